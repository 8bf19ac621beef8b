//go:build !linux

package nexthop

import "net/netip"

// Table is not available on this platform.
type Table struct{ sh shared }

// Open returns ErrNotSupported.
func Open(cfg Config) (*Table, error) { return nil, ErrNotSupported }

// NewCache returns nil, a Cache that leaves frames alone.
func (t *Table) NewCache() *Cache { return nil }

// Lookup reports nothing known.
func (t *Table) Lookup(dst netip.Addr) ([6]byte, bool) { return [6]byte{}, false }

// Stats returns zero counters.
func (t *Table) Stats() Stats { return Stats{} }

// Close does nothing.
func (t *Table) Close() error { return nil }
