//go:build !linux

package xdp

import (
	"time"

	"github.com/sprayfabric/spray/link"
)

// sysSocket is empty where AF_XDP does not exist.
type sysSocket struct{}

// Open returns ErrNotSupported: AF_XDP exists only on Linux.
func Open(cfg Config) (*Socket, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrNotSupported
}

// FD returns -1.
func (s *Socket) FD() int { return -1 }

// Wait returns ErrNotSupported.
func (s *Socket) Wait(time.Duration) error { return ErrNotSupported }

// Wake does nothing.
func (s *Socket) Wake() {}

// Close marks the socket closed.
func (s *Socket) Close() error {
	s.closed.Store(true)
	return nil
}

func (y *sysSocket) kickTx() error                     { return nil }
func (y *sysSocket) kickRx()                           {}
func (y *sysSocket) napiID() uint32                    { return 0 }
func (y *sysSocket) kernelStats() (kernelStats, error) { return kernelStats{}, link.ErrClosed }

// BusyPoll reports Config.BusyPoll only: there is no kernel to ask.
func (s *Socket) BusyPoll() BusyPollState { return BusyPollState{Requested: s.cfg.BusyPoll} }
