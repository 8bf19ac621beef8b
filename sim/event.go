package sim

import "github.com/sprayfabric/spray/clock"

// Event kinds.
const (
	evTxDone   uint8 = iota // a: port; b: packet
	evArrive                // a: receiving port; b: packet
	evPause                 // a: port to stop (b=1) or restart (b=0)
	evHostStep              // a: host
	evHostWake              // a: host
	evFunc                  // a: index in Net.funcs
)

// event is one scheduled thing. Ties in time break by seq, the order in
// which they were scheduled, so that a run is a function of its seed.
type event struct {
	t    clock.Time
	seq  uint64
	kind uint8
	a, b int32
}

func (e *event) less(o *event) bool {
	if e.t != o.t {
		return e.t < o.t
	}
	return e.seq < o.seq
}

// eventHeap is a binary min-heap of events by (t, seq).
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(&s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].less(&s[l]) {
			m = r
		}
		if !s[m].less(&s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
