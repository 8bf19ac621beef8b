//go:build !linux

package poll

import (
	"errors"
	"time"
)

// Waiter is not available on this platform.
type Waiter struct{}

// New returns an error: the runtime poller integration is Linux-only.
func New(...int) (*Waiter, error) { return nil, errors.New("poll: not supported on this platform") }

// Wait returns an error.
func (w *Waiter) Wait(time.Duration) error { return errors.New("poll: not supported") }

// Wake does nothing.
func (w *Waiter) Wake() {}

// Close does nothing.
func (w *Waiter) Close() error { return nil }
