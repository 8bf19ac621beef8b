package spray

import (
	"context"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/telemetry"
)

// TestMetrics: an endpoint opened with Options.Metrics exports its
// counters while it is open, and a QP's series follow its traffic.
func TestMetrics(t *testing.T) {
	seed := testutil.Seed(t)
	prom, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	defer fab.Close()
	pa, _ := fab.NewPort(macA, ipA)
	ea, err := NewEndpoint(pa, Options{CMAddr: "127.0.0.1:0", TrustPeerIP: true, Metrics: prom.Provider, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb := memEndpoint(t, fab, macB, ipB, seed+1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("m")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ea.Dial(ctx, ln.Addr(), "m")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	prom.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var txBytes float64
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "spray_qp_tx_bytes_total{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			txBytes += v
		}
	}
	if txBytes < 100000 {
		t.Fatalf("spray_qp_tx_bytes_total %v after a 100000-byte Send:\n%.3000s", txBytes, body)
	}
}
