package raw

import (
	"errors"
	"net/netip"

	"github.com/sprayfabric/spray/link"
)

// Limits and defaults of Config.
const (
	DefaultPort         = 4791
	DefaultFrames       = 1024
	DefaultBatch        = 64
	MaxBatch            = 1024 // the kernel's limit on one sendmmsg/recvmmsg
	DefaultSocketBuffer = 4 << 20
	MaxPoolBytes        = 1 << 30 // Frames * FrameSize, for each of the two pools
	minFrameSize        = 14 + 40 + 8 + 16
)

// Errors. Open wraps ErrConfig or the failing system call's error (no root:
// unix.EPERM); methods return link.ErrClosed after Close.
var (
	// ErrConfig is returned by Open for an invalid Config.
	ErrConfig = errors.New("raw: invalid config")
	// ErrNotSupported is returned by Open on platforms other than Linux.
	ErrNotSupported = errors.New("raw: not supported on this platform")
)

// Config configures Open. The zero value of each field except Ifindex
// selects the default given in its comment.
type Config struct {
	// Ifindex is the interface to bind to. Required.
	Ifindex int
	// MAC is the source MAC of sent frames (link.Info.MAC). Zero: the
	// interface's address.
	MAC [6]byte
	// IP is the local address (link.Info.IP). The link does not filter on
	// it; when valid, Open binds the port guard (see the package doc) to it.
	IP netip.Addr
	// FrameSize is the largest frame, Ethernet header and VLAN tag
	// included. 0: the interface's MTU + 18. Received frames get 4 bytes
	// less before their tag is put back.
	FrameSize int
	// Frames is the number of buffers in each of the receive and the
	// transmit pool. 0: 1024.
	Frames int
	// Port is the UDP destination port of the frames the link receives.
	// 0: 4791.
	Port uint16
	// Batch is the number of frames moved per system call. 0: 64; at most
	// MaxBatch.
	Batch int
	// SocketBuffer is the SO_RCVBUF and SO_SNDBUF size asked for. 0: 4 MiB
	// (forced past net.core.rmem_max, as root may).
	SocketBuffer int
	// KeepDstMAC sends frames with the destination MAC the caller wrote.
	// By default Send writes the MAC of the next hop the kernel's routing
	// and neighbour tables give for each frame's destination IP (package
	// link/nexthop), so that frames to a peer behind a router reach the
	// router.
	KeepDstMAC bool
}

// Counters are a Link's statistics: link.Stats and the reasons behind its
// drops. All counts are since Open.
type Counters struct {
	link.Stats
	// TxMalformed counts frames shorter than an Ethernet header; dropped.
	TxMalformed uint64
	// TxErrors counts frames the kernel refused (EMSGSIZE for a frame over
	// the MTU, ENETDOWN...); TxErrno is the last such error number.
	TxErrors uint64
	TxErrno  uint64
	// RxTruncated counts frames larger than FrameSize; dropped.
	RxTruncated uint64
	// RxKernelDrops counts frames that matched the filter but that the
	// kernel dropped because the socket's receive buffer was full
	// (PACKET_STATISTICS).
	RxKernelDrops uint64
	// BadFrames counts frames passed to Release or Send that the link did
	// not hand out or that were already returned; they were ignored.
	BadFrames uint64
}
