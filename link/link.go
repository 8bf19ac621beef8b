// Package link is the frame batch interface between spray's transport and the
// ways frames reach a network: AF_XDP (package xdp), AF_PACKET (link/raw),
// kernel UDP sockets (link/udp) and an in-memory fabric for tests (link/mem).
//
// Every link carries whole Ethernet frames: Ethernet | IPv4 or IPv6 | UDP |
// BTH ... | ICRC. A link whose kernel owns the lower headers (link/udp) strips
// them on send, using the addresses and ports written in them, and writes them
// back in front of what it receives, so that the transport's codec sees one
// format everywhere and can encode and decode in place in link-owned buffers
// (UMEM frames for AF_XDP).
//
// Buffers belong to the link. A caller borrows transmit buffers with Alloc,
// encodes into them and hands them back with Send; it borrows received frames
// with Recv and returns them with Release. Nothing is copied between the link
// and the codec.
package link

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Frame is one link-owned frame buffer, passed by value.
type Frame struct {
	// Buf is the frame. From Recv it holds exactly the received bytes. From
	// Alloc it spans the whole buffer (len == cap == Info().FrameSize); the
	// caller reslices it to the encoded length before Send.
	Buf []byte
	// ID is the link's handle for the buffer (a UMEM address, a pool index).
	// Callers pass it back unchanged.
	ID uint64
	// RxTime is when a received frame reached the host, in nanoseconds of
	// the kernel's CLOCK_MONOTONIC (the clock of Go's monotonic readings),
	// stamped before it waited in any queue of the link; 0 when the link
	// does not know. The transport counts a packet's hold time, and so the
	// endpoint delay its congestion control sees, from it.
	RxTime int64
}

// Info describes a link.
type Info struct {
	// Name is a short description for logs and reports ("mem", "udp", "xdp:eth0/q0").
	Name string
	// FrameSize is the largest frame, Ethernet header included, without FCS.
	FrameSize int
	// BatchSize is the number of frames the link moves best in one call.
	BatchSize int
	// MAC and IP are the local addresses that frames sent on this link carry
	// as source.
	MAC [6]byte
	IP  netip.Addr
	// Ports are the UDP source ports (entropies) the link can send from;
	// empty means any. A link whose kernel owns the sockets (link/udp)
	// binds one socket per port, and the transport then draws its QPs'
	// entropies from this set.
	Ports []uint16
	// Segments is the most frames the link sends as one message when
	// they go in a row from one source port to one destination with one
	// length (UDP segmentation offload: link/udp); 0 or 1 when each frame
	// costs the same alone. A transport then sends a message's packets in
	// runs on one entropy (multipath.Runner) so that they find runs to
	// coalesce.
	Segments int
}

// Link moves batches of frames. Implementations document whether they are safe
// for concurrent use; the transport engine calls a link from one goroutine,
// except Wake, which must be safe to call from any goroutine.
type Link interface {
	// Info describes the link. It does not change after the link is opened.
	Info() Info

	// Recv fills fs with received frames and returns how many it filled. It
	// never blocks. The frames belong to the caller until it passes them to
	// Release.
	Recv(fs []Frame) (int, error)

	// Release returns received frames to the link.
	Release(fs []Frame)

	// Alloc fills fs with free transmit buffers and returns how many it filled:
	// fewer than len(fs), or none, when the transmit pool is short
	// (backpressure: try again after Wait).
	Alloc(fs []Frame) int

	// Send transmits the frames, each resliced to its length, and takes back
	// every one of them whatever it returns. It returns how many it queued for
	// transmission; the rest were dropped and counted by the link.
	Send(fs []Frame) (int, error)

	// Wait blocks until a frame may be ready to receive, a transmit buffer may
	// have been freed, Wake is called, or timeout passes. A negative timeout
	// waits without limit. Spurious returns are allowed.
	Wait(timeout time.Duration) error

	// Wake makes a pending or the next Wait return. Safe from any goroutine.
	Wake()

	// Close releases the link's resources. It is idempotent; after it, calls
	// return ErrClosed.
	Close() error
}

// WaitSplitter is implemented by links whose Wait can be taken in two
// steps, so that a driver can let another goroutine move frames while it
// sleeps: PrepareWait does what Wait does before it blocks (it may touch
// the rings, like Recv and Send) and returns the timeout to block for
// (it may shorten timeout) and whether something is ready already (then
// there is nothing to block for); Block then blocks like Wait without
// touching the rings, so that Recv, Release, Alloc and Send may run on
// another goroutine meanwhile (one at a time, as ever). A driver calls
// PrepareWait, then Block, under the same rule as Wait.
type WaitSplitter interface {
	PrepareWait(timeout time.Duration) (time.Duration, bool, error)
	Block(timeout time.Duration) error
}

// Quieter is implemented by links whose Wait parks in the runtime's
// poller (internal/poll): Quiet stops the link's descriptors from waking
// it until the next Wait (or Block), for a driver that stops waiting on
// the link for a while because another goroutine polls it. Call it from
// the goroutine that waits, never during a Wait; it does not touch the
// rings. Errors are ignored: the next Wait reports them.
type Quieter interface {
	Quiet()
}

// ErrClosed is returned by a link's methods after Close. It wraps
// net.ErrClosed so that errors.Is(err, net.ErrClosed) holds too.
var ErrClosed = fmt.Errorf("link: %w", net.ErrClosed)

// Stats are the counters every link keeps. Links may keep more.
type Stats struct {
	RxFrames, RxBytes uint64
	TxFrames, TxBytes uint64
	// RxDropped counts frames the link received but could not hand over
	// (ring or pool full, too large).
	RxDropped uint64
	// TxDropped counts frames handed to Send that were not transmitted.
	TxDropped uint64
}

// StatsReader is implemented by links that report Stats.
type StatsReader interface {
	Stats() Stats
}

// Multi is implemented by a link made of several device queues (an AF_XDP
// link bound to every RX queue of a NIC). Its own Recv, Send and Wait serve
// every queue, so that one engine can drive it; Queues returns one Link per
// queue so that an endpoint can drive each queue with an engine of its own.
// A caller uses either the Multi itself or its queues, never both.
type Multi interface {
	Link
	// Queues returns one Link per device queue, in queue order. Queue i's
	// Recv returns the frames the device delivered to queue i, and frames
	// sent on it leave from queue i. The slice does not change after open.
	Queues() []Link
}
