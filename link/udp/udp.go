package udp

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/sprayfabric/spray/link"
)

// RoCEPort is the RoCEv2 UDP port: the default of Config.Port and
// Config.PeerPort, and the destination port of every synthesized header.
const RoCEPort = 4791

// Limits and defaults of Config.
const (
	DefaultFrameSize    = 1514
	DefaultFrames       = 1024
	DefaultBatch        = 64
	MaxBatch            = 1024 // the kernel's limit on one sendmmsg/recvmmsg
	MaxEntropies        = 1024
	DefaultEntropies    = 8 // ephemeral entropy ports when Config.Entropies is empty
	DefaultSocketBuffer = 4 << 20
	MaxPoolBytes        = 1 << 30 // Frames * FrameSize, for each of the two pools
)

// Errors. Open wraps ErrConfig or the failing system call's error; methods
// return link.ErrClosed after Close.
var (
	// ErrConfig is returned by Open for an invalid Config.
	ErrConfig = errors.New("udp: invalid config")
	// ErrNotSupported is returned by Open on platforms other than Linux.
	ErrNotSupported = errors.New("udp: not supported on this platform")
)

// Config configures Open. The zero value of each field except Local selects
// the default given in its comment.
type Config struct {
	// Local is the address every socket binds to and the source IP of sent
	// frames (link.Info.IP). Required: a specific IPv4 or IPv6 address, not
	// the unspecified one. An IPv6 link-local address needs a zone.
	Local netip.Addr
	// Port is the local RoCE port that receives. 0: 4791.
	Port uint16
	// PeerPort is the port that frames are sent to. 0: 4791.
	PeerPort uint16
	// Entropies are the UDP source ports that the transport sprays over: one
	// send-only socket is bound to each (duplicates and Port itself need no
	// extra socket). At most MaxEntropies. Empty: EphemeralEntropies
	// sockets are bound to ports the kernel picks. Either way Info().Ports
	// lists exactly the ports the link can send from, and the transport
	// draws its entropies from that list only: a frame from any other port
	// would fail the peer's ICRC check (TestZeroConfigTransport).
	Entropies []uint16
	// EphemeralEntropies is the number of send-only sockets bound to
	// kernel-chosen ports when Entropies is empty. 0: DefaultEntropies;
	// negative: none, every frame is sent from Port (one path).
	EphemeralEntropies int
	// FrameSize is the largest frame, Ethernet header included. 0: 1514.
	// It must leave room for the headers and 16 bytes (BTH and ICRC).
	FrameSize int
	// Frames is the number of buffers in each of the receive and the
	// transmit pool. 0: 1024.
	Frames int
	// Batch is the number of datagrams moved per system call. 0: 64; at
	// most MaxBatch.
	Batch int
	// SocketBuffer is the SO_RCVBUF and SO_SNDBUF size asked for each
	// socket. 0: 4 MiB. The kernel caps it at net.core.rmem_max and
	// wmem_max unless the process may use SO_RCVBUFFORCE (root).
	SocketBuffer int
	// NoOffload turns off UDP segmentation offload (UDP_SEGMENT: one
	// system call carries a run of equal-size frames to one destination)
	// and receive coalescing (UDP_GRO). Either is used only where the
	// kernel accepts it; see the package doc.
	NoOffload bool
}

// Counters are a Link's statistics: link.Stats and the reasons behind its
// drops. All counts are since Open.
type Counters struct {
	link.Stats
	// TxMalformed counts frames that Send dropped because they are not
	// Ethernet | IP | UDP of the link's address family.
	TxMalformed uint64
	// TxUnknownEntropy counts frames whose UDP source port has no socket;
	// they were sent from another one (still counted in TxFrames), so they
	// arrive with another source port and fail the peer's ICRC check.
	TxUnknownEntropy uint64
	// TxErrors counts frames the kernel refused (EMSGSIZE, ENETUNREACH...);
	// TxErrno is the last such error number.
	TxErrors uint64
	TxErrno  uint64
	// RxTruncated counts datagrams larger than FrameSize allows; they were
	// dropped.
	RxTruncated uint64
	// RxKernelDrops counts datagrams the kernel dropped at the receiving
	// socket (full receive buffer), as last reported by SO_RXQ_OVFL: it
	// moves when the next datagram after a drop is received.
	RxKernelDrops uint64
	// BadFrames counts frames passed to Release or Send that the link did
	// not hand out or that were already returned; they were ignored.
	BadFrames uint64
	// TxSegmented counts the frames sent as segments of a UDP_SEGMENT
	// message (a run of at least two), TxSegmentMsgs those messages.
	TxSegmented, TxSegmentMsgs uint64
	// RxCoalesced counts the frames split out of datagrams the kernel
	// coalesced (UDP_GRO), RxCoalescedMsgs those datagrams.
	RxCoalesced, RxCoalescedMsgs uint64
	// RxNoBuffer counts segments of coalesced datagrams dropped for want
	// of a free receive buffer.
	RxNoBuffer uint64
}

func (c *Config) withDefaults() (Config, error) {
	d := *c
	d.Entropies = append([]uint16(nil), c.Entropies...)
	if d.Port == 0 {
		d.Port = RoCEPort
	}
	if d.PeerPort == 0 {
		d.PeerPort = RoCEPort
	}
	if d.FrameSize == 0 {
		d.FrameSize = DefaultFrameSize
	}
	if d.Frames == 0 {
		d.Frames = DefaultFrames
	}
	if d.Batch == 0 {
		d.Batch = DefaultBatch
	}
	if d.SocketBuffer == 0 {
		d.SocketBuffer = DefaultSocketBuffer
	}
	if d.EphemeralEntropies == 0 {
		d.EphemeralEntropies = DefaultEntropies
	}
	d.Local = d.Local.Unmap()
	switch {
	case !d.Local.IsValid() || d.Local.IsUnspecified():
		return d, fmt.Errorf("%w: Local must be a specific IP address", ErrConfig)
	case d.Batch < 0 || d.Batch > MaxBatch:
		return d, fmt.Errorf("%w: Batch out of range", ErrConfig)
	case d.Frames < 0 || d.Frames > 1<<20 || d.Frames*d.FrameSize > MaxPoolBytes:
		return d, fmt.Errorf("%w: Frames out of range (at most %d bytes per pool)", ErrConfig, MaxPoolBytes)
	case d.FrameSize < headroom(d.Local.Is6())+16 || d.FrameSize > 65535+ethLen:
		return d, fmt.Errorf("%w: FrameSize out of range", ErrConfig)
	case len(d.Entropies) > MaxEntropies:
		return d, fmt.Errorf("%w: too many Entropies", ErrConfig)
	case d.EphemeralEntropies > MaxEntropies:
		return d, fmt.Errorf("%w: EphemeralEntropies above %d", ErrConfig, MaxEntropies)
	case d.SocketBuffer < 0:
		return d, fmt.Errorf("%w: negative SocketBuffer", ErrConfig)
	}
	for _, e := range d.Entropies {
		if e == 0 {
			return d, fmt.Errorf("%w: entropy port 0", ErrConfig)
		}
	}
	return d, nil
}
