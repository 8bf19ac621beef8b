package sock

import (
	"time"

	"github.com/sprayfabric/spray/link"
)

// Stub is a link.Link that is always closed, embedded by the links'
// placeholder types on platforms where they cannot open. Its zero value is
// usable and it is safe for concurrent use.
type Stub struct{}

// Info returns the zero link.Info.
func (Stub) Info() link.Info { return link.Info{} }

// Recv returns link.ErrClosed.
func (Stub) Recv(fs []link.Frame) (int, error) { return 0, link.ErrClosed }

// Release does nothing.
func (Stub) Release(fs []link.Frame) {}

// Alloc returns 0.
func (Stub) Alloc(fs []link.Frame) int { return 0 }

// Send returns link.ErrClosed.
func (Stub) Send(fs []link.Frame) (int, error) { return 0, link.ErrClosed }

// Wait returns link.ErrClosed.
func (Stub) Wait(timeout time.Duration) error { return link.ErrClosed }

// Wake does nothing.
func (Stub) Wake() {}

// Close returns nil.
func (Stub) Close() error { return nil }

// Stats returns the zero link.Stats.
func (Stub) Stats() link.Stats { return link.Stats{} }
