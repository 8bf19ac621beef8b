package cc

import (
	"math"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// SwiftConfig configures a Swift controller. Windows are in packets of
// PacketBytes and may be fractional. The zero value is usable: every field
// documents its default, and a negative, NaN or infinite value also takes
// the default.
type SwiftConfig struct {
	// PacketBytes is the payload of a full packet, the unit of the window.
	// 0 means 1400.
	PacketBytes int
	// BaseTarget is the fabric delay target of a one-hop path with few
	// flows. 0 means 25µs.
	BaseTarget time.Duration
	// HopScale (the paper's h) is added to the fabric target per hop of the
	// path, counted from the INT records of the ACK. 0 means no hop scaling.
	HopScale time.Duration
	// FlowScaleRange (fs_range) is the most that flow scaling adds to the
	// fabric target, at a window of FlowScaleMinCwnd and below, falling as
	// 1/sqrt(cwnd) to nothing at FlowScaleMaxCwnd. 0 means 2 × BaseTarget.
	FlowScaleRange time.Duration
	// FlowScaleMinCwnd and FlowScaleMaxCwnd (fs_min_cwnd, fs_max_cwnd)
	// bound the flow-scaling range in packets; 0 means 0.1 and 100.
	FlowScaleMinCwnd, FlowScaleMaxCwnd float64
	// EndpointTarget is the target of the endpoint delay (Sample.HoldTime).
	// 0 means 50µs (above the transport's default 20µs ACK delay); a
	// negative value turns the endpoint window off (ours: where the hold
	// time is the receiver's delayed-ACK timer rather than host
	// congestion, and that timer fires late).
	EndpointTarget time.Duration
	// HostEndpointTarget is the endpoint target of samples whose hold
	// time counts from the packet's arrival at the receiving host
	// (Sample.HostHold): the time packets wait in the host's receive ring
	// while its transport is not scheduled, the host congestion the
	// paper's endpoint window is for (ours: the paper's NIC timestamps
	// give every sample that). 0 means EndpointTarget's rule.
	HostEndpointTarget time.Duration
	// AI is the additive increase in packets per RTT. 0 means 1.
	AI float64
	// Beta is the multiplicative decrease constant β. 0 means 0.8.
	Beta float64
	// MaxMDF is the largest multiplicative decrease in one step, as a
	// fraction of the window. 0 means 0.5.
	MaxMDF float64
	// MinCwnd and MaxCwnd bound the window in packets; 0 means 0.001 and
	// 1024.
	MinCwnd, MaxCwnd float64
	// InitCwnd is the initial window in packets. 0 means 16 (at most
	// MaxCwnd).
	InitCwnd float64
	// RetxResetThreshold is the number of consecutive retransmission
	// timeouts after which the window drops to MinCwnd; a timeout before
	// that cuts the window by MaxMDF (at most once per RTT). 0 means 1:
	// every timeout drops the window to MinCwnd.
	RetxResetThreshold int
	// RelativeTarget measures the fabric delay from the smallest fabric
	// delay seen recently (the last one to two MinDelayWindow periods)
	// instead of from zero, so that the targets above are a queueing
	// allowance over the path's unloaded delay (ours). Off by default: the
	// paper's targets are absolute, for hardware fabrics whose unloaded RTT
	// is a few µs. A software fabric's unloaded RTT is 50-500µs and moves
	// with CPU load, far above any useful queue target: ByName turns this
	// on.
	RelativeTarget bool
	// MinDelayWindow is how long RelativeTarget remembers a minimum; 0
	// means 10s.
	MinDelayWindow time.Duration
	// INTFabricDelay takes the fabric delay of an ACK that echoes INT
	// records from those records: the sum of the hops' queue delays (queue
	// bytes over egress rate), which the targets are then an allowance
	// for, instead of the RTT minus the hold time (ours). The RTT of a
	// software fabric also holds the endpoints' scheduling delays (hundreds
	// of µs to ms on a loaded machine), which Swift would read as
	// congestion; the paper measures the fabric delay with NIC timestamps,
	// which exclude them. ACKs without INT records keep the RTT rule.
	INTFabricDelay bool
	// StandingDelay takes, on ACKs without INT records, the smallest RTT
	// fabric delay of the last half to one smoothed RTT instead of the
	// ACK's own (Copa's "standing" RTT; ours): a queue raises every
	// sample for an RTT, a descheduled endpoint only some, and those no
	// longer cut the window. The reaction to a queue comes up to half an
	// RTT later.
	StandingDelay bool
	// RTTEndpointAllowance is added to the fabric target on ACKs without
	// INT records (ours). Their fabric delay, the RTT minus the hold time,
	// also holds the endpoints' delays that a software endpoint does not
	// timestamp apart: the receiver's backlog before its engine reads a
	// packet (the hold time starts there, the paper's starts at the NIC),
	// and the engines' wake-ups. The paper keeps those under the endpoint
	// target, in a window of their own; without a measure of them, this
	// adds an endpoint allowance to the one window. 0 means none: the
	// paper's fabric target.
	RTTEndpointAllowance time.Duration
}

// Swift is the Swift delay-based window controller (Kumar et al., SIGCOMM
// 2020). It keeps two windows, one against the fabric delay (Sample.RTT
// minus Sample.HoldTime; its target grows for small windows, "flow
// scaling", and with the hop count) and one against the endpoint delay
// (Sample.HoldTime), and uses the smaller. Each window grows by AI packets
// per RTT while its delay is under its target and is cut by
// max(1 - β(delay-target)/delay, 1 - MaxMDF) when it is over, at most once
// per RTT (the latest RTT sample); a loss cuts by MaxMDF, a timeout drops
// the window to MinCwnd. Below one packet, the window stays at one packet
// and Rate paces at cwnd packets per RTT. With INTFabricDelay, the fabric
// delay of an ACK with INT records is the queueing its records report;
// with RTTEndpointAllowance, the target of an ACK without them is higher
// by that allowance; with HostEndpointTarget, an ACK whose hold counts
// from the packet's arrival at the host holds the endpoint window to it.
//
// Its zero value is not usable: use NewSwift. It is not safe for concurrent
// use.
type Swift struct {
	mss               float64
	base, hopScale    float64 // ns
	fsRange, fsA, fsB float64 // ns; flow-scaling curve fsA/sqrt(cwnd)+fsB
	eTarget           float64 // ns
	hostETarget       float64 // ns; 0: eTarget
	ai, beta, maxMDF  float64
	minCwnd, maxCwnd  float64
	retxReset         int
	fcwnd, ecwnd      float64
	intDelay          bool
	rttAllow          float64       // ns
	rtt               time.Duration // latest sample
	srtt              float64       // ns, EWMA (gain 1/8) of the samples
	standing          bool
	stCur, stPrev     float64 // ns; smallest fabric delay this and last half-srtt
	stStart           clock.Time
	lastDecrease      clock.Time
	decreased         bool
	retx              int
	decreases         uint64

	relative        bool
	minWin          time.Duration
	curMin, prevMin float64 // ns; smallest fabric delay this and last period
	epoch           clock.Time
	epochSet        bool
}

var _ Controller = (*Swift)(nil)

// NewSwift returns a Swift controller with both windows at InitCwnd.
func NewSwift(cfg SwiftConfig) *Swift {
	s := &Swift{
		mss:         float64(cfg.PacketBytes),
		base:        float64(cfg.BaseTarget),
		hopScale:    float64(max(cfg.HopScale, 0)),
		fsRange:     float64(cfg.FlowScaleRange),
		eTarget:     float64(cfg.EndpointTarget),
		hostETarget: float64(max(cfg.HostEndpointTarget, 0)),
		ai:          cfg.AI,
		beta:        cfg.Beta,
		maxMDF:      cfg.MaxMDF,
		minCwnd:     cfg.MinCwnd,
		maxCwnd:     cfg.MaxCwnd,
		retxReset:   cfg.RetxResetThreshold,
	}
	def := func(v *float64, d float64) {
		if !positive(*v) {
			*v = d
		}
	}
	def(&s.mss, 1400)
	def(&s.base, float64(25*time.Microsecond))
	def(&s.fsRange, 2*s.base)
	def(&s.eTarget, float64(50*time.Microsecond))
	if cfg.EndpointTarget < 0 {
		s.eTarget = math.Inf(1)
	}
	def(&s.ai, 1)
	def(&s.beta, 0.8)
	def(&s.maxMDF, 0.5)
	s.maxMDF = min(s.maxMDF, 1)
	def(&s.minCwnd, 0.001)
	def(&s.maxCwnd, 1024)
	s.maxCwnd = max(s.maxCwnd, s.minCwnd)
	fsMin, fsMax := cfg.FlowScaleMinCwnd, cfg.FlowScaleMaxCwnd
	def(&fsMin, 0.1)
	def(&fsMax, 100)
	if fsMax <= fsMin {
		fsMin, fsMax = 0.1, 100
	}
	s.fsA = s.fsRange / (1/math.Sqrt(fsMin) - 1/math.Sqrt(fsMax))
	s.fsB = -s.fsA / math.Sqrt(fsMax)
	if s.retxReset <= 0 {
		s.retxReset = 1
	}
	s.intDelay = cfg.INTFabricDelay
	s.rttAllow = float64(max(cfg.RTTEndpointAllowance, 0))
	s.standing = cfg.StandingDelay
	s.stCur, s.stPrev = math.Inf(1), math.Inf(1)
	s.relative, s.minWin = cfg.RelativeTarget, cfg.MinDelayWindow
	if s.minWin <= 0 {
		s.minWin = 10 * time.Second
	}
	s.curMin, s.prevMin = math.Inf(1), math.Inf(1)
	init := cfg.InitCwnd
	def(&init, 16)
	s.fcwnd = s.clamp(init)
	s.ecwnd = s.fcwnd
	return s
}

func (s *Swift) clamp(c float64) float64 { return min(max(c, s.minCwnd), s.maxCwnd) }

// TargetDelay returns the fabric delay target for a window of cwnd packets
// on a path of hops hops: BaseTarget + hops × HopScale + the flow-scaling
// term clamped to [0, FlowScaleRange].
func (s *Swift) TargetDelay(cwnd float64, hops int) time.Duration {
	fs := 0.0
	if cwnd > 0 {
		fs = min(max(s.fsA/math.Sqrt(cwnd)+s.fsB, 0), s.fsRange)
	} else {
		fs = s.fsRange
	}
	return time.Duration(s.base + float64(max(hops, 0))*s.hopScale + fs)
}

// Cwnd returns the window in packets: the smaller of the fabric and
// endpoint windows.
func (s *Swift) Cwnd() float64 { return min(s.fcwnd, s.ecwnd) }

// FabricCwnd and EndpointCwnd return the two windows in packets.
func (s *Swift) FabricCwnd() float64 { return s.fcwnd }

// EndpointCwnd returns the endpoint window in packets.
func (s *Swift) EndpointCwnd() float64 { return s.ecwnd }

// Decreases returns how many times a window was cut (delay, loss or
// timeout).
func (s *Swift) Decreases() uint64 { return s.decreases }

// canDecrease reports whether a cut is allowed at now: none yet, or the
// last one at least an RTT ago. Before the first RTT sample, one cut is
// allowed: the losses of one flight, reported together, cut once.
func (s *Swift) canDecrease(now clock.Time) bool {
	if !s.decreased {
		return true
	}
	if s.rtt <= 0 {
		return false
	}
	return now.Sub(s.lastDecrease) >= s.rtt
}

func (s *Swift) didDecrease(now clock.Time) {
	s.lastDecrease, s.decreased = now, true
	s.decreases++
}

// OnSend does nothing: Swift reacts to ACKs.
func (s *Swift) OnSend(clock.Time, int) {}

// OnAck updates both windows from the sample's delays. A sample without
// an RTT changes nothing.
func (s *Swift) OnAck(a Sample) {
	if a.RTT <= 0 {
		return
	}
	s.retx = 0
	s.rtt = a.RTT
	if s.srtt == 0 {
		s.srtt = float64(a.RTT)
	} else {
		s.srtt += (float64(a.RTT) - s.srtt) / 8
	}
	hold := min(max(a.HoldTime, 0), a.RTT)
	var fabric, allow float64
	if q, ok := intQueueDelay(a.INT); ok && s.intDelay {
		fabric = q
	} else {
		fabric = float64(a.RTT - hold)
		allow = s.rttAllow
		if s.relative {
			fabric -= s.minDelay(a.Now, fabric)
		}
		if s.standing {
			if a.Now.Sub(s.stStart) >= time.Duration(s.srtt/2) || a.Now < s.stStart {
				s.stPrev, s.stCur, s.stStart = s.stCur, fabric, a.Now
			} else {
				s.stCur = min(s.stCur, fabric)
			}
			fabric = min(s.stCur, s.stPrev)
		}
	}
	endpoint := float64(hold)
	acked := float64(max(a.AckedBytes, 0)) / s.mss
	can := s.canDecrease(a.Now)
	target := float64(s.TargetDelay(s.fcwnd, len(a.INT))) + allow
	f, fcut := s.step(s.fcwnd, fabric, target, acked, can)
	eTarget := s.eTarget
	if a.HostHold && s.hostETarget > 0 {
		eTarget = s.hostETarget
	}
	e, ecut := s.step(s.ecwnd, endpoint, eTarget, acked, can)
	s.fcwnd, s.ecwnd = f, e
	if fcut || ecut {
		s.didDecrease(a.Now)
	}
}

// intQueueDelay returns the sum of the queue delays (ns) that the INT hop
// records report, each hop's queue bytes over its egress rate; false when
// there is no record with a rate.
func intQueueDelay(records []Hop) (float64, bool) {
	d, ok := 0.0, false
	for _, h := range records {
		if h.RateMbps > 0 {
			d += float64(h.QLen) * 8000 / float64(h.RateMbps)
			ok = true
		}
	}
	return d, ok
}

// minDelay folds a fabric delay sample d (ns) into the windowed minimum
// and returns the minimum: a two-period filter, so that a minimum is
// forgotten after one to two MinDelayWindow periods.
func (s *Swift) minDelay(now clock.Time, d float64) float64 {
	if !s.epochSet || now.Sub(s.epoch) >= s.minWin || now < s.epoch {
		s.prevMin, s.curMin = s.curMin, d
		s.epoch, s.epochSet = now, true
	} else {
		s.curMin = min(s.curMin, d)
	}
	return min(s.prevMin, s.curMin)
}

// BaseDelay returns the unloaded fabric delay that RelativeTarget measures
// from (the windowed minimum), or 0 when RelativeTarget is off or no
// sample came yet.
func (s *Swift) BaseDelay() time.Duration {
	m := min(s.prevMin, s.curMin)
	if !s.relative || math.IsInf(m, 1) {
		return 0
	}
	return time.Duration(m)
}

// step is Swift's per-ACK rule for one window: additive increase under the
// target, a bounded multiplicative decrease over it when allowed.
func (s *Swift) step(c, delay, target, acked float64, can bool) (float64, bool) {
	if delay < target {
		if c >= 1 {
			c += s.ai / c * acked
		} else {
			c += s.ai * acked
		}
		return s.clamp(c), false
	}
	if !can || delay <= 0 {
		return c, false
	}
	f := max(1-s.beta*(delay-target)/delay, 1-s.maxMDF)
	return s.clamp(c * f), true
}

// OnLoss cuts both windows by MaxMDF, at most once per RTT (the paper's
// fast-recovery rule).
func (s *Swift) OnLoss(now clock.Time, _ int) {
	s.retx = 0
	if s.canDecrease(now) {
		s.fcwnd = s.clamp(s.fcwnd * (1 - s.maxMDF))
		s.ecwnd = s.clamp(s.ecwnd * (1 - s.maxMDF))
		s.didDecrease(now)
	}
}

// OnTimeout drops both windows to MinCwnd after RetxResetThreshold
// consecutive timeouts, and cuts them by MaxMDF (at most once per RTT)
// before that.
func (s *Swift) OnTimeout(now clock.Time) {
	s.retx++
	switch {
	case s.retx >= s.retxReset:
		s.fcwnd, s.ecwnd = s.minCwnd, s.minCwnd
		s.didDecrease(now)
	case s.canDecrease(now):
		s.fcwnd = s.clamp(s.fcwnd * (1 - s.maxMDF))
		s.ecwnd = s.clamp(s.ecwnd * (1 - s.maxMDF))
		s.didDecrease(now)
	}
}

// OnCNP does nothing: Swift uses delay, not ECN.
func (s *Swift) OnCNP(clock.Time) {}

// NextTimer returns clock.Never: Swift has no timers.
func (s *Swift) NextTimer() clock.Time { return clock.Never }

// OnTimer does nothing.
func (s *Swift) OnTimer(clock.Time) {}

// Window returns the window in bytes, at least one packet.
func (s *Swift) Window() int { return int(max(s.Cwnd(), 1) * s.mss) }

// Rate returns 0 (unpaced) while the window is a packet or more, and
// cwnd packets per RTT below that: per the smaller of the latest RTT
// sample and the smoothed RTT (gain 1/8), or BaseTarget before the first
// sample. The smoothed RTT is ours: on a loaded machine a single sample
// that waited ms for a descheduled engine would otherwise space the next
// packets by ms over cwnd.
func (s *Swift) Rate() float64 {
	c := s.Cwnd()
	if c >= 1 {
		return 0
	}
	rtt := float64(s.rtt)
	if s.srtt > 0 {
		rtt = min(rtt, s.srtt)
	}
	if rtt <= 0 {
		rtt = s.base
	}
	return c * s.mss * 1e9 / rtt
}
