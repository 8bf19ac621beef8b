//go:build !linux

package raw

import "github.com/sprayfabric/spray/link/internal/sock"

type stub = sock.Stub

// Link is a link.Link over an AF_PACKET socket; on this platform Open
// always fails with ErrNotSupported, and its methods act as on a closed
// link.
type Link struct{ stub }

// Open returns ErrNotSupported: AF_PACKET is Linux only.
func Open(cfg Config) (*Link, error) { return nil, ErrNotSupported }

// Counters returns the zero Counters.
func (l *Link) Counters() Counters { return Counters{} }
