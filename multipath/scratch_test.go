package multipath

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// TestAdaptiveSharedScratch: policies that share a Scratch (interleaved,
// one goroutine) pick the same entropies as policies with their own, and a
// policy holds no per-path state until its first use.
func TestAdaptiveSharedScratch(t *testing.T) {
	set := Entropies(7, 8)
	big := Entropies(9, 40)
	var sc Scratch
	shared := []Policy{
		NewAdaptive(set, 1, AdaptiveConfig{Scratch: &sc}),
		NewAdaptive(big, 2, AdaptiveConfig{Scratch: &sc}),
	}
	own := []Policy{NewAdaptive(set, 1, AdaptiveConfig{}), NewAdaptive(big, 2, AdaptiveConfig{})}
	for _, p := range append(shared, own...) {
		if a := p.(*adaptive); a.st != nil || a.stats != nil || a.rng != nil {
			t.Fatal("an unused policy holds per-path state")
		}
	}
	now := clock.Time(0)
	for k := range 2000 {
		now += clock.Time(time.Microsecond)
		i := k % 2
		a, b := shared[i].Next(now), own[i].Next(now)
		if a != b {
			t.Fatalf("packet %d of policy %d: entropy %d with a shared scratch, %d with its own", k, i, a, b)
		}
		// Scores that differ per path, so that rounds differ.
		rtt := time.Duration(10+int(a)%7) * time.Microsecond
		shared[i].OnAck(now, a, rtt, a%3 == 0)
		own[i].OnAck(now, b, rtt, b%3 == 0)
	}
	if len(sc.scores) != len(big) {
		t.Fatalf("shared scratch of %d paths, want %d", len(sc.scores), len(big))
	}
}
