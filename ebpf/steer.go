package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// DefaultPort is the UDP destination port steered when SteerConfig.Port is 0:
// the RoCEv2 port.
const DefaultPort = 4791

// StampLen is the length of the arrival stamp that the steering program
// prepends, with SteerConfig.Stamp, to every frame it steers to a socket:
// bpf_ktime_get_ns() (CLOCK_MONOTONIC, ns) as a little-endian uint64.
const StampLen = 8

// Limits of the steering program's maps.
const (
	// DefaultQueues is the number of XSKMAP slots (RX queues 0..255) when
	// SteerConfig.Queues is 0.
	DefaultQueues = 256
	// MaxQueues is the largest SteerConfig.Queues.
	MaxQueues = 4096
	// MaxLocal is the largest number of distinct SteerConfig.Local addresses.
	MaxLocal = 64
	// MaxAllow is the largest number of distinct SteerConfig.Allow addresses.
	MaxAllow = 16384
)

// Errors returned by this package. Test for them with errors.Is.
var (
	// ErrNotSupported is returned on platforms without XDP and tcx
	// (anything but little-endian Linux).
	ErrNotSupported = errors.New("ebpf: only supported on little-endian Linux")
	// ErrClosed is returned by the methods of a Steering or a Fabric after
	// Close. It wraps net.ErrClosed.
	ErrClosed = fmt.Errorf("ebpf: program %w", net.ErrClosed)
	// ErrInvalidConfig is returned for a SteerConfig that cannot be loaded
	// (an invalid address, too many addresses or queues) and for fabric
	// settings out of range.
	ErrInvalidConfig = errors.New("ebpf: invalid config")
	// ErrBadQueue is returned by Register and Unregister for a queue outside
	// 0..Queues-1, and by Register for a negative socket descriptor.
	ErrBadQueue = errors.New("ebpf: queue or socket out of range")
	// ErrAttached is returned by Attach for an interface that the Steering
	// is already attached to, and by AttachPort for an interface or a
	// PortID that is already a port of the Fabric.
	ErrAttached = errors.New("ebpf: already attached")
)

// AttachMode selects how the XDP program is attached to an interface.
type AttachMode int

const (
	// Auto tries native (driver) mode and falls back to generic (skb) mode.
	Auto AttachMode = iota
	// Native attaches in the driver (XDP_FLAGS_DRV_MODE); it fails when the
	// driver has no XDP support. AF_XDP zero-copy needs it.
	Native
	// Generic attaches after the driver (XDP_FLAGS_SKB_MODE): works on every
	// interface, slower, AF_XDP in copy mode only.
	Generic
)

// String returns "auto", "native" or "generic".
func (m AttachMode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Native:
		return "native"
	case Generic:
		return "generic"
	}
	return fmt.Sprintf("AttachMode(%d)", int(m))
}

// SteerConfig says which frames the steering program sends to AF_XDP
// sockets. The zero value steers every UDP frame to port 4791, whatever its
// addresses.
type SteerConfig struct {
	// Port is the UDP destination port to steer; 0 means DefaultPort (4791).
	Port uint16
	// Local restricts steering to frames addressed to these IPv4 or IPv6
	// addresses (zones are ignored, IPv4-mapped IPv6 addresses count as
	// IPv4); frames to Port for other destinations pass to the kernel.
	// Empty means any destination. At most MaxLocal distinct addresses.
	Local []netip.Addr
	// Allow, when non-empty, is the allowlist of peer (source) addresses:
	// frames to Port from any other source are dropped and counted Refused.
	// Empty means any source. At most MaxAllow distinct addresses.
	Allow []netip.Addr
	// Queues is the number of XSKMAP slots, that is the RX queues
	// 0..Queues-1 that Register accepts; 0 means DefaultQueues. At most
	// MaxQueues. Fixed at LoadSteering; Update ignores it.
	Queues int
	// Stamp prepends to every frame steered to a socket the time it
	// reached the host: StampLen bytes of bpf_ktime_get_ns()
	// (CLOCK_MONOTONIC in ns, the clock of Go's monotonic readings) as a
	// little-endian uint64, written with bpf_xdp_adjust_head before the
	// frame waits in the socket's RX ring. Frames passed to the kernel are
	// never stamped. A frame without headroom for the stamp is dropped and
	// counted NoRoom. The sockets must expect it (package xdp,
	// Config.Stamped); xdp.OpenLink sets both.
	Stamp bool
}

// Clone returns a copy of c that shares no memory with it.
func (c SteerConfig) Clone() SteerConfig {
	c.Local = slices.Clone(c.Local)
	c.Allow = slices.Clone(c.Allow)
	return c
}

// SteerCounters are the steering program's counters, summed over CPUs. Every
// frame that the program sees moves exactly one of them.
type SteerCounters struct {
	// Steered counts frames redirected to an AF_XDP socket.
	Steered uint64
	// Passed counts frames left to the kernel because they are not for the
	// steered port and local addresses (ARP, TCP, other UDP, IPv4
	// fragments, IPv6 with extension headers).
	Passed uint64
	// Malformed counts dropped IPv4/IPv6 frames carrying UDP whose IP or
	// UDP header is truncated or inconsistent (the kernel drops those too),
	// and frames to Port with a bad UDP length.
	Malformed uint64
	// Refused counts frames to Port dropped because their source is not in
	// the allowlist.
	Refused uint64
	// NoSocket counts frames that would have been steered but found no
	// socket registered for their RX queue; they pass to the kernel.
	NoSocket uint64
	// NoRoom counts frames dropped instead of steered because, with
	// SteerConfig.Stamp, the stamp did not fit in front of them (no XDP
	// headroom; veth, generic XDP and real drivers leave 256 bytes).
	NoRoom uint64
}

// Sub returns c - o field by field: the counts between two snapshots.
func (c SteerCounters) Sub(o SteerCounters) SteerCounters {
	return SteerCounters{
		Steered:   c.Steered - o.Steered,
		Passed:    c.Passed - o.Passed,
		Malformed: c.Malformed - o.Malformed,
		Refused:   c.Refused - o.Refused,
		NoSocket:  c.NoSocket - o.NoSocket,
		NoRoom:    c.NoRoom - o.NoRoom,
	}
}

// String formats the counters for logs.
func (c SteerCounters) String() string {
	return fmt.Sprintf("steered=%d passed=%d malformed=%d refused=%d nosocket=%d noroom=%d",
		c.Steered, c.Passed, c.Malformed, c.Refused, c.NoSocket, c.NoRoom)
}

// steerPlan is a validated SteerConfig: defaults applied, addresses
// normalized and deduplicated.
type steerPlan struct {
	port   uint16
	queues int
	local  []netip.Addr
	allow  []netip.Addr
	stamp  bool
}

// plan validates c and applies its defaults.
func (c SteerConfig) plan() (steerPlan, error) {
	p := steerPlan{port: c.Port, queues: c.Queues, stamp: c.Stamp}
	if p.port == 0 {
		p.port = DefaultPort
	}
	if p.queues == 0 {
		p.queues = DefaultQueues
	}
	if p.queues < 0 || p.queues > MaxQueues {
		return steerPlan{}, fmt.Errorf("%w: Queues %d outside 0..%d", ErrInvalidConfig, c.Queues, MaxQueues)
	}
	var err error
	if p.local, err = normalizeAddrs("Local", c.Local, MaxLocal); err != nil {
		return steerPlan{}, err
	}
	if p.allow, err = normalizeAddrs("Allow", c.Allow, MaxAllow); err != nil {
		return steerPlan{}, err
	}
	return p, nil
}

// normalizeAddrs unmaps, strips zones, sorts and deduplicates addrs.
func normalizeAddrs(field string, addrs []netip.Addr, limit int) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(addrs))
	for i, a := range addrs {
		if !a.IsValid() {
			return nil, fmt.Errorf("%w: %s[%d] is not a valid address", ErrInvalidConfig, field, i)
		}
		out = append(out, a.Unmap().WithZone(""))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	out = slices.Compact(out)
	if len(out) > limit {
		return nil, fmt.Errorf("%w: %d distinct %s addresses, at most %d", ErrInvalidConfig, len(out), field, limit)
	}
	return out, nil
}

// addrKey is the steer_local/steer_allow key layout of a (normalized)
// address: family 4 or 6, three zero bytes, 16 address bytes with IPv4 in
// the first four.
func addrKey(a netip.Addr) (family uint8, addr [16]byte) {
	if a.Is4() {
		v4 := a.As4()
		copy(addr[:], v4[:])
		return 4, addr
	}
	return 6, a.As16()
}
