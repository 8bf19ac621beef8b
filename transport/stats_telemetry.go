package transport

import (
	"context"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/retransmit"
)

// DefaultMicroburstThreshold is Config.MicroburstThreshold's default: the
// INT queue delay above which an acknowledgement counts as a microburst.
const DefaultMicroburstThreshold = 50 * time.Microsecond

// PathCounters are the transport's own counters for one path (entropy) of
// a QP, kept beside the path policy's (multipath.PathStats) whatever the
// policy: bytes, retransmissions and the INT queue delay that
// acknowledgements report for the path.
type PathCounters struct {
	// TxPackets and TxBytes count the data packets (retransmissions
	// included) sent on the entropy; Retransmits the retransmissions alone.
	TxPackets, TxBytes, Retransmits uint64
	// INTAcks counts the acknowledgements of packets sent on the entropy
	// that carried INT records.
	INTAcks uint64
	// INTQueueDelay is the smoothed (EWMA, gain 1/8) queue delay those
	// records report, summed over the hops; MaxINTQueueDelay the largest.
	INTQueueDelay, MaxINTQueueDelay time.Duration
	// MicroburstAcks counts those acknowledgements whose queue delay
	// exceeded Config.MicroburstThreshold, Microbursts the runs of them: an
	// acknowledgement above the threshold after one below it (or as the
	// path's first) starts a microburst event.
	Microbursts, MicroburstAcks uint64
}

// pathTable keeps PathCounters in the order of the path policy's Paths,
// and the QP's delay histograms. A path's counters take room from its
// first packet or INT record on: a QP that sends a few packets over many
// entropies holds counters for those it used (TestPathTableGrows).
type pathTable struct {
	ents []uint16
	// idx holds entropy<<16 | position for sets above 16 paths, sorted,
	// for a binary search; small ones are scanned.
	idx []uint32
	// slot is each path's place in c plus 1 (0: no counters yet), and
	// slotHot when the path's last INT queue delay was above the
	// threshold.
	slot []uint16
	c    []pathCount
	// wide, when not nil, holds the counters of c at full size, in the
	// same places: from the first value that outgrew 32 bits on.
	wide [][pcN]uint64

	rtt, qdelay delayHist
}

// pathCount is a path's PathCounters in 32 bytes, every field in 32 bits
// while every value of the QP's table fits; the first that does not moves
// the table to wide, so the counters stay exact
// (TestPathCountersWideValues). A busy QP holds one per entropy.
type pathCount [pcN]uint32

// Fields of pathCount: PathCounters' counters, then its delays (ns).
const (
	pcTxPackets = iota
	pcTxBytes
	pcRetransmits
	pcINTAcks
	pcMicrobursts
	pcMicroburstAcks
	pcINTQueueDelay
	pcMaxINTQueueDelay
	pcN
)

// get returns field f of the counters at k.
func (t *pathTable) get(k, f int) uint64 {
	if t.wide != nil {
		return t.wide[k][f]
	}
	return uint64(t.c[k][f])
}

// set sets field f of the counters at k, widening the table when v does
// not fit 32 bits.
func (t *pathTable) set(k, f int, v uint64) {
	if t.wide == nil {
		if v <= math.MaxUint32 {
			t.c[k][f] = uint32(v)
			return
		}
		t.wide = make([][pcN]uint64, len(t.c), cap(t.c))
		for j := range t.c {
			for g := range pcN {
				t.wide[j][g] = uint64(t.c[j][g])
			}
		}
	}
	t.wide[k][f] = v
}

func (t *pathTable) delay(k, f int) time.Duration { return time.Duration(int64(t.get(k, f))) }

func (t *pathTable) setDelay(k, f int, d time.Duration) { t.set(k, f, uint64(int64(d))) }

// slotHot marks a hot path in pathTable.slot (a set has at most 1,024
// paths).
const slotHot = 1 << 15

// DelayBuckets is the number of buckets of a DelayHistogram.
const DelayBuckets = 24

// DelayHistogram counts durations in power-of-two buckets of microseconds:
// bucket 0 holds those up to 1µs, bucket i those in (2^(i-1), 2^i] µs, the
// last bucket everything above 2^(DelayBuckets-2) µs (about 4 s). Adding a
// sample costs a few instructions and allocates nothing. The zero value is
// an empty histogram; it is not safe for concurrent use.
type DelayHistogram struct {
	Counts [DelayBuckets]uint64
	Sum    time.Duration // of every sample added
}

// Add counts d (negative durations count as 0).
func (h *DelayHistogram) Add(d time.Duration) {
	d = max(d, 0)
	h.Counts[delayBucket(d)]++
	h.Sum += d
}

// delayBucket returns the bucket of d >= 0.
func delayBucket(d time.Duration) int {
	if d <= time.Microsecond {
		return 0
	}
	return min(bits.Len64(uint64((d-1)/time.Microsecond)), DelayBuckets-1)
}

// delayHist is a QP's DelayHistogram in 112 bytes: counts in 32
// bits until one would pass 2^32-1, then the full histogram from there on,
// so the counts stay exact (TestDelayHistWide). Every busy QP holds two.
type delayHist struct {
	c    [DelayBuckets]uint32
	sum  time.Duration
	wide *DelayHistogram
}

// add counts d (negative durations count as 0).
func (h *delayHist) add(d time.Duration) {
	if h.wide == nil {
		d = max(d, 0)
		if i := delayBucket(d); h.c[i] < math.MaxUint32 {
			h.c[i]++
			h.sum += d
			return
		}
		w := h.full()
		h.wide = &w
	}
	h.wide.Add(d)
}

// full returns the histogram.
func (h *delayHist) full() DelayHistogram {
	if h.wide != nil {
		return *h.wide
	}
	f := DelayHistogram{Sum: h.sum}
	for i, c := range h.c {
		f.Counts[i] = uint64(c)
	}
	return f
}

// Count returns the number of samples.
func (h *DelayHistogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// DelayBucketBound returns the upper bound of bucket i, 2^i µs, for i in
// [0, DelayBuckets-1); the last bucket is unbounded.
func DelayBucketBound(i int) time.Duration {
	return time.Microsecond << i
}

// init sets the table to the paths ents, every counter at zero; the
// delay histograms are the QP's and stay. A set of 16 paths or fewer
// holds no index, whatever the set before it (TestPathTableNewSmallerSet).
func (t *pathTable) init(ents []uint16) {
	t.ents = append([]uint16(nil), ents...)
	t.slot = make([]uint16, len(ents))
	t.idx, t.c, t.wide = nil, nil, nil
	if len(ents) > 16 {
		t.idx = make([]uint32, len(ents))
		for i, e := range ents {
			t.idx[i] = uint32(e)<<16 | uint32(i)
		}
		slices.Sort(t.idx)
	}
}

// index returns the index of entropy e, or -1 if e is not a path.
func (t *pathTable) index(e uint16) int {
	if t.idx != nil {
		k, _ := slices.BinarySearch(t.idx, uint32(e)<<16)
		if k < len(t.idx) && uint16(t.idx[k]>>16) == e {
			return int(t.idx[k] & 0xffff)
		}
		return -1
	}
	for i, x := range t.ents {
		if x == e {
			return i
		}
	}
	return -1
}

// entry returns the place of path i's counters, making room for them: c
// grows by doubling, up to one entry per path.
func (t *pathTable) entry(i int) int {
	if t.slot[i]&^slotHot == 0 {
		if len(t.c) == cap(t.c) {
			t.c = slices.Grow(t.c, min(max(4, len(t.c)), len(t.slot)-len(t.c)))
		}
		t.c = append(t.c, pathCount{})
		if t.wide != nil {
			t.wide = append(t.wide, [pcN]uint64{})
		}
		t.slot[i] |= uint16(len(t.c))
	}
	return int(t.slot[i]&^slotHot - 1)
}

// counters returns a copy of path i's counters (zero when unused).
func (t *pathTable) counters(i int) PathCounters {
	if i < 0 || i >= len(t.slot) || t.slot[i]&^slotHot == 0 {
		return PathCounters{}
	}
	k := int(t.slot[i]&^slotHot - 1)
	return PathCounters{
		TxPackets: t.get(k, pcTxPackets), TxBytes: t.get(k, pcTxBytes), Retransmits: t.get(k, pcRetransmits),
		INTAcks:          t.get(k, pcINTAcks),
		INTQueueDelay:    t.delay(k, pcINTQueueDelay),
		MaxINTQueueDelay: t.delay(k, pcMaxINTQueueDelay),
		Microbursts:      t.get(k, pcMicrobursts), MicroburstAcks: t.get(k, pcMicroburstAcks),
	}
}

func (t *pathTable) onSend(e uint16, n int, retx bool) {
	i := t.index(e)
	if i < 0 {
		return
	}
	k := t.entry(i)
	t.set(k, pcTxPackets, t.get(k, pcTxPackets)+1)
	t.set(k, pcTxBytes, t.get(k, pcTxBytes)+uint64(n))
	if retx {
		t.set(k, pcRetransmits, t.get(k, pcRetransmits)+1)
	}
}

// ewma8 moves avg by 1/8 of the way to the sample; the first sample sets it.
func ewma8(avg, sample time.Duration, first bool) time.Duration {
	if first {
		return sample
	}
	return avg + (sample-avg)/8
}

// noteRTT folds a round-trip sample into the QP's SRTT and MinRTT.
func (q *QP) noteRTT(rtt time.Duration) {
	if rtt <= 0 {
		return
	}
	s := &q.stats
	first := s.RTTSamples == 0
	s.RTTSamples++
	q.pstats.rtt.add(rtt)
	s.SRTT = ewma8(s.SRTT, rtt, first)
	if first || rtt < s.MinRTT {
		s.MinRTT = rtt
	}
}

// noteINT records the queue delay of an acknowledgement's INT records, for
// the QP and for the path (entropy) of the acknowledged packet, and counts
// microbursts: acknowledgements above the threshold, and events (the first
// of a run of them on a path).
func (q *QP) noteINT(entropy uint16, delay time.Duration) {
	above := q.cfg.MicroburstThreshold >= 0 && delay > q.cfg.MicroburstThreshold
	s := &q.stats
	s.INTQueueDelay = ewma8(s.INTQueueDelay, delay, s.INTAcks == 0)
	s.INTAcks++
	s.MaxINTQueueDelay = max(s.MaxINTQueueDelay, delay)
	q.pstats.qdelay.add(delay)
	i := q.pstats.index(entropy)
	if i < 0 {
		return
	}
	t := &q.pstats
	k := t.entry(i)
	acks := t.get(k, pcINTAcks)
	t.setDelay(k, pcINTQueueDelay, ewma8(t.delay(k, pcINTQueueDelay), delay, acks == 0))
	t.set(k, pcINTAcks, acks+1)
	t.setDelay(k, pcMaxINTQueueDelay, max(t.delay(k, pcMaxINTQueueDelay), delay))
	if above {
		s.MicroburstAcks++
		t.set(k, pcMicroburstAcks, t.get(k, pcMicroburstAcks)+1)
		if q.pstats.slot[i]&slotHot == 0 {
			s.Microbursts++
			t.set(k, pcMicrobursts, t.get(k, pcMicrobursts)+1)
		}
	}
	if above {
		q.pstats.slot[i] |= slotHot
	} else {
		q.pstats.slot[i] &^= slotHot
	}
}

// PathCounters returns a copy of the QP's per-path counters, in the order
// of PathStats (the path policy's Paths).
func (q *QP) PathCounters() []PathCounters {
	if q.pstats.ents == nil {
		return nil
	}
	c := make([]PathCounters, len(q.pstats.ents))
	for i := range c {
		c[i] = q.pstats.counters(i)
	}
	return c
}

// Histograms returns the QP's round-trip times (the samples of
// QPStats.SRTT) and INT queue delays (those of QPStats.INTQueueDelay) as
// histograms.
func (q *QP) Histograms() (rtt, queueDelay DelayHistogram) {
	return q.pstats.rtt.full(), q.pstats.qdelay.full()
}

// PathSnapshot is everything known about one path of a QP: the path
// policy's counters and the transport's.
type PathSnapshot struct {
	multipath.PathStats
	PathCounters
}

// QPSnapshot is the state of one QP at a moment: its counters, its
// sender's retransmit counters and its paths.
type QPSnapshot struct {
	QPN        uint32
	Stats      QPStats
	Retransmit retransmit.Stats
	Paths      []PathSnapshot
	// RTT and QueueDelay are the QP's Histograms.
	RTT, QueueDelay DelayHistogram
}

// Snapshot is the state of an Engine and of every QP on it at a moment:
// what a metrics exporter reads. The zero value is ready to be filled;
// filling it again reuses its memory.
type Snapshot struct {
	// Time is when Endpoint.Snapshot took it, on the Endpoint's clock;
	// Engine.Snapshot leaves it as it was.
	Time clock.Time
	// Engine is the sum of Engines, the counters of each engine (one per
	// queue of a sharded endpoint, in queue order).
	Engine  EngineStats
	Engines []EngineStats
	QPs     []QPSnapshot
	// Filter is what the link's filter in the kernel dropped before any
	// engine saw it (link.FilterStatsReader: an AF_XDP link's steering
	// program); zero for other links. Endpoint.Snapshot fills it.
	Filter link.FilterStats
}

// Snapshot fills dst with the engine's counters and those of its QPs, in
// creation order.
func (e *Engine) Snapshot(dst *Snapshot) {
	dst.Engine = e.stats
	dst.Engines = append(dst.Engines[:0], e.stats)
	dst.QPs = dst.QPs[:0]
	e.appendQPs(dst)
}

// appendQPs appends the snapshots of the engine's QPs to dst.QPs.
func (e *Engine) appendQPs(dst *Snapshot) {
	for _, q := range e.order {
		if q == nil {
			continue // a destroyed QP's place (sched.go)
		}
		if len(dst.QPs) < cap(dst.QPs) {
			dst.QPs = dst.QPs[:len(dst.QPs)+1]
		} else {
			dst.QPs = append(dst.QPs, QPSnapshot{})
		}
		s := &dst.QPs[len(dst.QPs)-1]
		s.QPN, s.Stats, s.Retransmit = q.qpn, q.Stats(), q.RetransmitStats()
		s.RTT, s.QueueDelay = q.Histograms()
		s.Paths = s.Paths[:0]
		for i, p := range q.paths.Stats() {
			ps := PathSnapshot{PathStats: p}
			if i < len(q.pstats.ents) && q.pstats.ents[i] == p.Entropy {
				ps.PathCounters = q.pstats.counters(i)
			} else {
				ps.PathCounters = q.pstats.counters(q.pstats.index(p.Entropy))
			}
			s.Paths = append(s.Paths, ps)
		}
	}
}

// Snapshot fills dst with the counters of the endpoint's engines and QPs
// (see Engine.Snapshot). It takes each engine's state lock in turn, like
// Stats.
func (ep *Endpoint) Snapshot(ctx context.Context, dst *Snapshot) error {
	dst.Engine = EngineStats{}
	dst.Engines = dst.Engines[:0]
	dst.QPs = dst.QPs[:0]
	for _, s := range ep.shards {
		err := s.view(ctx, func() error {
			dst.Engine.add(s.eng.stats)
			dst.Engines = append(dst.Engines, s.eng.stats)
			s.eng.appendQPs(dst)
			return nil
		})
		if err != nil {
			return err
		}
	}
	dst.Filter = link.FilterStats{}
	if f, ok := ep.link.(link.FilterStatsReader); ok {
		if st, err := f.FilterStats(); err == nil {
			dst.Filter = st
		}
	}
	dst.Time = ep.clk.Now()
	return nil
}

// LinkInfo returns the description of the endpoint's link.
func (ep *Endpoint) LinkInfo() link.Info { return ep.link.Info() }

// Link returns the link the endpoint was started on, for its counters
// (telemetry.InstrumentLink). Its engines own it: do not call its
// link.Link methods.
func (ep *Endpoint) Link() link.Link { return ep.link }

// Done returns a channel that is closed when the endpoint's engine has
// stopped: after Close, or when the link failed (see Err).
func (ep *Endpoint) Done() <-chan struct{} { return ep.done }
