package transport

import (
	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/clock"
)

// rxClockFor returns the conversion of link.Frame.RxTime (CLOCK_MONOTONIC
// ns) into clk's time, or nil when clk does not run with the system's
// monotonic clock (a simulated clock). clock.System counts from a
// time.Time, whose monotonic reading is CLOCK_MONOTONIC, so the two differ
// by a constant that one pair of reads gives to within their spacing.
func rxClockFor(clk clock.Clock) func(int64) clock.Time {
	if _, ok := clk.(*clock.System); !ok {
		return nil
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return nil
	}
	off := ts.Nano() - int64(clk.Now())
	return func(ns int64) clock.Time { return clock.Time(ns - off) }
}
