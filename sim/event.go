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

// eventHeap is a 4-ary min-heap of events by (t, seq). Four children sit
// in two cache lines and the tree is half as deep as a binary one: a run
// of a thousand hosts holds millions of events, and every pop's path down
// missed the cache at each level. (t, seq) is a total order, so the order
// of pops is that of any heap (TestEventHeapOrder).
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !e.less(&s[p]) {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = e
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	x := s[n]
	s = s[:n]
	*h = s
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < min(c+4, n); k++ {
			if s[k].less(&s[m]) {
				m = k
			}
		}
		if !s[m].less(&x) {
			break
		}
		s[i] = s[m]
		i = m
	}
	s[i] = x
	return top
}
