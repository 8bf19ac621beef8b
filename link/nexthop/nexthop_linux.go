//go:build linux

package nexthop

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Timings of resolution.
const (
	// retrigger is how often the kernel is asked again to resolve a next
	// hop that has not answered.
	retrigger = 500 * time.Millisecond
	// pendingPoll is how often pending next hops are looked up while the
	// kernel resolves them (neighbour notifications usually come first).
	pendingPoll = 20 * time.Millisecond
	// giveUp is how long a next hop may stay unresolved before it is
	// only looked at every Recheck.
	giveUp = 3 * time.Second
	// discardPort is where the UDP trigger sends its empty datagram.
	discardPort = 9
)

// Table follows the next hop of every destination a link sends to, in the
// network namespace it was opened in. Get one from Open; Close it when the
// link closes. It is safe for concurrent use.
type Table struct {
	sh      shared
	ifindex int
	recheck time.Duration
	noARP   bool // the interface has no link-layer addresses

	h          *netlink.Handle
	udp4, udp6 int // trigger sockets, -1 when not open
	routes     chan netlink.RouteUpdate
	neighs     chan netlink.NeighUpdate
	done       chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once

	// Owned by the goroutine.
	entries map[netip.Addr]*entry

	lookups, changes, triggers, overflow, notes atomic.Uint64
	nEntries, nResolved                         atomic.Int64
}

// state of an entry.
type state uint8

const (
	unroutable state = iota // leave frames alone
	pending                 // next hop known, its MAC not yet
	resolved
)

// entry is one destination the Table follows.
type entry struct {
	st        state
	hop       netip.Addr // the gateway, or the destination on the link
	mac       [6]byte
	ok        bool // mac is usable (it stays so while a new one is sought)
	nud       uint16
	since     time.Time // pending since
	triggered time.Time
}

// Open opens a Table for the interface cfg.Ifindex in the calling thread's
// network namespace (its netlink sockets stay there, whichever thread
// later uses them) and starts its goroutine.
func Open(cfg Config) (*Table, error) {
	if cfg.Ifindex <= 0 {
		return nil, fmt.Errorf("nexthop: Ifindex %d", cfg.Ifindex)
	}
	t := &Table{ifindex: cfg.Ifindex, recheck: cfg.Recheck, udp4: -1, udp6: -1,
		entries: map[netip.Addr]*entry{}, done: make(chan struct{})}
	if t.recheck <= 0 {
		t.recheck = DefaultRecheck
	}
	t.sh.init(cfg.MissWait)
	var err error
	if t.h, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("nexthop: netlink: %w", err)
	}
	_ = t.h.SetSocketTimeout(time.Second) // a stuck kernel must not stall the goroutine
	l, err := t.h.LinkByIndex(cfg.Ifindex)
	if err != nil {
		t.h.Close()
		return nil, fmt.Errorf("nexthop: interface %d: %w", cfg.Ifindex, err)
	}
	a := l.Attrs()
	t.noARP = len(a.HardwareAddr) != 6 || a.Flags&net.FlagLoopback != 0 || a.RawFlags&unix.IFF_NOARP != 0
	// The trigger sockets are opened here, in the namespace.
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0); err == nil {
		t.udp4 = fd
	}
	if fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0); err == nil {
		t.udp6 = fd
	}
	// Notifications: without them (a kernel that refuses the
	// subscription) the Recheck still follows changes, later.
	t.routes = make(chan netlink.RouteUpdate, 64)
	if netlink.RouteSubscribeWithOptions(t.routes, t.done, netlink.RouteSubscribeOptions{}) != nil {
		t.routes = nil
	}
	t.neighs = make(chan netlink.NeighUpdate, 64)
	if netlink.NeighSubscribeWithOptions(t.neighs, t.done, netlink.NeighSubscribeOptions{}) != nil {
		t.neighs = nil
	}
	t.wg.Add(1)
	go t.run()
	return t, nil
}

// NewCache returns a Cache that applies the Table's answers, for one
// sending goroutine. A nil Table gives a nil Cache, which leaves frames
// alone.
func (t *Table) NewCache() *Cache {
	if t == nil {
		return nil
	}
	return &Cache{s: &t.sh}
}

// Lookup returns the MAC address frames to dst get now, and false when
// they are left alone (dst not resolved, or not followed yet).
func (t *Table) Lookup(dst netip.Addr) ([6]byte, bool) {
	s := t.sh.snap.Load().m[keyOf(dst.Unmap())]
	return s.mac, s.ok
}

// Stats returns the Table's counters. Safe from any goroutine.
func (t *Table) Stats() Stats {
	return Stats{
		Entries:       int(t.nEntries.Load()),
		Resolved:      int(t.nResolved.Load()),
		Lookups:       t.lookups.Load(),
		Changes:       t.changes.Load(),
		Triggers:      t.triggers.Load(),
		Overflow:      t.overflow.Load(),
		Notifications: t.notes.Load(),
	}
}

// Close stops the goroutine and closes the sockets. It is idempotent.
// Caches keep their last answers and learn nothing new.
func (t *Table) Close() error {
	t.closeOnce.Do(func() {
		t.sh.closed.Store(true)
		close(t.done)
		t.wg.Wait()
		t.h.Close()
		for _, fd := range []int{t.udp4, t.udp6} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	})
	return nil
}

func (t *Table) run() {
	defer t.wg.Done()
	timer := time.NewTimer(t.recheck)
	defer timer.Stop()
	nextRecheck := time.Now().Add(t.recheck)
	for {
		changed := false
		select {
		case <-t.done:
			// The subscriptions close their channels once their sockets
			// are closed; drain them so that their goroutines can end.
			for t.routes != nil || t.neighs != nil {
				select {
				case _, ok := <-t.routes:
					if !ok {
						t.routes = nil
					}
				case _, ok := <-t.neighs:
					if !ok {
						t.neighs = nil
					}
				}
			}
			return
		case dst := <-t.sh.req:
			changed = t.add(dst)
			// Take the other requests queued meanwhile with it.
			for more := true; more; {
				select {
				case dst := <-t.sh.req:
					changed = t.add(dst) || changed
				default:
					more = false
				}
			}
		case _, ok := <-t.routes:
			if !ok {
				t.routes = nil
				break
			}
			t.notes.Add(1)
			// A burst of route changes is taken as one.
			for more := t.routes != nil; more; {
				select {
				case _, ok := <-t.routes:
					t.notes.Add(1)
					more = ok
					if !ok {
						t.routes = nil
					}
				default:
					more = false
				}
			}
			changed = t.resolveAll(false)
		case u, ok := <-t.neighs:
			if !ok {
				t.neighs = nil
				break
			}
			t.notes.Add(1)
			changed = t.neighbour(u)
		case <-timer.C:
			now := time.Now()
			if !now.Before(nextRecheck) {
				nextRecheck = now.Add(t.recheck)
				changed = t.resolveAll(true)
			} else {
				changed = t.resolvePending()
			}
		}
		if changed {
			t.publish()
		}
		// Wake up for pending next hops soon, else at the next recheck.
		wait := time.Until(nextRecheck)
		for _, e := range t.entries {
			if e.st == pending && time.Since(e.since) < giveUp {
				wait = min(wait, pendingPoll)
				break
			}
		}
		timer.Reset(max(wait, time.Millisecond))
	}
}

// add starts following dst and resolves it. It reports whether the
// snapshot must be published.
func (t *Table) add(dst netip.Addr) bool {
	if _, ok := t.entries[dst]; ok {
		return false // asked twice before the answer was published
	}
	if len(t.entries) >= MaxEntries {
		t.overflow.Add(1)
		return false
	}
	e := &entry{}
	t.entries[dst] = e
	var ns map[netip.Addr]netlink.Neigh
	t.resolve(dst, e, &ns, false)
	return true
}

// resolveAll resolves every destination again; confirm asks the kernel to
// confirm STALE next hops.
func (t *Table) resolveAll(confirm bool) bool {
	var ns map[netip.Addr]netlink.Neigh
	changed := false
	for dst, e := range t.entries {
		changed = t.resolve(dst, e, &ns, confirm) || changed
	}
	return changed
}

// resolvePending resolves the destinations whose next hop is pending.
func (t *Table) resolvePending() bool {
	var ns map[netip.Addr]netlink.Neigh
	changed := false
	for dst, e := range t.entries {
		if e.st == pending {
			changed = t.resolve(dst, e, &ns, false) || changed
		}
	}
	return changed
}

// neighbour applies a neighbour notification to the destinations behind
// it: a new MAC at once; a failed or deleted entry makes them pending and
// the kernel resolve it again.
func (t *Table) neighbour(u netlink.NeighUpdate) bool {
	if u.LinkIndex != t.ifindex {
		return false
	}
	ip, ok := netip.AddrFromSlice(u.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	usable := u.Type == unix.RTM_NEWNEIGH && u.State&usableNUD != 0 && len(u.HardwareAddr) == 6
	var mac [6]byte
	if usable {
		copy(mac[:], u.HardwareAddr)
		usable = mac != [6]byte{}
	}
	changed, trigger := false, false
	for _, e := range t.entries {
		if e.st == unroutable || e.hop != ip {
			continue
		}
		switch {
		case usable:
			changed = t.set(e, mac, uint16(u.State)) || changed
		case u.Type == unix.RTM_DELNEIGH || u.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE|netlink.NUD_NONE) != 0 || u.State == 0:
			if e.st != pending {
				e.st, e.since = pending, time.Now()
			}
			e.nud = uint16(u.State)
			trigger = u.State&netlink.NUD_INCOMPLETE == 0 // incomplete: the kernel is at it
		}
	}
	if trigger {
		t.trigger(ip, netip.Addr{})
	}
	return changed
}

// set records a usable MAC for e.
func (t *Table) set(e *entry, mac [6]byte, nud uint16) bool {
	e.nud = nud
	if e.st == resolved && e.ok && e.mac == mac {
		return false
	}
	if e.ok && e.mac != mac {
		t.changes.Add(1)
	}
	e.st, e.mac, e.ok = resolved, mac, true
	return true
}

// usableNUD are the neighbour states whose MAC may be used.
const usableNUD = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// resolve looks dst's route and next hop up; *ns is the neighbour table,
// read once per round. It reports whether what frames get changed.
func (t *Table) resolve(dst netip.Addr, e *entry, ns *map[netip.Addr]netlink.Neigh, confirm bool) bool {
	t.lookups.Add(1)
	wasOK, wasMAC, wasSt := e.ok, e.mac, e.st
	hop, ok := t.route(dst)
	if !ok {
		e.st, e.ok, e.hop = unroutable, false, netip.Addr{}
		return wasOK || wasSt != unroutable
	}
	if hop != e.hop {
		e.hop = hop
		e.triggered = time.Time{}
	}
	if *ns == nil {
		*ns = t.neighbours()
	}
	if n, found := (*ns)[hop]; found {
		var mac [6]byte
		copy(mac[:], n.HardwareAddr)
		t.set(e, mac, uint16(n.State))
		if confirm && n.State&netlink.NUD_STALE != 0 {
			t.confirm(hop)
		}
		return e.ok != wasOK || e.mac != wasMAC
	}
	if e.st != pending {
		e.st, e.since = pending, time.Now()
	}
	if time.Since(e.triggered) >= retrigger {
		e.triggered = time.Now()
		t.trigger(hop, dst)
	}
	return e.ok != wasOK || e.st != wasSt
}

// route returns dst's next hop when its route is unicast, leaves by the
// Table's interface and that interface resolves link-layer addresses.
func (t *Table) route(dst netip.Addr) (netip.Addr, bool) {
	if t.noARP || !dst.IsValid() || dst.IsUnspecified() || dst.IsMulticast() || dst.IsLoopback() {
		return netip.Addr{}, false
	}
	rs, err := t.h.RouteGet(dst.AsSlice())
	if err != nil || len(rs) == 0 {
		return netip.Addr{}, false
	}
	r := rs[0]
	if r.Type != unix.RTN_UNICAST || r.LinkIndex != t.ifindex {
		return netip.Addr{}, false
	}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
		return gw.Unmap(), true
	}
	return dst, true
}

// neighbours returns the interface's usable neighbour entries with a MAC.
func (t *Table) neighbours() map[netip.Addr]netlink.Neigh {
	out := map[netip.Addr]netlink.Neigh{}
	list, err := t.h.NeighList(t.ifindex, netlink.FAMILY_ALL)
	if err != nil {
		return out
	}
	for _, n := range list {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || n.State&usableNUD == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		var mac [6]byte
		copy(mac[:], n.HardwareAddr)
		if mac == ([6]byte{}) {
			continue
		}
		out[a.Unmap()] = n
	}
	return out
}

// trigger makes the kernel resolve hop: a neighbour request with NTF_USE,
// or, when that is refused (no CAP_NET_ADMIN), an empty UDP datagram to
// dst's discard port, which the kernel sends through hop (only to dst, the
// peer the link sends to anyway, never to the router itself).
func (t *Table) trigger(hop, dst netip.Addr) {
	t.triggers.Add(1)
	if t.useNeigh(hop) == nil || !dst.IsValid() {
		return
	}
	fd := t.udp4
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: discardPort, Addr: dst.As4()}
	if dst.Is6() {
		fd = t.udp6
		sa = &unix.SockaddrInet6{Port: discardPort, Addr: dst.As16()}
	}
	if fd >= 0 {
		_ = unix.Sendto(fd, nil, unix.MSG_DONTWAIT, sa)
	}
}

// confirm asks the kernel to confirm a STALE next hop (it moves the entry
// to DELAY, then probes it unless traffic confirms it meanwhile), so that
// a next hop that changed MAC without telling is found out.
func (t *Table) confirm(hop netip.Addr) {
	t.triggers.Add(1)
	_ = t.useNeigh(hop)
}

func (t *Table) useNeigh(hop netip.Addr) error {
	return t.h.NeighSet(&netlink.Neigh{LinkIndex: t.ifindex, IP: hop.AsSlice(), Flags: netlink.NTF_USE})
}

// publish hands the entries' answers to the Caches.
func (t *Table) publish() {
	m := make(map[key]slot, len(t.entries))
	resolved := 0
	for dst, e := range t.entries {
		m[keyOf(dst)] = slot{mac: e.mac, ok: e.ok}
		if e.ok {
			resolved++
		}
	}
	t.nEntries.Store(int64(len(m)))
	t.nResolved.Store(int64(resolved))
	t.sh.publish(m)
}
