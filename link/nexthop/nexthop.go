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

// key is a destination IP as the map holds it: 16 bytes, IPv4 mapped
// into IPv6 (a map keyed by netip.Addr hashes several times slower).
type key [16]byte

func keyOf(a netip.Addr) key { return a.As16() }

// snapshot is the Table's answer for every destination it follows,
// immutable once published; done is closed when the next one replaces it.
type snapshot struct {
	m    map[key]slot
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
	s.snap.Store(&snapshot{m: map[key]slot{}, done: make(chan struct{})})
}

// publish replaces the snapshot and wakes the senders waiting for it.
func (s *shared) publish(m map[key]slot) {
	old := s.snap.Swap(&snapshot{m: m, done: make(chan struct{})})
	close(old.done)
}

// lines is the number of destinations a Cache holds (direct-mapped by a
// hash of the address's last four bytes; Rewrite's index takes the hash's
// top 4 bits), so that an engine sending to a few peers in turn rarely
// goes to the map.
const lines = 16

// line is one destination's answer in a Cache, valid while snap is the
// Table's snapshot.
type line struct {
	snap *snapshot
	key  key
	mac  [6]byte
	ok   bool
}

// Cache applies a Table's answers to frames. Get one from Table.NewCache
// for each goroutine that sends; it is not safe for concurrent use. A nil
// *Cache leaves every frame alone.
type Cache struct {
	s     *shared
	lines [lines]line
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
	k, ok := dstKey(frame)
	if !ok {
		return
	}
	l := &c.lines[binary.BigEndian.Uint32(k[12:])*0x9e3779b1>>28]
	if sn := c.s.snap.Load(); sn != l.snap || k != l.key {
		c.lookup(l, sn, k)
	}
	if l.ok {
		copy(frame[:6], l.mac[:])
	}
}

// lookup sets l to k's answer from sn, or from the snapshot that the
// Table's goroutine publishes after resolving k.
func (c *Cache) lookup(l *line, sn *snapshot, k key) {
	l.key, l.snap, l.ok = k, sn, false
	s, found := sn.m[k]
	if !found {
		if c.s.closed.Load() {
			return
		}
		select {
		case c.s.req <- netip.AddrFrom16(k).Unmap():
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
			s, found = sn.m[k]
		}
		l.snap = sn
	}
	l.mac, l.ok = s.mac, s.ok
}

// dstKey returns the destination IP of an IPv4 or IPv6 frame, untagged
// or with one 802.1Q tag.
func dstKey(b []byte) (key, bool) {
	var k key
	if len(b) < 14 {
		return k, false
	}
	off := 14
	et := binary.BigEndian.Uint16(b[12:])
	if et == 0x8100 || et == 0x88a8 {
		if len(b) < 18 {
			return k, false
		}
		et = binary.BigEndian.Uint16(b[16:])
		off = 18
	}
	switch et {
	case 0x0800:
		if len(b) < off+20 {
			return k, false
		}
		k[10], k[11] = 0xff, 0xff
		copy(k[12:], b[off+16:off+20])
		return k, true
	case 0x86dd:
		if len(b) < off+40 {
			return k, false
		}
		return key(b[off+24 : off+40]), true
	}
	return k, false
}
