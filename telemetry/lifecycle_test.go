package telemetry

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// endpoints returns the values of the endpoint label in the scrape's
// spray_qp_tx_packets_total series.
func endpoints(t *testing.T, url string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	f := scrape(t, url)["spray_engine_tx_frames_total"]
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "endpoint" {
				out[l.GetValue()] = true
			}
		}
	}
	return out
}

func TestInstrumentGlobalStopAndClose(t *testing.T) {
	srv, err := Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := newPair(t, mem.Config{Seed: testutil.Seed(t)}, transport.Config{})
	stopG, err := Instrument(p.ea, "g") // through the global provider Serve installed
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Instrument(p.eb, "h"); err != nil {
		t.Fatal(err)
	}
	if got := endpoints(t, srv.URL()); !got["g"] || !got["h"] {
		t.Fatalf("endpoints in the scrape: %v, want g and h", got)
	}
	hist := func() map[string]float64 {
		return series(scrape(t, srv.URL()), "spray_qp_int_queue_delay_histogram_seconds", map[string]string{"endpoint": "g"})
	}
	if len(hist()) != 1 {
		t.Errorf("no queue delay histogram for g: %v", hist())
	}
	stopG()
	stopG() // idempotent
	if got := endpoints(t, srv.URL()); got["g"] || !got["h"] {
		t.Fatalf("after stop: endpoints %v, want h alone", got)
	}
	if len(hist()) != 0 {
		t.Errorf("g's histogram still there after stop: %v", hist())
	}
	p.eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitFor(t, ctx, "the closed endpoint's series to go", func() bool { return !endpoints(t, srv.URL())["h"] })

	// The root page answers, other paths do not exist.
	for path, want := range map[string]int{"/": http.StatusOK, "/nope": http.StatusNotFound} {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := http.Get(srv.URL()); err == nil {
		t.Errorf("the server still answers after Close")
	}
}

func TestOnEndpointNamesAndDedup(t *testing.T) {
	prom, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Provider.Shutdown(context.Background())
	ts := httptest.NewServer(prom.Handler) // a mux of the caller's
	defer ts.Close()
	url := ts.URL + "/anywhere"
	hook := OnEndpoint(prom.Provider)
	cfg := transport.Config{OnEndpoint: hook}
	p := newPair(t, mem.Config{Seed: testutil.Seed(t)}, cfg)
	// A second pair on another fabric has the same link names and IPs.
	q := newPair(t, mem.Config{Seed: testutil.Seed(t)}, cfg)
	got := endpoints(t, url)
	for _, name := range []string{"mem@10.0.0.1", "mem@10.0.0.2", "mem@10.0.0.1#2", "mem@10.0.0.2#2"} {
		if !got[name] {
			t.Errorf("endpoint %q missing from %v", name, got)
		}
	}
	p.ea.Close()
	p.eb.Close()
	q.ea.Close()
	q.eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitFor(t, ctx, "the closed endpoints' series to go", func() bool { return len(endpoints(t, url)) == 0 })
}

func TestConcurrentScrapes(t *testing.T) {
	srv, err := Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := newPair(t, mem.Config{Seed: testutil.Seed(t)}, transport.Config{})
	for _, ep := range []*transport.Endpoint{p.ea, p.eb} {
		stop, err := InstrumentWith(srv.MeterProvider(), ep, ep.LinkInfo().IP.String())
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				if got := endpoints(t, srv.URL()); len(got) != 2 {
					t.Errorf("endpoints %v, want 2", got)
				}
			}
		})
	}
	wg.Wait()
}

func TestErrors(t *testing.T) {
	if _, err := Serve("no-such-host.invalid:http-nope"); !errors.Is(err, ErrServe) {
		t.Errorf("Serve on a bad address: %v, want ErrServe", err)
	}
	if _, err := InstrumentWith(nil, nil, "x"); !errors.Is(err, ErrInstrument) {
		t.Errorf("InstrumentWith(nil, nil): %v, want ErrInstrument", err)
	}
}
