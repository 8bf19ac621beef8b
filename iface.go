package spray

import (
	"fmt"
	"net"
	"net/netip"
)

// Interface is what opening a link needs to know of a network interface:
// LookupInterface fills it, OpenLink takes it. A caller that knows it
// already (a testbed host, a route lookup) may fill it itself.
type Interface struct {
	Name     string
	Index    int
	MAC      [6]byte
	IP       netip.Addr // the local IPv4 address the link uses
	MTU      int        // the IP MTU; 0: unknown
	Loopback bool
}

// LookupInterface finds an interface and IPv4 address in the calling
// thread's network namespace: by name (its first IPv4 address, or addr if
// it holds it), or by address (the interface that holds it; an address
// inside a loopback interface's prefix, such as 127.0.0.2, resolves to
// that interface). Errors wrap ErrOptions and say what to set.
func LookupInterface(name string, addr netip.Addr) (Interface, error) {
	addr = addr.Unmap()
	if addr.IsValid() && !addr.Is4() {
		return Interface{}, fmt.Errorf("%w: Addr %s: only IPv4 for now", ErrOptions, addr)
	}
	if name == "" && !addr.IsValid() {
		return Interface{}, fmt.Errorf("%w: set Interface (e.g. \"eth0\") or Addr (e.g. 10.0.0.1)", ErrOptions)
	}
	var ifs []net.Interface
	if name != "" {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return Interface{}, fmt.Errorf("%w: interface %q: %v", ErrOptions, name, err)
		}
		ifs = []net.Interface{*ifc}
	} else {
		var err error
		if ifs, err = net.Interfaces(); err != nil {
			return Interface{}, fmt.Errorf("spray: listing interfaces: %w", err)
		}
	}
	var inPrefix *Interface
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return Interface{}, fmt.Errorf("spray: addresses of %s: %w", ifc.Name, err)
		}
		info := Interface{Name: ifc.Name, Index: ifc.Index, MTU: ifc.MTU, Loopback: ifc.Flags&net.FlagLoopback != 0}
		copy(info.MAC[:], ifc.HardwareAddr)
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
				info.IP = p
				return info, nil
			case info.Loopback && inPrefix == nil && netip.PrefixFrom(p, ones).Contains(addr):
				i := info
				i.IP = addr
				inPrefix = &i
			}
		}
	}
	if inPrefix != nil {
		return *inPrefix, nil
	}
	if name != "" && addr.IsValid() {
		return Interface{}, fmt.Errorf("%w: interface %s does not hold %s", ErrOptions, name, addr)
	}
	if name != "" {
		return Interface{}, fmt.Errorf("%w: interface %s has no IPv4 address", ErrOptions, name)
	}
	return Interface{}, fmt.Errorf("%w: no interface holds %s", ErrOptions, addr)
}
