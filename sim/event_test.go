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

// TestEventQueueOrder: the ring of buckets and its far heap run events in
// the order of the heap, (t, seq), with times near and beyond the ring,
// ties, pushes at the time just popped, and pops bounded by until.
func TestEventQueueOrder(t *testing.T) {
	r := testutil.Rand(t)
	for _, span := range []int{3, 50, ringSize - 1, ringSize, 3 * ringSize} {
		var q eventQueue
		var h eventHeap
		var seq uint64
		var now clock.Time
		popped := 0
		for step := 0; step < 200000; step++ {
			if r.IntN(5) < 3 || h.len() == 0 {
				seq++
				d := clock.Time(r.IntN(span))
				if r.IntN(4) == 0 {
					d = 0 // at the time just popped
				}
				e := event{t: now + d, seq: seq, kind: uint8(seq), c: uint16(seq >> 8), a: int32(seq), b: -int32(seq)}
				h.push(e)
				q.push(e.t, slotEvent{kind: e.kind, c: e.c, a: e.a, b: e.b})
				continue
			}
			until := now + clock.Time(r.IntN(2*span))
			qt, qe, ok := q.pop(until)
			if want := h[0]; want.t > until {
				if ok {
					t.Fatalf("span %d: popped t=%v past until %v", span, qt, until)
				}
				continue
			}
			if !ok {
				t.Fatalf("span %d: no event at or before %v; the heap has t=%v", span, until, h[0].t)
			}
			want := h.pop()
			if qt != want.t || qe != (slotEvent{kind: want.kind, c: want.c, a: want.a, b: want.b}) {
				t.Fatalf("span %d, pop %d: got t=%v %+v, want t=%v seq=%d", span, popped, qt, qe, want.t, want.seq)
			}
			now = qt
			popped++
		}
		for h.len() > 0 {
			want := h.pop()
			qt, qe, ok := q.pop(want.t)
			if !ok || qt != want.t || qe.a != want.a {
				t.Fatalf("span %d, draining: got t=%v %+v ok=%v, want t=%v a=%d", span, qt, qe, ok, want.t, want.a)
			}
		}
		if q.len() != 0 {
			t.Fatalf("span %d: %d events left", span, q.len())
		}
	}
}
