package cc

import (
	"time"

	"github.com/sprayfabric/spray/clock"
)

// Pacer spaces packets at a rate, letting up to a burst of bytes go back to
// back after an idle period: a token bucket of burstBytes that fills at the
// rate and that a packet may overdraw (a packet goes when the bucket is not
// in debt, and leaves it in debt by up to its size).
//
// The bucket is kept in fractional bytes and refilled from the exact
// nanoseconds elapsed, and the sub-nanosecond part of a wait is carried as
// debt rather than rounded away, so the rate holds over long runs whatever
// the packet size and rate. In any interval [t1, t2] that starts at a send,
// the packets sent in [t1, t2) total at most
// burstBytes + rate*(t2-t1) + rate*1ns.
//
// The rate is an argument of Next and OnSend, so that it can follow a
// controller's Rate from packet to packet: a change takes effect at once,
// for the debt already accrued too. A rate of 0 (or negative, NaN or
// infinite) is unpaced: every packet may go, and the bucket stays full.
//
// The zero value is a usable Pacer with no burst (packets strictly spaced).
// A Pacer is not safe for concurrent use.
type Pacer struct {
	burst  float64 // bucket size, bytes
	tokens float64 // bytes; negative is debt
	last   clock.Time
}

// NewPacer returns a pacer with a bucket of burstBytes (negative: 0),
// initially full.
func NewPacer(burstBytes int) *Pacer {
	b := float64(max(burstBytes, 0))
	return &Pacer{burst: b, tokens: b}
}

// bucket returns the tokens at now, refilled at rate since the last update.
func (p *Pacer) bucket(now clock.Time, rate float64) float64 {
	tok := p.tokens
	if now > p.last && tok < p.burst {
		tok = min(p.burst, tok+rate*float64(now-p.last)/1e9)
	}
	return tok
}

// Next returns the earliest time the next packet may go: now (or earlier)
// means at once. It does not change the pacer. A packet may go in the
// nanosecond in which the bucket's debt is paid off, so that it never
// leaves late by rounding; the fraction of a nanosecond it leaves early is
// debt that the next packet pays. Next returns clock.Never when the wait
// would not fit in a Time.
func (p *Pacer) Next(now clock.Time, rate float64) clock.Time {
	if !paced(rate) {
		return now
	}
	wait := -p.bucket(now, rate) * 1e9 / rate // ns until the debt is paid
	if wait < 1 {
		return now
	}
	if wait >= 1<<62 {
		return clock.Never
	}
	return now.Add(time.Duration(wait)) // truncated; saturates at Never
}

// OnSend records a packet of bytes sent at now at rate: the bucket refills
// up to now, then gives up bytes (going into debt if need be). Call it for
// every packet, paced or not, so that the pacer knows the traffic.
func (p *Pacer) OnSend(now clock.Time, bytes int, rate float64) {
	if !paced(rate) {
		p.tokens, p.last = p.burst, max(p.last, now)
		return
	}
	p.tokens = p.bucket(now, rate) - float64(max(bytes, 0))
	p.last = max(p.last, now)
}

// Burst returns the bucket size in bytes.
func (p *Pacer) Burst() int { return int(p.burst) }
