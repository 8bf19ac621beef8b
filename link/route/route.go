package route

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Errors returned by Resolve, wrapped with %w.
var (
	// ErrNoRoute is returned when the kernel has no route to the peer.
	ErrNoRoute = errors.New("route: no route to peer")
	// ErrNoNeighbour is returned when the next hop's MAC address was not
	// resolved before the context ended.
	ErrNoNeighbour = errors.New("route: next hop not resolved")
)

// Path is how frames reach a peer.
type Path struct {
	// Ifindex and IfName are the egress interface.
	Ifindex int
	IfName  string
	// SrcMAC is the egress interface's address; DstMAC the next hop's. Both
	// are zero on interfaces without link-layer addresses (loopback, tun).
	SrcMAC, DstMAC [6]byte
	// Src is the source address the kernel would use; Dst the peer.
	Src, Dst netip.Addr
	// Gateway is the next hop when the peer is not on the link; invalid
	// (the zero Addr) when it is.
	Gateway netip.Addr
	// MTU is the route's MTU if it has one, else the interface's.
	MTU int
}

// NextHop is the address whose MAC address is DstMAC: Gateway, or Dst when
// the peer is on the link.
func (p Path) NextHop() netip.Addr {
	if p.Gateway.IsValid() {
		return p.Gateway
	}
	return p.Dst
}

// Polling of the neighbour table while the kernel resolves.
const (
	pollFirst   = 2 * time.Millisecond
	pollMax     = 50 * time.Millisecond
	retrigger   = 500 * time.Millisecond
	discardPort = 9
)

// useNetlinkTrigger is false in tests that exercise the UDP fallback;
// udpTriggers counts the datagrams sent.
var (
	useNetlinkTrigger = true
	udpTriggers       atomic.Int64
)

// Resolve returns the path to peer from the calling thread's network
// namespace. It waits for neighbour resolution until ctx ends.
func Resolve(ctx context.Context, peer netip.Addr) (Path, error) {
	peer = peer.Unmap()
	if !peer.IsValid() || peer.IsUnspecified() {
		return Path{}, fmt.Errorf("%w: invalid peer address %v", ErrNoRoute, peer)
	}
	routes, err := netlink.RouteGet(peer.AsSlice())
	if err != nil {
		return Path{}, fmt.Errorf("%w: %v: %w", ErrNoRoute, peer, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex == 0 {
		return Path{}, fmt.Errorf("%w: %v", ErrNoRoute, peer)
	}
	rt := routes[0]
	switch rt.Type {
	case unix.RTN_UNREACHABLE, unix.RTN_PROHIBIT, unix.RTN_BLACKHOLE, unix.RTN_THROW:
		return Path{}, fmt.Errorf("%w: %v: route type %d", ErrNoRoute, peer, rt.Type)
	}
	l, err := netlink.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return Path{}, fmt.Errorf("route: interface %d: %w", rt.LinkIndex, err)
	}
	a := l.Attrs()
	p := Path{Ifindex: a.Index, IfName: a.Name, Dst: peer, MTU: a.MTU}
	if rt.MTU > 0 && rt.MTU < p.MTU {
		p.MTU = rt.MTU
	}
	if src, ok := netip.AddrFromSlice(rt.Src); ok {
		p.Src = src.Unmap()
	}
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok {
		p.Gateway = gw.Unmap()
	}
	if len(a.HardwareAddr) != 6 || a.Flags&net.FlagLoopback != 0 || a.RawFlags&unix.IFF_NOARP != 0 {
		return p, nil // no link-layer addresses to resolve
	}
	copy(p.SrcMAC[:], a.HardwareAddr)
	next := p.NextHop()
	family := netlink.FAMILY_V4
	if next.Is6() {
		family = netlink.FAMILY_V6
	}
	wait := pollFirst
	var triggered time.Time
	for {
		mac, ok, err := lookup(p.Ifindex, family, next)
		if err != nil {
			return p, fmt.Errorf("route: neighbours of %s: %w", p.IfName, err)
		}
		if ok {
			p.DstMAC = mac
			return p, nil
		}
		if time.Since(triggered) >= retrigger {
			trigger(p.Ifindex, next)
			triggered = time.Now()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, fmt.Errorf("%w: %v on %s: %w", ErrNoNeighbour, next, p.IfName, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, pollMax)
	}
}

// usable are the neighbour states whose MAC address may be used.
const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

func lookup(ifindex, family int, ip netip.Addr) ([6]byte, bool, error) {
	var mac [6]byte
	ns, err := netlink.NeighList(ifindex, family)
	if err != nil {
		return mac, false, err
	}
	for _, n := range ns {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || a.Unmap() != ip.WithZone("") || n.State&usable == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		copy(mac[:], n.HardwareAddr)
		if mac != ([6]byte{}) || n.State&netlink.NUD_NOARP != 0 {
			return mac, true, nil
		}
	}
	return mac, false, nil
}

// trigger makes the kernel resolve ip on the interface: a netlink request
// with NTF_USE, or, when that is refused (no CAP_NET_ADMIN), an empty UDP
// datagram to ip's discard port sent out of the interface.
func trigger(ifindex int, ip netip.Addr) {
	if useNetlinkTrigger {
		err := netlink.NeighSet(&netlink.Neigh{
			LinkIndex: ifindex,
			IP:        ip.AsSlice(),
			Flags:     netlink.NTF_USE,
		})
		if err == nil {
			return
		}
	}
	family := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: discardPort, Addr: ip.As4()}
	if ip.Is6() {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: discardPort, Addr: ip.As16(), ZoneId: uint32(ifindex)}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	udpTriggers.Add(1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BINDTOIFINDEX, ifindex) // best effort
	_ = unix.Sendto(fd, nil, unix.MSG_DONTWAIT, sa)
}
