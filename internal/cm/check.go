package cm

import (
	"fmt"
	"net"
	"net/netip"
)

// linkInfo returns this endpoint's link block for REQ and REP: the UDP
// ports of a kernel UDP link only (AF_XDP and AF_PACKET take port 4791),
// nothing but the MTU for a caller's link.
func (ep *Endpoint) linkInfo() linkInfo {
	l := linkInfo{kind: ep.kind, mtu: uint16(ep.cfg.MTU)}
	if ep.kind == LinkUDP {
		p := ep.cfg.DataPort
		if p == 0 {
			p = 4791
		}
		l.port, l.peerPort = p, p
	}
	return l
}

// checkLink returns why the dialer's link and the listener's cannot
// exchange frames, or nil: kernel UDP against raw frames (AF_XDP,
// AF_PACKET; a UDP link's MAC is made up), different MTUs (the transport
// sizes its packets by its own), or one side sending to a UDP port the
// other does not receive on. A value of 0 (unknown) passes. Its text names
// both sides' values (TestCMLinkMismatch).
func checkLink(dialer, listener linkInfo) error {
	udp := func(k LinkKind) bool { return k == LinkUDP }
	if dialer.kind != LinkAuto && listener.kind != LinkAuto && udp(dialer.kind) != udp(listener.kind) {
		return fmt.Errorf("the dialer's link is %s, the listener's %s: kernel UDP cannot talk to AF_XDP or AF_PACKET (set the same Options.Link on both; LinkAuto picks udp where AF_XDP is not allowed)", dialer.kind, listener.kind)
	}
	if dialer.mtu != 0 && listener.mtu != 0 && dialer.mtu != listener.mtu {
		return fmt.Errorf("the dialer's MTU is %d, the listener's %d (set Options.MTU to %d on both)", dialer.mtu, listener.mtu, min(dialer.mtu, listener.mtu))
	}
	if dialer.peerPort != 0 && listener.port != 0 && dialer.peerPort != listener.port {
		return fmt.Errorf("the dialer sends data to UDP port %d, the listener receives on %d (set the same Options.Port on both)", dialer.peerPort, listener.port)
	}
	if listener.peerPort != 0 && dialer.port != 0 && listener.peerPort != dialer.port {
		return fmt.Errorf("the listener sends data to UDP port %d, the dialer receives on %d (set the same Options.Port on both)", listener.peerPort, dialer.port)
	}
	return nil
}

// checkPeerIP refuses the address a peer's QP claims in REQ or REP
// unless it is the address of the peer's end of the TCP connection, at,
// or Options.TrustPeerIP allows any: otherwise a peer could aim this
// endpoint's traffic at a third host. A multicast or broadcast address is
// refused either way (TestCMPeerAddr).
func (ep *Endpoint) checkPeerIP(claimed netip.Addr, at net.Addr, who, how string) error {
	if claimed.IsMulticast() || claimed == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("the %s's QP address %s is a multicast or broadcast address", who, claimed)
	}
	if ep.cfg.TrustPeerIP {
		return nil
	}
	ta, ok := at.(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("the %s's connection is not TCP (%v)", who, at)
	}
	if from := ta.AddrPort().Addr().Unmap(); from != claimed {
		return fmt.Errorf("the %s's QP address %s is not %s, where its connection %s (set Options.TrustPeerIP to allow)", who, claimed, from, how)
	}
	return nil
}
