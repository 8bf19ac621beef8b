package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/xdp"
)

// TestLeafSpineQueues: a sprayed AF_XDP transfer across a leaf-spine fabric
// whose host interfaces have four queues (the last leaf spreads the
// sprayed flows over all four, as RSS does on a real NIC) is byte-exact,
// and retransmits no more than twice what the same transfer does with one
// queue plus 3% of its packets (the count varies tenfold from run to run
// on a loaded two-core machine, and four queues add the reordering between
// queues that the engine drains in turn). A link that serves queue 0 only
// fails it: the other queues' frames go to the kernel, and the QP gives up.
func TestLeafSpineQueues(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	seed := testutil.Seed(t)
	const total = 32 << 20
	run := func(queues int) PairResult {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cfg, err := testbed.ParseLeafSpine("leafspine:1x2x2,rate=200mbit")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Queues = queues
		fab, _ := newFabric(t, ctx, cfg)
		a, b := fab.Host(0, 0), fab.Host(1, 0)
		res, err := RunHosts(ctx, a, b, PairRun{
			Kind:      KindXDP,
			Transport: transport.Config{Seed: seed, MTU: a.MTU + 14, INTHops: 4, LineRate: float64(fab.Config.HostRateBps) / 8},
			Perf:      PerfConfig{Total: total, MsgSize: 1 << 20, Pings: -1, Seed: seed},
		})
		if err != nil {
			t.Fatalf("queues=%d: %v", queues, err)
		}
		if !res.Integrity || res.Bytes != total {
			t.Fatalf("queues=%d: integrity %v, %d of %d bytes", queues, res.Integrity, res.Bytes, total)
		}
		t.Logf("queues=%d: %.3f Gbit/s, %d retransmits, %d packets sent", queues, res.GoodputGbps, res.Retransmits, res.ClientQP.TxPackets)
		if err := fab.Close(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	one := run(1)
	four := run(4)
	limit := 2*one.Retransmits + 3*one.ClientQP.TxPackets/100
	if four.Retransmits > limit {
		t.Fatalf("4 queues: %d retransmits, more than %d (2x the %d of one queue plus 3%% of its packets)", four.Retransmits, limit, one.Retransmits)
	}
}

// TestPairJumbo: an AF_XDP transfer between the two ends of a pair at MTU
// 9000, with two queues each, is byte-exact: its 9000-byte packets leave
// as chained descriptors over three UMEM chunks and are reassembled on
// receipt (the receiver's multi-buffer counter moves).
func TestPairJumbo(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	testutil.RealClock(t)
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{MTU: 9000, Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	total := transferSize() / 8
	var multi uint64
	var served int
	res, err := RunPair(ctx, p, PairRun{
		Kind:      KindXDP,
		Transport: transport.Config{Seed: seed, MTU: 9014},
		Perf:      PerfConfig{Total: total, MsgSize: 1 << 20, Pings: 100, Seed: seed},
		During: func(ctx context.Context, _, server link.Link) {
			<-ctx.Done()
			l := server.(*xdp.Link)
			served = len(l.Queues())
			for i, st := range l.QueueStats() {
				multi += st.RxMultiBuffer
				t.Logf("server queue %d: %d frames, %d dropped (ring full %d, fill ring empty %d, kernel %d)",
					i, st.RxFrames, st.RxDropped, st.RxRingFull, st.RxFillRingEmpty, st.KernelRxDropped)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Integrity || res.Bytes != total {
		t.Fatalf("integrity %v, %d of %d bytes", res.Integrity, res.Bytes, total)
	}
	t.Logf("MTU 9000: %.2f Gbit/s, %d retransmits, %d frames reassembled on %d queues", res.GoodputGbps, res.Retransmits, multi, served)
	if served != 2 || multi < uint64(total/9000) {
		t.Fatalf("server served %d queues and reassembled %d frames; want 2 and at least %d", served, multi, total/9000)
	}
}

// TestLeafSpineJumbo: a sprayed AF_XDP transfer across a leaf-spine fabric
// at MTU 9000, host interfaces with two queues, is byte-exact, and the
// fabric programs stamp INT records into its 9000-byte packets (which the
// tc programs read and write beyond the skb's linear part).
func TestLeafSpineJumbo(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	seed := testutil.Seed(t)
	const total = 32 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := testbed.ParseLeafSpine("leafspine:1x2x2,rate=400mbit,mtu=9000,queues=2")
	if err != nil {
		t.Fatal(err)
	}
	fab, _ := newFabric(t, ctx, cfg)
	a, b := fab.Host(0, 0), fab.Host(1, 0)
	res, err := RunHosts(ctx, a, b, PairRun{
		Kind:      KindXDP,
		Transport: transport.Config{Seed: seed, MTU: a.MTU + 14, INTHops: 4, LineRate: float64(fab.Config.HostRateBps) / 8},
		Perf:      PerfConfig{Total: total, MsgSize: 1 << 20, Pings: -1, Seed: seed},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Integrity || res.Bytes != total {
		t.Fatalf("integrity %v, %d of %d bytes", res.Integrity, res.Bytes, total)
	}
	perPkt := res.ClientQP.TxBytes / max(res.ClientQP.TxPackets, 1)
	t.Logf("MTU 9000 across the fabric: %.3f Gbit/s, %d retransmits, %d packets of %d bytes on average, %d INT acks",
		res.GoodputGbps, res.Retransmits, res.ClientQP.TxPackets, perPkt, res.ClientQP.INTAcks)
	if perPkt < 8000 {
		t.Errorf("packets of %d bytes on average, want jumbo", perPkt)
	}
	if res.ClientQP.INTAcks == 0 {
		t.Errorf("no acknowledgement carried INT records: the fabric programs did not stamp the jumbo packets")
	}
}
