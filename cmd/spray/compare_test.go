package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/sprayfabric/spray/bench"
)

// TestCompareLoopbackCLI runs spray compare on loopback (forced, so that
// it also runs as root) with a small workload and checks the files it
// writes: the JSON holds a row per profile, every element right, and the
// PNG decodes.
func TestCompareLoopbackCLI(t *testing.T) {
	dir := t.TempDir()
	js, img := filepath.Join(dir, "c.json"), filepath.Join(dir, "c.png")
	if err := runCompare([]string{"--loopback", "--scenarios", "lossless", "--size", "256K", "--iters", "5",
		"--json", js, "--png", img}); err != nil {
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
	if res.Mode != "loopback" || len(res.Rows) != 3 {
		t.Fatalf("mode %q, %d rows, want loopback and 3", res.Mode, len(res.Rows))
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

func TestParseCompareSize(t *testing.T) {
	for s, want := range map[string]int64{"1M": 1 << 20, "64k": 64 << 10, "4096": 4096, "1GiB": 1 << 30, "2MB": 2 << 20} {
		if got, err := parseCompareSize(s); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "-1", "1X", "M", "99999999T"} {
		if _, err := parseCompareSize(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}
