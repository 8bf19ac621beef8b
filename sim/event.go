package sim

import (
	"math/bits"

	"github.com/sprayfabric/spray/clock"
)

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
	c    uint16
	a, b int32
}

// slotEvent is an event in the ring of eventQueue: its time is its
// bucket's, its order its place in the bucket.
type slotEvent struct {
	kind uint8
	c    uint16
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

const (
	ringBits = 14
	// ringSize is the nanoseconds eventQueue's ring covers ahead of the
	// last event run: every frame's transmission, link delay and PFC
	// pause of the built topologies falls within it.
	ringSize  = 1 << ringBits
	ringMask  = ringSize - 1
	ringWords = ringSize / 64
)

// bucket is the events of one nanosecond, in the order they were
// scheduled: ev[h:] are pending.
type bucket struct {
	ev []slotEvent
	h  int
}

// eventQueue runs events in (t, seq) order, as eventHeap does, at O(1)
// a push and a pop for the events less than ringSize ahead: a ring of
// per-nanosecond FIFO buckets, found through a two-level bitmap, and a
// heap (far) for the rest. A run of a thousand hosts holds millions of
// events, and a heap's pop missed the cache at every level.
//
// The order is that of the heap: within a nanosecond a bucket is a FIFO,
// so in scheduling order; an event of the far heap at time t was
// scheduled while t was ringSize or more ahead, before any event of t's
// bucket, so it runs first on a tie (TestEventQueueOrder).
type eventQueue struct {
	// base is the time of the last event popped; none pending is
	// earlier, so the ring's slot s holds time base + (s - base) mod
	// ringSize.
	base clock.Time
	ring []bucket
	bits [ringWords]uint64      // slot s has events
	sum  [ringWords / 64]uint64 // bits[w] != 0
	n    int                    // events in the ring
	seq  uint64
	far  eventHeap
}

// len returns the pending events.
func (q *eventQueue) len() int { return q.n + len(q.far) }

// push adds event e at time t, which is not before the last pop's.
func (q *eventQueue) push(t clock.Time, e slotEvent) {
	if t-q.base >= ringSize {
		q.seq++
		q.far.push(event{t: t, seq: q.seq, kind: e.kind, c: e.c, a: e.a, b: e.b})
		return
	}
	if q.ring == nil {
		q.ring = make([]bucket, ringSize)
	}
	s := int(t & ringMask)
	b := &q.ring[s]
	b.ev = append(b.ev, e)
	q.bits[s>>6] |= 1 << (s & 63)
	q.sum[s>>12] |= 1 << ((s >> 6) & 63)
	q.n++
}

// nextWord returns the first word of bits at or after w that has
// events, or -1.
func (q *eventQueue) nextWord(w int) int {
	for j := w >> 6; j < len(q.sum); j++ {
		m := q.sum[j]
		if j == w>>6 {
			m &= ^uint64(0) << (w & 63)
		}
		if m != 0 {
			return j<<6 | bits.TrailingZeros64(m)
		}
	}
	return -1
}

// first returns the ring's earliest slot with events, or -1.
func (q *eventQueue) first() int {
	if q.n == 0 {
		return -1
	}
	from := int(q.base & ringMask)
	w := from >> 6
	if m := q.bits[w] & (^uint64(0) << (from & 63)); m != 0 {
		return w<<6 | bits.TrailingZeros64(m)
	}
	i := -1
	if w+1 < ringWords {
		i = q.nextWord(w + 1)
	}
	if i < 0 {
		i = q.nextWord(0) // wrapped: a word at or before w
	}
	return i<<6 | bits.TrailingZeros64(q.bits[i])
}

// pop removes and returns the earliest event if it is not after until.
func (q *eventQueue) pop(until clock.Time) (clock.Time, slotEvent, bool) {
	s := q.first()
	var t clock.Time
	if s >= 0 {
		t = q.base + clock.Time((s-int(q.base&ringMask))&ringMask)
	}
	if len(q.far) > 0 && (s < 0 || q.far[0].t <= t) {
		if q.far[0].t > until {
			return 0, slotEvent{}, false
		}
		e := q.far.pop()
		q.base = e.t
		return e.t, slotEvent{kind: e.kind, c: e.c, a: e.a, b: e.b}, true
	}
	if s < 0 || t > until {
		return 0, slotEvent{}, false
	}
	b := &q.ring[s]
	e := b.ev[b.h]
	b.h++
	if b.h == len(b.ev) {
		b.ev, b.h = b.ev[:0], 0
		q.bits[s>>6] &^= 1 << (s & 63)
		if q.bits[s>>6] == 0 {
			q.sum[s>>12] &^= 1 << ((s >> 6) & 63)
		}
	}
	q.n--
	q.base = t
	return t, e, true
}

func (h eventHeap) len() int { return len(h) }
