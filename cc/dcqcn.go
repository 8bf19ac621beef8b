package cc

import (
	"math"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// DCQCNConfig configures a DCQCN reaction point. Rates are in bytes per
// second. The zero value is usable: every field documents its default, and
// a negative, NaN or infinite value also takes the default.
type DCQCNConfig struct {
	// LineRate is the initial and largest rate. 0 means 12.5e9 (100 Gb/s).
	LineRate float64
	// MinRate is the smallest rate. 0 means 1.25e6 (10 Mb/s).
	MinRate float64
	// G is the gain g of the alpha estimator. 0 means 1/256.
	G float64
	// AlphaPeriod is K: alpha decays by (1-g) every K without a CNP. 0 means
	// 55µs.
	AlphaPeriod time.Duration
	// IncreasePeriod is the rate-increase timer T. 0 means 55µs.
	IncreasePeriod time.Duration
	// ByteCounter is B: every B bytes sent is a rate-increase event. 0
	// means 10 MB (10e6 bytes).
	ByteCounter int64
	// FastRecovery is F, the number of rate-increase events of either kind
	// (timer or byte counter) that halve the distance to the target rate
	// before additive increase starts. 0 means 5.
	FastRecovery int
	// AdditiveRate is R_AI. 0 means 5e6 (40 Mb/s).
	AdditiveRate float64
	// HyperRate is R_HAI. 0 means 10 × AdditiveRate.
	HyperRate float64
	// Window is a fixed window in bytes; 0 means unlimited (DCQCN controls
	// the rate only).
	Window int
	// EchoInterval lets ACKs that echo ECN marks (Sample.ECNCount > 0, the
	// spray profile's ECN echo) stand in for CNPs: such an ACK counts as a
	// CNP when none (CNP or echo) came in the last EchoInterval, which is
	// what a receiver's CNPGenerator would have sent (ours: DCQCN under the
	// spray profile, whose receivers echo ECN instead of sending CNPs).
	// 0 means 50µs, the CNP generator's interval; negative ignores the
	// echo.
	EchoInterval time.Duration
}

// alphaFloor is where the alpha timer stops: a CNP at that alpha cuts the
// rate by under 0.01%, and an idle QP then has no timer armed.
const alphaFloor = 1e-4

// maxAlphaSteps bounds the alpha periods one catch-up runs one by one;
// with the default G alpha reaches alphaFloor in 2,353.
const maxAlphaSteps = 1 << 16

// maxIncreaseEvents bounds the rate-increase events one call runs (a late
// OnTimer or a huge OnSend); fast recovery and hyper increase reach the
// line rate well within it.
const maxIncreaseEvents = 4096

// DCQCN is the DCQCN reaction point (Zhu et al., SIGCOMM 2015): the
// sender's rate controller driven by CNPs. On a CNP it remembers the
// current rate Rc as the target Rt, cuts Rc by alpha/2 and raises alpha
// towards 1 with gain g; alpha decays by (1-g) every AlphaPeriod without a
// CNP. Rate-increase events come from a timer (IncreasePeriod) and a byte
// counter (ByteCounter bytes sent); with T and BC the events of each kind
// since the last CNP, an event is fast recovery (Rc = (Rt+Rc)/2) while
// both are at most F, additive increase (Rt += R_AI first) while one is
// above F, and hyper increase (Rt += i·R_HAI, i = min(T,BC) - F) when both
// are. The timers are armed by the first CNP and stop when the rate is back
// at LineRate and alpha has decayed below 1e-4.
//
// The alpha timer changes nothing a caller sees until the next CNP, and
// the rate timer nothing until Rate is read: both run lazily, every call
// that takes a time (OnCNP, OnAck, OnSend, OnTimer) first running, one
// period at a time, the periods that ended at or before it. NextTimer is
// the rate timer only, for a sender that waits on its pacing; a sender
// calls OnTimer(now) before it reads Rate at now. The result is the
// periodic form's, rate for rate (TestDCQCNLazyMatchesPeriodic).
//
// Its zero value is not usable: use NewDCQCN. It is not safe for concurrent
// use.
type DCQCN struct {
	line, minRate    float64
	g                float64
	k, t             time.Duration
	b                int64
	f                int
	rai, rhai        float64
	window           int
	echo             time.Duration
	lastCNP          clock.Time
	cnpSeen          bool
	rc, rt, alpha    float64
	alphaNext        clock.Time
	rateNext         clock.Time
	tCount, bcCount  int
	bytes            int64
	cnps, increments uint64
}

var _ Controller = (*DCQCN)(nil)

// NewDCQCN returns a DCQCN reaction point at LineRate with alpha 1.
func NewDCQCN(cfg DCQCNConfig) *DCQCN {
	d := &DCQCN{
		line: cfg.LineRate, minRate: cfg.MinRate, g: cfg.G,
		k: cfg.AlphaPeriod, t: cfg.IncreasePeriod, b: cfg.ByteCounter,
		f: cfg.FastRecovery, rai: cfg.AdditiveRate, rhai: cfg.HyperRate,
		window:    max(cfg.Window, 0),
		echo:      cfg.EchoInterval,
		alpha:     1,
		alphaNext: clock.Never, rateNext: clock.Never,
	}
	if !positive(d.line) {
		d.line = 12.5e9
	}
	if !positive(d.minRate) {
		d.minRate = 1.25e6
	}
	d.minRate = min(d.minRate, d.line)
	if !positive(d.g) || d.g > 1 {
		d.g = 1.0 / 256
	}
	if d.echo == 0 {
		d.echo = 50 * time.Microsecond
	}
	if d.k <= 0 {
		d.k = 55 * time.Microsecond
	}
	if d.t <= 0 {
		d.t = 55 * time.Microsecond
	}
	if d.b <= 0 {
		d.b = 10e6
	}
	if d.f <= 0 {
		d.f = 5
	}
	if !positive(d.rai) {
		d.rai = 5e6
	}
	if !positive(d.rhai) {
		d.rhai = 10 * d.rai
	}
	d.rc, d.rt = d.line, d.line
	return d
}

// Alpha returns the congestion estimate alpha, in [0, 1].
func (d *DCQCN) Alpha() float64 { return d.alpha }

// TargetRate returns the target rate Rt in bytes per second.
func (d *DCQCN) TargetRate() float64 { return d.rt }

// CNPs returns the number of CNPs received.
func (d *DCQCN) CNPs() uint64 { return d.cnps }

// OnCNP cuts the rate: Rt = Rc, Rc = Rc(1 - alpha/2), alpha = (1-g)alpha +
// g; it resets the increase counters and restarts both timers.
func (d *DCQCN) OnCNP(now clock.Time) {
	d.catchUp(now)
	d.cnps++
	d.lastCNP, d.cnpSeen = now, true
	d.rt = d.rc
	d.rc = max(d.minRate, d.rc*(1-d.alpha/2))
	d.alpha = (1-d.g)*d.alpha + d.g
	d.tCount, d.bcCount, d.bytes = 0, 0, 0
	d.alphaNext = now.Add(d.k)
	d.rateNext = now.Add(d.t)
}

// recovering reports whether the rate is below the line rate.
func (d *DCQCN) recovering() bool { return d.rc < d.line }

// OnSend runs the byte counter: every ByteCounter bytes sent while the
// rate is below LineRate is a rate-increase event.
func (d *DCQCN) OnSend(now clock.Time, bytes int) {
	d.catchUp(now)
	if !d.recovering() || bytes <= 0 {
		return
	}
	d.bytes += int64(bytes)
	for n := 0; d.bytes >= d.b && d.recovering(); n++ {
		if n == maxIncreaseEvents {
			d.bytes = 0
			break
		}
		d.bytes -= d.b
		d.bcCount++
		d.increase()
	}
	d.stopIfDone()
}

// increase runs one rate-increase event; the counters are already
// incremented.
func (d *DCQCN) increase() {
	d.increments++
	lo, hi := min(d.tCount, d.bcCount), max(d.tCount, d.bcCount)
	switch {
	case hi <= d.f: // fast recovery
	case lo > d.f: // hyper increase
		d.rt += float64(lo-d.f) * d.rhai
	default: // additive increase
		d.rt += d.rai
	}
	d.rt = min(d.rt, d.line)
	d.rc = min((d.rt+d.rc)/2, d.line)
	if d.line-d.rc < 1 { // within a byte per second: done
		d.rc, d.rt = d.line, d.line
	}
}

// stopIfDone disarms the rate timer once the rate is back at the line
// rate.
func (d *DCQCN) stopIfDone() {
	if !d.recovering() {
		d.rateNext = clock.Never
		d.bytes = 0
	}
}

// NextTimer returns when the rate-increase timer next raises the rate, or
// clock.Never when the rate is at LineRate. The alpha timer is not in it:
// alpha matters at the next CNP only, which runs its missed periods.
func (d *DCQCN) NextTimer() clock.Time { return d.rateNext }

// OnTimer runs the timers due at now, including periods that a late call
// missed. Calling it early is harmless.
func (d *DCQCN) OnTimer(now clock.Time) { d.catchUp(now) }

// catchUp runs the alpha and rate-increase periods that ended at or before
// now, one at a time, as the periodic timers would have: alpha stops at
// alphaFloor, the rate at LineRate, and at most maxIncreaseEvents rate
// periods run (the rest are skipped, as a late timer skipped them).
func (d *DCQCN) catchUp(now clock.Time) {
	if d.alphaNext <= now {
		n := int64(now.Sub(d.alphaNext)/d.k) + 1
		i := int64(0)
		for ; i < n && i < maxAlphaSteps && d.alpha >= alphaFloor; i++ {
			d.alpha *= 1 - d.g
		}
		if i < n && d.alpha >= alphaFloor { // a tiny G: the rest at once
			d.alpha *= math.Pow(1-d.g, float64(n-i))
		}
		d.alphaNext = d.alphaNext.Add(time.Duration(n) * d.k)
		if d.alpha < alphaFloor {
			d.alphaNext = clock.Never
		}
	}
	if d.rateNext <= now {
		n := int64(now.Sub(d.rateNext)/d.t) + 1
		for i := int64(0); i < n && i < maxIncreaseEvents && d.recovering(); i++ {
			d.tCount++
			d.increase()
		}
		d.rateNext = d.rateNext.Add(time.Duration(n) * d.t)
		d.stopIfDone()
	}
}

// OnAck treats an ACK that echoes ECN marks as a CNP when no CNP came in
// the last EchoInterval (see DCQCNConfig.EchoInterval); other ACKs change
// nothing.
func (d *DCQCN) OnAck(s Sample) {
	if s.ECNCount <= 0 || d.echo < 0 {
		return
	}
	if d.cnpSeen && s.Now.Sub(d.lastCNP) < d.echo && s.Now >= d.lastCNP {
		return
	}
	d.OnCNP(s.Now)
}

// OnLoss does nothing.
func (d *DCQCN) OnLoss(clock.Time, int) {}

// OnTimeout does nothing.
func (d *DCQCN) OnTimeout(clock.Time) {}

// Window returns the configured window (0: unlimited).
func (d *DCQCN) Window() int { return d.window }

// Rate returns the current rate Rc in bytes per second.
func (d *DCQCN) Rate() float64 { return d.rc }

// CNPGenerator is DCQCN's notification point for one QP: the receiver asks
// it, for each ECN-CE-marked data packet, whether to send a CNP, and it
// allows at most one per Interval.
//
// Its zero value is usable (Interval 50µs). It is not safe for concurrent
// use.
type CNPGenerator struct {
	// Interval is the least time between two CNPs (the paper's N); 0 means
	// 50µs.
	Interval time.Duration
	// Sent and Suppressed count the CE marks that sent a CNP and those
	// that did not.
	Sent, Suppressed uint64

	last clock.Time
	sent bool
}

// OnCE reports whether a CE-marked packet received at now should be
// answered with a CNP: true for the first one and for any that comes at
// least Interval after the previous CNP.
func (g *CNPGenerator) OnCE(now clock.Time) bool {
	iv := g.Interval
	if iv <= 0 {
		iv = 50 * time.Microsecond
	}
	if g.sent && now.Sub(g.last) < iv {
		g.Suppressed++
		return false
	}
	g.last, g.sent = now, true
	g.Sent++
	return true
}
