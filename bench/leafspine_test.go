package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// newFabric builds a leaf-spine testbed with spray's fabric programs on
// every switch port (no ECN marking), both torn down at the test's end. It
// skips without root.
func newFabric(t *testing.T, ctx context.Context, cfg testbed.LeafSpineConfig) (*testbed.Fabric, *ebpf.Fabric) {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	testutil.RealClock(t)
	fab, err := testbed.NewLeafSpine(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fab.Close() })
	progs, err := fab.AttachPrograms(ebpf.ECNConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { progs.Close() }) // runs before the fabric's Close
	return fab, progs
}

// TestLeafSpineSpread: across a leaf-spine fabric with four spines, one
// sprayed QP carries bytes over every spine (at least 10% each: blind
// entropies alone leave a spine empty, the INT path signatures fix that),
// while a classic (ECMP) QP stays on one spine. Both transfers are checked
// by SHA-256. It does not assert ±10% of an equal share (TestFabricSpread
// does, on a shaped fabric): unshaped, the adaptive weights follow per-path
// delay, which is noisy on this testbed.
func TestLeafSpineSpread(t *testing.T) {
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fab, _ := newFabric(t, ctx, testbed.LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 4})
	a, b := fab.Host(0, 0), fab.Host(1, 0)
	for _, prof := range []transport.Profile{transport.Spray, transport.RoCE} {
		paths := transport.PathsAdaptive // learns the spines from INT
		if prof == transport.RoCE {
			paths = transport.PathsECMP
		}
		before, err := fab.UplinkBytes(0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := RunHosts(ctx, a, b, PairRun{
			Kind:      KindXDP,
			Transport: transport.Config{Profile: prof, Paths: paths, Seed: seed, MTU: a.MTU + 14, INTHops: 4, Entropies: 32},
			Perf:      PerfConfig{Total: 16 << 20, MsgSize: 1 << 20, Pings: -1, Seed: seed},
		})
		if err != nil {
			t.Fatalf("%v: %v", prof, err)
		}
		if !res.Integrity {
			t.Fatalf("%v: transfer corrupted", prof)
		}
		after, err := fab.UplinkBytes(0)
		if err != nil {
			t.Fatal(err)
		}
		var total uint64
		shares := make([]float64, len(after))
		for i := range after {
			total += after[i] - before[i]
		}
		for i := range after {
			shares[i] = float64(after[i]-before[i]) / float64(total)
		}
		t.Logf("%v: %.2f Gbit/s, %d retransmits, per-spine shares %.3f", prof, res.GoodputGbps, res.Retransmits, shares)
		if total < 16<<20 {
			t.Fatalf("%v: only %d bytes crossed the spines", prof, total)
		}
		for i, sh := range shares {
			switch {
			case prof == transport.Spray && sh < 0.10:
				t.Errorf("spray: spine %d carried %.1f%% of the bytes, want at least 10%%", i, 100*sh)
			case prof == transport.RoCE && sh > 0.01 && sh < 0.99:
				t.Errorf("roce: spine %d carried %.1f%% of the bytes: an ECMP QP must stay on one spine", i, 100*sh)
			}
		}
	}
}
