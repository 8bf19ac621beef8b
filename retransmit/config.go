package retransmit

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors; the errors that the package returns wrap them.
var (
	// ErrInvalidConfig is wrapped by Config.Validate and New.
	ErrInvalidConfig = errors.New("retransmit: invalid config")
	// ErrFull is returned by OnSend for a new packet when Capacity packets
	// are outstanding.
	ErrFull = errors.New("retransmit: scoreboard full")
	// ErrUnexpectedPSN is returned by OnSend for a PSN that is neither
	// Next() nor awaiting retransmission (returned by PopLost, or still
	// queued), for instance one acknowledged in the meantime.
	ErrUnexpectedPSN = errors.New("retransmit: PSN is neither next nor awaiting retransmission")
	// ErrBadLength is returned by OnSend for a negative or oversized length.
	ErrBadLength = errors.New("retransmit: bad packet length")
	// ErrRetryExceeded is returned by OnTimeout (kind Failed) after
	// Config.MaxRetries consecutive retransmission timeouts without
	// progress, and by every later OnSend and OnTimeout.
	ErrRetryExceeded = errors.New("retransmit: retransmission retries exceeded")
)

// Mode selects the loss recovery discipline.
type Mode uint8

const (
	// SelectiveRepeat is spray's mode: SACK, RACK-TLP, selective resend.
	// It is the zero value.
	SelectiveRepeat Mode = iota
	// GoBackN is classic RoCEv2: cumulative ACK, NAK sequence error and
	// timeout resend everything from the first missing PSN.
	GoBackN
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case SelectiveRepeat:
		return "selective-repeat"
	case GoBackN:
		return "go-back-n"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Defaults and limits of Config.
const (
	DefaultCapacity   = 4096
	DefaultInitialRTT = 100 * time.Microsecond
	DefaultInitialRTO = 2 * time.Millisecond
	DefaultMinRTO     = time.Millisecond
	DefaultMaxRTO     = 100 * time.Millisecond
	DefaultMaxRetries = 7
	// MaxCapacity bounds Capacity: PSN comparisons need windows far below
	// 2^23, and the ring costs 24 bytes per slot.
	MaxCapacity = 1 << 22
	// maxReoMult bounds the reordering window multiplier.
	maxReoMult = 64
	// maxPTOMult bounds the probe timeout multiplier.
	maxPTOMult = 16
	// maxWaitMult bounds the multiplier of RACK's wait without proof
	// (Scoreboard.spuriousWait).
	maxWaitMult = 4
	// MaxDuration bounds every duration in Config and every RTT sample, so
	// that timer arithmetic cannot overflow.
	MaxDuration = time.Hour
	// reoPersist is how many loss recoveries a grown reordering window
	// survives without a new spurious retransmission (RFC 8985 6.2 step 4).
	reoPersist = 16
)

// Config configures a Scoreboard. The zero value is a valid spray
// (SelectiveRepeat) configuration with every default below.
type Config struct {
	// Mode is SelectiveRepeat (zero value) or GoBackN.
	Mode Mode

	// Capacity is the most packets outstanding (sent and not cumulatively
	// acknowledged) at once; OnSend of a new packet beyond it fails with
	// ErrFull. Zero means DefaultCapacity (4096); at most MaxCapacity.
	Capacity int

	// InitialRTT stands in for SRTT and the minimum RTT until the first
	// sample. Zero means DefaultInitialRTT (100µs): a few switch hops at
	// 100-400 Gb/s take 5-20µs, but a user-space stack on busy cores adds
	// tens of microseconds, and an initial guess on the high side costs
	// one slow first probe while one on the low side costs spurious
	// resends. The first sample replaces it (RFC 6298 2.2).
	InitialRTT time.Duration

	// InitialRTO is the retransmission timeout before the first RTT sample
	// (RFC 6298 2.1 takes 1s for the Internet). Zero means
	// DefaultInitialRTO (2ms): longer than a full 15 MiB switch buffer
	// takes to drain at 100 Gbit/s (1.3ms), so that a transfer that starts
	// beside a hundred others, into queues no sample has measured yet, is
	// not resent; the tail loss probe (2*InitialRTT) still repairs a lost
	// first packet sooner.
	InitialRTO time.Duration

	// MinRTO and MaxRTO bound the retransmission timeout. Zero means
	// DefaultMinRTO (1ms) and DefaultMaxRTO (100ms). The floor is far above
	// fabric RTTs because a user-space engine can be descheduled for
	// hundreds of microseconds and a spurious timeout resends the whole
	// window; RACK and TLP repair most losses long before it. The ceiling
	// keeps a dead path from stalling a collective for seconds: with the
	// defaults, MaxRetries timeouts fail the scoreboard about 127ms after
	// the last progress, fast enough for a training job to react.
	MinRTO, MaxRTO time.Duration

	// FixedRTO, when not zero, is the retransmission timeout, whatever the
	// RTT samples say: no estimate, no exponential backoff, MinRTO and
	// MaxRTO unused. It is the transport timer of a classic RoCE NIC (the
	// QP's Local ACK Timeout, 4.096µs x 2^exponent; see package transport),
	// which restarts at the same value after every timeout until
	// MaxRetries of them have passed. RTT samples are still taken (SRTT,
	// MinRTT) for the statistics.
	FixedRTO time.Duration

	// MaxRetries is the number of consecutive retransmission timeouts
	// without an ACK making progress after which the next timeout fails
	// the scoreboard with ErrRetryExceeded. Zero means DefaultMaxRetries
	// (7).
	MaxRetries int

	// NoTLP turns the tail loss probe off. The probe is on by default in
	// SelectiveRepeat; GoBackN never probes.
	NoTLP bool

	// MinReorderWindow is the floor of RACK's reordering window. Zero means
	// none: the window is min(mult*minRTT/4, SRTT) as in RFC 8985 6.2 step
	// 4, where mult starts at 1 and grows by one (at most once per round
	// trip) each time a packet that RACK declared lost turns out to have
	// arrived (acknowledged before its resend was sent, or so soon after
	// it that the ACK must be for the original); it falls back to 1 after
	// 16 loss recoveries without such an event. Sprayed traffic reorders
	// by design: set a floor near the path delay spread if it is known.
	MinReorderWindow time.Duration
	// QueueingReorder raises RACK's reordering window to at least the
	// queueing part of the smoothed RTT (SRTT - MinRTT), still at most SRTT:
	// for a sender that sprays one flow over paths whose queues differ, a
	// packet overtaken by a later one on a path with less queue is late by
	// up to that much, not lost.
	QueueingReorder bool

	// MaxAckDelay is how long the receiver may hold an ACK back. It is
	// added to the probe timeout while fewer than AckEvery packets are in
	// flight (RFC 8985 7.2 adds it for a single packet). Zero (the
	// default) suits a receiver that acknowledges every packet at once.
	MaxAckDelay time.Duration
	// AckEvery is how many packets the receiver collects before it
	// acknowledges them without waiting (its delayed-ACK count). Zero
	// means 2, RFC 8985's case: only a lone packet in flight may have its
	// ACK held. A receiver that waits for more holds the ACK of any
	// smaller flight until MaxAckDelay has passed, so the probe waits for
	// it too: a paced sender with 2 of AckEvery 4 packets out, the next
	// one held back by its pacer, probed each time 2*SRTT had passed
	// (spray compare's all-to-all with HPCC keeping 2 frames in flight:
	// 894 of 898 probes with 2 packets in flight, 703 of them spurious).
	AckEvery int
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.InitialRTT == 0 {
		c.InitialRTT = DefaultInitialRTT
	}
	if c.MinRTO == 0 {
		c.MinRTO = DefaultMinRTO
	}
	if c.InitialRTO == 0 {
		c.InitialRTO = DefaultInitialRTO
	}
	if c.MaxRTO == 0 {
		c.MaxRTO = DefaultMaxRTO
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.AckEvery == 0 {
		c.AckEvery = 2
	}
	return c
}

// Validate reports whether c is usable, with an error wrapping
// ErrInvalidConfig when it is not.
func (c Config) Validate() error {
	switch {
	case c.Mode != SelectiveRepeat && c.Mode != GoBackN:
		return fmt.Errorf("%w: unknown mode %d", ErrInvalidConfig, c.Mode)
	case c.Capacity < 0 || c.Capacity > MaxCapacity:
		return fmt.Errorf("%w: capacity %d not in [0, %d]", ErrInvalidConfig, c.Capacity, MaxCapacity)
	case c.InitialRTT < 0:
		return fmt.Errorf("%w: negative initial RTT %v", ErrInvalidConfig, c.InitialRTT)
	case c.MinRTO < 0 || c.MaxRTO < 0 || c.InitialRTO < 0:
		return fmt.Errorf("%w: negative RTO bound", ErrInvalidConfig)
	case c.FixedRTO < 0:
		return fmt.Errorf("%w: negative fixed RTO %v", ErrInvalidConfig, c.FixedRTO)
	case c.MaxRetries < 0:
		return fmt.Errorf("%w: negative max retries %d", ErrInvalidConfig, c.MaxRetries)
	case c.MinReorderWindow < 0:
		return fmt.Errorf("%w: negative reorder window %v", ErrInvalidConfig, c.MinReorderWindow)
	case c.MaxAckDelay < 0:
		return fmt.Errorf("%w: negative max ACK delay %v", ErrInvalidConfig, c.MaxAckDelay)
	case c.AckEvery < 0:
		return fmt.Errorf("%w: negative AckEvery %d", ErrInvalidConfig, c.AckEvery)
	}
	for _, v := range []time.Duration{c.InitialRTT, c.InitialRTO, c.MinRTO, c.MaxRTO, c.FixedRTO, c.MinReorderWindow, c.MaxAckDelay} {
		if v > MaxDuration {
			return fmt.Errorf("%w: duration %v above %v", ErrInvalidConfig, v, MaxDuration)
		}
	}
	d := c.withDefaults()
	if d.MinRTO > d.MaxRTO {
		return fmt.Errorf("%w: min RTO %v above max RTO %v", ErrInvalidConfig, d.MinRTO, d.MaxRTO)
	}
	return nil
}
