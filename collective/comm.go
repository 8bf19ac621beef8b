package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Comm is a group of Size ranks that exchange messages point to point.
// Messages between one pair of ranks arrive in the order they were sent.
//
// Send may block until the peer receives (as MPI's standard-mode send may):
// two ranks that both Send large messages to each other before they Recv
// can deadlock, which is why the collectives of this package overlap every
// send with its receive. Recv returns a slice that belongs to the caller.
//
// Implementations in this package are safe for concurrent use by several
// goroutines as long as no two goroutines Send to the same peer, or Recv
// from the same peer, at the same time. Close is idempotent and makes
// pending and later calls return an error wrapping net.ErrClosed.
type Comm interface {
	// Rank is this member's rank, in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Send sends msg to peer. msg may be reused once Send returns.
	Send(ctx context.Context, peer int, msg []byte) error
	// Recv returns the next message from peer.
	Recv(ctx context.Context, peer int) ([]byte, error)
	// Close releases the Comm's connections.
	Close() error
}

// Errors of this package; errors.Is works on every error it returns.
var (
	// ErrInvalid is wrapped by errors for bad arguments: a peer or root out
	// of range or equal to the caller's rank, buffer lengths that do not
	// fit the world size.
	ErrInvalid = errors.New("collective: invalid argument")
	// ErrMismatch is wrapped when a peer's message does not have the size
	// the algorithm expects: ranks called different collectives, or the
	// same one with different lengths.
	ErrMismatch = errors.New("collective: message size mismatch")
	// ErrTooLarge is wrapped when a peer announces a message larger than
	// the configured bound.
	ErrTooLarge = errors.New("collective: message too large")
	// ErrBootstrap is wrapped by bootstrap failures: a malformed or
	// inconsistent hello, a duplicate rank, a peer that went away.
	ErrBootstrap = errors.New("collective: bootstrap failed")
	// ErrBroken is wrapped when a connection to a peer is unusable because
	// an earlier call on it failed or was cancelled half way through a
	// message.
	ErrBroken = errors.New("collective: connection broken")
	// ErrClosed is returned by calls on a closed Comm; it wraps
	// net.ErrClosed.
	ErrClosed = fmt.Errorf("collective: comm closed: %w", net.ErrClosed)
)

func checkPeer(c Comm, peer int) error {
	if peer < 0 || peer >= c.Size() || peer == c.Rank() {
		return fmt.Errorf("%w: peer %d (rank %d of %d)", ErrInvalid, peer, c.Rank(), c.Size())
	}
	return nil
}
