package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/ebpf"
)

// Errors returned by this package. Errors from the kernel wrap both the
// sentinel that fits (when one does) and the unix errno, so errors.Is works
// with either.
var (
	// ErrNotSupported: the kernel, the platform or the driver lacks a
	// feature this socket needs (AF_XDP itself, need_wakeup, zero-copy when
	// Mode is ZeroCopy, busy polling, an RSS hash for Link.RSSTable).
	ErrNotSupported = errors.New("xdp: not supported")
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig = errors.New("xdp: invalid config")
	// ErrBusy: a queue of the device is bound by another AF_XDP socket,
	// or another XDP program is attached to the device.
	ErrBusy = errors.New("xdp: device busy")
	// ErrQueuesChanged: the device's queue count changed while a Link was
	// open on it; close the Link and open it again.
	ErrQueuesChanged = errors.New("xdp: device queue count changed")
)

// Mode selects how the kernel moves frames between the driver and the UMEM.
type Mode int

const (
	// Auto binds in zero-copy mode when the driver offers it and in copy
	// mode otherwise (the fallback is logged). It is the zero value.
	Auto Mode = iota
	// ZeroCopy insists on zero-copy: Open fails with ErrNotSupported when
	// the driver cannot do it (veth cannot).
	ZeroCopy
	// Copy makes the kernel copy every frame between its own buffers and
	// the UMEM. It works on every device, veth included.
	Copy
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case ZeroCopy:
		return "zero-copy"
	case Copy:
		return "copy"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults for the zero values of Config.
const (
	DefaultFrameSize = 4096
	DefaultFrames    = 4096
	DefaultRingSize  = 2048
	// maxFrames bounds RxFrames+TxFrames (4 GiB of UMEM with 4 KiB frames).
	maxFrames = 1 << 20
	// maxRingSize bounds each ring.
	maxRingSize = 1 << 18
	// MaxKickDelay bounds Config.KickDelay.
	MaxKickDelay = time.Millisecond
	// MaxFrameLimit is the largest Config.MaxFrame: a 9000-byte MTU with
	// room to spare, in at most 8 chunks of 2 KiB (the kernel takes at
	// most 17 per frame).
	MaxFrameLimit = 16 << 10
)

// headroom is the space the kernel leaves in front of every received frame
// (XDP_PACKET_HEADROOM); a frame can be at most FrameSize-headroom long.
const headroom = 256

// StampLen is the length of the arrival stamp in front of the frames of a
// Stamped socket (ebpf.StampLen).
const StampLen = ebpf.StampLen

// Config configures one AF_XDP socket, bound to one queue of one device.
// Its zero value is not usable (Ifindex must be set); every other field has
// a default for its zero value. Open does not modify the Config it is given.
type Config struct {
	// Ifindex is the device's interface index in the calling thread's
	// network namespace. Required.
	Ifindex int
	// Queue is the device queue to bind to (default 0). One socket serves
	// one queue; a multi-queue device needs one socket per queue, each
	// registered in the steering program's XSKMAP at its queue index
	// (OpenLink does that).
	Queue int
	// FrameSize is the size of one UMEM chunk: 2048 or 4096 (default 4096).
	// The largest frame is FrameSize-256 bytes (the kernel keeps 256 bytes
	// of headroom in front of received frames).
	FrameSize int
	// MaxFrame is the largest frame, Ethernet header included, that the
	// socket receives and sends (Info().FrameSize). 0: FrameSize-256, one
	// chunk (less StampLen when Stamped). Above that, up to MaxFrameLimit,
	// the socket is multi-buffer: it binds with XDP_USE_SG (Linux 6.6), a
	// received frame that spans several chunks is copied into a
	// reassembly buffer before Recv hands it out, and a TX frame spans
	// adjacent chunks sent as chained descriptors. The steering program
	// must be loaded with the xdp.frags flag (package ebpf's is). Without
	// multi-buffer the kernel drops longer frames and counts them
	// (Stats.KernelRxDropped).
	MaxFrame int
	// Stamped says that every frame arrives with the steering program's
	// arrival stamp in front (ebpf.SteerConfig.Stamp: StampLen bytes of
	// CLOCK_MONOTONIC ns): the socket strips it into Frame.RxTime and
	// hands out the Ethernet frame behind it. A received frame is then
	// StampLen bytes longer in the UMEM: MaxFrame of 0 means one chunk
	// less the stamp (FrameSize-256-StampLen), and the socket is
	// multi-buffer when MaxFrame+StampLen exceeds FrameSize-256; Info's
	// FrameSize stays MaxFrame, what is sent. A frame too short for a
	// stamp and an Ethernet header is dropped and counted (RxBadDescs, or
	// RxOversize for a multi-buffer frame). OpenLink sets it, and the
	// program's Stamp, unless LinkConfig.NoStamp.
	Stamped bool
	// RxFrames and TxFrames size the receive and transmit pools (default
	// 4096 each). They are separate: a peer that floods the receiver can
	// never starve transmission, and the other way around. The UMEM holds
	// both, (RxFrames+TxFrames*S)*FrameSize bytes, where a TX frame spans
	// S = ceil(MaxFrame/FrameSize) chunks with multi-buffer, 1 without.
	RxFrames, TxFrames int
	// RingSize is the number of entries of each of the fill, completion, RX
	// and TX rings: a power of two (default 2048).
	RingSize int
	// Mode chooses zero-copy or copy (default Auto).
	Mode Mode
	// NoNeedWakeup turns need_wakeup off. With need_wakeup on (the
	// default) the kernel tells through a ring flag when it must be kicked
	// with a system call, so that a busy socket makes few system calls.
	NoNeedWakeup bool
	// KickDelay lets Send skip the system call that makes the kernel
	// transmit (need_wakeup mode) for the frames of a stream: a Send of at
	// most 4 frames that is the third or later since Recv last returned frames or Wait last
	// ran, while the last kick is younger than KickDelay. The frames wait
	// on the TX ring and leave with the next kick: made by a Send or Recv
	// once the last kick is KickDelay old, by Wait before it sleeps, by
	// Flush or Close, or once 32 frames wait (what copy mode sends per
	// kick) or the ring is full. A caller that loops over
	// Recv, Send and Wait, as the transport's engines do, then makes one
	// kick per stretch of a stream rather than one per Send, which in
	// copy mode (where every kick runs the kernel's transmit path) is
	// most of the cost of small frames; a reply, or a request right
	// behind its acknowledgement, still kicks at once. A caller that
	// sends and then neither receives nor waits must Flush, or leave it 0
	// (the default: every Send kicks). At most MaxKickDelay.
	KickDelay time.Duration
	// BusyPoll sets SO_PREFER_BUSY_POLL, SO_BUSY_POLL and
	// SO_BUSY_POLL_BUDGET on the socket and makes Recv drive the device
	// with a system call when the RX ring is empty. Off by default: busy
	// polling burns a core.
	BusyPoll bool
	// MAC and IP are reported by Info as the local addresses; the socket
	// itself does not use them.
	MAC [6]byte
	IP  netip.Addr
	// Logf, when set, receives the few log lines the socket writes (the
	// copy-mode fallback). Default: log/slog's default logger at Info.
	Logf func(format string, args ...any)

	// tag goes into the high bits of every frame ID (the queue, for the
	// sockets of a Link).
	tag uint64
	// quiet leaves the copy-mode fallback to the Link to log, once.
	quiet bool
	// alignedRx keeps a multi-buffer socket's RX entries chunk-aligned
	// (no frames in place): set after a zero-copy bind, or by tests.
	alignedRx bool
}

// withDefaults returns cfg with its zero values replaced by defaults, or an
// error wrapping ErrInvalidConfig.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.FrameSize == 0 {
		cfg.FrameSize = DefaultFrameSize
	}
	if cfg.RxFrames == 0 {
		cfg.RxFrames = DefaultFrames
	}
	if cfg.TxFrames == 0 {
		cfg.TxFrames = DefaultFrames
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = DefaultRingSize
	}
	switch {
	case cfg.Ifindex <= 0:
		return cfg, fmt.Errorf("%w: Ifindex %d", ErrInvalidConfig, cfg.Ifindex)
	case cfg.Queue < 0:
		return cfg, fmt.Errorf("%w: Queue %d", ErrInvalidConfig, cfg.Queue)
	case cfg.FrameSize != 2048 && cfg.FrameSize != 4096:
		return cfg, fmt.Errorf("%w: FrameSize %d (want 2048 or 4096)", ErrInvalidConfig, cfg.FrameSize)
	case cfg.RxFrames < 0 || cfg.TxFrames < 0 || cfg.RxFrames+cfg.TxFrames > maxFrames:
		return cfg, fmt.Errorf("%w: RxFrames %d, TxFrames %d (each >= 0, sum <= %d)", ErrInvalidConfig, cfg.RxFrames, cfg.TxFrames, maxFrames)
	case cfg.KickDelay < 0 || cfg.KickDelay > MaxKickDelay:
		return cfg, fmt.Errorf("%w: KickDelay %v (want 0 to %v)", ErrInvalidConfig, cfg.KickDelay, MaxKickDelay)
	case cfg.RingSize < 0 || cfg.RingSize > maxRingSize || cfg.RingSize&(cfg.RingSize-1) != 0:
		return cfg, fmt.Errorf("%w: RingSize %d (want a power of two <= %d)", ErrInvalidConfig, cfg.RingSize, maxRingSize)
	case cfg.MaxFrame < 0 || cfg.MaxFrame > MaxFrameLimit || cfg.MaxFrame > 0 && cfg.MaxFrame < 64:
		return cfg, fmt.Errorf("%w: MaxFrame %d (want 64 to %d)", ErrInvalidConfig, cfg.MaxFrame, MaxFrameLimit)
	case cfg.Mode < Auto || cfg.Mode > Copy:
		return cfg, fmt.Errorf("%w: %v", ErrInvalidConfig, cfg.Mode)
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = cfg.FrameSize - headroom - cfg.stampLen()
	}
	if n := cfg.chunks(); n > maxFrames {
		return cfg, fmt.Errorf("%w: %d UMEM chunks for RxFrames %d, TxFrames %d of MaxFrame %d (at most %d)", ErrInvalidConfig, n, cfg.RxFrames, cfg.TxFrames, cfg.MaxFrame, maxFrames)
	}
	return cfg, nil
}

// stampLen is the length of the arrival stamp in front of received frames.
func (cfg Config) stampLen() int {
	if cfg.Stamped {
		return StampLen
	}
	return 0
}

// multiBuffer reports whether a socket of cfg (defaults applied) binds with
// XDP_USE_SG: when its longest received frame, stamp included, exceeds a
// chunk's room.
func (cfg Config) multiBuffer() bool {
	return cfg.MaxFrame+cfg.stampLen() > cfg.FrameSize-headroom
}

// chunks is the number of UMEM chunks of a socket of cfg (defaults applied).
func (cfg Config) chunks() int {
	if !cfg.multiBuffer() {
		return cfg.RxFrames + cfg.TxFrames
	}
	return cfg.RxFrames + cfg.TxFrames*txSlotChunks(cfg.FrameSize, cfg.MaxFrame)
}
