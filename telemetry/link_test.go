package telemetry

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// queueLink is a QueueStatsReader with counters set by the test.
type queueLink struct {
	served []int
	stats  []link.Stats
}

func (q *queueLink) Served() []int               { return q.served }
func (q *queueLink) QueueCounters() []link.Stats { return q.stats }

// TestInstrumentLink: every queue of a link has its series, labelled with
// its device queue number, and they follow the link's counters.
func TestInstrumentLink(t *testing.T) {
	p, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Provider.Shutdown(t.Context())
	srv := httptest.NewServer(p.Handler)
	defer srv.Close()
	l := &queueLink{served: []int{0, 2}, stats: []link.Stats{
		{RxFrames: 10, RxBytes: 1000, TxFrames: 3, RxDropped: 1},
		{RxFrames: 7, RxBytes: 700, TxDropped: 2},
	}}
	stop, err := InstrumentLink(p.Provider, l, "xdp:eth0/q0,2")
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, srv.URL)
	rx := series(fams, "spray_link_queue_rx_frames_total", map[string]string{"link": "xdp:eth0/q0,2"})
	if rx["queue=0"] != 10 || rx["queue=2"] != 7 || len(rx) != 2 {
		t.Fatalf("rx frames series %v", rx)
	}
	if d := series(fams, "spray_link_queue_tx_dropped_total", nil); d["link=xdp:eth0/q0,2,queue=2"] != 2 {
		t.Fatalf("tx dropped series %v", d)
	}
	l.stats[1].RxFrames = 9
	if rx := series(scrape(t, srv.URL), "spray_link_queue_rx_frames_total", nil); rx["link=xdp:eth0/q0,2,queue=2"] != 9 {
		t.Fatalf("after a change: %v", rx)
	}
	stop()
	stop()
	if rx := series(scrape(t, srv.URL), "spray_link_queue_rx_frames_total", nil); len(rx) != 0 {
		t.Fatalf("series after stop: %v", rx)
	}
}

// queuePort is a link/mem port that reports its counters as one device
// queue, as an AF_XDP link reports each of its queues.
type queuePort struct{ link.Link }

func (q queuePort) Served() []int { return []int{3} }
func (q queuePort) QueueCounters() []link.Stats {
	return []link.Stats{q.Link.(link.StatsReader).Stats()}
}

// TestOnEndpointInstrumentsQueues: the hook that --metrics installs gives
// an endpoint whose link has per-queue counters the link's series too,
// under the endpoint's name, following its traffic; they go with it.
func TestOnEndpointInstrumentsQueues(t *testing.T) {
	prom, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Provider.Shutdown(context.Background())
	srv := httptest.NewServer(prom.Handler)
	defer srv.Close()
	cfg := transport.Config{OnEndpoint: OnEndpoint(prom.Provider), Seed: testutil.Seed(t)}
	fab := mem.NewFabric(mem.Config{Seed: cfg.Seed}, clock.NewSystem())
	pa, err := fab.NewPort([6]byte{2, 0, 0, 0, 0, 0xa}, netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := fab.NewPort([6]byte{2, 0, 0, 0, 0, 0xb}, netip.MustParseAddr("10.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	ea, err := transport.NewEndpoint(pa, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Seed++
	eb, err := transport.NewEndpoint(queuePort{pb}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, err := ea.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := eb.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Connect(ctx, cb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := cb.Connect(ctx, ca.Info()); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 100_000)
	if err := ca.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if m, err := cb.Recv(ctx); err != nil || len(m.Data) != len(msg) {
		t.Fatalf("recv: %d bytes, %v", len(m.Data), err)
	}
	fams := scrape(t, srv.URL)
	for _, name := range []string{
		"spray_link_queue_rx_frames_total", "spray_link_queue_tx_frames_total",
		"spray_link_queue_rx_bytes_total", "spray_link_queue_tx_bytes_total",
		"spray_link_queue_rx_dropped_total", "spray_link_queue_tx_dropped_total",
	} {
		s := series(fams, name, nil)
		if _, ok := s["link=mem@10.0.0.2,queue=3"]; !ok || len(s) != 1 {
			t.Errorf("%s: %v, want one series of mem@10.0.0.2 queue 3 (the plain port has none)", name, s)
		}
	}
	if rx := series(fams, "spray_link_queue_rx_bytes_total", nil)["link=mem@10.0.0.2,queue=3"]; rx < float64(len(msg)) {
		t.Errorf("queue 3 received %v bytes, want at least the %d of the message", rx, len(msg))
	}
	eb.Close()
	waitFor(t, ctx, "the closed endpoint's queue series to go", func() bool {
		return len(series(scrape(t, srv.URL), "spray_link_queue_rx_frames_total", nil)) == 0
	})
}
