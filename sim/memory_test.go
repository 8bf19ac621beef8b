package sim

import (
	"errors"
	"runtime"
	"testing"
)

// TestPreflightRefusesBeforeAllocating: a million-host all-to-all (10^12
// flows) in 2 GiB is refused with ErrMemory by Preflight, which allocates
// a small constant (the QP and engine it measures), not the flows or the
// fabric.
func TestPreflightRefusesBeforeAllocating(t *testing.T) {
	tp := mustTopo(t, "leafspine:1000x1000x1000")
	cfg := Config{Topo: tp, Memory: 2 << 30}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := Preflight(cfg, "alltoall:1G")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrMemory) {
		t.Fatalf("Preflight: %v, want ErrMemory", err)
	}
	t.Logf("%v", err)
	// The bound: the QP measurement's two engines and 128 QPs, for each
	// default profile, far below one byte per host.
	const bound = 64 << 20
	if grew := after.TotalAlloc - before.TotalAlloc; grew > bound {
		t.Errorf("Preflight allocated %d bytes, want at most %d", grew, bound)
	}
}

// TestPreflightBelowEstimate: Preflight's footprint is a lower bound of
// Estimate's for every workload kind, so that a run that Run would accept
// is never refused by Preflight: it passes with exactly Estimate's total.
func TestPreflightBelowEstimate(t *testing.T) {
	tp := mustTopo(t, "leafspine:8x4x4")
	for _, spec := range []string{
		"permutation:1M", "permutation:1M,iters=3", "alltoall:1M", "alltoall-pairwise:64k,iters=2",
		"moe:1M,iters=2", "incast:64k", "incast:64k,senders=5", "mix:64k,senders=3",
		"moe:ep=4,tokens=16,iters=2,grad=64k", "moe:ep=8,tokens=16,iters=1,jobs=2,routing=random",
	} {
		cfg := Config{Topo: tp, Workload: mustWork(t, spec, tp.Hosts()), Profiles: []string{ProfileSpray}}
		fp, err := Estimate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The measured QP cost moves by a few bytes between
		// measurements: allow 10%.
		cfg.Memory = fp.Total * 11 / 10
		if err := Preflight(cfg, spec); err != nil {
			t.Errorf("%s: Preflight refuses what Estimate (%d bytes) accepts: %v", spec, fp.Total, err)
		}
		s, err := WorkloadShape(spec, tp.Hosts())
		if err != nil {
			t.Fatal(err)
		}
		if s.Flows != int64(fp.Flows) || s.Pairs*2 > int64(fp.QPs) || s.Hosts > int64(fp.Hosts) {
			t.Errorf("%s: shape %+v against the built workload's %d flows, %d QPs, %d hosts", spec, s, fp.Flows, fp.QPs, fp.Hosts)
		}
	}
}

// TestWorkloadShapeErrors: WorkloadShape refuses what ParseWorkload
// refuses, with the same error.
func TestWorkloadShapeErrors(t *testing.T) {
	for _, spec := range []string{"bogus:1M", "alltoall:", "alltoall:1M,iters=0", "incast:1k,senders=64", "moe:1M,compute=2s", "alltoall:8"} {
		_, werr := ParseWorkload(spec, 16, 1)
		_, serr := WorkloadShape(spec, 16)
		if werr == nil || serr == nil || werr.Error() != serr.Error() || !errors.Is(serr, ErrConfig) {
			t.Errorf("%s: ParseWorkload %v, WorkloadShape %v", spec, werr, serr)
		}
	}
}
