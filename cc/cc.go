package cc

import (
	"math"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// Sample is what one acknowledgement tells a controller.
type Sample struct {
	// Now is when the ACK was processed.
	Now clock.Time
	// AckedBytes is the payload newly acknowledged by this ACK (cumulative
	// and selective), retransmissions counted once.
	AckedBytes int
	// RTT is the round-trip time of the packet the ACK answers, from its
	// echoed transmit timestamp; it includes HoldTime. 0 means no sample.
	RTT time.Duration
	// HoldTime is how long the receiver held that packet before
	// acknowledging it, and the ACK waited at this host before the
	// transport read it when the link stamps arrivals (endpoint delay, not
	// fabric delay).
	HoldTime time.Duration
	// HostHold says the receiver's part of HoldTime counts from the
	// packet's arrival at its host, not from when its transport read it:
	// HoldTime then holds the time the packet waited for a descheduled
	// receiver, which a controller can hold to an endpoint target.
	HostHold bool
	// ECNCount is the number of CE-marked data packets the receiver saw
	// since its previous ACK.
	ECNCount int
	// INT holds the INT hop records echoed by the ACK, first hop first, or
	// nil. It is only valid during OnAck: a controller copies what it keeps.
	INT []Hop
	// Entropy is the UDP source port (path) of the acknowledged packet.
	Entropy uint16
}

// Hop is one switch's INT record of the egress port a packet left by, as
// an ACK echoes it: the transport decodes the wire's records into Hops.
type Hop struct {
	Switch, Port uint16 // the switch and its egress port
	RateMbps     uint32 // the port's link rate; 0: unknown (the record is skipped)
	TS           uint64 // egress time by the switch's clock, ns
	QLen         uint32 // queue depth in bytes
	TxBytes      uint32 // bytes the port transmitted (a counter that wraps)
}

// Controller is a congestion controller. Implementations document whether
// their zero value is usable; none is safe for concurrent use.
type Controller interface {
	// OnSend reports bytes (payload) sent at now, retransmissions included.
	OnSend(now clock.Time, bytes int)
	// OnAck reports an acknowledgement.
	OnAck(s Sample)
	// OnLoss reports that bytes sent earlier were declared lost (SACK or
	// RACK detection).
	OnLoss(now clock.Time, bytes int)
	// OnTimeout reports a retransmission timeout: nothing was heard for an
	// RTO.
	OnTimeout(now clock.Time)
	// OnCNP reports a RoCEv2 congestion notification packet from the
	// receiver.
	OnCNP(now clock.Time)
	// NextTimer returns when the controller needs OnTimer, or clock.Never.
	NextTimer() clock.Time
	// OnTimer runs the controller's timers that are due at now (DCQCN's
	// rate-increase and alpha-update timers). Calling it early is harmless.
	OnTimer(now clock.Time)
	// Window is the number of bytes allowed in flight; 0 is unlimited. A
	// controller that wants to send slower than one packet per RTT keeps
	// Window at one packet or more and lowers Rate.
	Window() int
	// Rate is the pacing rate in bytes per second; 0 is unpaced.
	Rate() float64
}

// Fixed is a controller with a constant window and pacing rate that ignores
// every event. Its zero value is usable: unlimited window, unpaced. It is a
// value type; copies are independent.
//
// (Its fields cannot be named Rate and Window: those are its methods.)
type Fixed struct {
	// BytesPerSec is the pacing rate in bytes per second; 0 (or a
	// negative, NaN or infinite value) is unpaced.
	BytesPerSec float64
	// WindowBytes is the number of bytes allowed in flight; 0 (or
	// negative) is unlimited.
	WindowBytes int
}

var _ Controller = Fixed{}

// NewFixed returns a Fixed controller pacing at rate bytes/s with window
// bytes in flight (0: unpaced, unlimited).
func NewFixed(rate float64, window int) Fixed {
	return Fixed{BytesPerSec: rate, WindowBytes: window}
}

// OnSend does nothing.
func (Fixed) OnSend(clock.Time, int) {}

// OnAck does nothing.
func (Fixed) OnAck(Sample) {}

// OnLoss does nothing.
func (Fixed) OnLoss(clock.Time, int) {}

// OnTimeout does nothing.
func (Fixed) OnTimeout(clock.Time) {}

// OnCNP does nothing.
func (Fixed) OnCNP(clock.Time) {}

// NextTimer returns clock.Never: Fixed has no timers.
func (Fixed) NextTimer() clock.Time { return clock.Never }

// OnTimer does nothing.
func (Fixed) OnTimer(clock.Time) {}

// Window returns WindowBytes, or 0 (unlimited) when it is not positive.
func (f Fixed) Window() int { return max(f.WindowBytes, 0) }

// Rate returns BytesPerSec, or 0 (unpaced) when it is not a positive finite
// number.
func (f Fixed) Rate() float64 {
	if !paced(f.BytesPerSec) {
		return 0
	}
	return f.BytesPerSec
}

// paced reports whether rate is a usable pacing rate.
func paced(rate float64) bool { return rate > 0 && !math.IsInf(rate, 1) }
