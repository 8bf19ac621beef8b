package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/poll"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/nexthop"
	"github.com/sprayfabric/spray/link/rss"
)

// defaultCheckEvery is LinkConfig.CheckEvery's default.
const defaultCheckEvery = time.Second

// linkSys holds a Link's own kernel objects: the wake eventfd, the waiter
// over every socket and the eventfd, the poll set for waits that also need
// POLLOUT, and a socket for ethtool ioctls in the device's namespace.
type linkSys struct {
	efd, ctl int
	waiter   *poll.Waiter
	pfd      []unix.PollFd
	ts       unix.Timespec
	drainBuf [8]byte
	dev      string
	pollout  atomic.Bool // Block waits in ppoll for completions too
	inPpoll  atomic.Bool // Block sleeps in ppoll: wake writes the eventfd
	efdDirty atomic.Bool // wake wrote the eventfd and nobody read it yet
}

// OpenLink opens an AF_XDP link on the device cfg.Ifindex in the calling
// thread's network namespace (to open one in another namespace, lock the OS
// thread and enter it first): it reads the device's RX queue count
// (ETHTOOL_GCHANNELS), loads the steering program of package ebpf (with
// the xdp.frags flag, so jumbo frames pass, stamping arrival times unless
// cfg.NoStamp), attaches it (cfg.Attach: native, generic as a fallback),
// opens one Socket per queue (copy mode on drivers without zero-copy, veth
// among them; Stamped unless cfg.NoStamp) and registers each in the
// program's XSKMAP at its queue index.
//
// It fails with an error wrapping ErrBusy when another XDP program is
// attached to the device or another AF_XDP socket holds one of the queues
// (unless cfg.Partial, which leaves such queues to the kernel and says so
// through Logf), ErrNotSupported when the kernel lacks AF_XDP or
// multi-buffer, and ErrInvalidConfig for a bad cfg. On error nothing stays
// attached or open.
func OpenLink(cfg LinkConfig) (_ *Link, err error) {
	if cfg.Ifindex <= 0 {
		return nil, fmt.Errorf("%w: Ifindex %d", ErrInvalidConfig, cfg.Ifindex)
	}
	if cfg.Queues < 0 {
		return nil, fmt.Errorf("%w: Queues %d", ErrInvalidConfig, cfg.Queues)
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	}
	ifc, err := net.InterfaceByIndex(cfg.Ifindex)
	if err != nil {
		return nil, fmt.Errorf("xdp: interface %d: %w", cfg.Ifindex, err)
	}
	l := &Link{ifindex: cfg.Ifindex, logf: logf, every: cfg.CheckEvery}
	if l.every == 0 {
		l.every = defaultCheckEvery
	}
	l.sys.efd, l.sys.ctl, l.sys.dev = -1, -1, ifc.Name
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if l.sys.ctl, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("xdp: control socket: %w", err)
	}
	dev, err := l.sys.queueCount()
	if err != nil {
		return nil, err
	}
	l.devQueues = dev
	n := cfg.Queues
	if n == 0 {
		n = dev
	}
	if n > dev {
		return nil, fmt.Errorf("%w: Queues %d, but %s has %d RX queues (ethtool -l %s)", ErrInvalidConfig, n, ifc.Name, dev, ifc.Name)
	}
	if n > ebpf.MaxQueues {
		return nil, fmt.Errorf("%w: %d queues (at most %d)", ErrInvalidConfig, n, ebpf.MaxQueues)
	}

	scfg := cfg.Steer.Clone()
	if len(scfg.Local) == 0 && cfg.IP.IsValid() {
		scfg.Local = []netip.Addr{cfg.IP}
	}
	if scfg.Queues == 0 {
		scfg.Queues = max(dev, n)
	}
	// The program stamps exactly when the sockets expect it: a socket
	// reading a stamp that is not there would lose 8 bytes of every frame
	// (TestLinkStamp, TestLinkNoStamp).
	scfg.Stamp = !cfg.NoStamp
	if l.steer, err = ebpf.LoadSteering(scfg); err != nil {
		return nil, err
	}
	if err := l.steer.Attach(cfg.Ifindex, cfg.Attach); err != nil {
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("xdp: %s already has an XDP program attached by someone else (ip link show dev %s): %w (%w)", ifc.Name, ifc.Name, ErrBusy, err)
		}
		return nil, err
	}

	sc := cfg.Socket
	sc.Ifindex, sc.MAC, sc.IP, sc.Logf, sc.quiet = cfg.Ifindex, cfg.MAC, cfg.IP, logf, true
	sc.Stamped = !cfg.NoStamp
	if sc.MaxFrame == 0 {
		chunk := sc.FrameSize
		if chunk == 0 {
			chunk = DefaultFrameSize
		}
		if frame := ifc.MTU + 18; frame+sc.stampLen() > chunk-headroom {
			sc.MaxFrame = min(frame, MaxFrameLimit)
		}
	}
	if sc.RxFrames == 0 {
		sc.RxFrames = queueFrames(n)
	}
	if sc.TxFrames == 0 {
		sc.TxFrames = queueFrames(n)
	}
	var skipped []string
	for q := range n {
		sc.Queue = q
		sc.tag = uint64(len(l.qs)) << idQueueShift
		s, err := Open(sc)
		if err != nil {
			if cfg.Partial && errors.Is(err, unix.EBUSY) {
				skipped = append(skipped, strconv.Itoa(q))
				continue
			}
			return nil, fmt.Errorf("xdp: %s queue %d of %d: %w", ifc.Name, q, n, err)
		}
		l.qs = append(l.qs, s)
		l.ql = append(l.ql, s)
		l.served = append(l.served, q)
		if err := l.steer.Register(q, s.FD()); err != nil {
			return nil, err
		}
	}
	if len(l.qs) == 0 {
		return nil, fmt.Errorf("xdp: %s: no queue could be bound (every one held by another AF_XDP socket): %w", ifc.Name, ErrBusy)
	}
	if !cfg.KeepDstMAC {
		if l.hops, err = nexthop.Open(nexthop.Config{Ifindex: cfg.Ifindex}); err != nil {
			return nil, fmt.Errorf("xdp: %s: %w", ifc.Name, err)
		}
		for _, s := range l.qs {
			s.hop = l.hops.NewCache()
		}
	}
	if sc.Mode == Auto && l.qs[0].Mode() == Copy {
		logf("xdp: %s: driver offers no zero-copy, using copy mode", ifc.Name)
	}
	if len(skipped) > 0 {
		logf("xdp: %s: queue(s) %s bound by another AF_XDP socket: their frames go to the kernel", ifc.Name, strings.Join(skipped, ","))
	}
	if n < dev {
		logf("xdp: %s: serving %d of %d RX queues; frames on queues %d-%d go to the kernel", ifc.Name, n, dev, n, dev-1)
	}

	if l.sys.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("xdp: eventfd: %w", err)
	}
	fds := make([]int, 0, len(l.qs)+1)
	l.sys.pfd = make([]unix.PollFd, len(l.qs)+1)
	for i, s := range l.qs {
		fds = append(fds, s.FD())
		l.sys.pfd[i].Fd = int32(s.FD())
	}
	fds = append(fds, l.sys.efd)
	l.sys.pfd[len(l.qs)] = unix.PollFd{Fd: int32(l.sys.efd), Events: unix.POLLIN}
	if l.sys.waiter, err = poll.New(fds...); err != nil {
		return nil, err
	}
	l.info = l.qs[0].Info()
	l.info.Name = linkName(ifc.Name, l.served)
	l.readRSS()
	l.nextCheck = time.Now().Add(l.every)
	return l, nil
}

// Wait blocks until any queue has frames to receive or (after Alloc came
// up short) freed TX frames, Wake or Close is called, or timeout passes
// (negative: no limit). Before sleeping it kicks every queue's TX ring. At
// most every LinkConfig.CheckEvery it also reads the device's queue count:
// when it changed, Wait and Recv return an error wrapping
// ErrQueuesChanged from then on.
func (l *Link) Wait(timeout time.Duration) error {
	timeout, ready, err := l.PrepareWait(timeout)
	if ready || err != nil {
		return err
	}
	return l.Block(timeout)
}

// PrepareWait does what Wait does before it sleeps (the queue count
// check, the TX kicks, the look for frames) and chooses what Block waits
// for (link.WaitSplitter).
func (l *Link) PrepareWait(timeout time.Duration) (time.Duration, bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return timeout, false, link.ErrClosed
	}
	if p := l.queueErr.Load(); p != nil {
		return timeout, false, *p
	}
	if l.every > 0 {
		if now := time.Now(); now.After(l.nextCheck) {
			l.nextCheck = now.Add(l.every)
			if err := l.checkQueues(); err != nil {
				return timeout, false, err
			}
			l.readRSS()
		}
	}
	pollout, stuck := false, false
	for i, s := range l.qs {
		ready, ev, st, err := s.prepareWait()
		if err != nil {
			return timeout, false, err
		}
		if ready {
			return timeout, true, nil
		}
		l.sys.pfd[i].Events = ev
		pollout = pollout || ev&unix.POLLOUT != 0
		stuck = stuck || st
	}
	if stuck && (timeout < 0 || timeout > stuckRetry) {
		timeout = stuckRetry
	}
	if l.every > 0 && (timeout < 0 || timeout > l.every) {
		timeout = l.every
	}
	l.sys.pollout.Store(pollout)
	return timeout, false, nil
}

// Quiet stops the queues from waking the runtime poller until the next
// Block (link.Quieter).
func (l *Link) Quiet() {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() || l.sys.waiter == nil {
		return
	}
	_ = l.sys.waiter.Quiet()
}

// Block sleeps as PrepareWait chose, touching no ring: Recv, Release,
// Alloc and Send may run on another goroutine meanwhile
// (link.WaitSplitter).
func (l *Link) Block(timeout time.Duration) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	if !l.sys.pollout.Load() {
		err := l.sys.waiter.Wait(timeout)
		l.sys.drain()
		if l.closed.Load() {
			return link.ErrClosed
		}
		if err != nil {
			return fmt.Errorf("xdp: wait: %w", err)
		}
		return nil
	}
	for i := range l.sys.pfd {
		l.sys.pfd[i].Revents = 0
	}
	var ts uintptr
	if timeout >= 0 {
		l.sys.ts = unix.NsecToTimespec(int64(timeout))
		ts = uintptr(unsafe.Pointer(&l.sys.ts))
	}
	// Announce the ppoll before the last look for a Wake: a Wake after
	// the look sees the flag and writes the eventfd.
	l.sys.inPpoll.Store(true)
	if !l.sys.waiter.Woken() {
		_, _, e := syscall.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&l.sys.pfd[0])), uintptr(len(l.sys.pfd)), ts, 0, 0, 0)
		if e != 0 && e != unix.EINTR {
			l.sys.inPpoll.Store(false)
			return fmt.Errorf("xdp: ppoll: %w", e)
		}
		l.sys.waiter.Woken()
	}
	l.sys.inPpoll.Store(false)
	l.sys.drain()
	if l.closed.Load() {
		return link.ErrClosed
	}
	return nil
}

// checkQueues compares the device's queue count with the one at open and
// records ErrQueuesChanged when they differ.
func (l *Link) checkQueues() error {
	n, err := l.sys.queueCount()
	if err == nil && n == l.devQueues {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("xdp: %s now has %d RX queues, the link was opened on %d (serving %s): close and open it again: %w",
			l.sys.dev, n, l.devQueues, l.info.Name, ErrQueuesChanged)
	} else if errors.Is(err, unix.ENODEV) {
		err = fmt.Errorf("xdp: %s is gone: %w (%w)", l.sys.dev, ErrQueuesChanged, err)
	} else {
		return nil // a transient ioctl failure: look again later
	}
	l.queueErr.Store(&err)
	l.logf("%v", err)
	return err
}

// readRSS reads the device's RSS configuration through the control
// socket (in the device's namespace) for RSS.
func (l *Link) readRSS() {
	t, err := rss.DeviceFD(l.sys.ctl, l.sys.dev)
	st := &rssState{}
	switch {
	case errors.Is(err, rss.ErrNoRSS):
		st.err = fmt.Errorf("xdp: %s has no RSS hash to read (ETHTOOL_GRSSH): %w (%w)", l.sys.dev, ErrNotSupported, err)
	case err != nil:
		st.err = fmt.Errorf("xdp: %s: %w", l.sys.dev, err)
	default:
		st.tab = servedTable(t, l.served)
	}
	l.rss.Store(st)
}

// wake ends a Block: through the runtime poller's deadline when it parks
// there (no system call), and through the eventfd only when it sleeps in
// ppoll or has no Waiter.
func (y *linkSys) wake() {
	if y.waiter != nil {
		y.waiter.Wake()
	}
	if y.efd >= 0 && (y.waiter == nil || y.inPpoll.Load()) {
		syscall.Syscall(unix.SYS_WRITE, uintptr(y.efd), uintptr(unsafe.Pointer(&eventfdOne[0])), 8)
		y.efdDirty.Store(true) // after the write: a drain between them only delays it a turn
	}
}

// drain empties the eventfd if wake wrote it.
func (y *linkSys) drain() {
	if y.efdDirty.Swap(false) {
		syscall.Syscall(unix.SYS_READ, uintptr(y.efd), uintptr(unsafe.Pointer(&y.drainBuf[0])), 8)
	}
}

func (y *linkSys) close() error {
	if y.waiter != nil {
		y.waiter.Close()
		y.waiter = nil
	}
	if y.efd >= 0 {
		unix.Close(y.efd)
		y.efd = -1
	}
	if y.ctl >= 0 {
		unix.Close(y.ctl)
		y.ctl = -1
	}
	return nil
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with ifr_data.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// queueCount returns the device's RX queue count: its combined plus
// RX-only channels (ETHTOOL_GCHANNELS), 1 for a device that has no
// channel settings.
func (y *linkSys) queueCount() (int, error) {
	return queueCountFD(y.ctl, y.dev)
}

// QueueCount returns the number of RX queues of the device named dev in
// the calling thread's network namespace, as `ethtool -l` shows them: the
// combined plus the RX-only channels in use; 1 for a device that has no
// channel settings (ETHTOOL_GCHANNELS not supported).
func QueueCount(dev string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("xdp: control socket: %w", err)
	}
	defer unix.Close(fd)
	return queueCountFD(fd, dev)
}

// queueCountFD is QueueCount through the socket fd (whose network
// namespace is the one that counts).
func queueCountFD(fd int, dev string) (int, error) {
	ch := &ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	req := &ifreqData{data: unsafe.Pointer(ch)}
	copy(req.name[:unix.IFNAMSIZ-1], dev)
	_, _, e := syscall.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req)))
	switch e {
	case 0:
	case unix.EOPNOTSUPP:
		return 1, nil
	default:
		return 0, fmt.Errorf("xdp: ETHTOOL_GCHANNELS on %s: %w", dev, e)
	}
	return max(int(ch.combinedCount+ch.rxCount), 1), nil
}
