package spray

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/raw"
	"github.com/sprayfabric/spray/link/udp"
)

// LinkConfig says which link OpenLink opens, and how. Open fills one from
// its Options; a caller that builds its own stack (a benchmark inside a
// testbed namespace, a run that needs fixed UDP ports or an allowlist)
// fills its own. The zero value of every field but Interface selects the
// default in its comment; OpenLink does not modify it.
type LinkConfig struct {
	// Kind is the link kind. LinkAuto (zero): kernel UDP on a loopback
	// interface, else AF_XDP when it opens, else kernel UDP.
	Kind LinkKind
	// Interface is the interface to open the link on, as LookupInterface
	// returns it in the calling thread's network namespace. IP is
	// required; Index too for LinkXDP and LinkRaw.
	Interface Interface
	// MTU is the IP MTU the link must carry. 0: DefaultMTU, or
	// Interface.MTU when smaller; when Interface.MTU is 0 too, each
	// link's own default. The frames it implies are MTU+14 bytes for UDP,
	// MTU+18 (room for a VLAN tag) for raw sockets, and for AF_XDP MTU+18
	// when that with the 8-byte arrival stamp exceeds one UMEM chunk
	// (multi-buffer), else xdp's default (the device's MTU+18 when that
	// exceeds a chunk, one chunk less the stamp otherwise). AF_XDP
	// frames carry their arrival time (link.Frame.RxTime).
	MTU int
	// FrameSize, when not 0, is the largest frame, Ethernet header
	// included, that the link carries (its Info().FrameSize), instead of
	// what MTU implies: link/udp's and link/raw's FrameSize, AF_XDP's
	// MaxFrame (at most xdp.MaxFrameLimit).
	FrameSize int
	// Queues is the number of device queues AF_XDP serves, from queue 0.
	// 0: every RX queue of the device.
	Queues int
	// Port is the UDP port RoCE frames are received on (link/udp, the
	// port guard of link/raw). 0: 4791. AF_XDP takes 4791 only.
	Port uint16
	// PeerPort is the UDP port link/udp sends to. 0: 4791.
	PeerPort uint16
	// Entropies are the UDP source ports link/udp binds and sprays over
	// (udp.Config.Entropies). Empty: ports the kernel picks. The other
	// links send from any port.
	Entropies []uint16
	// Allow restricts AF_XDP's steering program to frames from these
	// peers; empty allows every peer.
	Allow []netip.Addr
	// Logf receives the link's log lines (AF_XDP's copy-mode fallback,
	// queues left to the kernel). nil: log/slog.
	Logf func(format string, args ...any)
	// KeepDstMAC makes AF_XDP and raw links send frames with the
	// destination MAC the QP's peer info carries. By default they write
	// the MAC of the next hop that the kernel's routing and neighbour
	// tables give for each frame's destination IP, so that peers behind
	// routers are reached (package link/nexthop).
	KeepDstMAC bool
	// KickDelay is AF_XDP's xdp.Config.KickDelay: a Send that follows
	// others closely leaves its frames on the TX ring for one later
	// system call, which the engine's next Recv or wait makes. 0:
	// DefaultKickDelay; negative: every Send makes its own.
	KickDelay time.Duration
	// BusyPoll sets AF_XDP's xdp.Config.BusyPoll: the sockets ask the
	// kernel to busy poll their device queue, where it records one to
	// poll (not veth: xdp.BusyPollState). Meant for engines that busy
	// poll themselves (transport.Config.BusyPoll).
	BusyPoll bool
}

// DefaultKickDelay is LinkConfig.KickDelay's default: the longest a frame
// of a stream waits for its kick while its engine keeps working, a few
// times what one copy-mode kick of a small frame costs the kernel.
const DefaultKickDelay = 15 * time.Microsecond

// OpenLink opens the link cfg asks for in the calling thread's network
// namespace (to open one in another namespace, lock the OS thread and
// enter it first) and returns it with its kind and the reason it was
// chosen. It is the one place where spray builds links: Open calls it,
// and so do the benchmarks and the spray command. On error nothing stays
// open or attached.
func OpenLink(cfg LinkConfig) (link.Link, LinkKind, string, error) {
	ifc := cfg.Interface
	if !ifc.IP.IsValid() {
		return nil, cfg.Kind, "", fmt.Errorf("%w: LinkConfig.Interface has no IP address (LookupInterface fills it)", ErrOptions)
	}
	if cfg.MTU == 0 && ifc.MTU > 0 {
		cfg.MTU = min(DefaultMTU, ifc.MTU)
	}
	var (
		l   link.Link
		err error
	)
	kind, reason := cfg.Kind, "asked for"
	switch kind {
	case LinkAuto:
		if ifc.Loopback {
			kind, reason = LinkUDP, "loopback interface"
			break
		}
		x, err := openXDP(cfg)
		if err == nil {
			return x, LinkXDP, "AF_XDP available", nil
		}
		kind, reason = LinkUDP, "AF_XDP unavailable: "+firstLast(err.Error())
	case LinkXDP:
		if l, err = openXDP(cfg); err != nil {
			return nil, kind, "", fmt.Errorf("spray: AF_XDP on %s: %w (needs root, or CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_PERFMON and CAP_IPC_LOCK; or LinkUDP)", ifc.Name, err)
		}
		return l, kind, reason, nil
	case LinkRaw:
		frame := cfg.FrameSize
		if frame == 0 && cfg.MTU > 0 {
			frame = cfg.MTU + 18
		}
		rl, err := raw.Open(raw.Config{Ifindex: ifc.Index, MAC: ifc.MAC, IP: ifc.IP, FrameSize: frame, Port: cfg.Port, KeepDstMAC: cfg.KeepDstMAC})
		if err != nil {
			return nil, kind, "", fmt.Errorf("spray: raw socket on %s: %w (needs CAP_NET_RAW)", ifc.Name, err)
		}
		return rl, kind, reason, nil
	case LinkUDP:
	default:
		return nil, kind, "", fmt.Errorf("%w: unknown link kind %d", ErrOptions, kind)
	}
	frame := cfg.FrameSize
	if frame == 0 && cfg.MTU > 0 {
		frame = cfg.MTU + 14
	}
	ul, err := udp.Open(udp.Config{Local: ifc.IP, Port: cfg.Port, PeerPort: cfg.PeerPort, Entropies: cfg.Entropies, FrameSize: frame})
	if err != nil {
		return nil, kind, "", fmt.Errorf("spray: UDP on %s: %w", ifc.IP, err)
	}
	return ul, kind, reason, nil
}

// ParseLinkKind parses a link kind as String writes it: "auto", "xdp",
// "udp" or "raw".
func ParseLinkKind(s string) (LinkKind, error) {
	for k := LinkAuto; k <= LinkRaw; k++ {
		if strings.EqualFold(s, k.String()) {
			return k, nil
		}
	}
	return LinkAuto, fmt.Errorf("%w: unknown link kind %q (want auto, xdp, udp or raw)", ErrOptions, s)
}
