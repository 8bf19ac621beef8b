package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/sim"
	"github.com/sprayfabric/spray/testbed"
)

// TestSimCommand runs spray sim at a small size: the JSON has a row per
// profile and scenario with every flow done, the PNG decodes, and a
// second run with the same seed writes the same JSON bytes.
func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	run := func(name string) []byte {
		j := filepath.Join(dir, name+".json")
		p := filepath.Join(dir, name+".png")
		err := runSim([]string{"-q", "--topo", "leafspine:2x2x2,rate=10gbit", "--workload", "alltoall:256k",
			"--scenarios", "lossless,loss0.1", "--json", j, "--png", p})
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := png.Decode(f); err != nil {
			t.Fatalf("PNG: %v", err)
		}
		b, err := os.ReadFile(j)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := run("a"), run("b")
	if !bytes.Equal(a, b) {
		t.Fatal("two runs with the same seed wrote different JSON")
	}
	var res struct {
		Rows []struct {
			Profile, Scenario string
			Flows, Done       int
		}
	}
	if err := json.Unmarshal(a, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Flows != 12 || r.Done != r.Flows {
			t.Errorf("%s/%s: %d of %d flows done", r.Scenario, r.Profile, r.Done, r.Flows)
		}
	}
	if err := runSim([]string{"-q", "--topo", "ring:4"}); err == nil {
		t.Error("a bad topology gave no error")
	}
}

// TestCompareSim: spray compare --sim runs the scenarios in the simulator
// and writes compare's JSON, with every iteration timed.
func TestCompareSim(t *testing.T) {
	dir := t.TempDir()
	j := filepath.Join(dir, "c.json")
	err := runCompare([]string{"--sim", "--testbed", "leafspine:2x2x2,rate=1gbit,hostrate=2gbit", "--scenarios", "lossless,spinefail",
		"--profiles", "roce,spray,tcp", "--size", "256K", "--iters", "3", "--warmup", "1", "--json", j, "--png", ""})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(j)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Mode string
		Rows []struct {
			Profile, Scenario string
			Iters             int
			Mean              int64 `json:"mean_ns"`
		}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Mode != "sim" || len(res.Rows) != 6 {
		t.Fatalf("mode %q, %d rows; want sim and 6 (roce, roce-nopfc, spray; tcp is not simulated)", res.Mode, len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Iters != 3 || r.Mean <= 0 {
			t.Errorf("%s/%s: %d iterations, mean %d ns", r.Scenario, r.Profile, r.Iters, r.Mean)
		}
	}
}

// TestSimTopoMapsTestbed: compare --sim builds the testbed's fabric:
// shaper ports with the testbed's queue per port, its rates and MTU, and
// the software's delays on the links.
func TestSimTopoMapsTestbed(t *testing.T) {
	tb, err := testbed.ParseLeafSpine(bench.DefaultCompareTestbed)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := simTopo(tb)
	if err != nil {
		t.Fatal(err)
	}
	want := sim.Topo{Kind: sim.LeafSpine, HostsPerLeaf: 2, Leaves: 2, Spines: 2, Rate: 100e6, HostRate: 200e6, MTU: 3514,
		Shaper: true, PortBuffer: 16 * 3514, Delay: testbedHopDelay, HostDelay: testbedHopDelay + testbedHostDelay}
	// The testbed's queue per port: 1 ms at the rate, at least 16 frames.
	if tp != want {
		t.Fatalf("simTopo(%s) = %+v, want %+v", bench.DefaultCompareTestbed, tp, want)
	}
	// A testbed that trims: switches that trim at its threshold.
	for spec, queue := range map[string]int{
		bench.DefaultCompareTestbed + ",trim":               16 * 3514 * 3 / 4,
		bench.DefaultCompareTestbed + ",buffer=64k,trim":    48 << 10,
		bench.DefaultCompareTestbed + ",buffer=64k,trim=8k": 8 << 10,
	} {
		tb, err := testbed.ParseLeafSpine(spec)
		if err != nil {
			t.Fatal(err)
		}
		tp, err := simTopo(tb)
		if err != nil || !tp.Trim || tp.PortBuffer != queue {
			t.Errorf("simTopo(%s) = trim %v, queue %d, %v; want trim at %d", spec, tp.Trim, tp.PortBuffer, err, queue)
		}
	}
}

// TestSimMoE: spray sim runs the moe workload to the end (every flow of
// both collectives of every step, each timed), and refuses bad PFC
// thresholds and moe options as usage errors.
func TestSimMoE(t *testing.T) {
	j := filepath.Join(t.TempDir(), "moe.json")
	err := runSim([]string{"-q", "--topo", "leafspine:2x2x2,rate=10gbit,pfc=0.25/6k", "--workload", "moe:64k,compute=100us,iters=2",
		"--scenarios", "lossless", "--json", j})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(j)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Topo string
		Rows []struct {
			Flows, Done int
			Iterations  []int64 `json:"iterations_ns"`
			Simulated   int64   `json:"simulated_ns"`
		}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Topo, "pfc=0.25/6144") || len(res.Rows) != 2 {
		t.Fatalf("topo %q, %d rows", res.Topo, len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Flows != 2*2*4*3 || r.Done != r.Flows || len(r.Iterations) != 4 || r.Simulated < 200e3 {
			t.Errorf("%d of %d flows, %d collectives, %d ns simulated", r.Done, r.Flows, len(r.Iterations), r.Simulated)
		}
	}
	for _, args := range [][]string{
		{"--topo", "leafspine:2x2x2,pfc=9"},
		{"--topo", "leafspine:2x2x2,pfc=10k/20k"},
		{"--workload", "moe:64k,compute=0s"},
		{"--workload", "alltoall:64k,compute=1ms"},
	} {
		var u usageError
		if err := runSim(append([]string{"-q"}, args...)); !errors.As(err, &u) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestSimProfiles: --cpuprofile writes a CPU profile of a run, and the
// heap profile is written once, at the first progress report past
// --memprofile-at, and passes the reports on.
func TestSimProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu := filepath.Join(dir, "cpu.pb.gz")
	if err := runSim([]string{"-q", "--topo", "leafspine:2x2x2,rate=10gbit", "--workload", "alltoall:256k",
		"--scenarios", "lossless", "--cpuprofile", cpu}); err != nil {
		t.Fatal(err)
	}
	gzipped := func(p string) bool {
		b, err := os.ReadFile(p)
		return err == nil && len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b
	}
	if !gzipped(cpu) {
		t.Fatal("no CPU profile written")
	}
	heap := filepath.Join(dir, "heap.pb.gz")
	reports := 0
	f := heapProfileAt(heap, time.Millisecond, func(sim.Progress) { reports++ })
	f(sim.Progress{Sim: time.Microsecond})
	if _, err := os.Stat(heap); err == nil {
		t.Fatal("heap profile written before --memprofile-at")
	}
	f(sim.Progress{Sim: 2 * time.Millisecond})
	if !gzipped(heap) {
		t.Fatal("no heap profile written past --memprofile-at")
	}
	os.Remove(heap)
	f(sim.Progress{Sim: 3 * time.Millisecond})
	if _, err := os.Stat(heap); err == nil || reports != 3 {
		t.Fatalf("heap profile written twice, or %d of 3 reports passed on", reports)
	}
}

// TestSimFaults: --faults runs every scenario and profile again on the
// fabric with those faults, as rows SCENARIO+faults whose header names
// them, and --markdown writes the headline table with each row's CPU
// time and RSS; faults on a fabric that has its own, or options that are
// not faults, are usage errors.
func TestSimFaults(t *testing.T) {
	dir := t.TempDir()
	j, md := filepath.Join(dir, "f.json"), filepath.Join(dir, "f.md")
	err := runSim([]string{"-q", "--topo", "fattree:4,rate=10gbit", "--workload", "moe:ep=4,tokens=8,compute=100us,iters=2",
		"--scenarios", "lossless", "--profiles", "roce,spray", "--faults", "fail=2,lossy=0.25/1e-3", "--json", j, "--markdown", md})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(j)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Faults string
		Rows   []struct {
			Scenario, Profile string
			Flows, Done       int
			Collectives       []sim.CollectiveStats
		}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	want := []string{"lossless/roce", "lossless/spray", "lossless+faults/roce", "lossless+faults/spray"}
	if len(res.Rows) != len(want) || !strings.Contains(res.Faults, "2 of 32 links") || !strings.Contains(res.Faults, "+faults") {
		t.Fatalf("faults %q, %d rows", res.Faults, len(res.Rows))
	}
	for i, r := range res.Rows {
		if r.Scenario+"/"+r.Profile != want[i] || r.Done != r.Flows || len(r.Collectives) != 2 || r.Collectives[0].Count != 8 {
			t.Errorf("row %d: %s/%s, %d of %d flows, %+v; want %s, every flow, 4 groups x 2 steps", i, r.Scenario, r.Profile, r.Done, r.Flows, r.Collectives, want[i])
		}
	}
	m, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	table, _, _ := strings.Cut(string(m), "\n\n")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2+len(want) || !strings.HasPrefix(lines[5], "| lossless+faults | spray | off |") || strings.HasSuffix(lines[5], "| - | - |") {
		t.Errorf("markdown without the faulted rows or their cost:\n%s", m)
	}
	for _, args := range [][]string{
		{"--topo", "fattree:4,fail=1", "--faults", "fail=1"},
		{"--topo", "fattree:4", "--faults", "oversub=2"},
		{"--topo", "fattree:4", "--faults", "fail=x"},
	} {
		var u usageError
		if err := runSim(append([]string{"-q", "--workload", "alltoall:64k"}, args...)); !errors.As(err, &u) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestRunRowsMatchRun: running one scenario and profile at a time, as
// spray sim does to measure each row, gives the rows one sim.Run gives,
// byte for byte in JSON.
func TestRunRowsMatchRun(t *testing.T) {
	tp, err := sim.ParseTopo("leafspine:2x2x2,rate=10gbit")
	if err != nil {
		t.Fatal(err)
	}
	w, err := sim.ParseWorkloadOn("moe:ep=2,tokens=8,compute=50us,iters=2", tp, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.Config{Topo: tp, Workload: w, Seed: 1, Profiles: []string{sim.ProfileRoCE, sim.ProfileSpray},
		Scenarios: []string{sim.ScenarioLossless, sim.ScenarioLoss01}}
	one, err := sim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	each, err := runRows(cfg, sim.Topo{}, false)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := sim.WriteJSON(&a, one); err != nil {
		t.Fatal(err)
	}
	if err := sim.WriteJSON(&b, each); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || len(each.Rows) != 4 {
		t.Errorf("%d rows one at a time differ from one run's %d:\n%s\n%s", len(each.Rows), len(one.Rows), b.String(), a.String())
	}
	for _, r := range each.Rows {
		if r.CPU <= 0 || r.RSS <= 0 {
			t.Errorf("%s/%s: CPU %v, RSS %d: not measured", r.Scenario, r.Profile, r.CPU, r.RSS)
		}
	}
	cfg.Parallel = 2
	both, err := runRows(cfg, sim.Topo{}, false)
	if err != nil {
		t.Fatal(err)
	}
	var c bytes.Buffer
	if err := sim.WriteJSON(&c, both); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Errorf("rows at once differ from one run's:\n%s\n%s", c.String(), a.String())
	}
}
