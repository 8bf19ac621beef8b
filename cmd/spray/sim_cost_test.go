package main

import (
	"os"
	"runtime"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestRowCost: the RSS a row reports covers the memory it touched, and
// a later row that touches little is not charged for an earlier, larger
// one (the high-water mark is reset between rows).
func TestRowCost(t *testing.T) {
	testutil.SkipUnlessLinux(t, "VmHWM and clear_refs")
	if highWater() == 0 {
		t.Fatal("no VmHWM in /proc/self/status")
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("the peak RSS cannot be reset: %v", err)
	}
	const big = 256 << 20
	done := rowCost()
	b := make([]byte, big)
	for i := range b {
		b[i] = byte(i)
	}
	_, first := done()
	runtime.KeepAlive(b)
	b = nil
	done = rowCost()
	_, second := done()
	if first < big || second > first-big/2 {
		t.Errorf("a row touching %d MiB reported %d MiB, the next touching none %d MiB", big>>20, first>>20, second>>20)
	}
}
