package main

import (
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestPerfMetricsQueues: spray perf --metrics over AF_XDP on a two-queue
// pair serves the link's per-queue series (both queues of both ends)
// while the run goes on, and their received frames grow.
func TestPerfMetricsQueues(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	urls := make(chan string, 1)
	metricsStarted = func(url string) { urls <- url }
	defer func() { metricsStarted = nil }()
	done := make(chan error, 1)
	go func() {
		done <- runPerf([]string{"--testbed", "pair,queues=2", "--link", "xdp", "--metrics", "127.0.0.1:0",
			"--total", "512M", "--pings", "-1", "--json"})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("perf ended before serving metrics: %v", err)
	}
	const name = "spray_link_queue_rx_frames_total"
	for {
		if v, ok := sumFamily(t, url, name); ok && v > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("perf ended (%v) before %s showed frames", err, name)
		default:
		}
	}
	queues := map[string]bool{}
	for _, l := range labelValues(t, url, name, "queue") {
		queues[l] = true
	}
	if !queues["0"] || !queues["1"] || len(queues) != 2 {
		t.Errorf("%s has queues %v, want 0 and 1", name, queues)
	}
	if links := labelValues(t, url, name, "link"); len(links) != 4 {
		t.Errorf("%s has links %v, want two queues of each of the two ends", name, links)
	}
	for _, fam := range []string{"spray_link_queue_tx_frames_total", "spray_link_queue_rx_bytes_total", "spray_link_queue_rx_dropped_total"} {
		if _, ok := sumFamily(t, url, fam); !ok {
			t.Errorf("%s missing during the run", fam)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
