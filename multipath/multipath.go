package multipath

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// Entropy range: the IANA dynamic port range, which RoCEv2 recommends for
// the UDP source port.
const (
	MinEntropy = 49152
	MaxEntropy = 65535
	// NumEntropies is the number of distinct entropies in the range.
	NumEntropies = MaxEntropy - MinEntropy + 1
)

// Entropies returns n distinct ports in [MinEntropy, MaxEntropy], in a
// pseudo-random order that depends only on seed. n is clamped to
// [0, NumEntropies]; n <= 0 returns nil. Entropies(seed, m) for m < n is a
// prefix of Entropies(seed, n).
func Entropies(seed uint64, n int) []uint16 {
	n = min(n, NumEntropies)
	if n <= 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, seed^0x6A09E667F3BCC908))
	// Sparse Fisher-Yates over the range: swapped records the positions
	// whose value is no longer their own.
	swapped := make(map[int]int, n)
	at := func(i int) int {
		if v, ok := swapped[i]; ok {
			return v
		}
		return i
	}
	out := make([]uint16, n)
	for i := range n {
		j := i + r.IntN(NumEntropies-i)
		vi, vj := at(i), at(j)
		swapped[j] = vi
		out[i] = uint16(MinEntropy + vj)
	}
	return out
}

// PathStats are the counters a policy keeps for one entropy.
type PathStats struct {
	Entropy uint16
	// Down reports that the path is out of the spray set and being probed
	// (the adaptive policy only).
	Down bool
	// Packets counts the packets Next sent on this entropy.
	Packets uint64
	// Acks and Losses count OnAck and OnLoss reports for it.
	Acks, Losses uint64
	// ECN counts acknowledgements that carried an ECN mark.
	ECN uint64
	// SRTT is the smoothed RTT (EWMA with gain 1/8) of the acknowledgements,
	// MinRTT the smallest; both 0 before the first.
	SRTT, MinRTT time.Duration
	// LastAck is the time of the last OnAck (0 before the first).
	LastAck clock.Time

	// The fields below are kept by the adaptive policy (NewAdaptive) only;
	// they stay zero for the others.

	// Removals counts the times the path was taken out of the set, Probes
	// the probe packets sent on it while out (also counted in Packets).
	Removals, Probes uint64
	// QueueDelay is the smoothed INT queue delay (EWMA with gain 1/8) that
	// OnINT reported for the path.
	QueueDelay time.Duration
	// Weight is the path's spraying weight relative to the best active
	// path, in (0, 1], as of the last round (1 before the first); 0 while
	// Down. The path's expected share of packets is its weight divided by
	// the sum of the weights.
	Weight float64
}

// Policy picks the entropy of each packet of a QP. Implementations are not
// safe for concurrent use.
type Policy interface {
	// Next returns the entropy for the next packet, and counts the packet.
	Next(now clock.Time) uint16
	// OnAck reports that a packet sent on entropy was acknowledged, with its
	// RTT and whether it (or the ACK) was ECN-marked. An entropy outside
	// Paths is ignored. The transport reports a packet that a switch
	// trimmed to its headers this way too, marked and with rtt 0: its path
	// works and its queue is full (transport's TestTrimMarksPath).
	OnAck(now clock.Time, entropy uint16, rtt time.Duration, ecn bool)
	// OnLoss reports that a packet sent on entropy was declared lost. An
	// entropy outside Paths is ignored.
	OnLoss(now clock.Time, entropy uint16)
	// Paths returns the entropy set. The caller must not modify it.
	Paths() []uint16
	// Stats returns a copy of the per-entropy counters, in Paths order.
	Stats() []PathStats
}

// paths is the per-entropy bookkeeping that every policy shares.
type paths struct {
	set []uint16
	// index holds entropy<<16 | position for sets above indexAbove,
	// sorted, for a binary search; smaller sets are scanned. Four bytes a
	// path: a QP holds one per policy (TestPathsIndex).
	index []uint32
	stats []PathStats // nil until initStats
}

// indexAbove is the largest set that find scans rather than searches in
// its index: a scan of a few entropies is as fast.
const indexAbove = 16

// newPaths returns the bookkeeping of set with duplicates removed, order
// kept, and no stats yet (initStats).
func newPaths(set []uint16) paths {
	var p paths
	if len(set) <= indexAbove {
		p.set = make([]uint16, 0, len(set))
		for _, e := range set {
			if !slices.Contains(p.set, e) {
				p.set = append(p.set, e)
			}
		}
		return p
	}
	// Sorted by entropy then position, the first of equal entropies is
	// the one to keep. The set then holds at most NumEntropies values, so
	// a position fits the index's 16 bits.
	type kp struct {
		e   uint16
		pos int
	}
	keys := make([]kp, len(set))
	for i, e := range set {
		keys[i] = kp{e, i}
	}
	slices.SortFunc(keys, func(a, b kp) int {
		if a.e != b.e {
			return int(a.e) - int(b.e)
		}
		return a.pos - b.pos
	})
	dup := make([]bool, len(set))
	for k := 1; k < len(keys); k++ {
		if keys[k].e == keys[k-1].e {
			dup[keys[k].pos] = true
		}
	}
	p.set = make([]uint16, 0, len(set))
	for i, e := range set {
		if !dup[i] {
			p.set = append(p.set, e)
		}
	}
	if len(p.set) > indexAbove {
		p.index = make([]uint32, len(p.set))
		for i, e := range p.set {
			p.index[i] = uint32(e)<<16 | uint32(i)
		}
		slices.Sort(p.index)
	}
	return p
}

// initStats gives every path its zero counters.
func (p *paths) initStats() {
	p.stats = make([]PathStats, len(p.set))
	for i, e := range p.set {
		p.stats[i].Entropy = e
	}
}

// find returns the index of entropy in the set.
func (p *paths) find(entropy uint16) (int, bool) {
	if p.index != nil {
		k, _ := slices.BinarySearch(p.index, uint32(entropy)<<16)
		if k < len(p.index) && uint16(p.index[k]>>16) == entropy {
			return int(p.index[k] & 0xffff), true
		}
		return 0, false
	}
	for i, e := range p.set {
		if e == entropy {
			return i, true
		}
	}
	return 0, false
}

func (p *paths) onAck(now clock.Time, entropy uint16, rtt time.Duration, ecn bool) {
	if i, ok := p.find(entropy); ok {
		p.ackAt(now, i, rtt, ecn)
	}
}

// ackAt counts an acknowledgement on path i.
func (p *paths) ackAt(now clock.Time, i int, rtt time.Duration, ecn bool) {
	s := &p.stats[i]
	s.Acks++
	if ecn {
		s.ECN++
	}
	s.LastAck = now
	if rtt <= 0 {
		return
	}
	if s.SRTT == 0 {
		s.SRTT, s.MinRTT = rtt, rtt
		return
	}
	s.SRTT += (rtt - s.SRTT) / 8
	s.MinRTT = min(s.MinRTT, rtt)
}

func (p *paths) onLoss(entropy uint16) {
	if i, ok := p.find(entropy); ok {
		p.stats[i].Losses++
	}
}

func (p *paths) Paths() []uint16 { return p.set }

func (p *paths) Stats() []PathStats {
	return append([]PathStats(nil), p.stats...)
}

// ecmp is the classic policy: every packet on one entropy.
type ecmp struct{ paths }

// NewECMP returns the classic policy: every packet of the QP on entropy.
func NewECMP(entropy uint16) Policy {
	e := &ecmp{newPaths([]uint16{entropy})}
	e.initStats()
	return e
}

// Next returns the QP's one entropy.
func (e *ecmp) Next(clock.Time) uint16 {
	e.stats[0].Packets++
	return e.set[0]
}

// OnAck updates the path's counters.
func (e *ecmp) OnAck(now clock.Time, entropy uint16, rtt time.Duration, ecn bool) {
	e.onAck(now, entropy, rtt, ecn)
}

// OnLoss updates the path's counters.
func (e *ecmp) OnLoss(_ clock.Time, entropy uint16) { e.onLoss(entropy) }

// spray is oblivious per-packet spraying: packets go round after round over
// the entropy set, each round in a fresh pseudo-random order, so every path
// gets exactly one packet per round and no path pattern repeats.
type spray struct {
	paths
	run
	rng   *rand.Rand
	order []int // permutation of indices into set for this round
	pos   int
}

// NewSpray returns an oblivious per-packet sprayer: packets go round after
// round over set (duplicates removed, order kept), each round in a fresh
// pseudo-random order derived from seed, so every path gets exactly one
// packet per round. OnAck and OnLoss update the counters only. An empty
// set is replaced by Entropies(seed, 1). The policy keeps its own copy of
// set.
func NewSpray(set []uint16, seed uint64) Policy {
	if len(set) == 0 {
		set = Entropies(seed, 1)
	}
	s := &spray{
		paths: newPaths(set),
		rng:   rand.New(rand.NewPCG(seed, seed^0xBB67AE8584CAA73B)),
	}
	s.initStats()
	s.order = make([]int, len(s.set))
	for i := range s.order {
		s.order[i] = i
	}
	s.pos = len(s.order) // the first Next shuffles
	return s
}

// Next returns the next entropy of the current round, starting a freshly
// shuffled round when the current one is used up. It does not allocate.
func (s *spray) Next(clock.Time) uint16 {
	if i, ok := s.cont(); ok {
		s.stats[i].Packets++
		return s.set[i]
	}
	if s.pos == len(s.order) {
		for i := len(s.order) - 1; i > 0; i-- { // Fisher-Yates
			j := s.rng.IntN(i + 1)
			s.order[i], s.order[j] = s.order[j], s.order[i]
		}
		s.pos = 0
	}
	i := s.order[s.pos]
	s.pos++
	s.stats[i].Packets++
	if s.len > 1 {
		s.start(i)
	}
	return s.set[i]
}

// OnAck updates the path's counters; it does not change the spraying.
func (s *spray) OnAck(now clock.Time, entropy uint16, rtt time.Duration, ecn bool) {
	s.onAck(now, entropy, rtt, ecn)
}

// OnLoss updates the path's counters; it does not change the spraying.
func (s *spray) OnLoss(_ clock.Time, entropy uint16) { s.onLoss(entropy) }
