// Package clock is spray's notion of time: a monotonic nanosecond count that
// the protocol core receives as an argument and never reads by itself.
//
// The sans-IO packages (transport's connection core, reorder, retransmit, cc,
// multipath) take a Time on every entry point. Only drivers (the engine loop,
// link implementations, test harnesses) hold a Clock and read it. A Sim clock
// lets tests jump straight to the next deadline, so protocol tests over
// link/mem are deterministic and take no wall-clock time.
package clock

import (
	"math"
	"sync/atomic"
	"time"
)

// Time is a point on a monotonic clock, in nanoseconds since an arbitrary
// epoch (the clock's creation). Its zero value is the epoch.
type Time int64

// Never is a Time later than every real deadline: "no timer armed".
const Never Time = math.MaxInt64

// Add returns t+d, saturating at Never.
func (t Time) Add(d time.Duration) Time {
	if t == Never {
		return Never
	}
	s := t + Time(d)
	if d > 0 && s < t {
		return Never
	}
	return s
}

// Sub returns the duration t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Before reports whether t is earlier than u.
func (t Time) Before(u Time) bool { return t < u }

// After reports whether t is later than u.
func (t Time) After(u Time) bool { return t > u }

// Min returns the earlier of t and u.
func Min(t, u Time) Time {
	if t < u {
		return t
	}
	return u
}

// String formats t as a duration since the epoch, or "never".
func (t Time) String() string {
	if t == Never {
		return "never"
	}
	return time.Duration(t).String()
}

// Clock reads the current time. Implementations must be safe for concurrent
// use.
type Clock interface {
	Now() Time
}

// System is the process's monotonic clock. Its zero value is not usable: use
// NewSystem.
type System struct{ start time.Time }

// NewSystem returns a monotonic clock whose epoch is now.
func NewSystem() *System { return &System{start: time.Now()} }

// Now returns the nanoseconds elapsed since the clock was created.
func (s *System) Now() Time { return Time(time.Since(s.start)) }

// Sim is a simulated clock that moves only when told to. Its zero value is a
// clock at the epoch, ready to use; it is safe for concurrent use.
type Sim struct{ now atomic.Int64 }

// Now returns the simulated time.
func (s *Sim) Now() Time { return Time(s.now.Load()) }

// Set moves the clock to t. Time never goes backwards: an earlier t is ignored.
func (s *Sim) Set(t Time) {
	for {
		cur := s.now.Load()
		if int64(t) <= cur || s.now.CompareAndSwap(cur, int64(t)) {
			return
		}
	}
}

// Advance moves the clock forward by d.
func (s *Sim) Advance(d time.Duration) { s.Set(s.Now().Add(d)) }
