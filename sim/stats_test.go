package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

const us = clock.Time(time.Microsecond)

// TestCollectiveStatsByHand: each EP group's dispatch and combine is an
// instance timed from its first flow posted to its last received; an
// instance with a flow not received is counted apart, out of the times.
func TestCollectiveStatsByHand(t *testing.T) {
	w := Workload{Iters: 2, Phases: []string{"dispatch", "combine"}, Ends: []int{4, 8},
		Groups: [][]int32{{0, 0, 1, 1}, {0, 0, 1, 1}}}
	for range 2 {
		w.Flows = append(w.Flows, Flow{Src: 0, Dst: 1}, Flow{Src: 1, Dst: 0}, Flow{Src: 2, Dst: 3}, Flow{Src: 3, Dst: 2})
	}
	fs := []flowState{
		{recvd: true, start: 0, done: 10 * us}, {recvd: true, start: 0, done: 12 * us}, // group 0: 12 µs
		{recvd: true, start: 1 * us, done: 30 * us}, {recvd: true, start: 0, done: 20 * us}, // group 1: 30 µs
		{recvd: true, start: 40 * us, done: 45 * us}, {recvd: true, start: 40 * us, done: 50 * us}, // group 0: 10 µs
		{recvd: true, start: 40 * us, done: 41 * us}, {failed: true, start: 40 * us}, // group 1: incomplete
	}
	got := collectiveStats(w, fs)
	want := []CollectiveStats{
		{Name: "dispatch", Count: 2, Mean: 21 * time.Microsecond, P999: 30 * time.Microsecond, Max: 30 * time.Microsecond},
		{Name: "combine", Count: 1, Incomplete: 1, Mean: 10 * time.Microsecond, P999: 10 * time.Microsecond, Max: 10 * time.Microsecond},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if s := collectiveStats(Workload{Flows: w.Flows}, fs); s != nil {
		t.Errorf("a workload that is not collectives: %+v", s)
	}
}

// TestCollectiveStatsP999: over 2,000 collectives of 1 to 2,000 µs the
// mean is 1,000.5 µs and the p99.9 the 1,998th by nearest rank, whatever
// order they ran in.
func TestCollectiveStatsP999(t *testing.T) {
	const n = 2000
	w := Workload{Name: "alltoall:2k", Iters: n}
	fs := make([]flowState, n)
	for i := range n {
		w.Flows = append(w.Flows, Flow{Src: 0, Dst: 1})
		d := clock.Time(i*7919%n+1) * us // a permutation of 1..n µs
		fs[i] = flowState{recvd: true, start: clock.Time(i) * clock.Time(time.Second), done: clock.Time(i)*clock.Time(time.Second) + d}
	}
	got := collectiveStats(w, fs)
	want := CollectiveStats{Name: "alltoall", Count: n, Mean: 1000500 * time.Nanosecond, P999: 1998 * time.Microsecond, Max: n * time.Microsecond}
	if len(got) != 1 || got[0] != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestTwoHostSteps: on two hosts each collective is one instance, so its
// p99.9 is its max and its mean the collectives' own mean, and the two
// hosts run in step, so the step is the compute plus each collective
// once: the compute share is compute / (compute + the collectives' time
// a step).
func TestTwoHostSteps(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x1x1,rate=10gbit")
	w := mustWork(t, "moe:64k,compute=1ms,iters=3", tp.Hosts())
	res, err := Run(Config{Topo: tp, Workload: w, Seed: testutil.Seed(t), Scenarios: []string{ScenarioLossless}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Rows {
		if len(r.Collectives) != 2 || len(r.Iterations) != 6 {
			t.Fatalf("%s: %d kinds, %d collectives", r.Profile, len(r.Collectives), len(r.Iterations))
		}
		var comm time.Duration
		for p, c := range r.Collectives {
			var sum time.Duration
			for k := p; k < len(r.Iterations); k += 2 {
				sum += r.Iterations[k]
			}
			comm += sum
			if c.Count != 3 || c.Incomplete != 0 || c.P999 != c.Max || c.Mean != sum/3 {
				t.Errorf("%s %s: %+v; want 3 instances, p99.9 the max, mean %v", r.Profile, c.Name, c, sum/3)
			}
		}
		st, err := RowSteps(r, w)
		if err != nil {
			t.Fatal(err)
		}
		want := float64(w.Compute) / float64(w.Compute+comm/3)
		if d := st.ComputeShare - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: compute share %v, want %v (compute %v, collectives %v a step)", r.Profile, st.ComputeShare, want, w.Compute, comm/3)
		}
	}
}

// TestMoEInstances: moe:ep=G with grad times each EP group's dispatch
// and combine and each data parallel ring's reduce-scatter and
// all-gather apart: groups (rings) x steps instances of each, every one
// within the whole collective's time.
func TestMoEInstances(t *testing.T) {
	tp := mustTopo(t, "leafspine:4x4x4,rate=10gbit")
	w := mustWork(t, "moe:ep=4,tokens=8,grad=64k,compute=100us,iters=2", tp.Hosts())
	if got := w.Groups[0]; got[0] != 0 || got[3] != 0 || got[4] != 1 || got[15] != 3 {
		t.Errorf("EP groups of the hosts %v, want four of consecutive hosts", got)
	}
	if got := w.Groups[2]; got[0] != 0 || got[1] != 1 || got[4] != 0 || got[15] != 3 {
		t.Errorf("rings of the hosts %v, want rank r of every group in ring r", got)
	}
	res, err := Run(Config{Topo: tp, Workload: w, Seed: testutil.Seed(t), Scenarios: []string{ScenarioLossless}, Profiles: []string{ProfileSpray}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	names := []string{"dispatch", "combine", "reduce-scatter", "all-gather"}
	if len(r.Collectives) != 4 || len(r.Iterations) != 8 {
		t.Fatalf("%+v, %d collectives", r.Collectives, len(r.Iterations))
	}
	for p, c := range r.Collectives {
		var whole time.Duration
		for k := p; k < 8; k += 4 {
			whole = max(whole, r.Iterations[k])
		}
		if c.Name != names[p] || c.Count != 8 || c.Incomplete != 0 || c.Mean <= 0 || c.Mean > c.Max || c.Max > whole {
			t.Errorf("%+v: want %s, 8 instances, mean at most the max, max at most the whole collective's %v", c, names[p], whole)
		}
	}
	var b bytes.Buffer
	WriteCollectives(&b, res)
	if out := b.String(); !strings.Contains(out, "reduce-scatter") || !strings.Contains(out, " 8 ") {
		t.Errorf("collectives table without the rings:\n%s", out)
	}
}

// TestWriteHeadline: the Markdown table gives per row each kind's mean
// and p99.9, pauses per minute (or "-" under MinRateWindow), the buffer,
// the compute share and the row's cost.
func TestWriteHeadline(t *testing.T) {
	w := Workload{Steps: 2, Iters: 4, Compute: 3 * time.Millisecond, Phases: []string{"dispatch", "combine"}}
	r := Row{Scenario: "lossless+faults", Profile: "roce", PFC: true, Flows: 8, Done: 8, Makespan: 8 * time.Millisecond,
		Simulated: 200 * time.Millisecond, PauseFrames: 10, BufferMean: 0.01, BufferMax: 0.5, CPU: 3 * time.Second, RSS: 3 << 29,
		Iterations: make([]time.Duration, 4),
		Collectives: []CollectiveStats{{Name: "dispatch", Count: 4, Mean: 500 * time.Microsecond, P999: 900 * time.Microsecond},
			{Name: "combine", Count: 3, Incomplete: 1, Mean: time.Millisecond, P999: 2 * time.Millisecond}}}
	short := r
	short.Profile, short.Simulated, short.CPU, short.RSS, short.Done = "spray", 50*time.Millisecond, 0, 0, 7
	var b bytes.Buffer
	WriteHeadline(&b, Result{Rows: []Row{r, short}}, w)
	out, note, _ := strings.Cut(b.String(), "\n\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(note, "less than 100ms") {
		t.Errorf("no note on the row under 100 ms:\n%s", b.String())
	}
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a head, a rule and 2 rows:\n%s", len(lines), b.String())
	}
	want := "| lossless+faults | roce | on | 0.500 / 0.900 | 1.000 / 2.000 (1 not done) | 3000 | 200.000 | 1.0% / 50.0% | 75.0% | 3s | 1.5 GiB |"
	if lines[2] != want {
		t.Errorf("row\n%s\nwant\n%s", lines[2], want)
	}
	if !strings.HasSuffix(lines[3], "| - | 50.000 | 1.0% / 50.0% | - | - | - |") {
		t.Errorf("short, unfinished, unmeasured row: %s", lines[3])
	}
}
