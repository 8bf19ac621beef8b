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
// queue (or the first cfg.Queues), each registered in the steering
// program, attached in native mode or, failing that, generic mode.
// Closing the link detaches the program.
func openXDP(cfg LinkConfig) (link.Link, error) {
	if cfg.Port != 0 && cfg.Port != 4791 {
		return nil, fmt.Errorf("%w: AF_XDP takes port 4791 only (Port %d)", ErrOptions, cfg.Port)
	}
	ifc := cfg.Interface
	var sock xdp.Config
	switch {
	case cfg.FrameSize != 0:
		sock.MaxFrame = min(cfg.FrameSize, xdp.MaxFrameLimit)
	case cfg.MTU+18+xdp.StampLen > xdp.DefaultFrameSize-256:
		// Multi-buffer when the frame and xdp.Link's arrival stamp
		// exceed one UMEM chunk.
		sock.MaxFrame = cfg.MTU + 18
	}
	switch {
	case cfg.KickDelay == 0:
		sock.KickDelay = DefaultKickDelay
	case cfg.KickDelay > 0:
		sock.KickDelay = cfg.KickDelay
	}
	sock.BusyPoll = cfg.BusyPoll
	l, err := xdp.OpenLink(xdp.LinkConfig{
		Ifindex: ifc.Index, MAC: ifc.MAC, IP: ifc.IP,
		Queues:     cfg.Queues,
		Socket:     sock,
		Steer:      ebpf.SteerConfig{Local: []netip.Addr{ifc.IP}, Allow: cfg.Allow},
		Attach:     ebpf.Auto,
		Logf:       cfg.Logf,
		KeepDstMAC: cfg.KeepDstMAC,
	})
	if errors.Is(err, xdp.ErrInvalidConfig) {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}
