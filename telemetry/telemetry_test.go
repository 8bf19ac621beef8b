package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// pair is two Endpoints over link/mem on the real clock, one QP each.
type pair struct {
	ea, eb *transport.Endpoint
	ca, cb *transport.Conn
}

func newPair(t *testing.T, mc mem.Config, cfg transport.Config) *pair {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = testutil.Seed(t)
	}
	fab := mem.NewFabric(mc, clock.NewSystem())
	pa, err := fab.NewPort([6]byte{2, 0, 0, 0, 0, 0xa}, netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := fab.NewPort([6]byte{2, 0, 0, 0, 0, 0xb}, netip.MustParseAddr("10.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{}
	if p.ea, err = transport.NewEndpoint(pa, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ea.Close() })
	cfg.Seed++
	if p.eb, err = transport.NewEndpoint(pb, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.eb.Close() })
	ctx := context.Background()
	if p.ca, err = p.ea.CreateQP(ctx); err != nil {
		t.Fatal(err)
	}
	if p.cb, err = p.eb.CreateQP(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.ca.Connect(ctx, p.cb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := p.cb.Connect(ctx, p.ca.Info()); err != nil {
		t.Fatal(err)
	}
	return p
}

// stream sends messages from a to b until ctx ends, checking every byte,
// and counts the messages received. It returns when both loops are done.
func (p *pair) stream(ctx context.Context, t *testing.T, size int, got *atomic.Int64) (wait func()) {
	var wg sync.WaitGroup
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := p.ca.Send(ctx, msg); err != nil && ctx.Err() == nil {
				t.Errorf("send: %v", err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			m, err := p.cb.Recv(ctx)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("recv: %v", err)
				}
				return
			}
			if string(m.Data) != string(msg) {
				t.Errorf("message %d: %d bytes, not the %d sent", got.Load(), len(m.Data), len(msg))
				return
			}
			got.Add(1)
		}
	}()
	return wg.Wait
}

// scrape fetches url and parses the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing the scrape: %v\n%s", err, body)
	}
	return fams
}

// series returns the value of every sample of family name whose labels
// include want, keyed by the rest of its labels.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
next:
	for _, m := range f.GetMetric() {
		var key []string
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok {
				if v != l.GetValue() {
					continue next
				}
				continue
			}
			if !strings.HasPrefix(l.GetName(), "otel_") {
				key = append(key, l.GetName()+"="+l.GetValue())
			}
		}
		for k := range want {
			if !hasLabel(m, k) {
				continue next
			}
		}
		sort.Strings(key)
		var v float64
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Untyped != nil:
			v = m.Untyped.GetValue()
		case m.Histogram != nil:
			v = float64(m.Histogram.GetSampleCount())
		}
		out[strings.Join(key, ",")] = v
	}
	return out
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return true
		}
	}
	return false
}

// allSeries are the families every instrumented endpoint exports.
var allSeries = []string{
	"spray_engine_rx_frames_total", "spray_engine_tx_frames_total",
	"spray_engine_rx_bytes_total", "spray_engine_tx_bytes_total",
	"spray_engine_drops_total", "spray_engine_tx_no_buffer_total",
	"spray_engine_handovers_total", "spray_engine_handover_drops_total",
	"spray_qp_tx_packets_total", "spray_qp_tx_bytes_total", "spray_qp_rx_packets_total", "spray_qp_rx_bytes_total",
	"spray_qp_retransmits_total", "spray_qp_losses_total", "spray_qp_timeouts_total",
	"spray_qp_acks_total", "spray_qp_naks_total", "spray_qp_rnr_naks_total", "spray_qp_cnps_total", "spray_qp_messages_total",
	"spray_qp_drops_total", "spray_qp_ecn_marked_total",
	"spray_qp_rtt_smoothed_seconds", "spray_qp_rtt_min_seconds",
	"spray_qp_int_acks_total", "spray_qp_int_queue_delay_seconds", "spray_qp_int_queue_delay_max_seconds",
	"spray_qp_microbursts_total", "spray_qp_microburst_acks_total", "spray_qp_reorder_held", "spray_qp_reorder_held_max",
	"spray_qp_credit_requests_total", "spray_qp_credit_grants_total", "spray_qp_credit_unsolicited_total",
	"spray_qp_credit_waits_total", "spray_qp_credit_fallbacks_total", "spray_qp_credit_rejected_total",
	"spray_qp_security_drops_total", "spray_qp_security_rotations_total", "spray_qp_security_epoch",
	"spray_qp_trims_total", "spray_qp_trim_naks_total",
	"spray_path_tx_packets_total", "spray_path_tx_bytes_total", "spray_path_retransmits_total",
	"spray_path_losses_total", "spray_path_acks_total", "spray_path_ecn_total",
	"spray_path_rtt_smoothed_seconds", "spray_path_int_queue_delay_seconds", "spray_path_int_queue_delay_max_seconds",
	"spray_path_microbursts_total", "spray_path_microburst_acks_total", "spray_path_weight_ratio", "spray_path_down_ratio",
	"spray_qp_rtt_histogram_seconds", "spray_qp_int_queue_delay_histogram_seconds",
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestScrapeDuringTransfer(t *testing.T) {
	seed := testutil.Seed(t)
	p := newPair(t, mem.Config{Seed: seed, Loss: 0.01, Reorder: 0.2, ReorderDelay: 20 * time.Microsecond},
		transport.Config{Seed: seed, MinRTO: time.Millisecond})
	srv, err := Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	stopA, err := InstrumentWith(srv.MeterProvider(), p.ea, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	stopB, err := InstrumentWith(srv.MeterProvider(), p.eb, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got atomic.Int64
	wait := p.stream(ctx, t, 64<<10, &got)
	defer wait()
	defer cancel()

	waitFor(t, ctx, "20 messages", func() bool { return got.Load() >= 20 })
	first := scrape(t, srv.URL())
	n := got.Load()
	waitFor(t, ctx, "40 more messages", func() bool { return got.Load() >= n+40 })
	second := scrape(t, srv.URL())

	for _, name := range allSeries {
		if len(series(second, name, map[string]string{"endpoint": "a"})) == 0 {
			t.Errorf("series %s{endpoint=\"a\"} missing", name)
		}
	}
	a := map[string]string{"endpoint": "a"}
	b := map[string]string{"endpoint": "b"}
	moved := func(name string, lab map[string]string) {
		t.Helper()
		s1, s2 := series(first, name, lab), series(second, name, lab)
		if len(s2) == 0 {
			t.Errorf("%s%v: no series", name, lab)
		}
		for k, v2 := range s2 {
			if v1 := s1[k]; !(v2 > v1) {
				t.Errorf("%s%v{%s}: %v then %v, want an increase", name, lab, k, v1, v2)
			}
		}
	}
	moved("spray_qp_tx_bytes_total", a)
	moved("spray_qp_tx_packets_total", a)
	moved("spray_qp_retransmits_total", a)
	moved("spray_engine_tx_bytes_total", a)
	moved("spray_qp_rx_bytes_total", b)
	moved("spray_qp_rx_packets_total", b)
	moved("spray_path_tx_bytes_total", a)
	moved("spray_path_tx_packets_total", a)
	moved("spray_qp_rtt_histogram_seconds", a) // its sample count
	if paths := series(second, "spray_path_tx_bytes_total", a); len(paths) != 8 {
		t.Errorf("%d paths with traffic, want the 8 entropies: %v", len(paths), paths)
	}
	for k, v := range series(second, "spray_qp_rtt_smoothed_seconds", a) {
		if !(v > 0 && v < 10) {
			t.Errorf("smoothed RTT {%s} = %vs", k, v)
		}
	}
	for k, v := range series(second, "spray_qp_reorder_held_max", b) {
		if v <= 0 {
			t.Errorf("receiver {%s} never held a packet for reordering at 20%% reordering", k)
		}
	}
}

// TestCreditSeries streams with receiver-paced credits on: the sender's
// unsolicited packets and credit requests, and the receiver's grants,
// show in their series.
func TestCreditSeries(t *testing.T) {
	seed := testutil.Seed(t)
	p := newPair(t, mem.Config{Seed: seed},
		transport.Config{Seed: seed, Credits: true, LineRate: 1.25e9})
	srv, err := Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for name, ep := range map[string]*transport.Endpoint{"a": p.ea, "b": p.eb} {
		stop, err := InstrumentWith(srv.MeterProvider(), ep, name)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got atomic.Int64
	wait := p.stream(ctx, t, 64<<10, &got)
	defer wait()
	defer cancel()
	waitFor(t, ctx, "20 messages", func() bool { return got.Load() >= 20 })
	m := scrape(t, srv.URL())
	positive := func(name string, lab map[string]string) {
		t.Helper()
		s := series(m, name, lab)
		if len(s) == 0 {
			t.Errorf("%s%v: no series", name, lab)
		}
		for k, v := range s {
			if !(v > 0) {
				t.Errorf("%s%v{%s} = %v, want > 0", name, lab, k, v)
			}
		}
	}
	positive("spray_qp_credit_unsolicited_total", map[string]string{"endpoint": "a"})
	positive("spray_qp_credit_requests_total", map[string]string{"endpoint": "a", "direction": "sent"})
	positive("spray_qp_credit_requests_total", map[string]string{"endpoint": "b", "direction": "received"})
	positive("spray_qp_credit_grants_total", map[string]string{"endpoint": "b", "direction": "sent"})
	for _, name := range []string{"spray_qp_security_drops_total", "spray_qp_security_rotations_total", "spray_qp_security_epoch"} {
		for k, v := range series(m, name, map[string]string{"endpoint": "a"}) {
			if v != 0 {
				t.Errorf("%s{%s} = %v on a clear QP, want 0", name, k, v)
			}
		}
	}
}
