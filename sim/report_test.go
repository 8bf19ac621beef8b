package sim

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestPerMinute: a rate per minute comes only from at least
// MinRateWindow of simulated time; the table prints the count, its window
// and "-" for a shorter row instead of scaling it, and says why.
func TestPerMinute(t *testing.T) {
	if r, ok := PerMinute(1, 3*time.Millisecond); ok || r != 0 {
		t.Errorf("one pause in 3 ms: %v, %v; want no rate", r, ok)
	}
	if r, ok := PerMinute(10, 200*time.Millisecond); !ok || r != 3000 {
		t.Errorf("10 pauses in 200 ms: %v, %v; want 3000 a minute", r, ok)
	}
	res := Result{Topo: "leafspine:2x2x2", Hosts: 4, Rows: []Row{
		{Scenario: "lossless", Profile: "roce", PFC: true, PauseFrames: 1, Simulated: 3 * time.Millisecond},
		{Scenario: "loss0.01", Profile: "roce", PFC: true, PauseFrames: 10, Simulated: 200 * time.Millisecond},
	}}
	var b bytes.Buffer
	WriteTable(&b, res)
	lines := strings.Split(b.String(), "\n")
	var short, long string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "lossless"):
			short = l
		case strings.Contains(l, "loss0.01"):
			long = l
		}
	}
	if strings.Contains(short, "20000") || !strings.Contains(short, " 3.000 ") || !strings.Contains(short, " - ") {
		t.Errorf("3 ms row: %q: want its window, its count and no rate", short)
	}
	if !strings.Contains(long, " 3000 ") || !strings.Contains(long, " 200.000 ") {
		t.Errorf("200 ms row: %q: want 3000 a minute over 200 ms", long)
	}
	if !strings.Contains(b.String(), "less than 100ms") {
		t.Errorf("no note on the short window:\n%s", b.String())
	}
}

// TestRowSteps: the step figures of a moe row are its makespan over the
// steps, its collectives' mean and max, and compute over the step; a row
// that did not finish, or another workload, has none.
func TestRowSteps(t *testing.T) {
	w := Workload{Steps: 2, Iters: 4, Compute: 3 * time.Millisecond, PerRank: 1 << 20}
	r := Row{Scenario: "lossless", Profile: "spray", Flows: 8, Done: 8, Makespan: 8 * time.Millisecond, Simulated: 8 * time.Millisecond,
		Iterations: []time.Duration{time.Millisecond, 500 * time.Microsecond, 300 * time.Microsecond, 200 * time.Microsecond}}
	st, err := RowSteps(r, w)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps != 2 || st.Step != 4*time.Millisecond || st.CollectiveMean != 500*time.Microsecond || st.CollectiveMax != time.Millisecond ||
		st.ComputeShare != 0.75 || st.NetworkShare != 0.25 {
		t.Errorf("%+v", st)
	}
	r.Done = 7
	if _, err := RowSteps(r, w); err == nil {
		t.Error("a row with a flow not done gave step figures")
	}
	if _, err := RowSteps(r, Workload{Iters: 4}); !errors.Is(err, ErrNotSteps) {
		t.Errorf("not a moe workload: %v, want ErrNotSteps", err)
	}
	var b bytes.Buffer
	r.Done = 8
	WriteSteps(&b, Result{Hosts: 4, Rows: []Row{r}}, w)
	if out := b.String(); !strings.Contains(out, "75.0%") || !strings.Contains(out, "25.0%") || !strings.Contains(out, "4.000") {
		t.Errorf("step table without the step or shares:\n%s", out)
	}
	b.Reset()
	WriteSteps(&b, Result{Hosts: 4, Rows: []Row{r}}, Workload{Iters: 4})
	if b.Len() != 0 {
		t.Errorf("a step table for another workload:\n%s", b.String())
	}
}

// TestProgressLeft: the time left is the wall time so far scaled by the
// share not done (the larger of flows and bytes, bytes at most 99%), and
// the runs after this one each the whole of this one.
func TestProgressLeft(t *testing.T) {
	p := Progress{Wall: 10 * time.Second, FlowsDone: 1, Flows: 4, Delivered: 50, Expected: 100, Run: 1, Runs: 3}
	if run, all, ok := p.Left(); !ok || run != 10*time.Second || all != 50*time.Second {
		t.Errorf("half done in 10s, run 1 of 3: %v left, %v in all (%v); want 10s and 50s", run, all, ok)
	}
	p.Delivered = 300 // ACKs and headers overshoot the data frames' bytes
	if run, _, ok := p.Left(); !ok || run <= 0 {
		t.Errorf("bytes past the expected: %v left (%v), want a little", run, ok)
	}
	p.FlowsDone, p.Delivered = 0, 0
	if _, _, ok := p.Left(); ok {
		t.Error("an estimate with nothing done")
	}
}
