package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/internal/poll"
	"github.com/sprayfabric/spray/link"
)

// Bind retries: closing a socket releases its queue asynchronously, so a
// bind right after a close of the previous socket on the same queue can
// fail with EBUSY for a short while.
const (
	bindRetries    = 10
	bindBackoff    = time.Millisecond
	bindBackoffMax = 100 * time.Millisecond
)

// stuckRetry bounds a Wait while the kernel has left TX entries unconsumed
// (device queue full): nothing wakes the socket when the device drains, so
// Wait returns after this long to kick again.
const stuckRetry = 200 * time.Microsecond

// epoch anchors monoNow.
var epoch = time.Now()

// monoNow is the monotonic clock of Config.KickDelay, in ns.
func monoNow() int64 { return int64(time.Since(epoch)) }

// eventfdOne is the value Wake adds to the eventfd (host byte order is
// little endian on every platform Go's AF_XDP support builds for, and any
// non-zero value wakes).
var eventfdOne = [8]byte{1}

// sysSocket holds the kernel objects of a Socket.
type sysSocket struct {
	fd, efd  int
	umem     []byte
	rings    [4][]byte
	pfd      [2]unix.PollFd
	ts       unix.Timespec
	drainBuf [8]byte
	// waiter parks long waits in the runtime poller; made on first use.
	waiter   *poll.Waiter
	waitOnce sync.Once
	// waking is waiter once made, for Wake on other goroutines.
	waking atomic.Pointer[poll.Waiter]
	// events is what Block polls for, as PrepareWait chose.
	events atomic.Int32
	// inPpoll: Block sleeps in ppoll, so wake writes the eventfd;
	// efdDirty: wake wrote it and nobody read it yet.
	inPpoll, efdDirty atomic.Bool
}

// Open creates an AF_XDP socket and its UMEM, registers the UMEM, maps the
// four rings, fills the fill ring and binds to cfg.Ifindex/cfg.Queue. The
// socket belongs to the calling thread's network namespace: to open one in
// another namespace, lock the OS thread (runtime.LockOSThread), enter the
// namespace, Open, and go back.
//
// A steering XDP program must redirect frames to the socket (an XSKMAP entry
// at the queue index, see package ebpf) for it to receive anything.
//
// Open retries a bind that fails with EBUSY (the previous socket on the
// queue is still being torn down) a few times with a short backoff. Errors
// wrap ErrInvalidConfig, ErrNotSupported and the unix errno as they apply.
func Open(cfg Config) (*Socket, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	backoff := bindBackoff
	for attempt := 0; ; attempt++ {
		s, err := openOnce(cfg)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, unix.EBUSY) || attempt == bindRetries {
			return nil, err
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, bindBackoffMax)
	}
}

// openOnce is open; tests replace it to exercise the EBUSY retries.
var openOnce = open

func open(cfg Config) (_ *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			return nil, fmt.Errorf("xdp: AF_XDP socket: %w (%w)", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("xdp: AF_XDP socket: %w", err)
	}
	s := &Socket{cfg: cfg}
	s.sys.fd, s.sys.efd = fd, -1
	defer func() {
		if err != nil {
			s.sys.close()
		}
	}()

	size := cfg.chunks() * cfg.FrameSize
	s.sys.umem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xdp: mmap UMEM of %d bytes: %w", size, err)
	}
	// A multi-buffer socket that may end up in copy mode lays its RX
	// entries out for frames in place (core.inPlace), which needs an
	// unaligned UMEM; in zero-copy mode, where a driver's DMA may not
	// cross pages, it opens again with aligned chunks.
	inPlace := cfg.multiBuffer() && cfg.Mode != ZeroCopy && !cfg.alignedRx
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.sys.umem)))),
		Len:  uint64(size),
		Size: uint32(cfg.FrameSize),
	}
	if inPlace {
		reg.Flags = unix.XDP_UMEM_UNALIGNED_CHUNK_FLAG
	}
	if err := setsockopt(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("xdp: register UMEM: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, cfg.RingSize); err != nil {
			return nil, fmt.Errorf("xdp: ring size %d (option %d): %w", cfg.RingSize, opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	n, err := getsockopt(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	if err != nil {
		return nil, fmt.Errorf("xdp: ring offsets: %w", err)
	}
	if n < unsafe.Sizeof(off) {
		return nil, fmt.Errorf("xdp: ring offsets without flags (kernel older than 5.4): %w", ErrNotSupported)
	}
	size32 := uint32(cfg.RingSize)
	maps := []struct {
		pgoff int64
		l     unix.XDPRingOffset
		entry uintptr
	}{
		{unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, 8},
		{unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, 8},
		{unix.XDP_PGOFF_RX_RING, off.Rx, unsafe.Sizeof(desc{})},
		{unix.XDP_PGOFF_TX_RING, off.Tx, unsafe.Sizeof(desc{})},
	}
	var layouts [4]ringLayout
	for i, m := range maps {
		layouts[i] = ringLayout{prod: m.l.Producer, cons: m.l.Consumer, desc: m.l.Desc, flags: m.l.Flags}
		s.sys.rings[i], err = unix.Mmap(fd, m.pgoff, ringBytes(layouts[i], size32, m.entry),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("xdp: mmap ring %d: %w", i, err)
		}
	}
	c := &s.c
	c.fill = newAddrRing(s.sys.rings[0], layouts[0], size32, true)
	c.comp = newAddrRing(s.sys.rings[1], layouts[1], size32, false)
	c.rx = newDescRing(s.sys.rings[2], layouts[2], size32, false)
	c.tx = newDescRing(s.sys.rings[3], layouts[3], size32, true)
	c.needWakeup = !cfg.NoNeedWakeup
	c.busyPoll = cfg.BusyPoll
	if cfg.KickDelay > 0 {
		c.setKickDelay(int64(cfg.KickDelay), monoNow)
	}
	c.inPlace = inPlace
	c.stamp = cfg.stampLen()
	c.sys = &s.sys
	c.init(s.sys.umem, cfg.FrameSize, cfg.RxFrames, cfg.TxFrames, cfg.MaxFrame)
	c.tag = cfg.tag

	if cfg.BusyPoll {
		for _, o := range [][2]int{{unix.SO_PREFER_BUSY_POLL, 1}, {unix.SO_BUSY_POLL, 20}, {unix.SO_BUSY_POLL_BUDGET, batchSize}} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], o[1]); err != nil {
				return nil, fmt.Errorf("xdp: busy poll option %d: %w (%w)", o[0], ErrNotSupported, err)
			}
		}
	}

	var flags uint16
	if c.needWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	if cfg.multiBuffer() {
		flags |= unix.XDP_USE_SG
	}
	switch cfg.Mode {
	case Copy:
		flags |= unix.XDP_COPY
	case ZeroCopy:
		flags |= unix.XDP_ZEROCOPY
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue)}
	if err := unix.Bind(fd, sa); err != nil {
		if inPlace && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
			s.sys.close()
			cfg.alignedRx = true
			return open(cfg)
		}
		where := fmt.Sprintf("xdp: bind ifindex %d queue %d (%v)", cfg.Ifindex, cfg.Queue, cfg.Mode)
		if cfg.Mode == ZeroCopy && errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("%s: zero-copy: %w (%w)", where, ErrNotSupported, err)
		}
		if cfg.multiBuffer() && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
			return nil, fmt.Errorf("%s: multi-buffer for MaxFrame %d (XDP_USE_SG needs Linux 6.6): %w (%w)", where, cfg.MaxFrame, ErrNotSupported, err)
		}
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%s: the queue is bound by another AF_XDP socket: %w (%w)", where, ErrBusy, err)
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	s.mode = Copy
	var opts uint32
	if _, err := getsockopt(fd, unix.SOL_XDP, unix.XDP_OPTIONS, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err == nil {
		if opts&unix.XDP_OPTIONS_ZEROCOPY != 0 {
			s.mode = ZeroCopy
		}
	} else if cfg.Mode == ZeroCopy {
		s.mode = ZeroCopy
	}
	if inPlace && s.mode == ZeroCopy {
		s.sys.close()
		cfg.alignedRx = true
		return open(cfg)
	}
	name := fmt.Sprintf("if%d", cfg.Ifindex)
	if ifc, err := net.InterfaceByIndex(cfg.Ifindex); err == nil {
		name = ifc.Name
	}
	if cfg.Mode == Auto && s.mode == Copy && !cfg.quiet {
		logf(cfg, "xdp: %s queue %d: driver offers no zero-copy, using copy mode", name, cfg.Queue)
	}

	s.sys.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("xdp: eventfd: %w", err)
	}
	s.sys.pfd[0].Fd = int32(fd)
	s.sys.pfd[1] = unix.PollFd{Fd: int32(s.sys.efd), Events: unix.POLLIN}
	s.info = link.Info{
		Name:      fmt.Sprintf("xdp:%s/q%d", name, cfg.Queue),
		FrameSize: cfg.MaxFrame,
		BatchSize: batchSize,
		MAC:       cfg.MAC,
		IP:        cfg.IP,
	}
	return s, nil
}

func logf(cfg Config, format string, args ...any) {
	if cfg.Logf != nil {
		cfg.Logf(format, args...)
		return
	}
	slog.Info(fmt.Sprintf(format, args...))
}

// FD returns the socket's file descriptor, for registering it in an XSKMAP.
// It is valid until Close.
func (s *Socket) FD() int { return s.sys.fd }

// Wait blocks until frames may be ready to receive, a TX frame may have
// been freed (when the last Alloc came up short), Wake is called, Close is
// called, or timeout passes (negative: no limit). Before sleeping it kicks
// the kernel for TX entries still queued and returns at once when frames
// are already waiting. It parks in the runtime poller on the socket and the
// wake eventfd, with a timerfd for the timeout (package internal/poll), or
// sleeps in ppoll while it also waits for completions (POLLOUT). Spurious
// returns happen. After Close it returns link.ErrClosed.
func (s *Socket) Wait(timeout time.Duration) error {
	timeout, ready, err := s.PrepareWait(timeout)
	if ready || err != nil {
		return err
	}
	return s.Block(timeout)
}

// PrepareWait does what Wait does before it sleeps: it kicks the kernel for
// TX entries still queued, reports whether frames are waiting, and chooses
// what Block waits for (link.WaitSplitter).
func (s *Socket) PrepareWait(timeout time.Duration) (time.Duration, bool, error) {
	ready, events, stuck, err := s.prepareWait()
	if ready || err != nil {
		return timeout, ready, err
	}
	if stuck && (timeout < 0 || timeout > stuckRetry) {
		timeout = stuckRetry
	}
	s.sys.events.Store(int32(events))
	return timeout, false, nil
}

// Block sleeps as PrepareWait chose, touching no ring: Recv, Release,
// Alloc and Send may run on another goroutine meanwhile
// (link.WaitSplitter).
func (s *Socket) Block(timeout time.Duration) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return link.ErrClosed
	}
	events := int16(s.sys.events.Load())
	if events == unix.POLLIN {
		// A wait for frames parks in the runtime poller rather than blocking
		// the thread, the short ones too (see package internal/poll).
		s.sys.waitOnce.Do(func() {
			s.sys.waiter, _ = poll.New(s.sys.fd, s.sys.efd)
			if s.sys.waiter != nil {
				s.sys.waking.Store(s.sys.waiter)
			}
		})
		if w := s.sys.waiter; w != nil {
			err := w.Wait(timeout)
			s.sys.drain()
			if s.closed.Load() {
				return link.ErrClosed
			}
			if err != nil {
				return fmt.Errorf("xdp: wait: %w", err)
			}
			return nil
		}
	}
	s.sys.pfd[0].Events = events
	s.sys.pfd[0].Revents = 0
	s.sys.pfd[1].Revents = 0
	var ts uintptr
	if timeout >= 0 {
		s.sys.ts = unix.NsecToTimespec(int64(timeout))
		ts = uintptr(unsafe.Pointer(&s.sys.ts))
	}
	// Announce the ppoll before the last look for a Wake through the
	// Waiter: a Wake after the look sees the flag and writes the eventfd.
	s.sys.inPpoll.Store(true)
	w := s.sys.waiter
	if w == nil || !w.Woken() {
		_, _, e := syscall.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&s.sys.pfd[0])), 2, ts, 0, 0, 0)
		if e != 0 && e != unix.EINTR {
			s.sys.inPpoll.Store(false)
			return fmt.Errorf("xdp: ppoll: %w", e)
		}
		if w != nil {
			w.Woken()
		}
	}
	s.sys.inPpoll.Store(false)
	s.sys.drain()
	if s.closed.Load() {
		return link.ErrClosed
	}
	return nil
}

// prepareWait does what Wait does before it sleeps, for a Link that waits
// on several sockets: it kicks the kernel for queued TX entries and reports
// whether the socket has something ready, the poll events to wait for, and
// whether the kernel left TX entries unconsumed (retry soon).
func (s *Socket) prepareWait() (ready bool, events int16, stuck bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false, 0, false, link.ErrClosed
	}
	c := &s.c
	if err := c.flushIdle(); err != nil {
		return false, 0, false, err
	}
	if c.ready() {
		return true, 0, false, nil
	}
	events = unix.POLLIN
	if c.wantCompletions() {
		events |= unix.POLLOUT
	}
	c.ctr.waits.Add(1)
	return false, events, c.tx.outstanding() > 0, nil
}

// Wake makes a pending or the next Wait return. Safe from any goroutine; a
// no-op after Close.
func (s *Socket) Wake() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.sys.wake()
}

// Close unbinds the socket (closes its descriptor), unmaps the rings and the
// UMEM and closes the wake eventfd. A concurrent Wait returns
// link.ErrClosed. Close is idempotent; every call returns the first call's
// result.
func (s *Socket) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.sys.wake() // a Wait in ppoll returns and lets go of mu
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.c.kickOwed {
			s.c.flushTx() // what Send left on the ring (Config.KickDelay)
		}
		if k, err := s.sys.kernelStats(); err == nil {
			s.final = k
		}
		s.closeErr = s.sys.close()
	})
	return s.closeErr
}

func (y *sysSocket) wake() {
	w := y.waking.Load()
	if w != nil {
		w.Wake() // a Wait parked in the runtime poller
	}
	if y.efd >= 0 && (w == nil || y.inPpoll.Load()) { // a Wait in ppoll
		syscall.Syscall(unix.SYS_WRITE, uintptr(y.efd), uintptr(unsafe.Pointer(&eventfdOne[0])), 8)
		y.efdDirty.Store(true) // after the write: a drain between them only delays it a turn
	}
}

// drain empties the eventfd if wake wrote it.
func (y *sysSocket) drain() {
	if y.efdDirty.Swap(false) {
		syscall.Syscall(unix.SYS_READ, uintptr(y.efd), uintptr(unsafe.Pointer(&y.drainBuf[0])), 8)
	}
}

// close releases everything open has created so far.
func (y *sysSocket) close() error {
	var errs []error
	if y.waiter != nil {
		y.waiter.Close()
	}
	if y.fd >= 0 {
		if err := unix.Close(y.fd); err != nil {
			errs = append(errs, fmt.Errorf("xdp: close socket: %w", err))
		}
		y.fd = -1
	}
	for i, r := range y.rings {
		if r != nil {
			if err := unix.Munmap(r); err != nil {
				errs = append(errs, fmt.Errorf("xdp: munmap ring: %w", err))
			}
			y.rings[i] = nil
		}
	}
	if y.umem != nil {
		if err := unix.Munmap(y.umem); err != nil {
			errs = append(errs, fmt.Errorf("xdp: munmap UMEM: %w", err))
		}
		y.umem = nil
	}
	if y.efd >= 0 {
		unix.Close(y.efd)
		y.efd = -1
	}
	return errors.Join(errs...)
}

// kickTx implements kicker with sendto(fd, NULL, 0, MSG_DONTWAIT).
func (y *sysSocket) kickTx() error {
	_, _, e := syscall.Syscall6(unix.SYS_SENDTO, uintptr(y.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0, unix.EAGAIN, unix.ENOBUFS, unix.ENETDOWN:
		// EAGAIN: the kernel's per-call budget ran out, the completion
		// ring is full, or the device queue is; ENOBUFS: no memory for an
		// skb; ENETDOWN: the device is down. All mean "kick again later".
		return nil
	case unix.EBUSY:
		return errDeviceDrop
	}
	return fmt.Errorf("xdp: sendto: %w", e)
}

// kickRx implements kicker with recvfrom(fd, NULL, 0, MSG_DONTWAIT).
func (y *sysSocket) kickRx() {
	syscall.Syscall6(unix.SYS_RECVFROM, uintptr(y.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// napiID implements kicker with SO_INCOMING_NAPI_ID.
func (y *sysSocket) napiID() uint32 {
	v, err := unix.GetsockoptInt(y.fd, unix.SOL_SOCKET, unix.SO_INCOMING_NAPI_ID)
	if err != nil {
		return 0
	}
	return uint32(v)
}

// BusyPoll reports what the kernel made of Config.BusyPoll (see
// BusyPollState). Safe from any goroutine; after Close it reports
// Requested only.
func (s *Socket) BusyPoll() BusyPollState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := BusyPollState{Requested: s.cfg.BusyPoll}
	if s.closed.Load() {
		return st
	}
	if v, err := unix.GetsockoptInt(s.sys.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL); err == nil {
		st.Usecs = v
	}
	if v, err := unix.GetsockoptInt(s.sys.fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL); err == nil {
		st.Prefer = v != 0
	}
	st.NapiID = s.sys.napiID()
	return st
}

func (y *sysSocket) kernelStats() (kernelStats, error) {
	var k kernelStats
	if y.fd < 0 {
		return k, link.ErrClosed
	}
	if _, err := getsockopt(y.fd, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&k), unsafe.Sizeof(k)); err != nil {
		return k, fmt.Errorf("xdp: statistics: %w", err)
	}
	return k, nil
}

func setsockopt(fd, level, name int, p unsafe.Pointer, n uintptr) error {
	_, _, e := syscall.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

// getsockopt returns the length the kernel wrote.
func getsockopt(fd, level, name int, p unsafe.Pointer, n uintptr) (uintptr, error) {
	l := uint32(n)
	_, _, e := syscall.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(l), nil
}
