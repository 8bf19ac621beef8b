package telemetry

import (
	"net/http/httptest"
	"testing"

	"github.com/sprayfabric/spray/link"
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
