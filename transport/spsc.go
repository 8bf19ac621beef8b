package transport

import (
	"sync/atomic"

	"github.com/sprayfabric/spray/clock"
)

// spscRing is a bounded lock-free single-producer single-consumer queue of
// frames with preallocated slots: the producer copies a frame into the next
// free slot and publishes it by advancing tail; the consumer reads the slot
// in place and frees it by advancing head. Neither side locks or allocates.
// A full ring or a frame longer than a slot refuses the push, for the
// producer to count as a drop.
//
// One goroutine may call push, another front and pop; len is safe from
// either. TestSPSCRing and TestSPSCRingConcurrent guard it.
type spscRing struct {
	// head is written by the consumer only, tail by the producer only;
	// each side keeps a cached copy of the other's index and reloads it only
	// when the cached one says full (producer) or empty (consumer), so that
	// in the steady state each side touches the other's cache line once per
	// batch rather than once per frame.
	head atomic.Uint64
	_    [56]byte
	tail atomic.Uint64
	_    [56]byte

	cachedHead uint64 // producer's copy of head
	_          [56]byte
	cachedTail uint64 // consumer's copy of tail
	_          [56]byte

	mask  uint64
	slots []spscSlot
}

type spscSlot struct {
	buf []byte // len == cap == slot size
	n   int
	at  clock.Time // when the frame arrived (Engine.arrival)
}

// newSPSCRing returns a ring of at least slots slots (rounded up to a power
// of two) of slotSize bytes each, all allocated now.
func newSPSCRing(slots, slotSize int) *spscRing {
	n := 1
	for n < slots {
		n <<= 1
	}
	mem := make([]byte, n*slotSize)
	r := &spscRing{mask: uint64(n - 1), slots: make([]spscSlot, n)}
	for i := range r.slots {
		r.slots[i].buf = mem[i*slotSize : (i+1)*slotSize : (i+1)*slotSize]
	}
	return r
}

// push copies frame, which arrived at at, into the next slot and reports
// whether it did: false when the ring is full or frame is longer than a
// slot.
func (r *spscRing) push(frame []byte, at clock.Time) bool {
	t := r.tail.Load()
	if t-r.cachedHead > r.mask {
		r.cachedHead = r.head.Load()
		if t-r.cachedHead > r.mask {
			return false
		}
	}
	s := &r.slots[t&r.mask]
	if len(frame) > len(s.buf) {
		return false
	}
	s.n = copy(s.buf, frame)
	s.at = at
	r.tail.Store(t + 1)
	return true
}

// front returns the oldest frame, valid until pop, and when it arrived;
// false when the ring is empty.
func (r *spscRing) front() ([]byte, clock.Time, bool) {
	h := r.head.Load()
	if h == r.cachedTail {
		r.cachedTail = r.tail.Load()
		if h == r.cachedTail {
			return nil, 0, false
		}
	}
	s := &r.slots[h&r.mask]
	return s.buf[:s.n], s.at, true
}

// pop frees the frame front returned.
func (r *spscRing) pop() { r.head.Store(r.head.Load() + 1) }

// len returns the number of frames queued.
func (r *spscRing) len() int { return int(r.tail.Load() - r.head.Load()) }

// cap returns the number of slots.
func (r *spscRing) cap() int { return len(r.slots) }
