package transport

import (
	"encoding/binary"
	"fmt"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
)

// Shards is a set of engines, one per queue of a multi-queue link
// (link.Multi), that serve one endpoint together: engine i drives queue i
// and owns the QPs whose number is i modulo the number of engines (Owner).
// A QP transmits on its owner's queue. A frame that arrives on a queue
// whose engine does not own its destination QP is copied into the
// hand-over ring from that engine to the owner (a bounded lock-free
// single-producer single-consumer ring, one per ordered pair of engines)
// and its link buffer released at once; the owner takes it from the ring
// in its next Step. A full ring drops the frame, counted in the receiving
// engine's EngineStats.HandoverDrops. Memory regions are shared by all the
// engines, since a peer's WRITE may arrive on any queue.
//
// Each engine may be stepped on its own goroutine (Endpoint does that);
// Step steps them all in turn on the caller's, for tests under a simulated
// clock. Engines are not safe for concurrent use one by one, and Register
// and Deregister are safe from any goroutine.
type Shards struct {
	engs  []*Engine
	rings [][]*spscRing // rings[from][to]; nil on the diagonal
	mrs   *mrTable
	next  int // engine of the next CreateQP
}

// NewShards returns one engine per queue of l, configured by cfg (whose
// Engines field it ignores).
func NewShards(l link.Multi, cfg Config) (*Shards, error) {
	qs := l.Queues()
	if len(qs) == 0 {
		return nil, fmt.Errorf("%w: link %q has no queues", ErrConfig, l.Info().Name)
	}
	c, err := cfg.withDefaults(l.Info().FrameSize)
	if err != nil {
		return nil, err
	}
	mrRng, seeded := newRand(c.Seed, mrStream)
	s := &Shards{mrs: newMRTable(mrRng, seeded)}
	for i, q := range qs {
		rng, seeded := newRand(c.Seed, uint64(i))
		e, err := newEngine(q, c, rng, seeded, s.mrs)
		if err != nil {
			return nil, err
		}
		e.sh, e.shard = s, i
		if e.credit != nil {
			e.credit.perNs /= float64(len(qs)) // the link's rate, shared by its queues' engines
		}
		e.woken = make([]bool, len(qs))
		s.engs = append(s.engs, e)
	}
	// Frames from a peer with the same MTU fit, with one 802.1Q tag; a
	// longer one is a counted drop.
	slot := c.MTU + 4
	s.rings = make([][]*spscRing, len(qs))
	for i := range s.rings {
		s.rings[i] = make([]*spscRing, len(qs))
		for j := range s.rings[i] {
			if i != j {
				s.rings[i][j] = newSPSCRing(c.HandoverSlots, slot)
			}
		}
	}
	return s, nil
}

// Engines returns the engines, in queue order.
func (s *Shards) Engines() []*Engine { return s.engs }

// Owner returns the index of the engine that owns QP number qpn.
func (s *Shards) Owner(qpn uint32) int { return int(qpn % uint32(len(s.engs))) }

// CreateQP creates a QP on the next engine in turn.
func (s *Shards) CreateQP() (*QP, error) {
	e := s.engs[s.next%len(s.engs)]
	s.next++
	return e.CreateQP()
}

// QP returns the QP numbered qpn, or nil.
func (s *Shards) QP(qpn uint32) *QP { return s.engs[s.Owner(qpn)].QP(qpn) }

// Register registers buf as a memory region for every engine.
func (s *Shards) Register(buf []byte, acc Access) *MR { return s.mrs.register(buf, acc) }

// Deregister removes a region.
func (s *Shards) Deregister(mr *MR) error { return s.mrs.deregister(mr) }

// Step steps every engine once at now, in queue order, and reports whether
// any did work.
func (s *Shards) Step(now clock.Time) (bool, error) {
	work := false
	for _, e := range s.engs {
		w, err := e.Step(now)
		if err != nil {
			return work, err
		}
		work = work || w
	}
	return work, nil
}

// NextDeadline returns the earliest NextDeadline of the engines.
func (s *Shards) NextDeadline() clock.Time {
	t := clock.Never
	for _, e := range s.engs {
		t = clock.Min(t, e.NextDeadline())
	}
	return t
}

// Pending reports whether a hand-over ring holds frames.
func (s *Shards) Pending() bool {
	for _, e := range s.engs {
		if e.handedInPending() {
			return true
		}
	}
	return false
}

// Stats returns the engines' counters, in queue order.
func (s *Shards) Stats() []EngineStats {
	st := make([]EngineStats, len(s.engs))
	for i, e := range s.engs {
		st[i] = e.stats
	}
	return st
}

// handOver passes frame to the engine that owns its destination QP, if
// that is another engine, and reports whether it took the frame (passed
// or dropped). Frames it cannot place are left to input, which counts them.
func (e *Engine) handOver(frame []byte, at clock.Time) bool {
	qpn, ok := destQP(frame)
	if !ok {
		return false
	}
	o := e.sh.Owner(qpn)
	if o == e.shard {
		return false
	}
	if !e.sh.rings[e.shard][o].push(frame, at) {
		e.stats.HandoverDrops++
		return true
	}
	e.stats.HandedOver++
	e.woken[o] = true
	return true
}

// wakeOwners wakes the engines that this Step handed frames to and that
// sleep (or are about to) in their link's Wait.
func (e *Engine) wakeOwners() {
	for o, w := range e.woken {
		if !w {
			continue
		}
		e.woken[o] = false
		if t := e.sh.engs[o]; t.sleeping.Load() {
			t.link.Wake()
		}
	}
}

// takeHandedIn runs the frames other engines handed over, at most a ring's
// worth from each, and reports whether there were any.
func (e *Engine) takeHandedIn(now clock.Time) bool {
	any := false
	for from := range e.sh.rings {
		r := e.sh.rings[from][e.shard]
		if r == nil {
			continue
		}
		for range r.cap() {
			b, at, ok := r.front()
			if !ok {
				break
			}
			any = true
			e.stats.HandedIn++
			e.input(now, at, b)
			r.pop()
		}
	}
	return any
}

// handedInPending reports whether another engine handed this one frames
// that it has not taken yet.
func (e *Engine) handedInPending() bool {
	for from := range e.sh.rings {
		if r := e.sh.rings[from][e.shard]; r != nil && r.len() > 0 {
			return true
		}
	}
	return false
}

// destQP returns the BTH destination QP of a frame carrying Ethernet (one
// 802.1Q tag allowed) | IPv4 or IPv6 | UDP to port 4791 | BTH, without
// checking anything else: the owner's decode does. ok is false for any
// other frame.
func destQP(f []byte) (uint32, bool) {
	if len(f) < 14 {
		return 0, false
	}
	off, et := 14, binary.BigEndian.Uint16(f[12:])
	if et == 0x8100 {
		if len(f) < 18 {
			return 0, false
		}
		off, et = 18, binary.BigEndian.Uint16(f[16:])
	}
	switch et {
	case 0x0800:
		if len(f) < off+20 || f[off+9] != 17 {
			return 0, false
		}
		off += int(f[off]&0xf) * 4
	case 0x86dd:
		if len(f) < off+40 || f[off+6] != 17 {
			return 0, false
		}
		off += 40
	default:
		return 0, false
	}
	// UDP (8 bytes), then BTH: the destination QP is in bytes 5-7.
	if len(f) < off+8+12 || binary.BigEndian.Uint16(f[off+2:]) != 4791 {
		return 0, false
	}
	b := f[off+8:]
	return uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]), true
}
