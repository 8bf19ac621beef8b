//go:build !linux

package raw

import (
	"time"

	"github.com/sprayfabric/spray/link"
)

// Link is a link.Link over an AF_PACKET socket; on this platform Open
// always fails with ErrNotSupported.
type Link struct{}

// Open returns ErrNotSupported: AF_PACKET is Linux only.
func Open(cfg Config) (*Link, error) { return nil, ErrNotSupported }

func (l *Link) Info() link.Info                   { return link.Info{} }
func (l *Link) Recv(fs []link.Frame) (int, error) { return 0, link.ErrClosed }
func (l *Link) Release(fs []link.Frame)           {}
func (l *Link) Alloc(fs []link.Frame) int         { return 0 }
func (l *Link) Send(fs []link.Frame) (int, error) { return 0, link.ErrClosed }
func (l *Link) Wait(timeout time.Duration) error  { return link.ErrClosed }
func (l *Link) Wake()                             {}
func (l *Link) Close() error                      { return nil }
func (l *Link) Stats() link.Stats                 { return link.Stats{} }
func (l *Link) Counters() Counters                { return Counters{} }
