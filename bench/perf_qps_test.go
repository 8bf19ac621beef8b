package bench

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// A perf run with several QPs between endpoints with one engine per queue:
// every QP's bytes arrive intact, the shares add up to the total, and the
// pings run after the bulk.
func TestRunEndpointsQPs(t *testing.T) {
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 2 * time.Microsecond}, clock.NewSystem())
	defer fab.Close()
	pa, err := fab.NewMultiPort([6]byte{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.0.0.1"), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := fab.NewMultiPort([6]byte{2, 0, 0, 0, 0, 2}, netip.MustParseAddr("10.0.0.2"), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc := transport.Config{Seed: seed, MTU: 9014, MaxRetries: 50} // outlasts a loaded machine's stalls
	a, err := transport.NewEndpoint(pa, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tc.Seed++
	b, err := transport.NewEndpoint(pb, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const qps, total = 4, 8 << 20
	res, err := RunEndpoints(ctx, a, b, PerfConfig{QPs: qps, Total: total, MsgSize: 256 << 10, Pings: 20, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.QPs) != qps || res.Bytes != total || !res.Integrity {
		t.Fatalf("%d QPs, %d bytes, integrity %v; want %d, %d, true", len(res.QPs), res.Bytes, res.Integrity, qps, total)
	}
	seen := map[uint32]bool{}
	for _, q := range res.QPs {
		if q.Bytes != total/qps || !q.Integrity || seen[q.QPN] {
			t.Errorf("QP %#x: %d bytes, integrity %v", q.QPN, q.Bytes, q.Integrity)
		}
		seen[q.QPN] = true
	}
	if res.Pings != 20 || res.RTTp50us <= 0 {
		t.Errorf("%d pings, p50 %vµs", res.Pings, res.RTTp50us)
	}
	// The client's QPs are steered to their server engines' queues; the
	// server's are not steered back.
	if res.Server.HandedOver != 0 || res.Client.HandedOver == 0 {
		t.Errorf("handed over: server %d (want 0, steered), client %d (want > 0)", res.Server.HandedOver, res.Client.HandedOver)
	}
}
