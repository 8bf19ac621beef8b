package sim

import (
	"slices"
	"testing"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

// TestEventHeapOrder: events pushed in random times, with ties, and
// popped between pushes come out in (t, seq) order, every one once.
func TestEventHeapOrder(t *testing.T) {
	r := testutil.Rand(t)
	for _, n := range []int{1, 2, 5, 17, 1000, 20000} {
		var h eventHeap
		var want, got []event
		var seq uint64
		var now clock.Time
		for len(got) < n {
			if len(want) < n && (len(h) == 0 || r.IntN(3) > 0) {
				seq++
				e := event{t: now + clock.Time(r.IntN(50)), seq: seq, a: int32(seq)}
				h.push(e)
				want = append(want, e)
				continue
			}
			e := h.pop()
			if e.t < now {
				t.Fatalf("n=%d: popped t=%v after t=%v", n, e.t, now)
			}
			now = e.t
			got = append(got, e)
		}
		if len(h) != 0 {
			t.Fatalf("n=%d: %d events left", n, len(h))
		}
		// Popping interleaved with pushes at or after the last pop's time
		// gives each event in (t, seq) order among those present: sorted,
		// the pops must be a permutation of the pushes, in order.
		for i := 1; i < len(got); i++ {
			if got[i].less(&got[i-1]) {
				t.Fatalf("n=%d: pop %d (t=%v seq=%d) before pop %d (t=%v seq=%d)", n, i-1, got[i-1].t, got[i-1].seq, i, got[i].t, got[i].seq)
			}
		}
		cmp := func(a, b event) int {
			if a.less(&b) {
				return -1
			}
			if b.less(&a) {
				return 1
			}
			return 0
		}
		slices.SortFunc(want, cmp)
		if !slices.Equal(want, got) {
			t.Fatalf("n=%d: the pops are not the pushes", n)
		}
	}
}
