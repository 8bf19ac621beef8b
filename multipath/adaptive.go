package multipath

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// INTObserver is an optional extension of a Policy that takes the queue
// delay that in-band network telemetry measured along a path. The transport
// calls OnINT, for a policy that implements it, when an ACK echoes the INT
// records of a data packet: queueDelay is the sum of the per-hop queue
// delays of the packet sent on entropy. The transport should call it for
// every ACK that echoes INT records, empty queues included: the policy's
// view of a path's queue only changes when OnINT is called. An entropy
// outside Paths is ignored. The policy returned by NewAdaptive implements
// it.
type INTObserver interface {
	OnINT(now clock.Time, entropy uint16, queueDelay time.Duration)
}

// PathObserver is an optional extension of a Policy that learns which
// physical path each entropy takes. ECMP hashes entropies onto paths
// unevenly (8 entropies over 4 spines leave a spine empty about a third of
// the time), so a policy that sprays evenly over entropies does not spray
// evenly over paths. The transport calls OnPath with a signature of the
// switches and ports that a packet sent on entropy crossed (from its INT
// records); entropies with the same signature share one path's share.
type PathObserver interface {
	OnPath(now clock.Time, entropy uint16, signature uint64)
}

// Resender is an optional extension of a Policy that picks the entropy of
// a retransmission, which the transport then uses instead of Next. The
// policy returned by NewAdaptive implements it: it never probes a path out
// of the set with a resend. urgent says that the sender is in
// retransmission timeout backoff (a timeout fired and no ACK made progress
// since): every packet then is a last chance, and it goes on the path with
// the freshest proof that it delivers.
type Resender interface {
	NextResend(now clock.Time, urgent bool) uint16
}

// AckPather is an optional extension of a Policy that picks the entropy
// (UDP source port) of an acknowledgement the QP sends to its peer. An
// acknowledgement leaves on the same paths as the QP's own data packets
// (same addresses, same direction), so a path that the policy found dead
// for its data is dead for its acknowledgements too; a receiver that kept
// acknowledging on it would lose every acknowledgement that lands there,
// and a sender whose last packets are acknowledged only there times out
// until it fails. NextAck counts nothing and never probes: nothing
// acknowledges an acknowledgement. The policy returned by NewAdaptive
// implements it.
//
// urgent asks for the path most likely to deliver, for an acknowledgement
// that answers a duplicate (the peer resent a packet it had, so earlier
// acknowledgements were probably lost); otherwise acknowledgements rotate
// over the paths so that one bad path costs only a share of them.
//
// AckLost reports that an acknowledgement sent on entropy was probably
// lost (the peer resent what it acknowledged): NextAck passes over the
// path until an ACK of the QP's own data on it shows that it delivers, or
// until every active path is passed over (a QP that sends no data learns
// nothing else), when they are all tried again.
type AckPather interface {
	NextAck(urgent bool) uint16
	AckLost(entropy uint16)
}

// Runner is an optional extension of a Policy that sends packets in runs:
// after SetRun(n), n > 1, Next returns the entropy it picked for n
// packets in a row (each counted) before it picks the next, so that a link
// that sends a run of frames from one source port as one message
// (link.Info.Segments: UDP segmentation offload) gets runs to send. The
// spraying is the same at run granularity: every pick still follows the
// policy's rounds and weights. A run ends early when its path is taken out
// of the set; a probe goes alone, and a resend (Resender) or an
// acknowledgement (AckPather) leaves the run as it is. n <= 1 sends every
// packet on its own pick. The policies of NewSpray and NewAdaptive
// implement it (TestRunsPerEntropy).
type Runner interface {
	SetRun(n int)
}

// run is the state of a Runner: the run length, the packets the current
// run has left and its path (an index in the set, which holds at most
// NumEntropies), in 6 bytes: every QP holds one (TestAdaptiveSize).
type run struct {
	len, left uint8
	path      uint16
	picked    uint16 // the adaptive policy's latest pick (pick)
}

// maxRun is the longest run SetRun takes.
const maxRun = 255

// SetRun sets the run length (Runner), at most maxRun.
func (r *run) SetRun(n int) {
	r.len = uint8(min(max(n, 1), maxRun))
	r.left = 0
}

// cont reports whether the current run goes on, and its path; it counts
// the packet against the run.
func (r *run) cont() (int, bool) {
	if r.left == 0 {
		return 0, false
	}
	r.left--
	return int(r.path), true
}

// start begins a run on path i.
func (r *run) start(i int) {
	r.path, r.left = uint16(i), r.len-1
}

// AdaptiveConfig tunes NewAdaptive. The zero value is usable: every zero
// field takes the default given in its comment, and a negative (or NaN)
// field is treated as zero unless its comment says otherwise. The package
// doc explains how the parameters fit together.
type AdaptiveConfig struct {
	// StallRTTs is K: a path that has had a packet outstanding for more
	// than K smoothed RTTs with no ACK, while another path acknowledged a
	// packet sent later, is stalled and taken out. 0 means 2.
	StallRTTs int
	// MinStallTimeout is the floor of the stall and probe timeouts, so that
	// microsecond RTTs do not make scheduling jitter look like a stall.
	// 0 means 50µs.
	MinStallTimeout time.Duration
	// InitialRTT is the RTT assumed for the stall timeout of a path that
	// has no RTT sample yet (the largest SRTT of the active paths when that
	// is larger), and for every timeout before any sample. 0 means 100µs.
	InitialRTT time.Duration
	// LossLimit is the number of losses in a row (no ACK between them) that
	// takes a path out. 0 means 3.
	LossLimit int
	// MaxLossRate takes a path out when its smoothed loss rate (an EWMA
	// with gain 1/16 over ACKs, counted as 0, and losses, counted as 1)
	// reaches it. 0 means 0.25; values above 1 never trigger.
	MaxLossRate float64
	// ProbeInterval is the time from a path's removal to its first probe,
	// and between probes at first; every probe that fails doubles it, up to
	// MaxProbeInterval. 0 means 1ms.
	ProbeInterval time.Duration
	// MaxProbeInterval caps the probe backoff. 0 means 64 x ProbeInterval;
	// a value below ProbeInterval is raised to it.
	MaxProbeInterval time.Duration
	// DelayScale is the extra delay that halves a path's weight (before
	// the ECN and loss terms). 0 means the smallest RTT measured across the
	// active paths, so that a path whose RTT is twice the best gets half
	// its share.
	DelayScale time.Duration
	// ECNWeight is the penalty of a path whose every ACK is ECN-marked (the
	// penalty is ECNWeight times the smoothed marked fraction, an EWMA with
	// gain 1/16). 0 means 4; negative means ECN does not change weights.
	ECNWeight float64
	// LossWeight is the penalty of a path that loses every packet (times
	// the smoothed loss rate). 0 means 16; negative means losses do not
	// change weights (they still take a path out, see LossLimit).
	LossWeight float64
	// MinWeight is the floor of a path's weight relative to the best active
	// path, so that every active path keeps carrying some traffic. 0 means
	// 1/16; values above 1 are taken as 1 (equal shares).
	MinWeight float64
	// Scratch, when not nil, is the scratch space of the policy's rounds,
	// shared with every other policy given the same one; policies that
	// share a Scratch must not be used concurrently (the QPs of one
	// engine). nil gives the policy its own, allocated at its first round.
	Scratch *Scratch
}

// Scratch is the space an adaptive policy computes a round in, reset on
// every use: policies used from one goroutine share one (AdaptiveConfig).
// Its zero value is ready to use; it grows to the largest set it served.
// It is not safe for concurrent use.
type Scratch struct {
	scores []float64 // per path
	// Of interleave, per path: the round's physical paths (their
	// signature, entries, entries placed, first and last entry in a list
	// threaded through link), and the interleaved round.
	gkey                []uint64
	gcnt, gtook         []int
	ghead, gtail, glink []int
	interleaved         []uint16
	// Of pool: the active paths' state pooled per physical path (poolOf
	// maps a path to its pool; poolKey and known find the pool of a
	// signature).
	pools   []pathPool
	poolOf  []int
	poolKey []uint64
	known   []int
}

// fit makes every slice of s hold n entries.
func (s *Scratch) fit(n int) {
	if len(s.scores) >= n {
		return
	}
	s.scores = make([]float64, n)
	s.gkey = make([]uint64, n)
	s.gcnt, s.gtook = make([]int, n), make([]int, n)
	s.ghead, s.gtail, s.glink = make([]int, n), make([]int, n), make([]int, n)
	s.interleaved = make([]uint16, 0, n)
	s.pools, s.poolOf = make([]pathPool, n), make([]int, n)
	s.poolKey, s.known = make([]uint64, n), make([]int, 0, n)
}

func (c AdaptiveConfig) withDefaults() AdaptiveConfig {
	pos := func(f float64) float64 {
		if math.IsNaN(f) || f < 0 {
			return 0
		}
		return f
	}
	if c.StallRTTs <= 0 {
		c.StallRTTs = 2
	}
	if c.MinStallTimeout <= 0 {
		c.MinStallTimeout = 50 * time.Microsecond
	}
	if c.InitialRTT <= 0 {
		c.InitialRTT = 100 * time.Microsecond
	}
	if c.LossLimit <= 0 {
		c.LossLimit = 3
	}
	if c.MaxLossRate = pos(c.MaxLossRate); c.MaxLossRate == 0 {
		c.MaxLossRate = 0.25
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = time.Millisecond
	}
	if c.MaxProbeInterval <= 0 {
		c.MaxProbeInterval = 64 * c.ProbeInterval
	}
	c.MaxProbeInterval = max(c.MaxProbeInterval, c.ProbeInterval)
	if c.DelayScale < 0 {
		c.DelayScale = 0
	}
	switch {
	case math.IsNaN(c.ECNWeight) || c.ECNWeight == 0:
		c.ECNWeight = 4
	case c.ECNWeight < 0:
		c.ECNWeight = 0
	}
	switch {
	case math.IsNaN(c.LossWeight) || c.LossWeight == 0:
		c.LossWeight = 16
	case c.LossWeight < 0:
		c.LossWeight = 0
	}
	if c.MinWeight = pos(c.MinWeight); c.MinWeight == 0 {
		c.MinWeight = 1.0 / 16
	}
	c.MinWeight = min(c.MinWeight, 1)
	return c
}

// unit is a packet's worth of spraying credit; weights are fixed-point
// fractions of it.
const unit = 1 << 16

// pathState is the adaptive policy's state and counters for one entropy,
// 64 bytes: a busy QP holds one per entropy. Durations and counters are
// held in 32 bits while every one fits (the policy's wide table then is
// nil); the first that does not moves the policy's narrow fields to wide
// for good, so values are exact at any size (TestAdaptiveWideValues).
// What only losses and ECN marks change sits in a table allocated at the
// policy's first loss or mark (lossState), the state of probing a path out
// of the set in one allocated at the first removal. The Weight of Stats is
// derived: weight/unit, 0 while down or from a removal to the next round
// (fNoWeight).
type pathState struct {
	// pendingSince: the first packet sent since the path's last ACK (valid
	// while fPending).
	pendingSince clock.Time
	// ackedSent is the latest send time of a packet acknowledged on the
	// path with an RTT (0: none).
	ackedSent clock.Time
	lastAck   clock.Time // time of the last OnAck (0: none)
	group     uint64     // path signature from OnPath; 0: unknown, a path of its own
	// Narrow fields, valid while the policy's wide table is nil.
	dur    [nDur]uint32 // nanoseconds: SRTT, MinRTT, QueueDelay
	cnt    [nCnt]uint32 // Packets, Acks
	credit uint32       // spraying credit, < 2*unit
	weight uint32       // at the last round, in [1, unit]
	flags  uint8
}

// lossState is a path's loss and ECN history: all zero until the policy
// sees its first loss or ECN mark, when every path gets one.
type lossState struct {
	lossRate   float64 // EWMA: ack 0, loss 1
	ecnRate    float64 // EWMA: marked 1, unmarked 0
	losses     uint64
	ecn        uint64
	consecLoss int
}

// Indexes of pathState.dur and widePath.dur.
const (
	dSRTT = iota
	dMinRTT
	dQueueDelay
	nDur
)

// Indexes of pathState.cnt and widePath.cnt.
const (
	cPackets = iota
	cAcks
	nCnt
)

// pathState flags.
const (
	fDown uint8 = 1 << iota
	// fPending: a packet was sent since the path's last ACK.
	fPending
	fINTSeen // OnINT reported the path's queue delay
	fProbing
	// fAckLost: an acknowledgement sent on the path was probably lost
	// (AckLost) and no ACK of a data packet on it came since.
	fAckLost
	// fNoWeight: taken out since the last round (Stats reports weight 0).
	fNoWeight
)

// widePath holds a path's narrow fields at full size, once one of a
// policy's values outgrew 32 bits.
type widePath struct {
	dur [nDur]time.Duration
	cnt [nCnt]uint64
}

// probeState is a path's probing state and removal counters, kept from its
// first removal on.
type probeState struct {
	probeSent, probeAt clock.Time
	probeInterval      time.Duration
	removals, probes   uint64
}

func (s *pathState) has(f uint8) bool { return s.flags&f != 0 }

func (s *pathState) set(f uint8, on bool) {
	if on {
		s.flags |= f
	} else {
		s.flags &^= f
	}
}

// dur returns duration f of path i.
func (a *adaptive) dur(i, f int) time.Duration {
	if a.wide != nil {
		return a.wide[i].dur[f]
	}
	return time.Duration(a.st[i].dur[f])
}

// setDur sets duration f of path i, widening the policy when d does not
// fit 32 bits.
func (a *adaptive) setDur(i, f int, d time.Duration) {
	if a.wide == nil {
		if d >= 0 && d <= math.MaxUint32 {
			a.st[i].dur[f] = uint32(d)
			return
		}
		a.widen()
	}
	a.wide[i].dur[f] = d
}

// cnt returns counter f of path i.
func (a *adaptive) cnt(i, f int) uint64 {
	if a.wide != nil {
		return a.wide[i].cnt[f]
	}
	return uint64(a.st[i].cnt[f])
}

// inc adds one to counter f of path i, widening the policy when it would
// wrap.
func (a *adaptive) inc(i, f int) {
	if a.wide == nil {
		if a.st[i].cnt[f] < math.MaxUint32 {
			a.st[i].cnt[f]++
			return
		}
		a.widen()
	}
	a.wide[i].cnt[f]++
}

// consecLoss returns path i's losses in a row.
func (a *adaptive) consecLoss(i int) int {
	if a.lossy == nil {
		return 0
	}
	return a.lossy[i].consecLoss
}

// lossOf returns path i's loss history, allocating the table at the first
// use.
func (a *adaptive) lossOf(i int) *lossState {
	if a.lossy == nil {
		a.lossy = make([]lossState, len(a.st))
	}
	return &a.lossy[i]
}

// widen moves every path's narrow fields to the wide table.
func (a *adaptive) widen() {
	a.wide = make([]widePath, len(a.st))
	for i := range a.st {
		s, w := &a.st[i], &a.wide[i]
		for f := range nDur {
			w.dur[f] = time.Duration(s.dur[f])
		}
		for f := range nCnt {
			w.cnt[f] = uint64(s.cnt[f])
		}
	}
}

// probeOf returns path i's probing state, allocating the table at the
// first use.
func (a *adaptive) probeOf(i int) *probeState {
	if a.probes == nil {
		a.probes = make([]probeState, len(a.st))
	}
	return &a.probes[i]
}

// ackAt counts an acknowledgement on path i and takes its RTT.
func (a *adaptive) ackAt(now clock.Time, i int, rtt time.Duration, ecn bool) {
	a.inc(i, cAcks)
	if ecn {
		a.lossOf(i).ecn++
	}
	a.st[i].lastAck = now
	if rtt <= 0 {
		return
	}
	srtt := a.dur(i, dSRTT)
	if srtt == 0 {
		a.setDur(i, dSRTT, rtt)
		a.setDur(i, dMinRTT, rtt)
		return
	}
	a.setDur(i, dSRTT, srtt+(rtt-srtt)/8)
	a.setDur(i, dMinRTT, min(a.dur(i, dMinRTT), rtt))
}

// pathPool sums the state of the active entropies on one physical path.
type pathPool struct {
	n, nrtt, nint int
	srtt, qdelay  time.Duration
	ecn, loss     float64
	score         float64
}

// adaptive is the adaptive sprayer; see NewAdaptive. Its per-path state
// (st, order, rng) is allocated at its first use (ensure): a QP
// that never sends nor acknowledges holds none of it.
type adaptive struct {
	paths
	// cfg is the policy's own copy (NewAdaptive) or one shared by many
	// (NewAdaptiveShared): read only, but for a private Scratch.
	cfg    *AdaptiveConfig
	seed   uint64
	rng    *rand.Rand
	st     []pathState
	wide   []widePath   // nil while every value fits pathState's narrow fields
	lossy  []lossState  // nil until the first loss or ECN mark
	probes []probeState // nil until a path is first taken out
	active int
	order  []uint16 // indices of the current round
	pos    int
	// nextProbe is the earliest time a probe may be due or time out
	// (a hint: clock.Never when no path is down).
	nextProbe clock.Time
	// lastAckedSend is the latest send time of a packet acknowledged on
	// an active path (valid when haveAckedSend).
	lastAckedSend clock.Time
	haveAckedSend bool
	haveSent      bool // lastSend is valid
	run                // in the padding after the two flags
	// lastSend is the time of the last Next (valid when haveSent); a gap
	// in sending longer than idleGap (the stall timeout of the largest
	// SRTT, as of the last round) sets resumedAt, and no path counts as
	// stalled for packets sent before it.
	lastSend  clock.Time
	idleGap   time.Duration
	resumedAt clock.Time
	// ackTurn is the rotation of NextAck over the set.
	ackTurn int
}

// NewAdaptive returns an adaptive sprayer over set (duplicates removed,
// order kept; an empty set is replaced by Entropies(seed, 1)). It sprays
// packets in rounds like NewSpray, each round in a fresh order drawn from
// seed, but gives each path a share that falls with its delay (RTT above
// the best path's, INT queue delay), its ECN marks and its losses; it takes
// paths that lose or stall out of the set and probes them back in. The
// package doc describes the policy. The returned Policy also implements
// INTObserver, PathObserver, Resender and AckPather. Next, OnAck, OnLoss,
// OnINT, NextResend, NextAck and AckLost do not allocate, but for the
// per-path state, allocated at the policy's first use, and the scratch
// space of its first round.
func NewAdaptive(set []uint16, seed uint64, cfg AdaptiveConfig) Policy {
	c := cfg.withDefaults()
	return newAdaptive(set, seed, &c)
}

// NewAdaptiveShared is NewAdaptive with a configuration that the policies
// made from it share rather than copy, so that each holds only its own
// state (at most 288 bytes, for a simulator's
// million QPs: TestAdaptiveSize). It fills in cfg's defaults at the first
// call; cfg must have a Scratch, must not change afterwards, and is then
// read by every policy made from it: like Scratch, for the policies of
// one goroutine. Without a Scratch it is NewAdaptive(set, seed, *cfg).
func NewAdaptiveShared(set []uint16, seed uint64, cfg *AdaptiveConfig) Policy {
	if cfg.Scratch == nil {
		return NewAdaptive(set, seed, *cfg)
	}
	*cfg = cfg.withDefaults()
	return newAdaptive(set, seed, cfg)
}

func newAdaptive(set []uint16, seed uint64, cfg *AdaptiveConfig) *adaptive {
	if len(set) == 0 {
		set = Entropies(seed, 1)
	}
	a := &adaptive{
		paths:     newPaths(set),
		cfg:       cfg,
		seed:      seed,
		nextProbe: clock.Never,
	}
	a.active = len(a.set)
	a.idleGap = a.timeout(a.cfg.InitialRTT)
	return a
}

// ensure allocates the per-path state at the policy's first use.
func (a *adaptive) ensure() {
	if a.st != nil {
		return
	}
	n := len(a.set)
	a.rng = rand.New(rand.NewPCG(a.seed, a.seed^0x3C6EF372FE94F82B))
	a.st = make([]pathState, n)
	a.order = make([]uint16, 0, n)
	// Credits start at evenly spread phases, in a seeded order: entropies
	// on one physical path share its weight, and with equal credits they
	// would join the same rounds, all or none (two spines of 13 and 19
	// entropies: rounds of 32 entries, then of 13 from one spine only).
	for k, i := range a.rng.Perm(n) {
		a.st[i].weight = unit
		a.st[i].credit = uint32(k * unit / n)
	}
}

// Stats returns the per-path counters, in Paths order.
func (a *adaptive) Stats() []PathStats {
	a.ensure()
	out := make([]PathStats, len(a.set))
	for i := range out {
		s, o := &a.st[i], &out[i]
		o.Entropy, o.Down = a.set[i], s.has(fDown)
		o.Packets, o.Acks = a.cnt(i, cPackets), a.cnt(i, cAcks)
		if a.lossy != nil {
			o.Losses, o.ECN = a.lossy[i].losses, a.lossy[i].ecn
		}
		o.SRTT, o.MinRTT = a.dur(i, dSRTT), a.dur(i, dMinRTT)
		o.QueueDelay = a.dur(i, dQueueDelay)
		o.LastAck = s.lastAck
		if a.probes != nil {
			o.Removals, o.Probes = a.probes[i].removals, a.probes[i].probes
		}
		if !s.has(fDown | fNoWeight) {
			o.Weight = float64(s.weight) / unit
		}
	}
	return out
}

// Next returns the entropy of the next packet: a probe on a path that is
// out of the set when one is due, otherwise the next entry of the current
// weighted round. It does not allocate.
func (a *adaptive) Next(now clock.Time) uint16 {
	a.ensure()
	if a.haveSent && now.Sub(a.lastSend) > a.idleGap {
		a.resumedAt = now
	}
	a.lastSend, a.haveSent = now, true
	if now >= a.nextProbe {
		if i, ok := a.probe(now); ok {
			a.st[i].set(fProbing, true)
			pr := a.probeOf(i)
			pr.probeSent = now
			pr.probes++
			a.inc(i, cPackets)
			a.nextProbe = clock.Min(a.nextProbe, now.Add(a.probeTimeout(i, a.refRTT())))
			return a.set[i]
		}
	}
	if i, ok := a.cont(); ok {
		if s := &a.st[i]; !s.has(fDown) {
			if !s.has(fPending) {
				s.set(fPending, true)
				s.pendingSince = now
			}
			a.inc(i, cPackets)
			return a.set[i]
		}
		a.left = 0
	}
	e := a.nextInRound(now)
	if a.len > 1 {
		a.start(int(a.picked))
	}
	return e
}

// NextResend returns the entropy of a retransmission: the next entry of
// the current weighted round whose latest report was an ACK, never a probe.
// A resend is often the packet that holds the sender's window; sent on a
// path that is out of the set, it would be lost again while the window
// stays shut, and with nothing else to send every resend would become the
// next probe. A path that lost its latest packet is passed over too (unless
// every active path did): with many entropies and few packets each, a dead
// path may take a while to collect LossLimit losses, and a resend after a
// retransmission timeout that lands on it again costs another, doubled,
// timeout. An urgent resend takes the freshest path (the latest send
// time of a packet acknowledged on it, then the latest ACK) of those whose
// latest report was an ACK: after a failure, the other paths may be dead
// without a loss reported yet, and MaxRetries unlucky picks fail the QP.
// It does not allocate.
func (a *adaptive) NextResend(now clock.Time, urgent bool) uint16 {
	a.ensure()
	if a.haveSent && now.Sub(a.lastSend) > a.idleGap {
		a.resumedAt = now
	}
	a.lastSend, a.haveSent = now, true
	if urgent {
		if i := a.freshest(); i >= 0 {
			s := &a.st[i]
			if !s.has(fPending) {
				s.set(fPending, true)
				s.pendingSince = now
			}
			a.inc(i, cPackets)
			return a.set[i]
		}
	}
	fresh := false
	for i := range a.st {
		if !a.st[i].has(fDown) && a.consecLoss(i) == 0 {
			fresh = true
			break
		}
	}
	return a.pick(now, fresh)
}

// NextAck returns the entropy of an acknowledgement: the set in turn,
// passing over the paths that are out of the set and, while any active
// path's latest report was an ACK, those that lost their latest packet.
// An urgent one takes, of those, the freshest path (as NextResend's), and
// the rotation when none was ever acknowledged. It changes no counter and does not allocate.
func (a *adaptive) NextAck(urgent bool) uint16 {
	a.ensure()
	if urgent {
		if i := a.freshest(); i >= 0 {
			return a.set[i]
		}
	}
	n := len(a.set)
	for pass := range 2 {
		for range n {
			a.ackTurn = (a.ackTurn + 1) % n
			s := &a.st[a.ackTurn]
			if !s.has(fDown) && (pass == 1 || (a.consecLoss(a.ackTurn) == 0 && !s.has(fAckLost))) {
				return a.set[a.ackTurn]
			}
		}
	}
	return a.set[a.ackTurn] // unreachable: the last active path never goes down
}

// freshest is the active path with the freshest proof that it delivers
// (the latest send time of a packet acknowledged on it, then the latest
// ACK) of those whose latest report was an ACK and that lost no
// acknowledgement since, or -1.
//
// On a known physical path (OnPath) the proof is the path's: of the
// entropies of the path with the freshest proof of all, it takes one whose
// latest report was an ACK, or, when every one of them lost its latest
// packet, the one that delivered last, rather than an entropy of another
// path whose proof is older. After a spine dies, the entropies that
// hashed onto it keep the clean record they had before (nothing is learned
// of an entropy that nothing is sent on), while those of the live spine
// lose packets whose acknowledgements the peer sent on the dead one: a
// rule without paths would send every resend of a QP in timeout backoff,
// and the peer's urgent acknowledgements, to a different entropy of the
// dead spine until MaxRetries failed the QP
// (TestAdaptiveUrgentAfterSpineFailure).
func (a *adaptive) freshest() int {
	best, proof := -1, -1
	for i := range a.st {
		s := &a.st[i]
		if s.has(fDown|fAckLost) || a.cnt(i, cAcks) == 0 {
			continue
		}
		if proof < 0 || a.fresher(i, proof) {
			proof = i
		}
		if a.consecLoss(i) > 0 {
			continue
		}
		if best < 0 || a.fresher(i, best) {
			best = i
		}
	}
	if proof < 0 || a.st[proof].group == 0 || (best >= 0 && a.st[best].group == a.st[proof].group) {
		return best
	}
	// The freshest proof is on another physical path than best's (so its
	// entropy lost its latest packet): take an entropy of that path that
	// delivered its latest packet, or else the one that delivered last.
	pick, g := proof, a.st[proof].group
	for i := range a.st {
		s := &a.st[i]
		if s.has(fDown|fAckLost) || a.cnt(i, cAcks) == 0 || a.consecLoss(i) > 0 || s.group != g {
			continue
		}
		if pick == proof || a.fresher(i, pick) {
			pick = i
		}
	}
	return pick
}

// fresher reports whether path i has a fresher proof of delivery than
// path j: a later send time of a packet acknowledged on it, then a later
// ACK.
func (a *adaptive) fresher(i, j int) bool {
	s, b := &a.st[i], &a.st[j]
	return s.ackedSent > b.ackedSent ||
		(s.ackedSent == b.ackedSent && s.lastAck > b.lastAck)
}

// AckLost marks the path of entropy as one that probably lost an
// acknowledgement; when that leaves no active path unmarked, every mark
// is cleared.
func (a *adaptive) AckLost(entropy uint16) {
	a.ensure()
	i, ok := a.find(entropy)
	if !ok {
		return
	}
	a.st[i].set(fAckLost, true)
	for j := range a.st {
		if !a.st[j].has(fDown | fAckLost) {
			return
		}
	}
	for j := range a.st {
		a.st[j].set(fAckLost, false)
	}
}

// nextInRound returns the next entry of the current weighted round,
// starting a new round when it is used up.
func (a *adaptive) nextInRound(now clock.Time) uint16 {
	return a.pick(now, false)
}

// pick returns the next entry of the current weighted round, starting a
// new round when it is used up, passing over paths taken out during the
// round and, when fresh, paths that lost their latest packet. A fresh pick
// that finds none in two sets' worth of entries takes the heaviest such
// path, or, when none is left (the new round took the only ones out as
// stalled), the heaviest active path: a pick always returns an active path.
func (a *adaptive) pick(now clock.Time, fresh bool) uint16 {
	for skipped := 0; ; {
		if a.pos == len(a.order) {
			a.newRound(now)
		}
		i := int(a.order[a.pos])
		a.pos++
		s := &a.st[i]
		if s.has(fDown) || (fresh && a.consecLoss(i) > 0) {
			// Taken out during this round, or lost its latest packet.
			if skipped++; !fresh || skipped < 2*len(a.set) {
				continue
			}
			i = a.heaviest(true)
			if i < 0 {
				i = a.heaviest(false)
			}
			s = &a.st[i]
		}
		if !s.has(fPending) {
			s.set(fPending, true)
			s.pendingSince = now
		}
		a.inc(i, cPackets)
		a.picked = uint16(i)
		return a.set[i]
	}
}

// heaviest returns the active path of the largest weight (when fresh, of
// those whose latest report was an ACK), or -1. Without fresh it finds one:
// the last active path never goes out.
func (a *adaptive) heaviest(fresh bool) int {
	i := -1
	for j := range a.st {
		if t := &a.st[j]; !t.has(fDown) && (!fresh || a.consecLoss(j) == 0) && (i < 0 || t.weight > a.st[i].weight) {
			i = j
		}
	}
	return i
}

// OnAck scores the path: RTT, ECN, and the end of a stall or a loss run. On
// a path that is out of the set, an ACK of the probe (a packet sent at or
// after the probe, so rtt must be positive) that came within the probe
// timeout puts the path back.
func (a *adaptive) OnAck(now clock.Time, entropy uint16, rtt time.Duration, ecn bool) {
	a.ensure()
	i, ok := a.find(entropy)
	if !ok {
		return
	}
	a.ackAt(now, i, rtt, ecn)
	s := &a.st[i]
	s.set(fAckLost, false)
	if rtt > 0 {
		s.ackedSent = max(s.ackedSent, now.Add(-rtt))
	}
	if a.lossy != nil { // without, the rate is 0 and an unmarked ACK keeps it so
		l := &a.lossy[i]
		mark := 0.0
		if ecn {
			mark = 1
		}
		l.ecnRate += (mark - l.ecnRate) / 16
	}
	if s.has(fDown) {
		if s.has(fProbing) && rtt > 0 && now.Add(-rtt) >= a.probes[i].probeSent && rtt <= a.probeTimeout(i, a.refRTT()) {
			a.restore(i, rtt)
			a.nextProbe = clock.Min(a.nextProbe, now) // the next probe may be due
		}
		return
	}
	s.set(fPending, false)
	if a.lossy != nil {
		l := &a.lossy[i]
		l.consecLoss = 0
		l.lossRate -= l.lossRate / 16
	}
	if rtt > 0 {
		if sent := now.Add(-rtt); !a.haveAckedSend || sent > a.lastAckedSend {
			a.lastAckedSend, a.haveAckedSend = sent, true
		}
	}
}

// OnLoss scores the path and takes it out of the set when its losses reach
// LossLimit in a row or its loss rate reaches MaxLossRate (unless it is the
// last active path). Losses on a path already out are counted only: they
// may be packets sent before it went out.
func (a *adaptive) OnLoss(now clock.Time, entropy uint16) {
	a.ensure()
	i, ok := a.find(entropy)
	if !ok {
		return
	}
	l := a.lossOf(i)
	l.losses++
	if a.st[i].has(fDown) {
		return
	}
	l.consecLoss++
	l.lossRate += (1 - l.lossRate) / 16
	if (l.consecLoss >= a.cfg.LossLimit || l.lossRate >= a.cfg.MaxLossRate) && !a.sharedLoss() {
		a.remove(now, i)
	}
}

// sharedLoss reports whether more than half of the active paths lost
// their latest packet: losses that most paths share are a bottleneck they
// all cross (the receiver's link, an incast) or the sender's own burst,
// not failing paths, and taking paths out would only crowd the rest. A
// failed link takes out 1/S of the paths of an S-spine fabric, as with
// stalls. TestAdaptiveSharedLossKeepsPaths guards it.
func (a *adaptive) sharedLoss() bool {
	n := 0
	for i := range a.st {
		if !a.st[i].has(fDown) && a.consecLoss(i) > 0 {
			n++
		}
	}
	return 2*n > a.active
}

// OnINT takes the INT queue delay of a packet sent on entropy into the
// path's smoothed queue delay (EWMA with gain 1/8).
func (a *adaptive) OnINT(_ clock.Time, entropy uint16, queueDelay time.Duration) {
	a.ensure()
	i, ok := a.find(entropy)
	if !ok {
		return
	}
	queueDelay = max(queueDelay, 0)
	q := a.dur(i, dQueueDelay)
	a.setDur(i, dQueueDelay, q+(queueDelay-q)/8)
	a.st[i].set(fINTSeen, true)
}

// OnPath records that packets sent on entropy take the path named by
// signature (0: unknown). Entropies on one path split that path's share.
func (a *adaptive) OnPath(_ clock.Time, entropy uint16, signature uint64) {
	a.ensure()
	if i, ok := a.find(entropy); ok {
		a.st[i].group = signature
	}
}

// remove takes path i out of the set, unless it is the last active one,
// and schedules its first probe.
func (a *adaptive) remove(now clock.Time, i int) {
	s := &a.st[i]
	if s.has(fDown) || a.active <= 1 {
		return
	}
	s.set(fDown|fNoWeight, true)
	a.active--
	s.set(fPending|fProbing, false)
	s.credit = 0
	pr := a.probeOf(i)
	pr.probeInterval = a.cfg.ProbeInterval
	pr.probeAt = now.Add(pr.probeInterval)
	a.nextProbe = clock.Min(a.nextProbe, pr.probeAt)
	pr.removals++
}

// restore puts path i back into the set after an acknowledged probe, with
// its loss history cleared and its SRTT restarted from the larger of the
// probe's RTT and the largest SRTT of the active paths, and with it every
// path out of the set that has the same known signature (OnPath): they take
// the same links, and the probe just crossed them. After a spine comes
// back, one probe brings all of its entropies back instead of one probe
// each (one is in flight at a time across the set). The probe crossed an
// empty queue: restarted from its RTT alone, the path drew the largest
// share at once and its first packets, behind the queue that share built,
// took more than StallRTTs of that RTT and took it out again.
func (a *adaptive) restore(i int, rtt time.Duration) {
	if a.active > 0 {
		rtt = max(rtt, a.refRTT())
	}
	a.restoreOne(i, rtt)
	if g := a.st[i].group; g != 0 {
		for j := range a.st {
			if a.st[j].has(fDown) && a.st[j].group == g {
				a.restoreOne(j, rtt)
			}
		}
	}
}

func (a *adaptive) restoreOne(i int, rtt time.Duration) {
	s := &a.st[i]
	s.set(fDown|fProbing|fPending, false)
	if a.lossy != nil {
		a.lossy[i].consecLoss, a.lossy[i].lossRate = 0, 0
	}
	s.credit = 0
	a.active++
	a.setDur(i, dSRTT, rtt)
}

// refRTT is the largest smoothed RTT of the active paths, or InitialRTT
// before any sample.
func (a *adaptive) refRTT() time.Duration {
	var ref time.Duration
	for i := range a.st {
		if !a.st[i].has(fDown) {
			ref = max(ref, a.dur(i, dSRTT))
		}
	}
	if ref == 0 {
		ref = a.cfg.InitialRTT
	}
	return ref
}

// timeout is StallRTTs times rtt, at least MinStallTimeout; it saturates
// instead of overflowing.
func (a *adaptive) timeout(rtt time.Duration) time.Duration {
	k := time.Duration(a.cfg.StallRTTs)
	if rtt > math.MaxInt64/k {
		return math.MaxInt64
	}
	return max(k*rtt, a.cfg.MinStallTimeout)
}

// probeTimeout is how long the ACK of a probe on path i may take: the
// timeout of the larger of refRTT and the path's own SRTT from before it
// went out.
func (a *adaptive) probeTimeout(i int, ref time.Duration) time.Duration {
	return a.timeout(max(ref, a.dur(i, dSRTT)))
}

// stallTimeout is how long an active path i may go without an ACK while it
// has a packet outstanding: the timeout of its SRTT or, before its first
// sample, of the larger of ref and InitialRTT (its RTT may be well above
// the other paths').
func (a *adaptive) stallTimeout(i int, ref time.Duration) time.Duration {
	rtt := a.dur(i, dSRTT)
	if rtt == 0 {
		rtt = max(ref, a.cfg.InitialRTT)
	}
	return a.timeout(rtt)
}

// probe fails the probes that timed out, then returns a down path whose
// probe is due (the one waiting longest), and resets the nextProbe hint.
// While a probe is in flight, no other is due: after a spine fails, half
// the entropies of a QP may be out, and a burst after an idle gap would
// otherwise open with a probe on each of them, every one lost.
func (a *adaptive) probe(now clock.Time) (int, bool) {
	ref := a.refRTT()
	flight := clock.Never
	for i := range a.st {
		s := &a.st[i]
		if !s.has(fDown) || !s.has(fProbing) {
			continue
		}
		pr := &a.probes[i]
		deadline := pr.probeSent.Add(a.probeTimeout(i, ref))
		if now <= deadline {
			flight = clock.Min(flight, deadline+1)
			continue
		}
		s.set(fProbing, false)
		pr.probeInterval = min(2*pr.probeInterval, a.cfg.MaxProbeInterval)
		pr.probeAt = now.Add(pr.probeInterval)
		a.backOffGroup(i)
	}
	if flight != clock.Never {
		a.nextProbe = flight
		return 0, false
	}
	best, found := 0, false
	next := clock.Never
	for i := range a.st {
		if !a.st[i].has(fDown) {
			continue
		}
		s := &a.probes[i]
		if s.probeAt > now {
			next = clock.Min(next, s.probeAt)
			continue
		}
		if !found || s.probeAt < a.probes[best].probeAt {
			if found {
				next = clock.Min(next, a.probes[best].probeAt)
			}
			best, found = i, true
		} else {
			next = clock.Min(next, s.probeAt)
		}
	}
	a.nextProbe = next
	return best, found
}

// backOffGroup makes the paths out of the set that share path i's known
// signature wait for i's next probe: i's probe just failed on their links,
// and their own probes would cost a probe timeout each, one at a time, while
// paths of other signatures wait to be probed back in.
func (a *adaptive) backOffGroup(i int) {
	g := a.st[i].group
	if g == 0 {
		return
	}
	s := &a.probes[i]
	for j := range a.st {
		if u := &a.st[j]; j != i && u.has(fDown) && !u.has(fProbing) && u.group == g {
			t := &a.probes[j]
			t.probeInterval = max(t.probeInterval, s.probeInterval)
			t.probeAt = max(t.probeAt, s.probeAt)
		}
	}
}

// newRound takes stalled paths out, recomputes the weights and fills the
// next round: every active path adds its weight to its credit and takes a
// place in the round for each unit of credit, so the best path is in every
// round and a path of weight w in a fraction w of them. The round is then
// shuffled.
func (a *adaptive) newRound(now clock.Time) {
	ref := a.refRTT()
	a.idleGap = a.timeout(ref)
	if a.haveAckedSend {
		// When more than half of the active paths look stalled at once,
		// the receiver or the host paused, not the paths (a failed link
		// takes out 1/S of them): none is taken out, and every stall clock
		// restarts, as after a gap in sending.
		stalled := 0
		for i := range a.st {
			if a.stalled(now, i, ref) {
				stalled++
			}
		}
		switch {
		case 2*stalled > a.active:
			a.resumedAt = now
		case stalled > 0:
			for i := range a.st {
				if a.stalled(now, i, ref) {
					a.remove(now, i)
				}
			}
		}
	}

	var base time.Duration // smallest RTT of the active paths
	for i := range a.st {
		if r := a.dur(i, dMinRTT); !a.st[i].has(fDown) && r > 0 && (base == 0 || r < base) {
			base = r
		}
	}
	scale := a.cfg.DelayScale
	if scale == 0 {
		scale = max(base, 1)
	}
	sc := a.cfg.Scratch
	if sc == nil {
		sc = new(Scratch)
		a.cfg.Scratch = sc
	}
	sc.fit(len(a.set))
	np := a.pool(sc)
	wmax := 0.0
	for g := range np {
		sc.pools[g].score = a.score(&sc.pools[g], base, scale)
		wmax = max(wmax, sc.pools[g].score)
	}
	// Entropies that share a physical path split its weight.
	gmax := 0.0
	for i := range a.st {
		if !a.st[i].has(fDown) {
			p := &sc.pools[sc.poolOf[i]]
			w := p.score
			if wmax != 1 {
				w /= wmax
			}
			w = max(w, a.cfg.MinWeight)
			if p.n != 1 {
				w /= float64(p.n)
			}
			sc.scores[i] = w
			gmax = max(gmax, w)
		}
	}
	a.order = a.order[:0]
	for i := range a.st {
		s := &a.st[i]
		if s.has(fDown) {
			continue
		}
		w := sc.scores[i]
		if gmax != 1 {
			w /= gmax
		}
		s.weight = uint32(max(min(w*unit, unit), 1))
		s.set(fNoWeight, false)
		s.credit += s.weight
		if s.credit >= unit {
			s.credit -= unit
			a.order = append(a.order, uint16(i))
		}
	}
	for i := len(a.order) - 1; i > 0; i-- { // Fisher-Yates
		j := a.rng.IntN(i + 1)
		a.order[i], a.order[j] = a.order[j], a.order[i]
	}
	a.interleave(sc)
	a.pos = 0
}

// interleave reorders the shuffled round so that every stretch of it
// spreads over the physical paths (the OnPath groups) in proportion to
// their entries in the round, keeping the shuffled order within each path:
// a run of packets that ends in the middle of a round (the last packets of
// a message) then loads the paths as evenly as a whole round does. Shuffled
// whole, a 79-packet message over two spines sent up to a dozen packets
// more on one than on the other, and an all-to-all that shares the spines
// finishes when the busier one does. Entropies whose path is unknown count
// as paths of their own, which leaves their shuffled order as it is.
func (a *adaptive) interleave(sc *Scratch) {
	n := len(a.order)
	if n < 3 {
		return
	}
	ng := 0
	for k, i := range a.order {
		key := a.st[i].group
		g := -1
		if key != 0 {
			for h := range ng {
				if sc.gkey[h] == key {
					g = h
					break
				}
			}
		}
		if g < 0 {
			g = ng
			ng++
			sc.gkey[g], sc.gcnt[g], sc.gtook[g], sc.ghead[g] = key, 0, 0, k
		} else {
			sc.glink[sc.gtail[g]] = k
		}
		sc.gtail[g] = k
		sc.gcnt[g]++
	}
	if ng == n {
		return
	}
	out := sc.interleaved[:0]
	for k := range n {
		// The path furthest behind its share of the first k+1 entries;
		// ties go to the one that came first in the shuffle.
		best, bd := -1, 0
		for g := range ng {
			if sc.gtook[g] == sc.gcnt[g] {
				continue
			}
			if d := sc.gcnt[g]*(k+1) - sc.gtook[g]*n; best < 0 || d > bd {
				best, bd = g, d
			}
		}
		pos := sc.ghead[best]
		out = append(out, a.order[pos])
		sc.gtook[best]++
		if sc.gtook[best] < sc.gcnt[best] {
			sc.ghead[best] = sc.glink[pos]
		}
	}
	copy(a.order, out)
	sc.interleaved = out
}

// stalled reports whether active path i has had a packet outstanding for
// longer than its stall timeout while another path acknowledged a packet
// sent later. A path with no RTT sample yet is not judged by time: its RTT
// may be far above the others' (a queue), and a dead one goes out on its
// losses.
func (a *adaptive) stalled(now clock.Time, i int, ref time.Duration) bool {
	s := &a.st[i]
	if s.has(fDown) || !s.has(fPending) || a.dur(i, dSRTT) == 0 {
		return false
	}
	since := max(s.pendingSince, a.resumedAt)
	return a.lastAckedSend > since && now.Sub(since) > a.stallTimeout(i, ref)
}

// pool sums the state of the active paths per physical path (the OnPath
// group; a path whose group is unknown is a pool of its own) into
// sc.pools, sets sc.poolOf, and returns the number of pools. It costs
// O(len(set) x physical paths).
func (a *adaptive) pool(sc *Scratch) int {
	np := 0
	sc.known = sc.known[:0]
	for i := range a.st {
		s := &a.st[i]
		if s.has(fDown) {
			continue
		}
		g := -1
		if s.group != 0 {
			for _, h := range sc.known {
				if sc.poolKey[h] == s.group {
					g = h
					break
				}
			}
		}
		if g < 0 {
			g = np
			np++
			sc.pools[g], sc.poolKey[g] = pathPool{}, s.group
			if s.group != 0 {
				sc.known = append(sc.known, g)
			}
		}
		sc.poolOf[i] = g
		p := &sc.pools[g]
		p.n++
		if a.lossy != nil {
			p.ecn += a.lossy[i].ecnRate
			p.loss += a.lossy[i].lossRate
		}
		if r := a.dur(i, dSRTT); r > 0 {
			p.srtt += r
			p.nrtt++
		}
		if s.has(fINTSeen) {
			p.qdelay += a.dur(i, dQueueDelay)
			p.nint++
		}
	}
	return np
}

// score is the unnormalized weight of a physical path, 1/(1+penalty),
// from the state of its active entropies pooled: their mean SRTT, INT
// queue delay, ECN and loss rates. One entropy sees a few packets per
// round trip, and its own averages follow them, not the path: scored
// alone, the 32 entropies of a QP over two equal spines (an all-to-all on
// spray compare's testbed) got weights from 0.19 to 1 and the spines'
// shares drifted apart by tens of packets per message.
func (a *adaptive) score(p *pathPool, base, scale time.Duration) float64 {
	// A division by 1 is left out (x/1 is x exactly, integer or float):
	// most pools are one entropy, and the divisions were most of a
	// round's cost (BenchmarkAdaptiveNext).
	var excess time.Duration
	if p.nrtt > 0 && base > 0 {
		excess = div(p.srtt, p.nrtt) - base
	}
	if p.nint > 0 {
		excess = max(excess, div(p.qdelay, p.nint))
	}
	excess = max(excess, 0)
	pen := (a.cfg.ECNWeight*p.ecn + a.cfg.LossWeight*p.loss)
	if p.n != 1 {
		pen /= float64(p.n)
	}
	if excess != 0 {
		pen += float64(excess) / float64(scale)
	}
	if pen == 0 {
		return 1
	}
	return 1 / (1 + pen)
}

// div is d/n, without the division when n is 1.
func div[N int | int32 | int64](d time.Duration, n N) time.Duration {
	if n == 1 {
		return d
	}
	return d / time.Duration(n)
}
