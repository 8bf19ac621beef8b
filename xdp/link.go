package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/nexthop"
	"github.com/sprayfabric/spray/link/rss"
)

// LinkConfig configures OpenLink. Ifindex is required; every other zero
// field means its documented default. OpenLink does not modify it.
type LinkConfig struct {
	// Ifindex is the device's interface index in the calling thread's
	// network namespace. Required.
	Ifindex int
	// MAC and IP are the local addresses (Info). IP, when valid, is also
	// the only destination the steering program steers (SteerConfig.Local).
	MAC [6]byte
	IP  netip.Addr
	// Queues is the number of RX queues to serve, from queue 0. 0: every
	// RX queue the device has (the combined plus RX-only channels that
	// ETHTOOL_GCHANNELS reports; one on a device without channels).
	// Frames arriving on a queue the link does not serve go to the kernel
	// and count in the steering program's NoSocket.
	Queues int
	// Partial lets OpenLink serve a subset: a queue whose socket cannot be
	// bound (another program's AF_XDP socket holds it) is left to the
	// kernel and named through Logf, instead of failing the open. At least
	// one queue must bind.
	Partial bool
	// Socket is the template of every queue's socket: FrameSize, MaxFrame,
	// RxFrames, TxFrames, RingSize, Mode, NoNeedWakeup, BusyPoll. Its
	// Ifindex, Queue, MAC, IP, Logf and Stamped are set by OpenLink.
	// MaxFrame of 0 means the device's MTU plus 18 (Ethernet header and a
	// VLAN tag, at most MaxFrameLimit) when that, with the stamp, exceeds
	// one UMEM chunk, so that a jumbo-frame device gets multi-buffer
	// sockets, and one chunk otherwise. RxFrames and
	// TxFrames of 0 mean DefaultFrames on a link of up to two queues and
	// 2*DefaultFrames/Queues (at least 512) on more, so that the locked
	// memory of a many-queue NIC stays near that of two queues.
	Socket Config
	// Steer configures the steering program (port, allowlist). Its Local
	// defaults to IP; its Queues to the device's queue count. Its Stamp,
	// and Socket.Stamped, are set by OpenLink: !NoStamp.
	Steer ebpf.SteerConfig
	// NoStamp turns the arrival stamp off. By default the steering
	// program prepends to every frame it steers the time it reached the
	// host (ebpf.SteerConfig.Stamp) and the sockets strip it into
	// Frame.RxTime (Config.Stamped), so that the transport can tell the
	// time a frame waited in the RX ring, while its engine was not
	// scheduled, from the time it spent in the fabric. It costs a
	// bpf_ktime_get_ns and a head adjust per frame. With NoStamp,
	// RxTime is 0.
	NoStamp bool
	// Attach is how the steering program is attached (default ebpf.Auto:
	// native, generic as a fallback).
	Attach ebpf.AttachMode
	// CheckEvery is how often Wait compares the device's queue count with
	// the one the link was opened with (default 1 s; negative: never).
	CheckEvery time.Duration
	// Logf receives the link's few log lines (copy-mode fallback, queues
	// left to the kernel, a queue count that changed). Default: log/slog.
	Logf func(format string, args ...any)
	// KeepDstMAC sends frames with the destination MAC the caller wrote.
	// By default every socket's Send writes the MAC of the next hop the
	// kernel's routing and neighbour tables give for each frame's
	// destination IP (package link/nexthop), so that frames to a peer
	// behind a router reach the router.
	KeepDstMAC bool
}

// Link is an AF_XDP link on every RX queue of a device (or those
// LinkConfig asks for): one Socket per queue, each with its own UMEM, and
// the steering program that redirects each queue's RoCEv2 frames to its
// socket. It implements link.Link and link.Multi.
//
// As a link.Link it serves all its queues, so that one engine can drive
// it: Recv takes from every queue in turn, Alloc lends TX frames of one
// queue at a time (the next one when it runs short), Send and Release route
// each frame back to the queue that lent it (by its ID), and Wait wakes
// when any queue has frames or freed TX frames. As a link.Multi, Queues
// returns the Sockets themselves, for an engine per queue. Use one or the
// other, never both.
//
// Get a Link from OpenLink. Close, Wake, Stats and QueueStats are safe from
// any goroutine; the link.Link methods must be called from one goroutine
// at a time.
type Link struct {
	mu        sync.RWMutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	ifindex int
	info    link.Info
	qs      []*Socket
	ql      []link.Link
	served  []int // device queue of each socket
	steer   *ebpf.Steering
	hops    *nexthop.Table // nil with KeepDstMAC
	logf    func(string, ...any)

	rxNext, txNext int
	// queueErr, once set (the device's queue count changed), is returned
	// by Wait and Recv.
	queueErr  atomic.Pointer[error]
	devQueues int
	every     time.Duration
	nextCheck time.Time
	// rss is the device's RSS configuration as of the last read (open,
	// then every CheckEvery), for RSS from any goroutine.
	rss atomic.Pointer[rssState]

	sys linkSys
}

// rssState is a read of the device's RSS configuration: the table with
// its entries translated to indices into Queues, or why there is none.
type rssState struct {
	tab rss.Table
	err error
}

var (
	_ link.Link  = (*Link)(nil)
	_ link.Multi = (*Link)(nil)
)

// Info describes the link: Name is "xdp:DEV/q0-3" (the queues served),
// FrameSize the sockets' MaxFrame.
func (l *Link) Info() link.Info { return l.info }

// Queues returns the link's sockets, one per served queue in queue order
// (link.Multi). They belong to the Link: Close closes them.
func (l *Link) Queues() []link.Link { return l.ql }

// RSS returns the device's RSS hash key and indirection table (what
// `ethtool -x` shows), with every table entry translated from a device
// queue to the index in Queues of the socket that serves it, and to
// len(Queues) for a queue that the link leaves to the kernel: entry i then
// names the engine that receives the frames whose hash picks it. Link thus
// implements transport.RSSReader: an endpoint with an engine per queue
// offers Endpoint.Steering, and a peer's CreateQPSteered picks entropies
// that the device delivers to the QP's own engine. The table is empty when
// the device has no RSS (veth, so every testbed) or cannot be read, which
// the transport takes for a hash it does not know: frames that land on
// another engine's queue reach their QP over the hand-over rings. RSSTable
// says why it is empty. The link reads the table at open and again every
// LinkConfig.CheckEvery while an engine waits on it (`ethtool -X` changes
// it). Safe from any goroutine.
func (l *Link) RSS() rss.Table {
	t, _ := l.RSSTable()
	return t
}

// RSSTable is RSS, with an error instead of an empty table: one wrapping
// ErrNotSupported and rss.ErrNoRSS for a device without RSS, or the
// ethtool ioctl's error.
func (l *Link) RSSTable() (rss.Table, error) {
	st := l.rss.Load()
	if st == nil {
		return rss.Table{}, fmt.Errorf("xdp: %s: RSS configuration not read: %w", l.info.Name, ErrNotSupported)
	}
	if st.err != nil {
		return rss.Table{}, st.err
	}
	return rss.Table{Key: append([]byte(nil), st.tab.Key...), Indir: append([]uint32(nil), st.tab.Indir...)}, nil
}

// servedTable returns t with its entries translated from device queues to
// indices into served, and to len(served) for a queue not in it.
func servedTable(t rss.Table, served []int) rss.Table {
	out := rss.Table{Key: append([]byte(nil), t.Key...), Indir: make([]uint32, len(t.Indir))}
	for i, q := range t.Indir {
		out.Indir[i] = uint32(len(served))
		for j, s := range served {
			if uint32(s) == q {
				out.Indir[i] = uint32(j)
				break
			}
		}
	}
	return out
}

// NextHops returns the table that chooses each sent frame's destination
// MAC, for its counters; nil with LinkConfig.KeepDstMAC.
func (l *Link) NextHops() *nexthop.Table { return l.hops }

// Sockets returns the same sockets as Queues, as *Socket.
func (l *Link) Sockets() []*Socket { return l.qs }

// Served returns the device queues the link serves, in the order of Queues.
func (l *Link) Served() []int { return l.served }

// Steering returns the steering program the link attached, for its
// counters. It belongs to the Link: Close closes it. An Update must keep
// Stamp as the link set it (!LinkConfig.NoStamp), or the sockets would
// read the first 8 bytes of every frame as a stamp, or a stamp as frame.
func (l *Link) Steering() *ebpf.Steering { return l.steer }

// Recv fills fs with frames received on any queue, taking from each in
// turn (starting one further at every call, so that no queue starves).
func (l *Link) Recv(fs []link.Frame) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	if p := l.queueErr.Load(); p != nil {
		return 0, *p
	}
	n := len(l.qs)
	start := l.rxNext
	l.rxNext++
	if l.rxNext >= n {
		l.rxNext = 0
	}
	got := 0
	for i := 0; i < n && got < len(fs); i++ {
		q := start + i
		if q >= n {
			q -= n
		}
		k, err := l.qs[q].Recv(fs[got:])
		if err != nil {
			return got, err
		}
		got += k
	}
	return got, nil
}

// queueOf returns the index in l.qs of the socket that lent the frame ID.
func (l *Link) queueOf(id uint64) int { return int(id >> idQueueShift) }

// byQueue calls fn with the runs of fs lent by one socket.
func (l *Link) byQueue(fs []link.Frame, fn func(s *Socket, run []link.Frame)) {
	for i := 0; i < len(fs); {
		q := l.queueOf(fs[i].ID)
		j := i + 1
		for j < len(fs) && l.queueOf(fs[j].ID) == q {
			j++
		}
		if q < len(l.qs) {
			fn(l.qs[q], fs[i:j])
		} else {
			fn(l.qs[0], fs[i:j]) // not ours: the socket counts and refuses them
		}
		i = j
	}
}

// Release returns received frames to the queues they came from.
func (l *Link) Release(fs []link.Frame) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return
	}
	l.byQueue(fs, func(s *Socket, run []link.Frame) { s.Release(run) })
}

// Alloc fills fs with free TX frames from one queue, moving on to the next
// while the current one is short. Only when every queue came up short does
// Wait also wake for freed TX frames.
func (l *Link) Alloc(fs []link.Frame) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0
	}
	got, first := 0, l.txNext
	for range len(l.qs) {
		got += l.qs[l.txNext].Alloc(fs[got:])
		if got == len(fs) {
			break
		}
		l.txNext++
		if l.txNext == len(l.qs) {
			l.txNext = 0
		}
	}
	if got == len(fs) {
		// The queues passed over were short, but the link is not: their
		// shortage must not make Wait return at once.
		for q := first; q != l.txNext; {
			l.qs[q].c.txShort = false
			if q++; q == len(l.qs) {
				q = 0
			}
		}
	}
	return got
}

// Send transmits each frame on the queue that lent it.
func (l *Link) Send(fs []link.Frame) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	sent := 0
	var errs error
	l.byQueue(fs, func(s *Socket, run []link.Frame) {
		n, err := s.Send(run)
		sent += n
		if err != nil && errs == nil {
			errs = err
		}
	})
	return sent, errs
}

// Stats returns the counters of every queue, summed.
func (l *Link) Stats() link.Stats {
	var sum link.Stats
	for _, st := range l.QueueStats() {
		sum.RxFrames += st.RxFrames
		sum.RxBytes += st.RxBytes
		sum.TxFrames += st.TxFrames
		sum.TxBytes += st.TxBytes
		sum.RxDropped += st.RxDropped
		sum.TxDropped += st.TxDropped
	}
	return sum
}

// QueueStats returns each served queue's counters, in the order of Queues
// (Served says which device queue each is). After Close they are the
// counters as they were at Close.
func (l *Link) QueueStats() []Stats {
	out := make([]Stats, len(l.qs))
	for i, s := range l.qs {
		out[i] = s.Stats()
	}
	return out
}

// QueueCounters returns each served queue's link.Stats (frames, bytes,
// drops), in the order of Queues: the part of QueueStats that every link
// kind has, for telemetry.InstrumentLink.
func (l *Link) QueueCounters() []link.Stats {
	out := make([]link.Stats, len(l.qs))
	for i, s := range l.qs {
		out[i] = s.Stats().Stats
	}
	return out
}

// Close detaches the steering program and closes every socket (unmapping
// their UMEMs). A pending Wait returns link.ErrClosed. Close is idempotent.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.sys.wake()
		l.mu.Lock()
		defer l.mu.Unlock()
		var errs []error
		if l.steer != nil {
			errs = append(errs, l.steer.Close())
		}
		for _, s := range l.qs {
			errs = append(errs, s.Close())
		}
		if l.hops != nil {
			errs = append(errs, l.hops.Close())
		}
		errs = append(errs, l.sys.close())
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

// Flush kicks every queue for the frames that Send left on its TX ring
// (Config.KickDelay; see Socket.Flush).
func (l *Link) Flush() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	var errs []error
	for _, s := range l.qs {
		errs = append(errs, s.Flush())
	}
	return errors.Join(errs...)
}

// Wake makes a pending or the next Wait return. Safe from any goroutine.
func (l *Link) Wake() {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return
	}
	l.sys.wake()
}

// linkName is "xdp:DEV/q0-3", or the list of queues when they are not a
// range ("xdp:DEV/q0,2").
func linkName(dev string, served []int) string {
	contiguous := true
	for i, q := range served {
		if q != served[0]+i {
			contiguous = false
		}
	}
	switch {
	case len(served) == 1:
		return fmt.Sprintf("xdp:%s/q%d", dev, served[0])
	case contiguous:
		return fmt.Sprintf("xdp:%s/q%d-%d", dev, served[0], served[len(served)-1])
	}
	s := make([]string, len(served))
	for i, q := range served {
		s[i] = strconv.Itoa(q)
	}
	return fmt.Sprintf("xdp:%s/q%s", dev, strings.Join(s, ","))
}

// queueFrames is the default RxFrames and TxFrames of each socket of a
// link of n queues.
func queueFrames(n int) int {
	if n <= 2 {
		return DefaultFrames
	}
	return max(2*DefaultFrames/n, 512)
}
