//go:build !linux

package xdp

import (
	"time"

	"github.com/sprayfabric/spray/link"
)

// linkSys is empty where AF_XDP does not exist.
type linkSys struct{}

func (y *linkSys) wake()        {}
func (y *linkSys) close() error { return nil }

// OpenLink returns ErrNotSupported: AF_XDP exists only on Linux.
func OpenLink(cfg LinkConfig) (*Link, error) { return nil, ErrNotSupported }

// QueueCount returns ErrNotSupported.
func QueueCount(dev string) (int, error) { return 0, ErrNotSupported }

// Wait returns ErrNotSupported.
func (l *Link) Wait(time.Duration) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	return ErrNotSupported
}
