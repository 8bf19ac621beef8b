package spray

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/xdp"
)

// openXDP opens an AF_XDP socket on queue 0 of the interface and the
// steering program that feeds it, attached in native mode or, failing
// that, generic mode. Closing the link detaches the program.
func openXDP(ifc ifaceInfo, opts Options) (link.Link, error) {
	if opts.Queues > 1 {
		return nil, fmt.Errorf("%w: AF_XDP serves one queue for now (Queues %d)", ErrOptions, opts.Queues)
	}
	// A frame that RSS puts on a queue without a socket passes to the
	// kernel, which has no socket for it either: with one socket, refuse a
	// device that spreads frames over several queues.
	if n := rxQueues(ifc.name); n > 1 {
		return nil, fmt.Errorf("%w: %s has %d RX queues and AF_XDP serves one for now (ethtool -L %s combined 1)", ErrOptions, ifc.name, n, ifc.name)
	}
	if opts.Port != 0 && opts.Port != 4791 {
		return nil, fmt.Errorf("%w: AF_XDP takes port 4791 only (Port %d)", ErrOptions, opts.Port)
	}
	st, err := ebpf.LoadSteering(ebpf.SteerConfig{Local: []netip.Addr{ifc.ip}})
	if err != nil {
		return nil, err
	}
	if err := st.Attach(ifc.index, ebpf.Auto); err != nil {
		st.Close()
		return nil, err
	}
	sock, err := xdp.Open(xdp.Config{Ifindex: ifc.index, MAC: ifc.mac, IP: ifc.ip, Logf: opts.Logf})
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := st.Register(sock.Queue(), sock.FD()); err != nil {
		sock.Close()
		st.Close()
		return nil, err
	}
	return &xdpLink{Socket: sock, st: st}, nil
}

type xdpLink struct {
	*xdp.Socket
	st *ebpf.Steering
}

func (l *xdpLink) Close() error { return errors.Join(l.Socket.Close(), l.st.Close()) }

// rxQueues counts the device's RX queues in sysfs; 0 when it cannot tell.
func rxQueues(name string) int {
	m, _ := filepath.Glob("/sys/class/net/" + name + "/queues/rx-*")
	return len(m)
}
