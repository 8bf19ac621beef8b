package sim

import (
	"bytes"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
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
	rng := newTestRand()
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

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
