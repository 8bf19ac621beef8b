// Package testutil holds helpers for spray's tests: seeded randomness that is
// logged and replayable, and root/kernel-feature skips.
package testutil

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Seed returns the seed for a randomized test: SPRAY_SEED from the
// environment when set, otherwise one derived from the clock. It logs the
// seed so that a failure can be replayed with SPRAY_SEED=<seed>.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	if s := os.Getenv("SPRAY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			tb.Fatalf("SPRAY_SEED=%q: %v", s, err)
		}
		tb.Logf("seed %d (from SPRAY_SEED)", v)
		return v
	}
	v := uint64(time.Now().UnixNano())
	tb.Logf("seed %d (replay with SPRAY_SEED=%d)", v, v)
	return v
}

// Rand returns a PCG source seeded by Seed.
func Rand(tb testing.TB) *rand.Rand {
	tb.Helper()
	s := Seed(tb)
	return rand.New(rand.NewPCG(s, s^0x9E3779B97F4A7C15))
}

// SkipIfNotRoot skips the test with a clear reason when not run as root.
func SkipIfNotRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, eBPF, AF_XDP): run the tests as root")
	}
}
