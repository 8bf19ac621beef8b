package testbed

import (
	"net"
	"net/netip"
)

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	a := p.Addr()
	bits := 32
	if a.Is6() {
		bits = 128
	}
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}
