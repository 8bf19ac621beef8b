package retransmit

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
)

// Event reports one packet newly acknowledged or newly declared lost.
type Event struct {
	PSN psn.PSN
	// Tag, Bytes and Entropy are the values given to OnSend for the latest
	// transmission of the packet.
	Tag     uint64
	Bytes   int
	Entropy uint16
	// SentAt is the time of the latest transmission.
	SentAt clock.Time
	// Retransmitted says the packet was sent more than once.
	Retransmitted bool
	// Lost is true when the packet was newly declared lost (it is queued
	// for PopLost), false when it was newly acknowledged. A PSN gets
	// exactly one acknowledged Event, and a lost Event for each time one of
	// its transmissions is declared lost before that.
	Lost bool
}

// Ack is what an ACK says, in PSNs.
type Ack struct {
	// Cum is the next PSN the receiver expects: every PSN before it arrived.
	Cum psn.PSN
	// Sack is a bitmap (SelectiveRepeat only): bit i of word w set means
	// PSN SackBase+64w+i arrived.
	Sack     []uint64
	SackBase psn.PSN
	// Acked is the PSN of the packet that triggered the ACK, valid when
	// HasAcked (SelectiveRepeat only).
	Acked    psn.PSN
	HasAcked bool
	// AckedSentAt, when not zero, is the send time that the triggering
	// packet carried and the ACK echoes (SelectiveRepeat only). When it is
	// earlier than the packet's latest transmission, the ACK is for an
	// earlier one: the resend was spurious, and the reordering window grows
	// (the timestamp test of RFC 3522, standing in for DSACK); when it is
	// the latest transmission's, the ACK is the resend's, however soon it
	// came.
	AckedSentAt clock.Time
}

// AckResult sums up what one OnAck or OnNak did.
type AckResult struct {
	// AckedPkts and AckedBytes count the packets newly acknowledged.
	AckedPkts, AckedBytes int
	// LostPkts counts the packets newly declared lost.
	LostPkts int
	// RTT is the round-trip sample taken from the most recently sent packet
	// newly acknowledged (the ACK's triggering packet when it qualifies),
	// or 0 for none: by Karn's rule a retransmitted packet gives none.
	RTT time.Duration
	// Progress says at least one packet was newly acknowledged.
	Progress bool
}

// TimeoutKind says what OnTimeout did.
type TimeoutKind uint8

// Timeout kinds.
const (
	// None: no timer was due.
	None TimeoutKind = iota
	// Reorder: RACK's reordering timer fired and re-ran loss detection.
	Reorder
	// Probe: the tail loss probe fired and queued the highest outstanding
	// PSN for resend.
	Probe
	// RTO: the retransmission timeout fired; every outstanding packet was
	// declared lost and queued, and the timeout backed off.
	RTO
	// Failed: MaxRetries timeouts passed without progress; the error wraps
	// ErrRetryExceeded.
	Failed
)

// String returns the kind's name.
func (k TimeoutKind) String() string {
	switch k {
	case None:
		return "none"
	case Reorder:
		return "reorder"
	case Probe:
		return "probe"
	case RTO:
		return "rto"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("TimeoutKind(%d)", uint8(k))
}

// Stats are a Scoreboard's counters since New.
type Stats struct {
	// Sent counts new packets, Retransmitted resends (probes included).
	Sent, Retransmitted uint64
	// Acked counts packets acknowledged, Lost loss declarations, of which
	// LostRACK by RACK's reordering window and LostRTO by a retransmission
	// timeout (the rest by a NAK).
	Acked, Lost, LostRACK, LostRTO uint64
	// SpuriousRetransmits counts packets declared lost (or probed) whose
	// earlier transmission turned out to arrive: acknowledged before the
	// resend was sent, or sooner after it than the minimum RTT.
	SpuriousRetransmits uint64
	// SpuriousRTOs counts retransmission timeouts whose resend turned out
	// unneeded, SpuriousTLPs probes acknowledged by their original, and
	// SpuriousWaits RACK losses declared without proof on their path (the
	// fan-in's wait, rackDetect) whose packet turned out to arrive.
	SpuriousRTOs, SpuriousTLPs, SpuriousWaits uint64
	// TLPs counts tail loss probes, RTOs retransmission timeouts.
	TLPs, RTOs uint64
	// BadAcks counts ACKs and NAKs dropped whole because they refer to
	// PSNs never sent (cumulative PSN, SACK bit or triggering PSN at or
	// beyond Next).
	BadAcks uint64
	// StaleAcks counts ACKs whose cumulative PSN, and NAKs whose expected
	// PSN, lies before the oldest unacknowledged PSN: reordered or
	// duplicate feedback, normal with sprayed ACKs. Their SACK bits are
	// still used.
	StaleAcks uint64
	// Naks counts NAKs acted on, DupNaks NAKs ignored because the resend
	// that the same expected PSN asked for is still in progress.
	Naks, DupNaks uint64
	// LostTrim counts packets declared lost by OnTrim: a switch cut them
	// to their headers and the receiver said so.
	LostTrim uint64
}

// Add adds o's counters to s, for totals over many scoreboards.
func (s *Stats) Add(o Stats) {
	s.Sent += o.Sent
	s.Retransmitted += o.Retransmitted
	s.Acked += o.Acked
	s.Lost += o.Lost
	s.LostRACK += o.LostRACK
	s.LostRTO += o.LostRTO
	s.SpuriousRetransmits += o.SpuriousRetransmits
	s.SpuriousRTOs += o.SpuriousRTOs
	s.SpuriousTLPs += o.SpuriousTLPs
	s.SpuriousWaits += o.SpuriousWaits
	s.TLPs += o.TLPs
	s.RTOs += o.RTOs
	s.BadAcks += o.BadAcks
	s.StaleAcks += o.StaleAcks
	s.Naks += o.Naks
	s.DupNaks += o.DupNaks
	s.LostTrim += o.LostTrim
}

// entry flags.
const (
	fAcked    uint8 = 1 << iota
	fLost           // declared lost: not in flight until resent
	fQueued         // in the resend queue (bitmap bit set)
	fPending        // returned by PopLost, awaiting OnSend
	fRetx           // sent more than once
	fRackLost       // the latest loss declaration was RACK's
	fRTO            // resent by a retransmission timeout
	fProbe          // resent as a tail loss probe
)

// pathSlots is the most slots of the per-entropy RACK table. The table
// starts empty and doubles (from minPathSlots) whenever an entropy finds no
// slot within pathProbe of its own, so that it holds about as many slots as
// the QP uses entropies; only a table of pathSlots evicts.
const (
	pathSlots    = 256
	minPathSlots = 16
)

// pathRack is RACK's state for one entropy: the most recently sent packet
// delivered on it, and that packet's RTT. It is 24 bytes, the booleans in
// one byte of flags: a busy QP holds a slot per entropy it uses, and the
// simulator a million QPs (TestPathRackSize).
type pathRack struct {
	entropy uint16
	// phys is 1 + the index in Scoreboard.phys of the physical path the
	// entropy takes (SetPath), or 0 when unknown.
	phys  uint8
	flags uint8 // rOK, rProven, rSilent
	psn   psn.PSN
	xmit  clock.Time
	rtt   time.Duration
}

// Flags of pathRack.
const (
	// rOK: the slot holds entropy's state.
	rOK uint8 = 1 << iota
	// rProven: a packet on the entropy was delivered (psn, xmit, rtt).
	rProven
	// rSilent: RACK declared a packet on the entropy lost and nothing on
	// it has been delivered since (rackDetect).
	rSilent
)

func (r *pathRack) ok() bool     { return r.flags&rOK != 0 }
func (r *pathRack) proven() bool { return r.flags&rProven != 0 }
func (r *pathRack) silent() bool { return r.flags&rSilent != 0 }

// physRack is RACK's state for one physical path (a route through the
// fabric's queues, named by SetPath): the most recently sent packet
// delivered on any entropy that takes it.
type physRack struct {
	sig  uint64
	ok   bool
	psn  psn.PSN
	xmit clock.Time
	rtt  time.Duration
}

// maxPhys bounds the physical paths a Scoreboard tells apart.
const maxPhys = 64

// pathProbe is how many slots, from its own, an entropy's RACK state may
// sit in (linear probing): 32 random entropies share a slot of 256 with
// some other one more often than not (1 - e^(-32*31/512), about 86%), and
// two spines' entropies in one slot would judge each other's packets, a
// spurious loss whenever their queues differ (TestRACKPathSlotsShared).
const pathProbe = 8

// path returns the RACK state of entropy, or nil when none is kept.
func (s *Scoreboard) path(entropy uint16) *pathRack {
	n := uint16(len(s.paths))
	if n == 0 {
		return nil
	}
	for k := range uint16(pathProbe) {
		r := &s.paths[(entropy+k)%n]
		if !r.ok() {
			return nil
		}
		if r.entropy == entropy {
			return r
		}
	}
	return nil
}

// pathSlot returns the slot for entropy's RACK state: its own, the first
// free one within pathProbe slots, or, when they are all taken by other
// entropies, the same in a table twice as large; in a table of pathSlots,
// its home slot (whose entropy loses its state).
func (s *Scoreboard) pathSlot(entropy uint16) *pathRack {
	for {
		n := uint16(len(s.paths))
		for k := range uint16(min(pathProbe, n)) {
			r := &s.paths[(entropy+k)%n]
			if !r.ok() || r.entropy == entropy {
				return r
			}
		}
		if n >= pathSlots {
			return &s.paths[entropy%n]
		}
		s.growPaths()
	}
}

// growPaths doubles the per-entropy RACK table and places every entropy's
// state again.
func (s *Scoreboard) growPaths() {
	old := s.paths
	s.paths = make([]pathRack, max(minPathSlots, 2*len(old)))
	for _, r := range old {
		if r.ok() {
			*s.pathSlot(r.entropy) = r
		}
	}
}

// entry is one ring slot: the state of one outstanding PSN.
type entry struct {
	sentAt  clock.Time
	tag     uint64
	bytes   int32
	entropy uint16
	flags   uint8
	// waitLost: the latest loss declaration was RACK's without proof on
	// the packet's path (rackDetect's fan-in wait).
	waitLost bool
}

// Scoreboard is the sender's state for one queue pair. Its zero value is
// not usable: use New. It is not safe for concurrent use: one engine loop
// owns it.
//
// Its ring of outstanding PSNs grows with them: it starts empty, doubles
// (from minRing slots) when a new packet finds it full, up to Capacity rounded
// up to a power of two, and Trim gives it back once nothing is
// outstanding. An idle scoreboard holds no ring (TestRingGrowsAndTrims).
type Scoreboard struct {
	cfg  Config
	ring []entry

	// queue has one bit per ring slot: queued for resend. qHint is at or
	// before the lowest queued PSN when nQueued > 0.
	queue   []uint64
	nQueued int

	inPkts, inBytes int

	srtt, rttvar, minRTT time.Duration
	failed               error

	rtoAt, ptoAt, reoAt clock.Time

	// RACK state (RFC 8985 5.2): the most recently sent packet delivered.
	rackXmit clock.Time
	rackRTT  time.Duration

	// recentRTT is a windowed maximum of the RTT samples of delivered
	// packets: the larger of this round trip's (rttCur) and the previous
	// one's (rttPrev); a round ends when the oldest unacknowledged PSN
	// passes rttEnd.
	rttCur, rttPrev time.Duration
	qCur, qPrev     time.Duration // the same for NoteQueueDelay
	fabQ            time.Duration // NoteFabricQueue
	// rtoFired is when the latest retransmission timeout fired.
	rtoFired clock.Time

	// paths is per-entropy RACK state, an open-addressed table by entropy
	// that grows with the entropies in use (pathSlot).
	paths []pathRack
	// phys is RACK's state per physical path (SetPath), at most maxPhys.
	phys []physRack

	nakResentAt clock.Time

	stats Stats

	// The 32-bit and 8-bit fields, together so that no padding parts
	// them: a busy QP holds a scoreboard, the simulator a million
	// (TestScoreboardSize).
	mask     uint32
	qHint    psn.PSN
	una      psn.PSN // oldest unacknowledged
	next     psn.PSN // next new
	rackPSN  psn.PSN
	retries  int32
	backoff  uint32
	spurEnd  psn.PSN // RACK.dsack_round, driven by spurious resends
	recovEnd psn.PSN
	rttEnd   psn.PSN
	tlpEnd   psn.PSN
	waitEnd  psn.PSN // see waitMult
	// rtoPSN was resent by the latest retransmission timeout.
	rtoPSN      psn.PSN
	nakExpected psn.PSN

	// reoMult multiplies RACK's reordering window, for reoLeft
	// recoveries (RACK.reo_wnd_persist). ptoMult multiplies the probe
	// timeout; a spurious probe doubles it (at most maxPTOMult) and
	// ptoLeft clean probes bring it back to 1. waitMult multiplies the
	// second round trip of RACK's wait for a packet without proof on its
	// path; a spurious loss declared by that wait doubles it (at most
	// maxWaitMult, once per round trip, till waitEnd) and waitLeft loss
	// recoveries without one bring it back to 1. All are small: bytes.
	reoMult, reoLeft   uint8
	ptoMult, ptoLeft   uint8
	waitMult, waitLeft uint8
	// hostD is NoteHostDelay's delay in hostUnits, rounded up.
	hostD     uint8
	hasRTT    bool
	rackOK    bool
	spurOK    bool
	inRecov   bool
	rttEndOK  bool
	tlpActive bool
	waitOK    bool
	nakActive bool
	nakResent bool
}

// New returns a Scoreboard whose first packet gets PSN first (masked to 24
// bits). Its ring and per-entropy table are allocated as packets need them.
func New(cfg Config, first psn.PSN) (*Scoreboard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	first = psn.New(uint32(first))
	return &Scoreboard{
		cfg:      cfg,
		una:      first,
		next:     first,
		rtoAt:    clock.Never,
		ptoAt:    clock.Never,
		reoAt:    clock.Never,
		reoMult:  1,
		waitMult: 1,
		rtoFired: clock.Time(math.MinInt64),
		ptoMult:  1,
	}, nil
}

// minRing is the ring's first size. Small: at 1,023 QPs a host, most QPs
// have a few packets outstanding, and a ring is 24 bytes a slot
// (TestRingGrowsAndTrims, TestPopLostSmallRingWraps).
const minRing = 8

// grow doubles the ring (from minRing), keeping every outstanding PSN's
// entry and resend bit.
func (s *Scoreboard) grow() {
	old, oldMask := s.ring, s.mask
	size := max(minRing, 2*len(old))
	s.ring = make([]entry, size)
	s.mask = uint32(size - 1)
	s.queue = make([]uint64, (size+63)/64)
	for p := s.una; p != s.next; p = p.Next() {
		e := old[uint32(p)&oldMask]
		*s.slot(p) = e
		if e.flags&fQueued != 0 {
			i := uint32(p) & s.mask
			s.queue[i>>6] |= 1 << (i & 63)
		}
	}
}

// Trim gives the ring back when no packet is outstanding, so that an idle
// scoreboard holds only its fixed state and its per-entropy table; the
// next packet sent allocates it again. It reports whether it had a ring
// to give back.
func (s *Scoreboard) Trim() bool {
	if s.ring == nil || s.una != s.next || s.nQueued > 0 {
		return false
	}
	s.ring, s.queue, s.mask = nil, nil, 0
	return true
}

// Trimmable reports whether Trim would give memory back.
func (s *Scoreboard) Trimmable() bool { return s.ring != nil && s.una == s.next && s.nQueued == 0 }

func (s *Scoreboard) slot(p psn.PSN) *entry { return &s.ring[uint32(p)&s.mask] }

// Config returns the configuration in use, defaults filled in.
func (s *Scoreboard) Config() Config { return s.cfg }

// Next returns the PSN for the next new packet.
func (s *Scoreboard) Next() psn.PSN { return s.next }

// Oldest returns the oldest unacknowledged PSN (Next when none).
func (s *Scoreboard) Oldest() psn.PSN { return s.una }

// Outstanding returns the number of PSNs from the oldest unacknowledged one
// up to Next.
func (s *Scoreboard) Outstanding() int { return int(s.next.Diff(s.una)) }

// Full reports whether Capacity packets are outstanding, so that OnSend of a
// new packet would fail.
func (s *Scoreboard) Full() bool { return s.Outstanding() >= s.cfg.Capacity }

// InFlight returns the packets (and their bytes) sent and neither
// acknowledged nor considered lost.
func (s *Scoreboard) InFlight() (pkts, bytes int) { return s.inPkts, s.inBytes }

// HasLost reports whether PopLost has a PSN to return.
func (s *Scoreboard) HasLost() bool { return s.nQueued > 0 }

// Stats returns the counters.
func (s *Scoreboard) Stats() Stats { return s.stats }

// Err returns nil, or the error wrapping ErrRetryExceeded once the
// scoreboard has failed.
func (s *Scoreboard) Err() error { return s.failed }

// SRTT returns the smoothed RTT (RFC 6298), or Config.InitialRTT before the
// first sample.
func (s *Scoreboard) SRTT() time.Duration {
	if !s.hasRTT {
		return s.cfg.InitialRTT
	}
	return s.srtt
}

// MinRTT returns the smallest RTT sample, or Config.InitialRTT before the
// first sample.
func (s *Scoreboard) MinRTT() time.Duration {
	if !s.hasRTT {
		return s.cfg.InitialRTT
	}
	return s.minRTT
}

// RTO returns the current retransmission timeout: Config.FixedRTO when it
// is set; otherwise SRTT + 4*RTTVAR (RFC 6298 2.2-2.3; Config.InitialRTO
// before the first sample, RFC 6298 2.1) at least MinRTO, plus the host's
// delay (NoteHostDelay), doubled
// for each timeout since the last valid RTT sample (RFC 6298 5.5) and
// capped at MaxRTO.
func (s *Scoreboard) RTO() time.Duration {
	if s.cfg.FixedRTO > 0 {
		return s.cfg.FixedRTO
	}
	var rto time.Duration
	if s.hasRTT {
		rto = max(s.srtt+4*s.rttvar, s.cfg.MinRTO)
	} else {
		rto = max(s.cfg.InitialRTO, s.cfg.MinRTO)
	}
	rto += s.hostDelay()
	for i := uint32(0); i < s.backoff && rto < s.cfg.MaxRTO; i++ {
		rto *= 2
	}
	return min(rto, s.cfg.MaxRTO)
}

// ReorderWindow returns RACK's reordering window: min(mult*MinRTT/4, SRTT),
// at least Config.MinReorderWindow (RFC 8985 6.2 step 4).
func (s *Scoreboard) ReorderWindow() time.Duration {
	w := s.MinRTT() / 4 * time.Duration(s.reoMult)
	if s.cfg.QueueingReorder {
		w = max(w, s.SRTT()-s.MinRTT())
	}
	w = min(w, s.SRTT())
	return max(w, s.cfg.MinReorderWindow)
}

// NextTimeout returns when OnTimeout should next be called: the earliest of
// RACK's reordering timer, the tail loss probe timer and the retransmission
// timer (RFC 8985 8), or clock.Never when none is armed.
func (s *Scoreboard) NextTimeout() clock.Time {
	if s.failed != nil {
		return clock.Never
	}
	return clock.Min(s.rtoAt, clock.Min(s.ptoAt, s.reoAt))
}

// OnSend records a transmission at now: a new packet when p == Next() (Next
// then advances), or a resend of a PSN that PopLost returned. Each call with
// a new PSN counts in Stats.Sent, each resend in Stats.Retransmitted. A
// resend of a PSN acknowledged since PopLost returned it fails with
// ErrUnexpectedPSN, which the transport may ignore.
//
// Timers (RFC 6298 5.1, RFC 8985 7.2): the retransmission timer starts if
// it is not running; a new packet (re)starts the probe timer.
func (s *Scoreboard) OnSend(now clock.Time, p psn.PSN, bytes int, tag uint64, entropy uint16) error {
	if s.failed != nil {
		return s.failed
	}
	if bytes < 0 || bytes > math.MaxInt32 {
		return fmt.Errorf("%w: %d bytes for PSN %d", ErrBadLength, bytes, p)
	}
	if p == s.next {
		if s.Full() {
			return fmt.Errorf("%w: %d packets outstanding", ErrFull, s.Outstanding())
		}
		if s.Outstanding() >= len(s.ring) {
			s.grow()
		}
		*s.slot(p) = entry{sentAt: now, tag: tag, bytes: int32(bytes), entropy: entropy}
		s.next = s.next.Next()
		s.inPkts++
		s.inBytes += bytes
		s.stats.Sent++
		if s.rtoAt == clock.Never {
			s.rtoAt = now.Add(s.RTO())
		}
		s.armProbe(now, true)
		return nil
	}
	if !p.InWindow(s.una, uint32(s.Outstanding())) {
		return fmt.Errorf("%w: PSN %d outside [%d, %d)", ErrUnexpectedPSN, p, s.una, s.next)
	}
	e := s.slot(p)
	if e.flags&fAcked != 0 || e.flags&(fLost|fQueued|fPending) == 0 {
		return fmt.Errorf("%w: PSN %d is not awaiting retransmission", ErrUnexpectedPSN, p)
	}
	if e.flags&fQueued != 0 {
		s.unqueue(p)
	}
	if e.flags&fLost != 0 {
		s.inPkts++
		s.inBytes += bytes
	} else {
		s.inBytes += bytes - int(e.bytes)
	}
	e.flags = (e.flags | fRetx) &^ (fLost | fQueued | fPending)
	e.sentAt, e.bytes, e.tag, e.entropy = now, int32(bytes), tag, entropy
	s.stats.Retransmitted++
	if s.nakActive && p == s.nakExpected && !s.nakResent {
		s.nakResent, s.nakResentAt = true, now
	}
	if s.rtoAt == clock.Never {
		s.rtoAt = now.Add(s.RTO())
	}
	// A resend arms the tail loss probe once nothing is queued: a lost
	// resend with nothing sent after it has no RACK to find it
	// (TestProbeAfterTrimResend).
	s.armProbe(now, false)
	return nil
}

// PopLost returns the lowest PSN queued for resend, with the tag given to
// OnSend, and removes it from the queue. The caller rebuilds the packet from
// the tag and calls OnSend with the same PSN.
func (s *Scoreboard) PopLost() (p psn.PSN, tag uint64, ok bool) {
	if s.nQueued == 0 {
		return 0, 0, false
	}
	out := s.Outstanding()
	p = s.qHint
	if d := p.Diff(s.una); d < 0 || int(d) >= out {
		p = s.una
	}
	// A word of the bitmap covers span slots: 64, or the whole ring when
	// it is smaller, whose bits above its size stay clear.
	span := uint32(min(64, len(s.ring)))
	for n := out - int(p.Diff(s.una)); n > 0; {
		i := uint32(p) & s.mask
		if w := s.queue[i>>6] >> (i & 63); w != 0 {
			k := bits.TrailingZeros64(w)
			if k >= n {
				break
			}
			p = p.Add(uint32(k))
			s.unqueue(p)
			e := s.slot(p)
			e.flags |= fPending
			s.qHint = p.Next()
			return p, e.tag, true
		}
		step := int(span - i%span)
		p = p.Add(uint32(step))
		n -= step
	}
	return 0, 0, false // unreachable while the queue bitmap is consistent
}

func (s *Scoreboard) enqueue(p psn.PSN) {
	i := uint32(p) & s.mask
	s.queue[i>>6] |= 1 << (i & 63)
	s.slot(p).flags |= fQueued
	if s.nQueued == 0 || p.Less(s.qHint) {
		s.qHint = p
	}
	s.nQueued++
}

func (s *Scoreboard) unqueue(p psn.PSN) {
	i := uint32(p) & s.mask
	s.queue[i>>6] &^= 1 << (i & 63)
	s.slot(p).flags &^= fQueued
	s.nQueued--
}

func (s *Scoreboard) event(p psn.PSN, e *entry, lost bool) Event {
	return Event{
		PSN: p, Tag: e.tag, Bytes: int(e.bytes), Entropy: e.entropy, SentAt: e.sentAt,
		Retransmitted: e.flags&fRetx != 0, Lost: lost,
	}
}

// markLost declares p lost (RFC 8985 6.2 step 5, 6.3): out of flight and
// queued for resend, unless already lost.
func (s *Scoreboard) markLost(p psn.PSN, e *entry, byRACK bool, dst []Event, res *AckResult) []Event {
	if e.flags&(fAcked|fLost) != 0 {
		return dst
	}
	s.inPkts--
	s.inBytes -= int(e.bytes)
	e.flags |= fLost
	e.waitLost = false
	if byRACK {
		e.flags |= fRackLost
	} else {
		e.flags &^= fRackLost
	}
	if e.flags&(fQueued|fPending) == 0 {
		s.enqueue(p)
	}
	s.stats.Lost++
	if byRACK {
		s.stats.LostRACK++
	}
	if res != nil {
		res.LostPkts++
	}
	if !s.inRecov {
		s.inRecov, s.recovEnd = true, s.next
	}
	return append(dst, s.event(p, e, true))
}

// ackState collects, during one ACK, what the sample and RACK need.
type ackState struct {
	res     AckResult
	sampOK  bool
	sampAt  clock.Time // send time of the RTT sample's packet
	trigOK  bool
	trigAt  clock.Time // send time of the triggering packet, when it qualifies
	trigger psn.PSN
	hasTrig bool
	trigTx  clock.Time // the ACK's AckedSentAt
}

// ackOne marks p acknowledged. RFC 8985 6.2 step 2: the RACK state follows
// the most recently sent packet delivered, skipping a retransmitted one
// whose ACK acknowledges an earlier transmission: as the send time the ACK
// echoes says when p triggered it (RFC 3522's timestamp test), otherwise
// when the ACK came sooner than the minimum RTT. The echo wins over the
// minimum: a fabric that drained after a failure returns a resend's ACK
// sooner than any RTT measured under load, and the packets sent before the
// resend must then be declared lost, not left to the next timeout
// (TestRTOResendEchoBeatsMinRTT, TestSpineFailAllToAll).
func (s *Scoreboard) ackOne(now clock.Time, p psn.PSN, e *entry, st *ackState, dst []Event) []Event {
	if e.flags&fLost == 0 {
		s.inPkts--
		s.inBytes -= int(e.bytes)
	}
	retx := e.flags&fRetx != 0
	early := retx && s.hasRTT && now.Sub(e.sentAt) < s.minRTT
	if retx && st.hasTrig && p == st.trigger && st.trigTx != 0 {
		early = st.trigTx.Before(e.sentAt)
	}
	if e.flags&fLost != 0 || early {
		s.spurious(e)
		switch {
		case e.flags&fRTO != 0 && p == s.rtoPSN:
			s.stats.SpuriousRTOs++
		case e.flags&fProbe != 0:
			s.spuriousProbe()
		}
	} else if e.flags&fProbe != 0 && e.flags&(fQueued|fPending) != 0 {
		// Acknowledged before the probe left: the probe fired too soon.
		s.spuriousProbe()
	} else if e.flags&fProbe != 0 && retx && s.ptoLeft > 0 {
		if s.ptoLeft--; s.ptoLeft == 0 {
			s.ptoMult = 1
		}
	}
	if e.flags&fQueued != 0 {
		s.unqueue(p)
	}
	e.flags = (e.flags | fAcked) &^ (fLost | fQueued | fPending)
	dst = append(dst, s.event(p, e, false))
	st.res.AckedPkts++
	st.res.AckedBytes += int(e.bytes)
	s.stats.Acked++
	// Karn's rule takes no sample from a resend, unless the ACK echoes the
	// resend's own send time (RFC 7323 3.3's timestamps): a QP resending
	// after a failure would otherwise keep its timer backed off until a
	// first transmission is acknowledged (TestRTOResendEchoBeatsMinRTT).
	echoed := retx && st.hasTrig && p == st.trigger && st.trigTx == e.sentAt
	if (!retx || echoed) && !now.Before(e.sentAt) {
		if !st.sampOK || e.sentAt.After(st.sampAt) {
			st.sampOK, st.sampAt = true, e.sentAt
		}
		if st.hasTrig && p == st.trigger {
			st.trigOK, st.trigAt = true, e.sentAt
		}
	}
	if !early && !now.Before(e.sentAt) && s.cfg.Mode == SelectiveRepeat {
		if !s.rackOK || sentAfter(e.sentAt, p, s.rackXmit, s.rackPSN) {
			s.rackOK, s.rackXmit, s.rackPSN = true, e.sentAt, p
			s.rackRTT = min(now.Sub(e.sentAt), MaxDuration)
		}
		r := s.pathSlot(e.entropy)
		rtt := min(now.Sub(e.sentAt), MaxDuration)
		if !e.sentAt.Before(s.rtoFired) {
			// A time to proof that spans a retransmission timeout
			// measures the timer (the ACKs lost, the proof came from the
			// resend's), not the path (TestRecentRTTSkipsTimeout,
			// TestSpineFailAllToAll).
			s.rttCur = max(s.rttCur, rtt)
		}
		if !r.ok() || r.entropy != e.entropy {
			*r = pathRack{flags: rOK | rProven, entropy: e.entropy, psn: p, xmit: e.sentAt, rtt: rtt}
		} else if !r.proven() || sentAfter(e.sentAt, p, r.xmit, r.psn) {
			r.flags |= rProven
			r.psn, r.xmit, r.rtt = p, e.sentAt, rtt
		}
		r.flags &^= rSilent
		if r.phys > 0 {
			if ph := &s.phys[r.phys-1]; !ph.ok || sentAfter(e.sentAt, p, ph.xmit, ph.psn) {
				ph.ok, ph.psn, ph.xmit, ph.rtt = true, p, e.sentAt, rtt
			}
		}
	}
	return dst
}

// sentAfter is RFC 8985's RACK_sent_after: t1 later than t2, PSN breaking
// ties.
func sentAfter(t1 clock.Time, p1 psn.PSN, t2 clock.Time, p2 psn.PSN) bool {
	return t1.After(t2) || (t1 == t2 && p2.Less(p1))
}

// spurious records that a loss declaration was wrong: the packet arrived.
// Lacking DSACK, this drives RFC 8985 6.2 step 4: a wrong RACK declaration
// widens the reordering window, at most once per round trip.
func (s *Scoreboard) spurious(e *entry) {
	s.stats.SpuriousRetransmits++
	if e.waitLost {
		s.spuriousWait()
	}
	if e.flags&fRackLost == 0 {
		return
	}
	if !s.spurOK || !s.una.Less(s.spurEnd) {
		s.spurOK, s.spurEnd = true, s.next
		s.reoMult = min(s.reoMult+1, maxReoMult)
		s.reoLeft = reoPersist
	}
}

// spuriousWait doubles the second round trip of RACK's wait without proof
// (at most maxWaitMult times, once per round trip) for the next reoPersist
// loss recoveries: a packet that this wait declared lost arrived, so the
// queue it met grew faster than the round trips measured before it, and
// the QP's next packets on fresh paths meet the same fan-in
// (TestSpuriousWaitBacksOff).
func (s *Scoreboard) spuriousWait() {
	s.stats.SpuriousWaits++
	if !s.waitOK || !s.una.Less(s.waitEnd) {
		s.waitOK, s.waitEnd = true, s.next
		s.waitMult = min(2*s.waitMult, maxWaitMult)
		s.waitLeft = reoPersist
	}
}

// NoteQueueDelay tells the scoreboard the queueing delay an ACK reports
// (INT records: the queues its packet met along the path).
func (s *Scoreboard) NoteQueueDelay(d time.Duration) {
	s.qCur = max(s.qCur, min(d, MaxDuration))
}

// NoteFabricQueue tells the scoreboard the largest queueing delay that
// the INT records of its engine's ACKs (every QP's) reported lately, as of
// this QP's latest ACK: the tail loss probe waits for it (armProbe), and
// so does RACK's wait without proof once spuriousWait has raised it
// (rackDetect); TestProbeUnderFullFlight, TestSpuriousWaitBacksOff.
func (s *Scoreboard) NoteFabricQueue(d time.Duration) {
	s.fabQ = min(d, MaxDuration)
}

// NoteHostDelay tells the scoreboard the longest time its host's engine
// was kept from running lately (descheduled, or busy): the retransmission
// and probe timers wait that much longer, as the time the host could not
// answer or read an acknowledgement is no sign of loss (RTO, armProbe;
// TestHostDelayLengthensTimers).
func (s *Scoreboard) NoteHostDelay(d time.Duration) {
	s.hostD = uint8(min((max(d, 0)+hostUnit-1)/hostUnit, math.MaxUint8))
}

// hostUnit is NoteHostDelay's unit: the delay is kept in a byte (a
// simulator holds a million scoreboards), up to 25.5 ms, above which the
// retransmission timeout's own backoff takes over.
const hostUnit = 100 * time.Microsecond

// hostDelay returns the delay NoteHostDelay noted.
func (s *Scoreboard) hostDelay() time.Duration { return time.Duration(s.hostD) * hostUnit }

// RecentQueue returns the largest queueing delay noted in this round trip
// or the previous one.
func (s *Scoreboard) RecentQueue() time.Duration {
	return max(s.qCur, s.qPrev)
}

// RecentRTT returns the largest RTT sample of a packet delivered in this
// round trip or the previous one, or SRTT when larger.
func (s *Scoreboard) RecentRTT() time.Duration {
	return max(s.rttCur, s.rttPrev, s.SRTT())
}

// queueing says whether the round trip has grown to more than twice the
// smallest one: the queue part of SRTT is longer than the path's own delay.
func (s *Scoreboard) queueing() bool { return s.hasRTT && s.srtt > 2*s.minRTT }

// silent reports whether no packet sent after the oldest unacknowledged
// one has been acknowledged.
func (s *Scoreboard) silent() bool {
	for p := s.una.Next(); p != s.next; p = p.Next() {
		if s.slot(p).flags&fAcked != 0 {
			return false
		}
	}
	return true
}

// spuriousProbe doubles the probe timeout (at most maxPTOMult times its
// base) for the next reoPersist probes: a probe that its own packet's ACK
// overtook was sent while the packet sat in a queue (TestSpuriousProbeBacksOff).
func (s *Scoreboard) spuriousProbe() {
	s.stats.SpuriousTLPs++
	s.ptoMult = min(2*s.ptoMult, maxPTOMult)
	s.ptoLeft = reoPersist
}

// advance moves the oldest unacknowledged PSN past acknowledged ones.
func (s *Scoreboard) advance() {
	for s.una != s.next && s.slot(s.una).flags&fAcked != 0 {
		s.una = s.una.Next()
	}
}

// rttSample updates SRTT, RTTVAR and the minimum (RFC 6298 2.2-2.3) and ends
// the timeout backoff (RFC 6298 5.7, Karn).
func (s *Scoreboard) rttSample(r time.Duration) {
	r = min(max(r, 1), MaxDuration)
	if !s.hasRTT {
		s.hasRTT = true
		s.srtt, s.rttvar, s.minRTT = r, r/2, r
	} else {
		d := s.srtt - r
		if d < 0 {
			d = -d
		}
		s.rttvar = (3*s.rttvar + d) / 4
		s.srtt = (7*s.srtt + r) / 8
		s.minRTT = min(s.minRTT, r)
	}
	s.backoff = 0
}

// OnAck processes an ACK received at now and appends to dst an Event for
// each packet newly acknowledged and each packet newly declared lost (at
// most Capacity in all; give dst that capacity to avoid allocation).
//
// SelectiveRepeat uses Cum, the SACK bitmap and Acked; RACK (RFC 8985 6.2)
// then declares lost every packet sent before the most recently sent
// delivered packet once RACK.rtt + reordering window has passed since it was
// sent, and arms the reordering timer for the rest. GoBackN uses Cum only.
// An ACK that refers to a PSN at or beyond Next is dropped whole and counted
// in Stats.BadAcks; information about PSNs before the oldest unacknowledged
// one is ignored (Stats.StaleAcks for an old Cum). A failed scoreboard
// ignores ACKs.
//
// Progress (a packet newly acknowledged) resets the timeout retry count and
// restarts the retransmission timer (RFC 6298 5.3) and the probe timer (RFC
// 8985 7.2).
func (s *Scoreboard) OnAck(now clock.Time, a Ack, dst []Event) ([]Event, AckResult) {
	if s.failed != nil {
		return dst, AckResult{}
	}
	out := s.Outstanding()
	cum := psn.New(uint32(a.Cum))
	cd := int(cum.Diff(s.una))
	sr := s.cfg.Mode == SelectiveRepeat
	var st ackState
	bad := cd > out
	if sr && !bad {
		if a.HasAcked {
			st.hasTrig, st.trigger, st.trigTx = true, psn.New(uint32(a.Acked)), a.AckedSentAt
			bad = int(st.trigger.Diff(s.una)) >= out
		}
		bad = bad || !s.sackValid(a.Sack, psn.New(uint32(a.SackBase)), out)
	}
	if bad {
		s.stats.BadAcks++
		return dst, AckResult{}
	}
	if cd < 0 {
		s.stats.StaleAcks++
	}
	for p := s.una; cd > 0; p, cd = p.Next(), cd-1 {
		if e := s.slot(p); e.flags&fAcked == 0 {
			dst = s.ackOne(now, p, e, &st, dst)
		}
	}
	if sr {
		if st.hasTrig && int(st.trigger.Diff(s.una)) >= 0 {
			if e := s.slot(st.trigger); e.flags&fAcked == 0 {
				dst = s.ackOne(now, st.trigger, e, &st, dst)
			}
		}
		dst = s.applySack(now, a.Sack, psn.New(uint32(a.SackBase)), &st, dst)
	}
	dst = s.afterAck(now, &st, dst)
	return dst, st.res
}

// sackValid reports whether no SACK bit names a PSN at or beyond Next.
func (s *Scoreboard) sackValid(sack []uint64, base psn.PSN, out int) bool {
	for w, word := range sack {
		if word == 0 {
			continue
		}
		if w >= psn.Half/64 {
			return false // a bitmap this long wraps the PSN space
		}
		d0 := int(base.Add(uint32(64 * w)).Diff(s.una))
		if d0 >= 0 && d0+64 <= out {
			continue
		}
		for ; word != 0; word &= word - 1 {
			k := bits.TrailingZeros64(word)
			if int(base.Add(uint32(64*w+k)).Diff(s.una)) >= out {
				return false
			}
		}
	}
	return true
}

func (s *Scoreboard) applySack(now clock.Time, sack []uint64, base psn.PSN, st *ackState, dst []Event) []Event {
	out := s.Outstanding()
	for w, word := range sack {
		for ; word != 0; word &= word - 1 {
			k := bits.TrailingZeros64(word)
			p := base.Add(uint32(64*w + k))
			if d := int(p.Diff(s.una)); d < 0 || d >= out {
				continue
			}
			if e := s.slot(p); e.flags&fAcked == 0 {
				dst = s.ackOne(now, p, e, st, dst)
			}
		}
	}
	return dst
}

// afterAck finishes an ACK or NAK: RTT sample, episode ends, timers, and in
// SelectiveRepeat RACK loss detection.
func (s *Scoreboard) afterAck(now clock.Time, st *ackState, dst []Event) []Event {
	progress := st.res.AckedPkts > 0
	if progress {
		st.res.Progress = true
		s.retries = 0
		switch {
		case st.trigOK:
			st.res.RTT = min(max(now.Sub(st.trigAt), 1), MaxDuration)
		case st.sampOK:
			st.res.RTT = min(max(now.Sub(st.sampAt), 1), MaxDuration)
		}
		if st.res.RTT > 0 {
			s.rttSample(st.res.RTT)
		}
		s.advance()
		if !s.rttEndOK || s.rttEnd.Less(s.una) {
			// The first packet sent in the round is acknowledged, and
			// every one before it: the round ends.
			s.rttPrev, s.rttCur = s.rttCur, 0
			s.qPrev, s.qCur = s.qCur, 0
			s.rttEnd, s.rttEndOK = s.next, true
		}
		if s.inRecov && !s.una.Less(s.recovEnd) {
			s.inRecov = false
			if s.reoLeft > 0 {
				s.reoLeft--
				if s.reoLeft == 0 {
					s.reoMult = 1
				}
			}
			if s.waitLeft > 0 {
				s.waitLeft--
				if s.waitLeft == 0 {
					s.waitMult = 1
				}
			}
		}
		if s.tlpActive && !s.una.Less(s.tlpEnd) {
			s.tlpActive = false
		}
		if s.nakActive && s.nakExpected.Less(s.una) {
			s.nakActive = false
		}
		if s.una == s.next {
			s.rtoAt, s.ptoAt, s.reoAt = clock.Never, clock.Never, clock.Never
			return dst
		}
		s.rtoAt = now.Add(s.RTO())
	}
	if s.cfg.Mode == SelectiveRepeat {
		dst = s.rackDetect(now, dst, &st.res)
	}
	s.armProbe(now, progress)
	return dst
}

// pathProof returns RACK's state for entropy's path: the most recently
// sent packet delivered on it (send time, PSN, RTT), on the entropy or on
// another that SetPath put on the same physical path, and whether there is
// one.
func (s *Scoreboard) pathProof(entropy uint16) (clock.Time, psn.PSN, time.Duration, bool) {
	r := s.path(entropy)
	if r == nil || !r.proven() {
		return 0, 0, 0, false
	}
	if r.phys > 0 {
		if ph := &s.phys[r.phys-1]; ph.ok && sentAfter(ph.xmit, ph.psn, r.xmit, r.psn) {
			return ph.xmit, ph.psn, ph.rtt, true
		}
	}
	return r.xmit, r.psn, r.rtt, true
}

// silentPath reports whether entropy's path is silent: RACK declared a
// packet on it lost without proof, and nothing on it has been delivered
// since.
func (s *Scoreboard) silentPath(entropy uint16) bool {
	r := s.path(entropy)
	return r != nil && r.silent()
}

// setSilent marks entropy's path silent (silentPath).
func (s *Scoreboard) setSilent(entropy uint16) {
	r := s.pathSlot(entropy)
	if !r.ok() || r.entropy != entropy {
		*r = pathRack{flags: rOK, entropy: entropy}
	}
	r.flags |= rSilent
}

// SetPath tells RACK that entropy takes the physical path sig (a nonzero
// name of its switches and ports, as INT records give them; 0 means
// unknown): entropies on one path share its queues, first in first out,
// so a packet delivered on any of them shows that one sent earlier on
// another is late by more than queueing (rackDetect). It needs a delivery
// on entropy first; at most maxPhys paths are told apart, and an entropy
// that moves to another path follows it.
func (s *Scoreboard) SetPath(entropy uint16, sig uint64) {
	r := s.path(entropy)
	if r == nil || !r.proven() || sig == 0 {
		return
	}
	if r.phys > 0 && s.phys[r.phys-1].sig == sig {
		return
	}
	i := 0
	for i < len(s.phys) && s.phys[i].sig != sig {
		i++
	}
	if i == len(s.phys) {
		if i == maxPhys {
			r.phys = 0
			return
		}
		s.phys = append(s.phys, physRack{sig: sig})
	}
	r.phys = uint8(i + 1)
	if ph := &s.phys[i]; !ph.ok || sentAfter(r.xmit, r.psn, ph.xmit, ph.psn) {
		ph.ok, ph.psn, ph.xmit, ph.rtt = true, r.psn, r.xmit, r.rtt
	}
}

// rackDetect is RFC 8985 6.2 step 5: every packet in flight sent before the
// most recently sent delivered packet is lost once RACK.rtt + reo_wnd has
// passed since its transmission; the reordering timer is armed for the
// earliest of the others. (The RFC arms it for the latest; the earliest
// repairs each loss as soon as it is known, at the cost of more wake-ups.)
//
// Sprayed packets take paths whose delays differ by more than any
// reordering window (a queue on one spine, none on another), so RACK also
// keeps its state per entropy (one path through an ECMP fabric, first in
// first out), shared by the entropies that SetPath puts on one physical
// path, and judges a packet by its own path:
//   - a packet sent on it later has been delivered: the packet is lost once
//     that packet's RTT + reo_wnd has passed since it was sent (RACK on one
//     path, where reordering is rare);
//   - otherwise (the path's later packets are still on their way, the path
//     died, or its entropy has had no delivery yet): once twice the largest
//     of RACK.rtt, the path's last RTT and RecentRTT (at least that plus
//     reo_wnd; the second of the two times the wait multiplier that a
//     spurious loss declared by this rule raises, spuriousWait), plus
//     RecentQueue, has passed. Under an N-to-1 fan-in the
//     queue a packet meets grows while it waits, and its path's last RTT,
//     or RACK.rtt from a path without that queue, say little of its own
//     (TestTimerUnderGrowingQueue); queues that grow, CPUs that
//     deschedule the receiver and ACKs sprayed back over other paths make
//     one path's RTT jump by more than any fraction of it; a dead path is
//     also taken out of the spray set by the path policy, so the cost of
//     the wait is a round trip for the packets caught on it. A longer
//     wait (four times) trades fewer spurious resends for real queue
//     drops repaired two round trips later (TestRACKPerPath);
//   - but once the last rule has declared a packet on the entropy lost and
//     nothing on it has been delivered since, its path is silent: its
//     packets stopped being acknowledged while the others' were, which a
//     failed link does and a queue does not (a queue delivers, late), so
//     its next packets are lost once the larger of RACK.rtt and its RTT,
//     plus reo_wnd, has passed, as RFC 8985 has it; a delivery on it ends
//     that (TestRACKSilentPath). The first packet caught on a dead path
//     pays the fan-in's wait, the ones behind it do not.
//
// On one path, with one entropy, this is RFC 8985's RACK.
//
// Original transmissions are sent in PSN order, so the scan stops at the
// first one sent after the RACK packet: only resends can follow it out of
// order, and they were sent later still.
func (s *Scoreboard) rackDetect(now clock.Time, dst []Event, res *AckResult) []Event {
	s.reoAt = clock.Never
	if !s.rackOK {
		return dst
	}
	reo := s.ReorderWindow()
	recent, queue := max(s.rackRTT, s.RecentRTT()), s.RecentQueue()
	for p := s.una; p != s.next; p = p.Next() {
		e := s.slot(p)
		if !sentAfter(s.rackXmit, s.rackPSN, e.sentAt, p) {
			if e.flags&fRetx == 0 {
				break
			}
			continue
		}
		if e.flags&(fAcked|fLost) != 0 {
			continue
		}
		var deadline clock.Time
		xmit, pp, prtt, ok := s.pathProof(e.entropy)
		proof := ok && sentAfter(xmit, pp, e.sentAt, p)
		switch {
		case proof:
			deadline = e.sentAt.Add(prtt + reo)
		case s.silentPath(e.entropy):
			deadline = e.sentAt.Add(max(s.rackRTT, prtt) + reo)
		default:
			rtt := max(recent, prtt)
			q := queue
			if s.waitMult > 1 {
				q = max(q, s.fabQ)
			}
			deadline = e.sentAt.Add(rtt + max(reo, rtt)*time.Duration(s.waitMult) + q)
		}
		if !now.Before(deadline) {
			wait := !proof && !s.silentPath(e.entropy)
			dst = s.markLost(p, e, true, dst, res)
			e.waitLost = wait
			if !proof {
				s.setSilent(e.entropy)
			}
		} else if deadline.Before(s.reoAt) {
			s.reoAt = deadline
		}
	}
	return dst
}

// probeTailPkts is the most packets in flight that armProbe takes for a
// lost tail: beyond, no ACK is a queue (docs/results.md#ack-every).
const probeTailPkts = 4

// armProbe schedules the tail loss probe (RFC 8985 7.2): PTO = 2*RecentRTT
// (3* with more than probeTailPkts packets in flight) plus RecentQueue, or the
// engine's fabric queue when larger (NoteFabricQueue) (the round trip and
// the queueing delay the QP has seen lately: SRTT lags a round trip that
// grows with a queue, and a probe sent into the queue only lengthens it;
// TestTimerUnderGrowingQueue), times the
// spurious-probe multiplier (spuriousProbe), plus the host's delay
// (NoteHostDelay), plus MaxAckDelay while fewer than AckEvery packets are in flight (the RFC: one
// packet), no later than the retransmission timer; only in SelectiveRepeat
// with TLP on, packets in flight, no probe
// outstanding, nothing queued and no reordering timer. restart moves an
// armed timer; otherwise only an unarmed one is set.
//
// Unlike RFC 8985 7.2 the probe is also armed during loss recovery: RACK
// cannot see a lost resend at the tail (nothing sent later gets delivered),
// and the RTO floor is some fifty fabric RTTs, so a probe repairs a lost
// tail resend sooner than the RTO for the same number of resends
// (BenchmarkSimRecovery reports RTOs and probes per transfer).
func (s *Scoreboard) armProbe(now clock.Time, restart bool) {
	if s.cfg.Mode != SelectiveRepeat || s.cfg.NoTLP || s.tlpActive ||
		s.nQueued > 0 || s.reoAt != clock.Never || s.inPkts == 0 {
		s.ptoAt = clock.Never
		return
	}
	if !restart && s.ptoAt != clock.Never {
		return
	}
	// Three round trips, not two, while more than probeTailPkts packets
	// are out: ACKs for none of so many sprayed packets is a queue that
	// grew (a fan-in), not a lost tail, which leaves few packets in
	// flight, however rarely the receiver acknowledges
	// (TestProbeUnderFullFlight).
	k := time.Duration(2)
	if s.inPkts > probeTailPkts {
		k = 3
	}
	pto := (k*s.RecentRTT()+max(s.RecentQueue(), s.fabQ))*time.Duration(s.ptoMult) + s.hostDelay()
	if s.inPkts < s.cfg.AckEvery {
		pto += s.cfg.MaxAckDelay
	}
	s.ptoAt = clock.Min(now.Add(pto), s.rtoAt)
}

// OnNak processes a NAK sequence error received at now (both modes): the
// receiver got every PSN before expected, so those are acknowledged, and
// every unacknowledged PSN from expected to Next-1 is declared lost and
// queued for resend in PSN order. A repeated NAK for the same expected PSN
// is ignored (Stats.DupNaks) while that resend is in progress: until the
// resend of expected has been sent and one SRTT has passed since, when a
// fresh NAK is first due. A NAK whose expected PSN lies beyond Next is
// dropped (Stats.BadAcks); one before the oldest unacknowledged PSN is stale
// (Stats.StaleAcks).
func (s *Scoreboard) OnNak(now clock.Time, expected psn.PSN, dst []Event) ([]Event, AckResult) {
	if s.failed != nil {
		return dst, AckResult{}
	}
	exp := psn.New(uint32(expected))
	d := int(exp.Diff(s.una))
	switch {
	case d > s.Outstanding():
		s.stats.BadAcks++
		return dst, AckResult{}
	case d < 0:
		s.stats.StaleAcks++
		return dst, AckResult{}
	case s.nakActive && exp == s.nakExpected &&
		(!s.nakResent || now.Before(s.nakResentAt.Add(s.SRTT()))):
		s.stats.DupNaks++
		return dst, AckResult{}
	}
	s.stats.Naks++
	var st ackState
	for p := s.una; p != exp; p = p.Next() {
		if e := s.slot(p); e.flags&fAcked == 0 {
			dst = s.ackOne(now, p, e, &st, dst)
		}
	}
	// Declare the losses before afterAck so that RACK and the probe see
	// them; afterAck does not touch packets already lost.
	for p := exp; p != s.next; p = p.Next() {
		dst = s.markLost(p, s.slot(p), false, dst, &st.res)
	}
	dst = s.afterAck(now, &st, dst)
	if exp != s.next {
		s.nakActive, s.nakExpected, s.nakResent = true, exp, false
	}
	return dst, st.res
}

// OnTrim handles the receiver's report, at now, that a switch trimmed the
// transmission of p sent at sentAt (its echoed send time; 0: unknown) to
// its headers: that transmission is lost, with nothing to wait for, so p
// is declared lost and queued for resend at once (Stats.LostTrim), and
// only p. A report about an earlier transmission than p's latest, about
// a PSN acknowledged, already lost or not outstanding, changes nothing
// and returns false. Guarded by TestTrimResendsOnePSN.
func (s *Scoreboard) OnTrim(now clock.Time, p psn.PSN, sentAt clock.Time, dst []Event) ([]Event, bool) {
	if s.failed != nil || s.cfg.Mode != SelectiveRepeat {
		return dst, false
	}
	p = psn.New(uint32(p))
	if d := int(p.Diff(s.una)); d < 0 || d >= s.Outstanding() {
		return dst, false
	}
	e := s.slot(p)
	if e.flags&(fAcked|fLost) != 0 || sentAt != 0 && sentAt.Before(e.sentAt) {
		return dst, false
	}
	s.stats.LostTrim++
	dst = s.markLost(p, e, false, dst, nil)
	s.armProbe(now, false)
	return dst, true
}

// PeerAlive notes that the peer answered without acknowledging anything
// (a receiver-not-ready NAK): the consecutive timeouts counted against
// MaxRetries start over. A failed scoreboard stays failed.
func (s *Scoreboard) PeerAlive() {
	if s.failed == nil {
		s.retries = 0
	}
}

// Restart restarts from now the timers that expired at or before now
// (retransmission, reordering, probe), for a host that was not running
// when they came due: the acknowledgements they wait for may not have
// been sent by a peer that was descheduled with it, or may still wait in
// its queues, so they get the time the timer gives them from now on
// before anything is declared lost or probed. It reports whether it moved
// a timer. Nothing is declared lost and nothing counts against
// MaxRetries. Guarded by TestStalledEngineNoResends.
func (s *Scoreboard) Restart(now clock.Time) bool {
	if s.failed != nil {
		return false
	}
	moved := false
	if s.rtoAt != clock.Never && !now.Before(s.rtoAt) {
		s.rtoAt, moved = now.Add(s.RTO()), true
	}
	if s.reoAt != clock.Never && !now.Before(s.reoAt) {
		s.reoAt, moved = now.Add(s.ReorderWindow()), true
	}
	if s.ptoAt != clock.Never && !now.Before(s.ptoAt) {
		s.armProbe(now, true)
		moved = true
	}
	return moved
}

// OnTimeout handles the timer due at now (call it when now reaches
// NextTimeout; it handles one timer per call, so call it again while
// NextTimeout is still not after now). It appends newly lost packets to dst.
//
//   - RTO (RFC 6298 5.4-5.6, RFC 8985 6.3): outstanding packets not
//     acknowledged are declared lost and queued in PSN order (in
//     SelectiveRepeat the oldest, and the others only if RACK.rtt + reo_wnd
//     has passed since they were sent; in GoBackN all), the timeout
//     doubles (up to MaxRTO; a FixedRTO stays as it is) and restarts. After MaxRetries consecutive RTOs
//     without progress the next one returns Failed and an error wrapping
//     ErrRetryExceeded instead, and the scoreboard stays failed. A timer
//     that expires while the previous RTO's resend of the oldest packet has
//     not been sent only restarts (None), and PeerAlive starts the count
//     over.
//   - Reorder (RFC 8985 6.2 step 5, 8): RACK loss detection runs again.
//   - Probe (RFC 8985 7.3): the highest outstanding PSN is queued for resend
//     (it stays in flight: a probe is no loss) and the retransmission timer
//     restarts; no further probe until the ACKs pass the PSNs sent so far.
func (s *Scoreboard) OnTimeout(now clock.Time, dst []Event) ([]Event, TimeoutKind, error) {
	if s.failed != nil {
		return dst, Failed, s.failed
	}
	switch {
	case s.rtoAt != clock.Never && !now.Before(s.rtoAt):
		if e := s.slot(s.una); e.flags&fLost != 0 && e.flags&fQueued != 0 {
			// The previous timeout's resend of the oldest packet has not
			// left (the sender's pacing or window held it): the peer was
			// not asked, so this is no timeout of its and counts nothing
			// (TestSlowReaderOutlastsRetries).
			s.rtoAt = now.Add(s.RTO())
			return dst, None, nil
		}
		if int(s.retries) >= s.cfg.MaxRetries {
			s.failed = fmt.Errorf("%w: PSN %d unacknowledged after %d timeouts", ErrRetryExceeded, s.una, s.retries)
			s.rtoAt, s.ptoAt, s.reoAt = clock.Never, clock.Never, clock.Never
			return dst, Failed, s.failed
		}
		s.retries++
		s.stats.RTOs++
		s.rtoFired = now
		if s.cfg.FixedRTO == 0 && s.RTO() < s.cfg.MaxRTO {
			s.backoff++
		}
		// In SelectiveRepeat, when the round trip shows a queue (queueing),
		// the first timeout since the last progress resends the oldest
		// packet alone (RFC 5682's F-RTO): a queue longer than the timer
		// explains the silence as well as a loss does, and the resend's ACK
		// tells them apart: RACK then declares the others lost if they
		// were, and an ACK of the original counts the timeout spurious. A
		// whole window resent into a long queue only lengthens it
		// (TestRTOResendsOldestOnly). So does a first timeout that found
		// the peer silent (no packet sent after the oldest acknowledged):
		// a peer whose engine was kept from running is as silent as a
		// dead link, while a dead path among live ones leaves the packets
		// sprayed on the others acknowledged (TestRTOSilentPeerResendsOldest).
		// Otherwise, and on a second timeout in a row, the packets sent
		// more than RACK.rtt + reo_wnd ago are lost (RFC 8985 6.3), as a
		// dead path needs. Go-Back-N resends all.
		young := clock.Never
		if s.cfg.Mode == SelectiveRepeat {
			young = clock.Time(math.MinInt64)
			if s.retries > 1 || !s.queueing() && !s.silent() {
				rtt := s.SRTT()
				if s.rackOK {
					rtt = s.rackRTT
				}
				young = now.Add(-(rtt + s.ReorderWindow()))
			}
		}
		for p := s.una; p != s.next; p = p.Next() {
			e := s.slot(p)
			if p != s.una && e.sentAt.After(young) && e.flags&fLost == 0 {
				continue
			}
			if e.flags&(fAcked|fLost) == 0 {
				s.stats.LostRTO++
			}
			if p == s.una && s.cfg.Mode == SelectiveRepeat {
				if e.flags&fLost == 0 {
					s.rtoPSN = p
				}
				e.flags |= fRTO
			}
			dst = s.markLost(p, e, false, dst, nil)
			if e.flags&fPending != 0 {
				// Popped but never resent: queue it again.
				e.flags &^= fPending
				s.enqueue(p)
			}
		}
		s.tlpActive, s.nakActive = false, false
		s.ptoAt, s.reoAt = clock.Never, clock.Never
		s.rtoAt = now.Add(s.RTO())
		return dst, RTO, nil
	case s.reoAt != clock.Never && !now.Before(s.reoAt):
		dst = s.rackDetect(now, dst, nil)
		s.armProbe(now, false)
		return dst, Reorder, nil
	case s.ptoAt != clock.Never && !now.Before(s.ptoAt):
		s.ptoAt = clock.Never
		for p := s.next.Prev(); p != s.una.Prev(); p = p.Prev() {
			e := s.slot(p)
			if e.flags&fAcked != 0 {
				continue
			}
			if e.flags&(fQueued|fPending) == 0 {
				s.enqueue(p)
			}
			e.flags |= fProbe
			break
		}
		s.stats.TLPs++
		s.tlpActive, s.tlpEnd = true, s.next
		s.rtoAt = now.Add(s.RTO())
		return dst, Probe, nil
	}
	return dst, None, nil
}
