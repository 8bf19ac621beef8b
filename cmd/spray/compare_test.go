package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/bench"
)

// TestCompareLoopbackCLI runs spray compare on loopback (forced, so that
// it also runs as root) with a small workload and checks the files it
// writes into --out, a folder it makes: the JSON holds a row per profile,
// every element right, and the PNG decodes.
func TestCompareLoopbackCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	js, img := filepath.Join(dir, "compare.json"), filepath.Join(dir, "compare.png")
	if err := runCompare([]string{"--loopback", "--scenarios", "lossless", "--size", "256K", "--iters", "5",
		"--out", dir}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.CompareResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Mode != "loopback" || len(res.Rows) != 3 || res.Iterations != 5 {
		t.Fatalf("mode %q, %d rows, %d iterations, want loopback, 3 and 5", res.Mode, len(res.Rows), res.Iterations)
	}
	for _, r := range res.Rows {
		if r.Err != "" || r.Wrong != 0 || r.Iters != 5 {
			t.Errorf("%s: %d iterations, %d wrong, error %q", r.Profile, r.Iters, r.Wrong, r.Err)
		}
	}
	p, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(p)); err != nil {
		t.Fatalf("the PNG does not decode: %v", err)
	}
}

// TestParseSize: the one parser of every size flag takes K, M and G
// (KiB, MiB, GiB; any case, a trailing B or iB) up to 1 TiB, and reads
// back what formatSize writes.
func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"1M": 1 << 20, "64k": 64 << 10, "4096": 4096, "1GiB": 1 << 30, "2MB": 2 << 20, "1024G": 1 << 40, "0": 0, "4MiB": 4 << 20, "16KB": 16 << 10} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", s, got, err, want)
		}
		if got, err := parseSize(formatSize(want)); err != nil || got != want {
			t.Errorf("formatSize(%d) = %q reads as %d, %v", want, formatSize(want), got, err)
		}
	}
	for _, s := range []string{"", "-1", "1X", "M", "K", "1T", "1025G", "1.5M"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

// TestCompareSimOut: spray compare in the simulator (what it runs without
// root) writes its JSON and PNG into --out (results/ by default), not
// into the working directory.
func TestCompareSimOut(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := runCompare([]string{"--sim", "--testbed", "leafspine:1x2x1", "--scenarios", "lossless", "--profiles", "spray",
		"--size", "16K", "--iters", "1", "--warmup", "0"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"compare.json", "compare.png"} {
		if _, err := os.Stat(filepath.Join(dir, "results", f)); err != nil {
			t.Errorf("results/%s: %v", f, err)
		}
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s written into the working directory", f)
		}
	}
}

// TestCompareMetrics: spray compare --metrics serves the roce and spray
// endpoints' series, named by profile, scenario and rank, while the
// comparison runs; two scrapes during a run see the bytes grow, and the
// page is gone when compare returns.
func TestCompareMetrics(t *testing.T) {
	urls := make(chan string, 1)
	metricsStarted = func(url string) { urls <- url }
	defer func() { metricsStarted = nil }()
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- runCompare([]string{"--loopback", "--metrics", "127.0.0.1:0", "--scenarios", "lossless,loss0.1",
			"--profiles", "roce,spray", "--size", "1M", "--iters", "20",
			"--json", filepath.Join(dir, "c.json"), "--png", ""})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("compare ended before serving metrics: %v", err)
	}
	const name = "spray_qp_tx_bytes_total"
	var first float64
	seen := map[string]bool{}
	for first == 0 {
		if v, ok := sumFamily(t, url, name); ok && v > 0 {
			first = v
		}
		for _, ep := range endpointLabels(t, url, name) {
			seen[ep] = true
		}
		select {
		case err := <-done:
			t.Fatalf("compare ended (%v) before %s showed traffic", err, name)
		default:
		}
	}
	for {
		v, ok := sumFamily(t, url, name)
		for _, ep := range endpointLabels(t, url, name) {
			seen[ep] = true
		}
		if ok && v > first {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("compare ended (%v) with %s still at %v", err, name, first)
		default:
		}
	}
	for _, fam := range []string{"spray_qp_retransmits_total", "spray_path_tx_bytes_total", "spray_qp_rx_bytes_total", "spray_qp_rtt_smoothed_seconds"} {
		if _, ok := sumFamily(t, url, fam); !ok {
			t.Errorf("%s missing during the run", fam)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	named := false
	for ep := range seen {
		if (strings.HasPrefix(ep, "roce/") || strings.HasPrefix(ep, "spray/")) && strings.Contains(ep, "/rank") {
			named = true
		} else {
			t.Errorf("endpoint %q: want PROFILE/SCENARIO/rankR", ep)
		}
	}
	if !named {
		t.Errorf("no endpoint series seen (%v)", seen)
	}
	t.Logf("endpoints seen: %v", seen)
	if _, err := http.Get(url); err == nil {
		t.Errorf("metrics still served after compare returned")
	}
}
