package sim

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestHtsimFiles: htsim's topology and connection-matrix files of the
// validation run read as the same fabric and flows.
func TestHtsimFiles(t *testing.T) {
	f, err := os.Open("testdata/ls128.topo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tp, err := ReadHtsimTopo(f)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Kind != LeafSpine || tp.HostsPerLeaf != 16 || tp.Leaves != 8 || tp.Spines != 16 || tp.Rate != 100e9 || tp.HostRate != 100e9 || tp.Delay != DefaultDelay {
		t.Fatalf("topology %v", tp)
	}
	w, err := ParseWorkload("htsim:testdata/perm128.cm", tp.Hosts(), 1)
	if err != nil {
		t.Fatal(err)
	}
	dst := map[int]bool{}
	for _, fl := range w.Flows {
		if fl.Size != 2000000 || fl.Start != 0 || fl.Src == fl.Dst {
			t.Fatalf("flow %+v", fl)
		}
		dst[fl.Dst] = true
	}
	if len(w.Flows) != 128 || len(dst) != 128 {
		t.Fatalf("%d flows to %d hosts, want a permutation of 128", len(w.Flows), len(dst))
	}
}

// TestConnectionMatrixRoundTrip: a pairwise all-to-all with its triggers
// written as a connection matrix reads back the same.
func TestConnectionMatrixRoundTrip(t *testing.T) {
	w, err := ParseWorkload("alltoall-pairwise:64k,iters=2", 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteConnectionMatrix(&b, w, 8); err != nil {
		t.Fatal(err)
	}
	cm, err := ReadConnectionMatrix(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cm.Flows, w.Flows) || !reflect.DeepEqual(cm.Triggers, w.Triggers) {
		t.Fatal("connection matrix does not read back the flows and triggers written")
	}
	for _, bad := range []string{
		"Nodes 4\nConnections 1\n0->1 id 1 size 100\n",                   // no start
		"Nodes 4\nConnections 1\n0->1 id 1 start 0 trigger 1 size 100\n", // both
		"Nodes 4\nConnections 1\n0->9 id 1 start 0 size 100\n",           // no such node
		"Nodes 4\nConnections 2\n0->1 id 1 start 0 size 100\n",           // count
		"Nodes 4\nConnections 1\n0->1 id 1 trigger 3 size 100\n",         // undefined trigger
		"Nodes 4\nConnections 1\n0->1 id 1 start 0 size 100 color red\n", // unknown token
	} {
		if _, err := ReadConnectionMatrix(strings.NewReader(bad)); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

// TestPairwiseCompletes: pairwise rounds chained by triggers run to the
// end, each round after the previous one.
func TestPairwiseCompletes(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x2x1,rate=10gbit")
	w := mustWork(t, "alltoall-pairwise:64k,iters=2", tp.Hosts())
	res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Profiles: []string{ProfileSpray}, Scenarios: []string{ScenarioLossless}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	if r.Done != len(w.Flows) || len(r.Iterations) != 2 {
		t.Fatalf("%d of %d flows, %d iterations: %s", r.Done, len(w.Flows), len(r.Iterations), r.Err)
	}
}

// TestCDF: sizes drawn from a CDF follow it.
func TestCDF(t *testing.T) {
	c, err := ReadCDF(strings.NewReader("# size cdf\n1000 50\n100000 100\n"))
	if err != nil {
		t.Fatal(err)
	}
	rng := testutil.Rand(t)
	small := 0
	for range 10000 {
		if c.Sample(rng) <= 1000 {
			small++
		}
	}
	if small < 4700 || small > 5300 {
		t.Fatalf("%d of 10000 at most 1000 B, want about half", small)
	}
	if _, err := ReadCDF(strings.NewReader("100 0.5\n50 1\n")); err == nil {
		t.Error("a falling CDF read without error")
	}
}

// TestMoEWorkload: moe:SIZE builds steps of a dispatch and a combine
// all-to-all, each rank's combine starting the compute time after its
// dispatch is in; every step completes with its bytes intact, and a step
// takes its compute plus its two collectives, so that a longer compute
// lengthens the run by the steps times the difference.
func TestMoEWorkload(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x2x2,rate=10gbit")
	run := func(spec string) (Workload, Row) {
		w := mustWork(t, spec, tp.Hosts())
		res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Verify: true, Profiles: []string{ProfileSpray}, Scenarios: []string{ScenarioLossless}})
		if err != nil {
			t.Fatal(err)
		}
		return w, res.Rows[0]
	}
	w, r := run("moe:64k,compute=200us,iters=3")
	if w.Steps != 3 || w.Iters != 6 || w.Compute != 200*time.Microsecond || len(w.Flows) != 3*2*4*3 {
		t.Fatalf("steps %d, iters %d, compute %v, %d flows", w.Steps, w.Iters, w.Compute, len(w.Flows))
	}
	if r.Done != r.Flows || r.Err != "" {
		t.Fatalf("%d of %d flows done: %s", r.Done, r.Flows, r.Err)
	}
	st, err := RowSteps(r, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("step %v, collectives %v (mean %v), compute share %.3f", st.Step, r.Iterations, st.CollectiveMean, st.ComputeShare)
	if st.Collectives != 6 || st.Step != r.Makespan/3 {
		t.Errorf("%d collectives, step %v of a makespan of %v", st.Collectives, st.Step, r.Makespan)
	}
	// Ranks do not wait for each other, so collectives may overlap, but
	// each rank's compute lies between its two collectives.
	if r.Makespan < 3*200*time.Microsecond+3*st.CollectiveMean {
		t.Errorf("makespan %v: less than 3 x (200µs + 2 collectives of %v)", r.Makespan, st.CollectiveMean)
	}
	if want := float64(200*time.Microsecond) / float64(st.Step); st.ComputeShare != want || st.NetworkShare != 1-want {
		t.Errorf("compute share %v, network %v; want %v", st.ComputeShare, st.NetworkShare, want)
	}
	_, r2 := run("moe:64k,compute=1200us,iters=3")
	if d := r2.Makespan - r.Makespan; d < 3*time.Millisecond-50*time.Microsecond || d > 3*time.Millisecond+50*time.Microsecond {
		t.Errorf("1 ms more compute a step over 3 steps lengthened the run by %v, want about 3ms", d)
	}
}

// TestMoEParse: moe's steps default to enough compute for MinRateWindow;
// bad options are refused; htsim cannot hold its compute delays.
func TestMoEParse(t *testing.T) {
	for _, c := range []struct {
		spec    string
		steps   int
		compute time.Duration
	}{
		{"moe:1M", 100, time.Millisecond},
		{"moe:1M,compute=10ms", 10, 10 * time.Millisecond},
		{"moe:1M,compute=30ms", 4, 30 * time.Millisecond},
		{"moe:1M,compute=30ms,iters=2", 2, 30 * time.Millisecond},
	} {
		w, err := ParseWorkload(c.spec, 16, 1)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if w.Steps != c.steps || w.Compute != c.compute {
			t.Errorf("%s: %d steps of %v compute, want %d of %v", c.spec, w.Steps, w.Compute, c.steps, c.compute)
		}
		if got := time.Duration(w.Steps) * w.Compute; !strings.Contains(c.spec, "iters") && got < MinRateWindow {
			t.Errorf("%s: %v of compute, under %v", c.spec, got, MinRateWindow)
		}
	}
	for _, bad := range []string{
		"moe:1M,compute=0s",
		"moe:1M,compute=2s",
		"moe:1M,compute=soon",
		"alltoall:1M,compute=1ms",
		"moe:8",               // under a byte per rank pair
		"moe:1M,compute=10us", // 10,000 steps: too many flows
		"moe:1M,iters=10000",
	} {
		if _, err := ParseWorkload(bad, 128, 1); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", bad, err)
		}
	}
	w, err := ParseWorkload("moe:64k,compute=1ms,iters=2", 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteConnectionMatrix(io.Discard, w, 4); !errors.Is(err, ErrConfig) {
		t.Errorf("connection matrix of a moe workload: %v, want ErrConfig", err)
	}
}
