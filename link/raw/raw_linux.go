//go:build linux

package raw

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/pool"
)

// Frame IDs carry their pool in the upper half, so that a received frame
// can be sent on (forwarded) and still find its way back.
const (
	tagRx = 1 << 32
	tagTx = 2 << 32
)

const (
	vlanLen       = 4
	sizeofAuxdata = int(unsafe.Sizeof(unix.TpacketAuxdata{}))
)

var rxCtrlLen = unix.CmsgSpace(sizeofAuxdata)

// Link is a link.Link over an AF_PACKET socket. Make one with Open; the
// zero value is not usable. See the package doc for which methods are safe
// for concurrent use.
type Link struct {
	cfg   Config
	info  link.Info
	batch int
	fd    int
	guard []int // UDP sockets holding Port so the kernel stays quiet
	efd   int

	rx, tx *pool.Pool

	rxMsgs []unix.Mmsghdr
	rxIov  []unix.Iovec
	rxIDs  []uint32
	rxCtrl []byte
	txMsgs []unix.Mmsghdr
	txIov  []unix.Iovec
	txLen  []int

	pfd  [2]unix.PollFd
	ts   unix.Timespec
	one  [8]byte
	junk [8]byte

	mu     sync.RWMutex // write-held by Close while it closes the fds
	closed atomic.Bool

	rxFrames, rxBytes, txFrames, txBytes atomic.Uint64
	txDropped, txMalformed, txErrs       atomic.Uint64
	txErrno, rxTrunc, badFrames          atomic.Uint64
	kdMu                                 sync.Mutex
	rxKernelDrops                        uint64
}

var _ link.Link = (*Link)(nil)
var _ link.StatsReader = (*Link)(nil)

// Open opens a raw socket on cfg.Ifindex with the filter attached before it
// is bound, so that nothing else is ever queued on it. It needs
// CAP_NET_RAW. Errors wrap ErrConfig or the system call's error.
func Open(cfg Config) (*Link, error) {
	c := cfg
	if c.Ifindex <= 0 {
		return nil, fmt.Errorf("%w: Ifindex %d", ErrConfig, c.Ifindex)
	}
	ifi, err := net.InterfaceByIndex(c.Ifindex)
	if err != nil {
		return nil, fmt.Errorf("%w: interface %d: %v", ErrConfig, c.Ifindex, err)
	}
	if c.MAC == ([6]byte{}) {
		copy(c.MAC[:], ifi.HardwareAddr)
	}
	if c.FrameSize == 0 {
		c.FrameSize = ifi.MTU + 18
	}
	if c.Frames == 0 {
		c.Frames = DefaultFrames
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	c.IP = c.IP.Unmap()
	switch {
	case c.FrameSize < minFrameSize || c.FrameSize > 1<<18:
		return nil, fmt.Errorf("%w: FrameSize %d", ErrConfig, c.FrameSize)
	case c.Frames < 0 || c.Frames > 1<<20 || c.Frames*c.FrameSize > MaxPoolBytes:
		return nil, fmt.Errorf("%w: Frames %d", ErrConfig, c.Frames)
	case c.Batch < 0 || c.Batch > MaxBatch:
		return nil, fmt.Errorf("%w: Batch %d", ErrConfig, c.Batch)
	case c.SocketBuffer < 0:
		return nil, fmt.Errorf("%w: SocketBuffer %d", ErrConfig, c.SocketBuffer)
	}
	l := &Link{cfg: c, batch: c.Batch, fd: -1, efd: -1}
	l.info = link.Info{
		Name:      fmt.Sprintf("raw:%s", ifi.Name),
		FrameSize: c.FrameSize,
		BatchSize: c.Batch,
		MAC:       c.MAC,
		IP:        c.IP,
	}
	if l.rx, err = pool.New(c.FrameSize, c.Frames); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if l.tx, err = pool.New(c.FrameSize, c.Frames); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := l.openSocket(); err != nil {
		l.closeFDs()
		return nil, err
	}
	l.openGuard()
	l.setupMsgs()
	*(*uint64)(unsafe.Pointer(&l.one)) = 1 // eventfd adds a native uint64
	return l, nil
}

func htons(v uint16) uint16 {
	var b [2]byte
	b[0], b[1] = byte(v>>8), byte(v)
	return *(*uint16)(unsafe.Pointer(&b))
}

func (l *Link) openSocket() error {
	var err error
	if l.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("raw: eventfd: %w", err)
	}
	// Protocol 0: the socket receives nothing until bind, by which time
	// the filter is in place.
	if l.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return fmt.Errorf("raw: socket: %w", err)
	}
	f := filterProgram(l.cfg.Port)
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.SetsockoptSockFprog(l.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fmt.Errorf("raw: SO_ATTACH_FILTER: %w", err)
	}
	// The kernel takes VLAN tags off received frames; auxdata gives them
	// back, to be put back in place.
	if err := unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		return fmt.Errorf("raw: PACKET_AUXDATA: %w", err)
	}
	// The filter refuses outgoing frames anyway; this saves the clone.
	_ = unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	size := l.cfg.SocketBuffer
	if unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	}
	if unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: l.cfg.Ifindex}
	if err := unix.Bind(l.fd, sa); err != nil {
		return fmt.Errorf("raw: bind to interface %d: %w", l.cfg.Ifindex, err)
	}
	return nil
}

// openGuard binds a UDP socket to IP:Port that drops everything, so that
// the kernel does not answer the link's frames with ICMP port unreachable.
// It is best effort: a port in use is left alone.
func (l *Link) openGuard() {
	if !l.cfg.IP.IsValid() {
		return
	}
	family := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(l.cfg.Port), Addr: l.cfg.IP.As4()}
	if l.cfg.IP.Is6() {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(l.cfg.Port), Addr: l.cfg.IP.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	drop := []unix.SockFilter{{Code: retK, K: 0}}
	prog := unix.SockFprog{Len: 1, Filter: &drop[0]}
	if unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog) != nil || unix.Bind(fd, sa) != nil {
		unix.Close(fd)
		return
	}
	l.guard = append(l.guard, fd)
}

func (l *Link) setupMsgs() {
	b := l.batch
	l.rxMsgs = make([]unix.Mmsghdr, b)
	l.rxIov = make([]unix.Iovec, b)
	l.rxIDs = make([]uint32, b)
	l.rxCtrl = make([]byte, b*rxCtrlLen)
	l.txMsgs = make([]unix.Mmsghdr, b)
	l.txIov = make([]unix.Iovec, b)
	l.txLen = make([]int, b)
	for j := 0; j < b; j++ {
		l.rxMsgs[j].Hdr.Iov = &l.rxIov[j]
		l.rxMsgs[j].Hdr.Iovlen = 1
		l.rxMsgs[j].Hdr.Control = &l.rxCtrl[j*rxCtrlLen]
		l.txMsgs[j].Hdr.Iov = &l.txIov[j]
		l.txMsgs[j].Hdr.Iovlen = 1
	}
}

// Info describes the link.
func (l *Link) Info() link.Info { return l.info }

// Alloc fills fs with free transmit buffers.
func (l *Link) Alloc(fs []link.Frame) int {
	if l.closed.Load() {
		return 0
	}
	n := 0
	for n < len(fs) {
		id, ok := l.tx.Get()
		if !ok {
			break
		}
		fs[n] = link.Frame{Buf: l.tx.Buf(id), ID: tagTx | uint64(id)}
		n++
	}
	return n
}

// Release returns received frames (or unsent transmit buffers) to the link.
func (l *Link) Release(fs []link.Frame) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return
	}
	bad := 0
	for i := range fs {
		if !l.put(fs[i].ID) {
			bad++
		}
	}
	if bad > 0 {
		l.badFrames.Add(uint64(bad))
	}
}

func (l *Link) owned(id uint64) bool {
	switch id &^ 0xFFFFFFFF {
	case tagRx:
		return l.rx.InUse(uint32(id))
	case tagTx:
		return l.tx.InUse(uint32(id))
	}
	return false
}

func (l *Link) put(id uint64) bool {
	switch id &^ 0xFFFFFFFF {
	case tagRx:
		return l.rx.Put(uint32(id)) == nil
	case tagTx:
		return l.tx.Put(uint32(id)) == nil
	}
	return false
}

// Recv fills fs with received frames. It never blocks.
func (l *Link) Recv(fs []link.Frame) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	n := min(len(fs), l.batch, l.rx.Free())
	if n == 0 {
		return 0, nil
	}
	for k := 0; k < n; k++ {
		id, _ := l.rx.Get()
		l.rxIDs[k] = id
		buf := l.rx.Buf(id)
		l.rxIov[k].Base = &buf[vlanLen] // room to put a tag back
		l.rxIov[k].SetLen(len(buf) - vlanLen)
		l.rxMsgs[k].Hdr.Flags = 0
		l.rxMsgs[k].Hdr.SetControllen(rxCtrlLen)
	}
	r, errno := mmsg(unix.SYS_RECVMMSG, l.fd, l.rxMsgs[:n], unix.MSG_DONTWAIT)
	got, bytes, trunc := 0, 0, 0
	for k := 0; k < r; k++ {
		id := l.rxIDs[k]
		m := &l.rxMsgs[k]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
			trunc++
			_ = l.rx.Put(id)
			continue
		}
		buf := l.rx.Buf(id)
		frame := buf[vlanLen : vlanLen+int(m.Len)]
		if tpid, tci, ok := l.vlanTag(k, int(m.Hdr.Controllen)); ok && len(frame) >= 12 {
			copy(buf[0:12], frame[0:12])
			binary.BigEndian.PutUint16(buf[12:], tpid)
			binary.BigEndian.PutUint16(buf[14:], tci)
			frame = buf[:vlanLen+int(m.Len)]
		}
		fs[got] = link.Frame{Buf: frame, ID: tagRx | uint64(id)}
		got++
		bytes += len(frame)
	}
	for k := r; k < n; k++ {
		_ = l.rx.Put(l.rxIDs[k])
	}
	if got > 0 {
		l.rxFrames.Add(uint64(got))
		l.rxBytes.Add(uint64(bytes))
	}
	if trunc > 0 {
		l.rxTrunc.Add(uint64(trunc))
	}
	switch errno {
	case 0, unix.EAGAIN, unix.EINTR:
		return got, nil
	}
	return got, fmt.Errorf("raw: recvmmsg: %w", errno)
}

// vlanTag reads the tag the kernel took off message k from its auxdata.
func (l *Link) vlanTag(k, clen int) (tpid, tci uint16, ok bool) {
	c := l.rxCtrl[k*rxCtrlLen : k*rxCtrlLen+min(clen, rxCtrlLen)]
	for len(c) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		hl := int(h.Len)
		if hl < unix.SizeofCmsghdr || hl > len(c) {
			return 0, 0, false
		}
		if h.Level == unix.SOL_PACKET && h.Type == unix.PACKET_AUXDATA && hl-unix.CmsgLen(0) >= sizeofAuxdata {
			a := (*unix.TpacketAuxdata)(unsafe.Pointer(&c[unix.CmsgLen(0)]))
			if a.Status&unix.TP_STATUS_VLAN_VALID == 0 {
				return 0, 0, false
			}
			tpid = 0x8100
			if a.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 && a.Vlan_tpid != 0 {
				tpid = a.Vlan_tpid
			}
			return tpid, a.Vlan_tci, true
		}
		sp := unix.CmsgSpace(hl - unix.CmsgLen(0))
		if sp > len(c) {
			return 0, 0, false
		}
		c = c[sp:]
	}
	return 0, 0, false
}

// Send transmits the frames with sendmmsg and takes every one of them back.
func (l *Link) Send(fs []link.Frame) (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	sent := 0
	for len(fs) > 0 {
		c := fs[:min(len(fs), l.batch)]
		fs = fs[len(c):]
		sent += l.sendBatch(c)
	}
	return sent, nil
}

func (l *Link) sendBatch(fs []link.Frame) int {
	var bad, malformed, errs uint64
	m := 0
	for i := range fs {
		f := &fs[i]
		if !l.owned(f.ID) {
			bad++
			continue
		}
		if len(f.Buf) < 14 {
			malformed++
			continue
		}
		l.txIov[m].Base = &f.Buf[0]
		l.txIov[m].SetLen(len(f.Buf))
		l.txLen[m] = len(f.Buf)
		m++
	}
	sent, bytes := 0, 0
	for off := 0; off < m; {
		r, errno := mmsg(unix.SYS_SENDMMSG, l.fd, l.txMsgs[off:m], 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || r <= 0 {
			errs++
			l.txErrno.Store(uint64(errno))
			off++
			continue
		}
		for j := off; j < off+r; j++ {
			bytes += l.txLen[j]
		}
		sent += r
		off += r
	}
	var failed uint64
	for i := range fs {
		if !l.put(fs[i].ID) {
			failed++
		}
	}
	// Puts fail for the foreign frames and for a frame given twice.
	bad = max(bad, failed)
	l.txFrames.Add(uint64(sent))
	l.txBytes.Add(uint64(bytes))
	if d := uint64(len(fs) - sent); d > 0 {
		l.txDropped.Add(d)
	}
	if bad|malformed|errs != 0 {
		l.badFrames.Add(bad)
		l.txMalformed.Add(malformed)
		l.txErrs.Add(errs)
	}
	return sent
}

func mmsg(trap uintptr, fd int, msgs []unix.Mmsghdr, flags int) (int, unix.Errno) {
	if len(msgs) == 0 {
		return 0, 0
	}
	r, _, errno := unix.Syscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), 0
}

// Wait blocks in ppoll until a frame arrives, Wake is called or timeout
// passes (negative: no limit).
func (l *Link) Wait(timeout time.Duration) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	l.pfd[0] = unix.PollFd{Fd: int32(l.efd), Events: unix.POLLIN}
	l.pfd[1] = unix.PollFd{Fd: int32(l.fd), Events: unix.POLLIN}
	var ts *unix.Timespec
	if timeout >= 0 {
		l.ts = unix.NsecToTimespec(timeout.Nanoseconds())
		ts = &l.ts
	}
	_, err := unix.Ppoll(l.pfd[:], ts, nil)
	if l.pfd[0].Revents&unix.POLLIN != 0 {
		_, _ = unix.Read(l.efd, l.junk[:])
	}
	if l.closed.Load() {
		return link.ErrClosed
	}
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("raw: ppoll: %w", err)
	}
	return nil
}

// Wake makes a pending or the next Wait return. Safe from any goroutine.
func (l *Link) Wake() {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.closed.Load() {
		_, _ = unix.Write(l.efd, l.one[:])
	}
}

// Close closes the sockets, unblocking a pending Wait. It is idempotent and
// safe from any goroutine; afterwards methods return link.ErrClosed.
func (l *Link) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	_, _ = unix.Write(l.efd, l.one[:]) // the fd is open until we hold mu
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kernelDrops()
	l.closeFDs()
	return nil
}

func (l *Link) closeFDs() {
	for _, fd := range append(l.guard, l.fd, l.efd) {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	l.guard, l.fd, l.efd = nil, -1, -1
}

// kernelDrops folds the kernel's drop count (which reading resets) into
// the counter. Callers hold mu (either way).
func (l *Link) kernelDrops() uint64 {
	l.kdMu.Lock()
	defer l.kdMu.Unlock()
	if l.fd >= 0 {
		if st, err := unix.GetsockoptTpacketStats(l.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			l.rxKernelDrops += uint64(st.Drops)
		}
	}
	return l.rxKernelDrops
}

// Stats returns the link.Stats counters. Safe from any goroutine.
func (l *Link) Stats() link.Stats { return l.Counters().Stats }

// Counters returns all counters. Safe from any goroutine.
func (l *Link) Counters() Counters {
	l.mu.RLock()
	kd := l.kernelDrops()
	l.mu.RUnlock()
	c := Counters{
		TxMalformed:   l.txMalformed.Load(),
		TxErrors:      l.txErrs.Load(),
		TxErrno:       l.txErrno.Load(),
		RxTruncated:   l.rxTrunc.Load(),
		RxKernelDrops: kd,
		BadFrames:     l.badFrames.Load(),
	}
	c.RxFrames = l.rxFrames.Load()
	c.RxBytes = l.rxBytes.Load()
	c.TxFrames = l.txFrames.Load()
	c.TxBytes = l.txBytes.Load()
	c.TxDropped = l.txDropped.Load()
	c.RxDropped = c.RxTruncated + c.RxKernelDrops
	return c
}
