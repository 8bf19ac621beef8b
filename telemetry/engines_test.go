package telemetry

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// An endpoint with one engine per queue reports each engine's series under
// its own engine label, hand-overs included.
func TestEngineSeriesPerQueue(t *testing.T) {
	const queues = 4
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	ma, err := fab.NewMultiPort([6]byte{2, 0, 0, 0, 0, 0xa}, netip.MustParseAddr("10.0.0.1"), queues, nil)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := fab.NewMultiPort([6]byte{2, 0, 0, 0, 0, 0xb}, netip.MustParseAddr("10.0.0.2"), queues, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{}
	if p.ea, err = transport.NewEndpoint(ma, transport.Config{Seed: seed, MaxRetries: 50}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ea.Close() })
	if p.eb, err = transport.NewEndpoint(mb, transport.Config{Seed: seed + 1, MaxRetries: 50}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.eb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if p.ca, err = p.ea.CreateQP(ctx); err != nil {
		t.Fatal(err)
	}
	if p.cb, err = p.eb.CreateQP(ctx); err != nil {
		t.Fatal(err)
	}
	p.ca.Connect(ctx, p.cb.Info())
	p.cb.Connect(ctx, p.ca.Info())

	srv, err := Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	stop, err := InstrumentWith(srv.MeterProvider(), p.eb, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var got atomic.Int64
	wait := p.stream(ctx, t, 64<<10, &got)
	waitFor(t, ctx, "20 messages", func() bool { return got.Load() >= 20 })
	cancel()
	wait()
	fams := scrape(t, srv.URL())
	rx := series(fams, "spray_engine_rx_frames_total", map[string]string{"endpoint": "b"})
	if len(rx) != queues {
		t.Fatalf("rx frames for %d engines, want %d: %v", len(rx), queues, rx)
	}
	var sent, recv float64
	for i := range queues {
		e := fmt.Sprint(i)
		sent += series(fams, "spray_engine_handovers_total", map[string]string{"endpoint": "b", "engine": e, "direction": "sent"})[""]
		recv += series(fams, "spray_engine_handovers_total", map[string]string{"endpoint": "b", "engine": e, "direction": "received"})[""]
	}
	// The QP lives on one engine; the sprayed frames land on every queue,
	// so the other three hand theirs over.
	if sent == 0 || recv == 0 {
		t.Errorf("handovers sent %v, received %v: want both > 0", sent, recv)
	}
}
