//go:build !linux

package udp

import "github.com/sprayfabric/spray/link/internal/sock"

type stub = sock.Stub

// Link is a link.Link over kernel UDP sockets; on this platform Open always
// fails with ErrNotSupported, and its methods act as on a closed link.
type Link struct{ stub }

// Open returns ErrNotSupported: the UDP link needs Linux (sendmmsg,
// recvmmsg, ppoll).
func Open(cfg Config) (*Link, error) { return nil, ErrNotSupported }

// Counters returns the zero Counters.
func (l *Link) Counters() Counters { return Counters{} }
