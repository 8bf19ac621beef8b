package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// sumFamily returns the sum of the values of family name in a scrape of
// url, and whether the family was there.
func sumFamily(t *testing.T, url, name string) (float64, bool) {
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
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	f := fams[name]
	if f == nil {
		return 0, false
	}
	var sum float64
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum, len(f.GetMetric()) > 0
}

// TestPerfMetrics: spray perf --metrics serves the endpoints' series while
// the run goes on; two scrapes during the run see the bytes grow.
func TestPerfMetrics(t *testing.T) {
	urls := make(chan string, 1)
	metricsStarted = func(url string) { urls <- url }
	defer func() { metricsStarted = nil }()
	done := make(chan error, 1)
	go func() {
		// A few seconds on the in-memory fabric on a loaded machine.
		done <- runPerf([]string{"--link", "mem", "--metrics", "127.0.0.1:0",
			"--total", "268435456", "--pings", "-1", "--json"})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("perf ended before serving metrics: %v", err)
	}
	const name = "spray_qp_tx_bytes_total"
	var first float64
	for {
		v, ok := sumFamily(t, url, name)
		if ok && v > 0 {
			first = v
			break
		}
		select {
		case err := <-done:
			t.Fatalf("perf ended (%v) before %s showed traffic", err, name)
		default:
		}
	}
	for {
		v, ok := sumFamily(t, url, name)
		if ok && v > first {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("perf ended (%v) with %s still at %v", err, name, first)
		default:
		}
	}
	for _, fam := range []string{"spray_path_tx_bytes_total", "spray_qp_rx_bytes_total", "spray_qp_rtt_smoothed_seconds", "spray_qp_microbursts_total"} {
		if _, ok := sumFamily(t, url, fam); !ok {
			t.Errorf("%s missing during the run", fam)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url); err == nil {
		t.Errorf("metrics still served after perf returned")
	}
}

// endpointLabels returns the endpoint labels of family name in a scrape of
// url.
func endpointLabels(t *testing.T, url, name string) []string {
	t.Helper()
	return labelValues(t, url, name, "endpoint")
}

// labelValues returns the values of label in every series of family name
// in a scrape of url.
func labelValues(t *testing.T, url, name, label string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}
