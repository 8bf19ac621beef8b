//go:build linux

package sock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/internal/poll"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/pool"
)

// Frame IDs carry their pool in the upper half, so that a received frame
// can be sent on (forwarded) and still find its way back.
const (
	TagRx = 1 << 32
	TagTx = 2 << 32
)

// Msgs is a batch of message headers, each wired once to its own iovec,
// address and control buffer, so that the data path only sets lengths and
// base pointers. The zero value is an empty batch; make one with NewMsgs.
type Msgs struct {
	Hdr     []unix.Mmsghdr
	Iov     []unix.Iovec
	Names   []unix.RawSockaddrInet6 // nil when the messages carry no address
	Ctrl    []byte                  // CtrlLen bytes for each message
	CtrlLen int
	IDs     []uint32 // receive: the pool index of message k
	Len     []int    // send: the frame length behind message j
}

// NewMsgs returns n messages with one iovec each, an address buffer each if
// named, and ctrlLen bytes of control buffer each (Hdr.Control points at it
// when ctrlLen > 0).
func NewMsgs(n int, named bool, ctrlLen int) Msgs {
	m := Msgs{
		Hdr:     make([]unix.Mmsghdr, n),
		Iov:     make([]unix.Iovec, n),
		Ctrl:    make([]byte, n*ctrlLen),
		CtrlLen: ctrlLen,
		IDs:     make([]uint32, n),
		Len:     make([]int, n),
	}
	if named {
		m.Names = make([]unix.RawSockaddrInet6, n)
	}
	for j := range n {
		h := &m.Hdr[j].Hdr
		h.Iov = &m.Iov[j]
		h.Iovlen = 1
		if named {
			h.Name = (*byte)(unsafe.Pointer(&m.Names[j]))
		}
		if ctrlLen > 0 {
			h.Control = &m.Ctrl[j*ctrlLen]
		}
	}
	return m
}

// Control returns the control data the kernel wrote for message k.
func (m *Msgs) Control(k int) []byte {
	clen := min(int(m.Hdr[k].Hdr.Controllen), m.CtrlLen)
	return m.Ctrl[k*m.CtrlLen : k*m.CtrlLen+clen]
}

// CtrlSlot returns message j's whole control buffer.
func (m *Msgs) CtrlSlot(j int) []byte {
	return m.Ctrl[j*m.CtrlLen : (j+1)*m.CtrlLen]
}

// NextCmsg splits the first control message off c: its header, its data
// and the rest of c. ok is false when c holds no whole message.
func NextCmsg(c []byte) (h *unix.Cmsghdr, data, rest []byte, ok bool) {
	if len(c) < unix.SizeofCmsghdr {
		return nil, nil, nil, false
	}
	h = (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	hl := int(h.Len)
	if hl < unix.SizeofCmsghdr || hl > len(c) {
		return nil, nil, nil, false
	}
	data = c[unix.CmsgLen(0):hl]
	if sp := unix.CmsgSpace(hl - unix.CmsgLen(0)); sp <= len(c) {
		rest = c[sp:]
	}
	return h, data, rest, true
}

// Mmsg calls sendmmsg or recvmmsg (trap) on msgs and returns the number of
// messages moved or the errno.
func Mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr, flags int) (int, unix.Errno) {
	if len(msgs) == 0 {
		return 0, 0
	}
	r, _, errno := unix.Syscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}

// Htons converts a port to network byte order (and back: it is its own
// inverse).
func Htons(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// SetRcvBuf asks for a receive buffer of size bytes, past
// net.core.rmem_max when the process may (root); otherwise capped.
func SetRcvBuf(fd, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}
}

// SetSndBuf asks for a send buffer of size bytes, like SetRcvBuf.
func SetSndBuf(fd, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	}
}

// AttachDropFilter attaches a socket filter that drops everything, so that
// nothing ever queues on a socket that only sends or only holds a port.
func AttachDropFilter(fd int) error {
	drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	prog := unix.SockFprog{Len: 1, Filter: &drop[0]}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
}

// Counters are the counters every socket link keeps, safe from any
// goroutine.
type Counters struct {
	RxFrames, RxBytes, TxFrames, TxBytes atomic.Uint64
	TxDropped, TxMalformed, TxErrors     atomic.Uint64
	TxErrno, RxTruncated, BadFrames      atomic.Uint64
}

// Snapshot is a copy of Counters, RxDropped being RxTruncated plus the
// kernel drops given to Core.Snapshot.
type Snapshot struct {
	link.Stats
	TxMalformed, TxErrors, TxErrno, RxTruncated, BadFrames uint64
}

// Core is the socket-independent part of a link: its pools, message
// batches, eventfd, file descriptors, closed state and counters. The zero
// value is not usable: call Init, then OpenEventfd and AddFD as the sockets
// open. See the package doc for concurrent use.
type Core struct {
	name   string // error prefix
	batch  int
	Rx, Tx *pool.Pool
	RxMsgs Msgs
	TxMsgs Msgs
	N      Counters

	rxFD int   // the socket Recv reads and Wait polls
	fds  []int // closed by Close
	efd  int

	pfd [2]unix.PollFd
	ts  unix.Timespec
	// waiter parks waits in the runtime poller (made on first use by the
	// one goroutine that calls Wait).
	waiter   *poll.Waiter
	waitOnce sync.Once
	waking   atomic.Pointer[poll.Waiter] // waiter once made, for Wake
	efdDirty atomic.Bool                 // Wake wrote efd and no Wait read it yet
	one      [8]byte
	junk     [8]byte

	mu     sync.RWMutex // write-held by Close while it closes the fds
	closed atomic.Bool
}

// Init makes the two pools of frames buffers of frameSize bytes and sets
// the batch size. name prefixes the errors of the system calls ("udp:
// ppoll: ..."). An error is one of package pool's.
func (c *Core) Init(name string, frameSize, frames, batch int) error {
	c.name, c.batch, c.rxFD, c.efd = name, batch, -1, -1
	*(*uint64)(unsafe.Pointer(&c.one)) = 1 // eventfd adds a native uint64
	var err error
	if c.Rx, err = pool.New(frameSize, frames); err != nil {
		return err
	}
	c.Tx, err = pool.New(frameSize, frames)
	return err
}

// OpenEventfd opens the eventfd behind Wake.
func (c *Core) OpenEventfd() error {
	var err error
	if c.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("%s: eventfd: %w", c.name, err)
	}
	return nil
}

// AddFD hands fd over to Close; rx makes it the socket that Recv reads
// and Wait polls.
func (c *Core) AddFD(fd int, rx bool) {
	c.fds = append(c.fds, fd)
	if rx {
		c.rxFD = fd
	}
}

// RxFD returns the receiving socket, -1 once Close has closed it. Callers
// outside the data path hold RLock.
func (c *Core) RxFD() int { return c.rxFD }

// Batch is the number of messages moved per system call.
func (c *Core) Batch() int { return c.batch }

// Closed reports whether Close has begun.
func (c *Core) Closed() bool { return c.closed.Load() }

// Alloc fills fs with free transmit buffers.
func (c *Core) Alloc(fs []link.Frame) int {
	if c.closed.Load() {
		return 0
	}
	n := 0
	for n < len(fs) {
		id, ok := c.Tx.Get()
		if !ok {
			break
		}
		fs[n] = link.Frame{Buf: c.Tx.Buf(id), ID: TagTx | uint64(id)}
		n++
	}
	return n
}

// Release returns received frames (or unsent transmit buffers) to their
// pools, counting those that are not out of one in BadFrames.
func (c *Core) Release(fs []link.Frame) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return
	}
	bad := 0
	for i := range fs {
		if !c.Put(fs[i].ID) {
			bad++
		}
	}
	if bad > 0 {
		c.N.BadFrames.Add(uint64(bad))
	}
}

// Owned reports whether the frame with this ID is out of one of the pools.
func (c *Core) Owned(id uint64) bool {
	switch id &^ 0xFFFFFFFF {
	case TagRx:
		return c.Rx.InUse(uint32(id))
	case TagTx:
		return c.Tx.InUse(uint32(id))
	}
	return false
}

// Put returns the frame with this ID to its pool and reports whether it was
// out of it.
func (c *Core) Put(id uint64) bool {
	switch id &^ 0xFFFFFFFF {
	case TagRx:
		return c.Rx.Put(uint32(id)) == nil
	case TagTx:
		return c.Tx.Put(uint32(id)) == nil
	}
	return false
}

// Recv receives up to one batch of messages from the receiving socket with
// recvmmsg, without blocking, into free receive buffers, each written from
// offset headroom on. For every message that fits, frame(k, buf, n) gets
// its index in RxMsgs, its whole buffer and its length and returns the
// frame to hand out; messages larger than the buffer are dropped and
// counted. Recv counts the frames and returns how many it put in fs, or
// link.ErrClosed.
func (c *Core) Recv(fs []link.Frame, headroom int, frame func(k int, buf []byte, n int) []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return 0, link.ErrClosed
	}
	n := min(len(fs), c.batch, c.Rx.Free())
	if n == 0 {
		return 0, nil
	}
	m := &c.RxMsgs
	named := m.Names != nil
	for k := 0; k < n; k++ {
		id, _ := c.Rx.Get()
		m.IDs[k] = id
		buf := c.Rx.Buf(id)
		m.Iov[k].Base = &buf[headroom]
		m.Iov[k].SetLen(len(buf) - headroom)
		h := &m.Hdr[k].Hdr
		if named {
			h.Namelen = unix.SizeofSockaddrInet6
		}
		h.SetControllen(m.CtrlLen)
		h.Flags = 0
	}
	r, errno := Mmsg(unix.SYS_RECVMMSG, c.rxFD, m.Hdr[:n], unix.MSG_DONTWAIT)
	got, bytes, trunc := 0, 0, 0
	for k := 0; k < r; k++ {
		id := m.IDs[k]
		if m.Hdr[k].Hdr.Flags&unix.MSG_TRUNC != 0 {
			trunc++
			_ = c.Rx.Put(id)
			continue
		}
		f := frame(k, c.Rx.Buf(id), int(m.Hdr[k].Len))
		fs[got] = link.Frame{Buf: f, ID: TagRx | uint64(id)}
		got++
		bytes += len(f)
	}
	for k := r; k < n; k++ {
		_ = c.Rx.Put(m.IDs[k])
	}
	if got > 0 {
		c.N.RxFrames.Add(uint64(got))
		c.N.RxBytes.Add(uint64(bytes))
	}
	if trunc > 0 {
		c.N.RxTruncated.Add(uint64(trunc))
	}
	switch errno {
	case 0, unix.EAGAIN, unix.EINTR:
		return got, nil
	}
	return got, fmt.Errorf("%s: recvmmsg: %w", c.name, errno)
}

// Send hands fs to batch one batch at a time, under the closed check, and
// returns the sum of what batch returns (the frames sent) or
// link.ErrClosed.
func (c *Core) Send(fs []link.Frame, batch func([]link.Frame) int) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return 0, link.ErrClosed
	}
	sent := 0
	for len(fs) > 0 {
		b := fs[:min(len(fs), c.batch)]
		fs = fs[len(b):]
		sent += batch(b)
	}
	return sent, nil
}

// SendMsgs sends TxMsgs[from:to] on fd with sendmmsg, retrying after EINTR
// and skipping a message the kernel refuses (its errno goes to TxErrno). It
// returns the messages sent, their bytes (from TxMsgs.Len) and the number
// refused.
func (c *Core) SendMsgs(fd, from, to int) (sent, bytes int, errs uint64) {
	m := &c.TxMsgs
	for off := from; off < to; {
		r, errno := Mmsg(unix.SYS_SENDMMSG, fd, m.Hdr[off:to], 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || r <= 0 {
			errs++
			c.N.TxErrno.Store(uint64(errno))
			off++
			continue
		}
		for j := off; j < off+r; j++ {
			bytes += m.Len[j]
		}
		sent += r
		off += r
	}
	return sent, bytes, errs
}

// SendDone takes every frame of a sent batch back and counts it: sent
// frames of bytes, bad frames that were not the link's (at least those that
// fail to go back to their pool: foreign, or given twice), malformed ones
// and refused ones.
func (c *Core) SendDone(fs []link.Frame, sent, bytes int, bad, malformed, errs uint64) {
	var failed uint64
	for i := range fs {
		if !c.Put(fs[i].ID) {
			failed++
		}
	}
	bad = max(bad, failed)
	c.N.TxFrames.Add(uint64(sent))
	c.N.TxBytes.Add(uint64(bytes))
	if d := uint64(len(fs) - sent); d > 0 {
		c.N.TxDropped.Add(d)
	}
	if bad|malformed|errs != 0 {
		c.N.BadFrames.Add(bad)
		c.N.TxMalformed.Add(malformed)
		c.N.TxErrors.Add(errs)
	}
}

// Wait parks in the runtime poller until the receiving socket is readable,
// Wake is called or timeout passes (negative: no limit), with the precision
// of a timerfd. It returns link.ErrClosed once
// Close has begun.
func (c *Core) Wait(timeout time.Duration) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return link.ErrClosed
	}
	// Every wait parks in the runtime poller, the short ones too (see
	// package internal/poll); ppoll only if the Waiter could not be made.
	c.waitOnce.Do(func() {
		if c.waiter, _ = poll.New(c.efd, c.rxFD); c.waiter != nil {
			c.waking.Store(c.waiter)
		}
	})
	if c.waiter != nil {
		err := c.waiter.Wait(timeout)
		if c.efdDirty.Swap(false) { // a Wake from before the Waiter
			_, _ = unix.Read(c.efd, c.junk[:])
		}
		if c.closed.Load() {
			return link.ErrClosed
		}
		if err != nil {
			return fmt.Errorf("%s: wait: %w", c.name, err)
		}
		return nil
	}
	c.pfd[0] = unix.PollFd{Fd: int32(c.efd), Events: unix.POLLIN}
	c.pfd[1] = unix.PollFd{Fd: int32(c.rxFD), Events: unix.POLLIN}
	var ts *unix.Timespec
	if timeout >= 0 {
		c.ts = unix.NsecToTimespec(timeout.Nanoseconds())
		ts = &c.ts
	}
	_, err := unix.Ppoll(c.pfd[:], ts, nil)
	if c.pfd[0].Revents&unix.POLLIN != 0 {
		_, _ = unix.Read(c.efd, c.junk[:])
	}
	if c.closed.Load() {
		return link.ErrClosed
	}
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("%s: ppoll: %w", c.name, err)
	}
	return nil
}

// PrepareWait has nothing to do before Wait blocks: Wait touches no
// state that Recv and Send use (link.WaitSplitter).
func (c *Core) PrepareWait(timeout time.Duration) (time.Duration, bool, error) {
	return timeout, false, nil
}

// Quiet stops the socket from waking the runtime poller until the next
// Wait (link.Quieter).
func (c *Core) Quiet() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() || c.waiter == nil {
		return
	}
	_ = c.waiter.Quiet()
}

// Block is Wait (link.WaitSplitter).
func (c *Core) Block(timeout time.Duration) error { return c.Wait(timeout) }

// Wake makes a pending or the next Wait return. Safe from any goroutine.
// Once Wait parks in the runtime poller, Wake goes through the poller's
// deadline (poll.Waiter.Wake: no system call, and the waiter runs on the
// caller's P at once); before, through the eventfd.
func (c *Core) Wake() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return
	}
	if w := c.waking.Load(); w != nil {
		w.Wake()
		return
	}
	_, _ = unix.Write(c.efd, c.one[:])
	c.efdDirty.Store(true) // after the write: a drain between them only delays it a turn
}

// Close wakes a pending Wait, waits for the methods in progress, calls
// before (unless nil) with the file descriptors still open and no method
// running, and closes them. It is idempotent and safe from any goroutine;
// it also cleans up after a failed Open.
func (c *Core) Close(before func()) error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	_, _ = unix.Write(c.efd, c.one[:]) // the fd is open until we hold mu
	c.mu.Lock()
	defer c.mu.Unlock()
	if before != nil {
		before()
	}
	if c.waiter != nil {
		c.waiter.Close()
	}
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	if c.efd >= 0 {
		unix.Close(c.efd)
	}
	c.fds, c.rxFD, c.efd = nil, -1, -1
	return nil
}

// RLock holds off Close, for reading a socket outside the data path (the
// caller checks Closed).
func (c *Core) RLock() { c.mu.RLock() }

// RUnlock undoes RLock.
func (c *Core) RUnlock() { c.mu.RUnlock() }

// Snapshot loads the counters; kernelDrops is added to RxDropped.
func (c *Core) Snapshot(kernelDrops uint64) Snapshot {
	s := Snapshot{
		TxMalformed: c.N.TxMalformed.Load(),
		TxErrors:    c.N.TxErrors.Load(),
		TxErrno:     c.N.TxErrno.Load(),
		RxTruncated: c.N.RxTruncated.Load(),
		BadFrames:   c.N.BadFrames.Load(),
	}
	s.RxFrames = c.N.RxFrames.Load()
	s.RxBytes = c.N.RxBytes.Load()
	s.TxFrames = c.N.TxFrames.Load()
	s.TxBytes = c.N.TxBytes.Load()
	s.TxDropped = c.N.TxDropped.Load()
	s.RxDropped = s.RxTruncated + kernelDrops
	return s
}
