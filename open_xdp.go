package spray

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/xdp"
)

// openXDP opens the AF_XDP link of the interface: a socket on every RX
// queue (or the first Options.Queues), each registered in the steering
// program, attached in native mode or, failing that, generic mode.
// Closing the link detaches the program.
func openXDP(ifc ifaceInfo, opts Options) (link.Link, error) {
	if opts.Port != 0 && opts.Port != 4791 {
		return nil, fmt.Errorf("%w: AF_XDP takes port 4791 only (Port %d)", ErrOptions, opts.Port)
	}
	sock := xdp.Config{Logf: opts.Logf}
	if frame := opts.MTU + 18; frame > xdp.DefaultFrameSize-256 {
		sock.MaxFrame = frame // multi-buffer above one UMEM chunk
	}
	l, err := xdp.OpenLink(xdp.LinkConfig{
		Ifindex: ifc.index, MAC: ifc.mac, IP: ifc.ip,
		Queues: opts.Queues,
		Socket: sock,
		Steer:  ebpf.SteerConfig{Local: []netip.Addr{ifc.ip}},
		Attach: ebpf.Auto,
		Logf:   opts.Logf,
	})
	if errors.Is(err, xdp.ErrInvalidConfig) {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	return l, err
}
