package nexthop

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"
)

// ErrNotSupported is returned by Open on platforms other than Linux.
var ErrNotSupported = errors.New("nexthop: not supported on this platform")

// Defaults and limits of Config.
const (
	// DefaultRecheck is Config.Recheck's default.
	DefaultRecheck = 2 * time.Second
	// DefaultMissWait is Config.MissWait's default.
	DefaultMissWait = 2 * time.Millisecond
	// MaxEntries bounds the destinations a Table follows, so that frames
	// to ever new addresses cannot grow it without limit.
	MaxEntries = 4096
)

// Config configures Open. Ifindex is required; every other zero field
// means the default in its comment.
type Config struct {
	// Ifindex is the interface the link sends on: destinations whose
	// route leaves by another interface are left alone.
	Ifindex int
	// Recheck is how often every destination is resolved again, whatever
	// the notifications said, and STALE next hops are confirmed. 0:
	// DefaultRecheck.
	Recheck time.Duration
	// MissWait bounds how long the first frame to a new destination
	// waits for its resolution (in the sender's goroutine, once per
	// destination). 0: DefaultMissWait; negative: no wait.
	MissWait time.Duration
}

// Stats are a Table's counters since Open.
type Stats struct {
	// Entries is the number of destinations followed now; Resolved how
	// many of them have a next hop MAC.
	Entries, Resolved int
	// Lookups counts resolutions (route and neighbour lookups) made.
	Lookups uint64
	// Changes counts next hop MACs that changed after a destination was
	// first resolved (a route moved, a neighbour came back with another
	// address).
	Changes uint64
	// Triggers counts requests to the kernel to resolve or confirm a next
	// hop.
	Triggers uint64
	// Overflow counts destinations not followed because the Table held
	// MaxEntries already; their frames are left alone.
	Overflow uint64
	// Notifications counts route and neighbour notifications received.
	Notifications uint64
}

// slot is what the transmit path learns of a destination: the MAC to
// write, when ok.
type slot struct {
	mac [6]byte
	ok  bool
}

// snapshot is the Table's answer for every destination it follows,
// immutable once published; done is closed when the next one replaces it.
type snapshot struct {
	m    map[netip.Addr]slot
	done chan struct{}
}

// shared is the part of a Table that Caches read.
type shared struct {
	snap     atomic.Pointer[snapshot]
	req      chan netip.Addr
	missWait time.Duration
	closed   atomic.Bool
}

func (s *shared) init(missWait time.Duration) {
	if missWait == 0 {
		missWait = DefaultMissWait
	}
	s.missWait = missWait
	s.req = make(chan netip.Addr, 256)
	s.snap.Store(&snapshot{m: map[netip.Addr]slot{}, done: make(chan struct{})})
}

// publish replaces the snapshot and wakes the senders waiting for it.
func (s *shared) publish(m map[netip.Addr]slot) {
	old := s.snap.Swap(&snapshot{m: m, done: make(chan struct{})})
	close(old.done)
}

// Cache applies a Table's answers to frames. Get one from Table.NewCache
// for each goroutine that sends; it is not safe for concurrent use. A nil
// *Cache leaves every frame alone.
type Cache struct {
	s    *shared
	snap *snapshot // the snapshot key's answer came from
	key  netip.Addr
	mac  [6]byte
	ok   bool
}

// Rewrite writes the next hop's MAC address into frame's destination
// address when the Table knows it for the frame's destination IP, and
// leaves the frame alone otherwise. It allocates nothing, and makes no
// system call except that the first frame to a new destination may wait
// up to Config.MissWait for its resolution.
func (c *Cache) Rewrite(frame []byte) {
	if c == nil {
		return
	}
	dst, ok := dstAddr(frame)
	if !ok {
		return
	}
	if sn := c.s.snap.Load(); sn != c.snap || dst != c.key {
		c.lookup(sn, dst)
	}
	if c.ok {
		copy(frame[:6], c.mac[:])
	}
}

// lookup sets the cache's answer for dst from sn, or from the snapshot
// that the Table's goroutine publishes after resolving dst.
func (c *Cache) lookup(sn *snapshot, dst netip.Addr) {
	c.key, c.snap, c.ok = dst, sn, false
	s, found := sn.m[dst]
	if !found {
		if c.s.closed.Load() {
			return
		}
		select {
		case c.s.req <- dst:
		default:
			return // the goroutine is busy: the next snapshot brings it
		}
		if c.s.missWait < 0 {
			return
		}
		t := time.NewTimer(c.s.missWait)
		defer t.Stop()
		for !found {
			select {
			case <-sn.done:
			case <-t.C:
				return
			}
			sn = c.s.snap.Load()
			s, found = sn.m[dst]
		}
		c.snap = sn
	}
	c.mac, c.ok = s.mac, s.ok
}

// dstAddr returns the destination IP of an IPv4 or IPv6 frame, untagged or
// with one 802.1Q tag.
func dstAddr(b []byte) (netip.Addr, bool) {
	if len(b) < 14 {
		return netip.Addr{}, false
	}
	off := 14
	et := binary.BigEndian.Uint16(b[12:])
	if et == 0x8100 || et == 0x88a8 {
		if len(b) < 18 {
			return netip.Addr{}, false
		}
		et = binary.BigEndian.Uint16(b[16:])
		off = 18
	}
	switch et {
	case 0x0800:
		if len(b) < off+20 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom4([4]byte(b[off+16 : off+20])), true
	case 0x86dd:
		if len(b) < off+40 {
			return netip.Addr{}, false
		}
		return netip.AddrFrom16([16]byte(b[off+24 : off+40])), true
	}
	return netip.Addr{}, false
}
