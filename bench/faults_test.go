package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// TestLeafSpineFaults: across a leaf-spine fabric with four spines, a
// sprayed transfer survives a spine link blackholed in its middle, and
// transfers in both profiles survive 1% random loss on every spine link,
// byte-exact (SHA-256). The fabric programs' counters show that the faults
// took effect.
func TestLeafSpineFaults(t *testing.T) {
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	fab, progs := newFabric(t, ctx, testbed.LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 4})
	a, b := fab.Host(0, 0), fab.Host(1, 0)
	leaf0 := fab.Leaves[0]
	uplink := func(s int) ebpf.PortID { return fab.PortID(leaf0, fab.Config.Hosts+s) }
	tcfg := func(prof transport.Profile) transport.Config {
		c := transport.Config{Profile: prof, Seed: seed, MTU: a.MTU + 14, INTHops: 4, Entropies: 32, Paths: transport.PathsAdaptive}
		if prof == transport.RoCE {
			c.Paths = transport.PathsECMP
		}
		return c
	}

	// A spine link dies early in a transfer: 20 ms in, far less than
	// 64 MiB takes over veth even on a fast quiet machine, so that the
	// blackhole always meets traffic.
	dead := uplink(1)
	res, err := RunHosts(ctx, a, b, PairRun{
		Kind: KindXDP, Transport: tcfg(transport.Spray),
		Perf: PerfConfig{Total: 64 << 20, MsgSize: 1 << 20, Pings: -1, Seed: seed},
		During: func(ctx context.Context, _, _ link.Link) {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			if err := progs.SetFaults(dead, ebpf.Faults{Blackhole: true, RoCEOnly: true}); err != nil {
				t.Error(err)
			}
		},
	})
	if err != nil {
		t.Fatalf("transfer with a dead spine link: %v", err)
	}
	pc, err := progs.PortCounters(dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dead spine link: %.2f Gbit/s, %d retransmits, %d frames blackholed", res.GoodputGbps, res.Retransmits, pc.DropBlackhole)
	if !res.Integrity {
		t.Fatal("transfer corrupted")
	}
	if pc.DropBlackhole == 0 {
		t.Fatal("the blackhole dropped nothing: the transfer ended before the failure, the test proves nothing")
	}
	if err := progs.SetFaults(dead, ebpf.Faults{}); err != nil {
		t.Fatal(err)
	}

	// 1% loss on every spine link, both profiles.
	for s := range fab.Config.Spines {
		if err := progs.SetFaults(uplink(s), ebpf.Faults{Loss: 0.01, RoCEOnly: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, prof := range []transport.Profile{transport.Spray, transport.RoCE} {
		res, err := RunHosts(ctx, a, b, PairRun{
			Kind: KindXDP, Transport: tcfg(prof),
			Perf: PerfConfig{Total: 32 << 20, MsgSize: 1 << 20, Pings: -1, Seed: seed},
		})
		if err != nil {
			t.Fatalf("%v at 1%% loss: %v", prof, err)
		}
		if !res.Integrity {
			t.Fatalf("%v at 1%% loss: transfer corrupted", prof)
		}
		t.Logf("%v at 1%% loss on the spine links: %.2f Gbit/s, %d retransmits", prof, res.GoodputGbps, res.Retransmits)
		if res.Retransmits == 0 {
			t.Fatalf("%v: 1%% loss and no retransmission", prof)
		}
	}
}
