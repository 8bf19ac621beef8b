package xdp

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenRetriesEBUSY: Open retries a bind that fails with EBUSY, and
// gives up with the errno after a bounded number of attempts.
func TestOpenRetriesEBUSY(t *testing.T) {
	defer func(f func(Config) (*Socket, error)) { openOnce = f }(openOnce)
	calls := 0
	busy := 3
	openOnce = func(cfg Config) (*Socket, error) {
		calls++
		if calls <= busy {
			return nil, fmt.Errorf("xdp: bind: %w", unix.EBUSY)
		}
		return &Socket{cfg: cfg}, nil
	}
	if _, err := Open(Config{Ifindex: 1}); err != nil || calls != busy+1 {
		t.Fatalf("Open = %v after %d calls, want success after %d", err, calls, busy+1)
	}
	calls, busy = 0, 1<<30
	if _, err := Open(Config{Ifindex: 1}); !errors.Is(err, unix.EBUSY) || calls != bindRetries+1 {
		t.Fatalf("Open = %v after %d calls, want EBUSY after %d", err, calls, bindRetries+1)
	}
	calls = 0
	openOnce = func(Config) (*Socket, error) { calls++; return nil, unix.ENODEV }
	if _, err := Open(Config{Ifindex: 1}); !errors.Is(err, unix.ENODEV) || calls != 1 {
		t.Fatalf("Open = %v after %d calls, want ENODEV at once", err, calls)
	}
}
