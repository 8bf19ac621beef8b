package main

import (
	"testing"
)

// TestPerfSweep: spray perf --size 64,1K runs every link kind at every
// size, in that order, each with its own total (256Ki messages, here
// bounded by --total) and the bytes intact, and reports the CPU a
// message took; a sweep in server mode, and a size in it beyond
// --total, are refused before anything runs.
func TestPerfSweep(t *testing.T) {
	rs := runPerfJSON(t, "--size", "64,1K", "--total", "64K", "--pings", "20", "--link", "mem,tcp")
	want := []struct {
		link string
		size float64
	}{{"mem", 64}, {"tcp", 64}, {"mem", 1024}, {"tcp", 1024}}
	if len(rs) != len(want) {
		t.Fatalf("%d results, want %d: %v", len(rs), len(want), rs)
	}
	for i, w := range want {
		r := rs[i]
		if r["link"] != w.link || r["msg_size"] != w.size {
			t.Errorf("result %d: %v at %v, want %s at %v", i, r["link"], r["msg_size"], w.link, w.size)
		}
		if r["integrity_ok"] != true || r["bytes"] != float64(64<<10) {
			t.Errorf("result %d: integrity %v, %v bytes, want true and %d", i, r["integrity_ok"], r["bytes"], 64<<10)
		}
		if us, _ := r["cpu_us_per_msg"].(float64); us <= 0 {
			t.Errorf("result %d: CPU per message %v, want > 0", i, r["cpu_us_per_msg"])
		}
	}
	if err := runPerf([]string{"server", "--size", "64,1K"}); err == nil {
		t.Error("a sweep in server mode was accepted")
	}
	if err := runPerf([]string{"--size", "64,1M", "--total", "64K"}); err == nil {
		t.Error("a sweep size beyond --total was accepted")
	}
}
