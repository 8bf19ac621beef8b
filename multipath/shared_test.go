package multipath

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

// TestAdaptiveSize: the adaptive policy's own struct, which every QP
// holds, is at most 288 bytes: its configuration is shared
// (NewAdaptiveShared), not copied into each of a simulator's million QPs.
func TestAdaptiveSize(t *testing.T) {
	if n := unsafe.Sizeof(adaptive{}); n > 288 {
		t.Fatalf("adaptive is %d bytes, want at most 288", n)
	}
}

// TestAdaptiveSharedSame: policies sharing one configuration choose the
// same paths and report the same statistics as policies with their own
// copy, under the same acknowledgements, losses and INT delays, and the
// shared configuration gets its defaults.
func TestAdaptiveSharedSame(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 24)
	shared := &AdaptiveConfig{Scratch: new(Scratch), LossLimit: 2}
	var own, sh []Policy
	for i := range 3 {
		own = append(own, NewAdaptive(set, seed+uint64(i), AdaptiveConfig{Scratch: new(Scratch), LossLimit: 2}))
		sh = append(sh, NewAdaptiveShared(set, seed+uint64(i), shared))
	}
	if *shared != shared.withDefaults() {
		t.Fatalf("shared configuration without its defaults: %+v", *shared)
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	now := clock.Time(0)
	for step := range 20000 {
		now += clock.Time(200 + rng.IntN(400))
		i := rng.IntN(len(own))
		a, b := own[i], sh[i]
		ea, eb := a.Next(now), b.Next(now)
		if ea != eb {
			t.Fatalf("step %d, policy %d: Next %d with its own configuration, %d shared", step, i, ea, eb)
		}
		rtt := time.Duration(5000+rng.IntN(20000)) * time.Nanosecond
		switch r := rng.IntN(100); {
		case r < 3:
			a.OnLoss(now, ea)
			b.OnLoss(now, eb)
		case r < 60:
			ecn := rng.IntN(10) == 0
			a.OnAck(now, ea, rtt, ecn)
			b.OnAck(now, eb, rtt, ecn)
			q := time.Duration(rng.IntN(30000))
			a.(INTObserver).OnINT(now, ea, q)
			b.(INTObserver).OnINT(now, eb, q)
		}
	}
	for i := range own {
		if !reflect.DeepEqual(own[i].Stats(), sh[i].Stats()) {
			t.Fatalf("policy %d: statistics differ with a shared configuration", i)
		}
	}
}
