//go:build !linux

package transport

import "github.com/sprayfabric/spray/clock"

// rxClockFor returns nil: links stamp arrival times on Linux only.
func rxClockFor(clock.Clock) func(int64) clock.Time { return nil }
