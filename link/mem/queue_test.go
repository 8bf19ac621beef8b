package mem

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sprayfabric/spray/clock"
)

// TestQueueOrder: a port's receive queue gives its frames back in (due,
// ord) order whether they came in order (the sorted queue popped from its
// front) or out of it (the heap), across the switches between the two and
// the window's moves within its array. Compared with a sorted model on
// seeded random pushes and pops.
func TestQueueOrder(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var p Port
		var model []entry
		ord := uint64(0)
		due := clock.Time(0)
		for step := range 5000 {
			if rng.IntN(4) < 1+int(seed%3) || len(model) == 0 { // push
				ord++
				if rng.IntN(20) == 0 { // out of order, as jitter makes it
					due -= clock.Time(rng.IntN(5))
				} else {
					due += clock.Time(rng.IntN(3))
				}
				e := entry{due: due, ord: ord, buf: uint32(ord)}
				p.push(e)
				model = append(model, e)
				slices.SortFunc(model, func(a, b entry) int {
					if a.less(&b) {
						return -1
					}
					return 1
				})
				continue
			}
			got := p.pop()
			if got != model[0] {
				t.Fatalf("seed %d step %d: popped %+v, want %+v", seed, step, got, model[0])
			}
			model = model[1:]
			if len(p.rxq) != len(model) {
				t.Fatalf("seed %d step %d: %d queued, want %d", seed, step, len(p.rxq), len(model))
			}
		}
		for len(model) > 0 {
			if got := p.pop(); got != model[0] {
				t.Fatalf("seed %d drain: popped %+v, want %+v", seed, got, model[0])
			}
			model = model[1:]
		}
	}
}
