package spray

import (
	"fmt"
	"net"
	"net/netip"
)

// ifaceInfo is what opening a link needs to know of an interface.
type ifaceInfo struct {
	name     string
	index    int
	mac      [6]byte
	ip       netip.Addr
	mtu      int
	loopback bool
}

// resolve finds the interface and IPv4 address: by name (its first IPv4
// address, or addr if it holds it), or by address (the interface that
// holds it; an address inside a loopback interface's prefix, such as
// 127.0.0.2, resolves to that interface).
func resolve(name string, addr netip.Addr) (ifaceInfo, error) {
	addr = addr.Unmap()
	if addr.IsValid() && !addr.Is4() {
		return ifaceInfo{}, fmt.Errorf("%w: Addr %s: only IPv4 for now", ErrOptions, addr)
	}
	if name == "" && !addr.IsValid() {
		return ifaceInfo{}, fmt.Errorf("%w: set Interface (e.g. \"eth0\") or Addr (e.g. 10.0.0.1)", ErrOptions)
	}
	var ifs []net.Interface
	if name != "" {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return ifaceInfo{}, fmt.Errorf("%w: interface %q: %v", ErrOptions, name, err)
		}
		ifs = []net.Interface{*ifc}
	} else {
		var err error
		if ifs, err = net.Interfaces(); err != nil {
			return ifaceInfo{}, fmt.Errorf("spray: listing interfaces: %w", err)
		}
	}
	var inPrefix *ifaceInfo
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return ifaceInfo{}, fmt.Errorf("spray: addresses of %s: %w", ifc.Name, err)
		}
		info := ifaceInfo{name: ifc.Name, index: ifc.Index, mtu: ifc.MTU, loopback: ifc.Flags&net.FlagLoopback != 0}
		copy(info.mac[:], ifc.HardwareAddr)
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			p, ok := netip.AddrFromSlice(n.IP)
			if !ok || !p.Unmap().Is4() {
				continue
			}
			p = p.Unmap()
			ones, _ := n.Mask.Size()
			switch {
			case !addr.IsValid() || p == addr:
				info.ip = p
				return info, nil
			case info.loopback && inPrefix == nil && netip.PrefixFrom(p, ones).Contains(addr):
				i := info
				i.ip = addr
				inPrefix = &i
			}
		}
	}
	if inPrefix != nil {
		return *inPrefix, nil
	}
	if name != "" && addr.IsValid() {
		return ifaceInfo{}, fmt.Errorf("%w: interface %s does not hold %s", ErrOptions, name, addr)
	}
	if name != "" {
		return ifaceInfo{}, fmt.Errorf("%w: interface %s has no IPv4 address", ErrOptions, name)
	}
	return ifaceInfo{}, fmt.Errorf("%w: no interface holds %s", ErrOptions, addr)
}
