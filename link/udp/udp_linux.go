//go:build linux

package udp

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/pool"
)

// Frame IDs carry the pool they come from in their upper half, so that a
// received frame can be sent on (forwarded) and still find its way back.
const (
	tagRx = 1 << 32
	tagTx = 2 << 32
)

var (
	rxCtrlLen = 2 * unix.CmsgSpace(4) // SO_RXQ_OVFL and IP_TOS / IPV6_TCLASS
	txCtrlLen = unix.CmsgSpace(4)     // IP_TOS / IPV6_TCLASS
)

// Link is a link.Link over kernel UDP sockets. Make one with Open; the zero
// value is not usable. See the package doc for which methods are safe for
// concurrent use.
type Link struct {
	cfg   Config
	v6    bool
	hdr   int // headroom: synthesized header length
	batch int
	info  link.Info
	local [16]byte
	scope uint32 // IPv6 zone of Local, as an interface index

	roce    int   // socket bound to Port: receives, and sends frames from Port
	socks   []int // send sockets; socks[0] == roce
	bySport map[uint16]int32
	efd     int // eventfd for Wake

	rx, tx *pool.Pool

	rxMsgs  []unix.Mmsghdr
	rxIov   []unix.Iovec
	rxNames []unix.RawSockaddrInet6
	rxCtrl  []byte
	rxIDs   []uint32

	txMsgs  []unix.Mmsghdr
	txIov   []unix.Iovec
	txNames []unix.RawSockaddrInet6
	txCtrl  []byte
	txLen   []int // frame length of message j
	txP     []parsed
	txSock  []int32 // socket of frame i, -1: dropped
	count   []int32 // frames per socket in this batch
	pos     []int32 // next message slot per socket

	pfd  [2]unix.PollFd
	ts   unix.Timespec
	one  [8]byte
	junk [8]byte

	mu     sync.RWMutex // write-held by Close while it closes the fds
	closed atomic.Bool

	rxFrames, rxBytes, txFrames, txBytes       atomic.Uint64
	txDropped, txMalformed, txUnknown, txErrs  atomic.Uint64
	txErrno, rxTrunc, rxKernelDrops, badFrames atomic.Uint64
}

var _ link.Link = (*Link)(nil)
var _ link.StatsReader = (*Link)(nil)

// Open validates cfg, creates and binds the sockets and allocates the
// buffer pools. Errors wrap ErrConfig or the system call's error (binding a
// port in use gives unix.EADDRINUSE).
func Open(cfg Config) (*Link, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Link{cfg: c, v6: c.Local.Is6(), batch: c.Batch, roce: -1, efd: -1}
	l.hdr = headroom(l.v6)
	l.local = c.Local.As16()
	if !l.v6 {
		a := c.Local.As4()
		l.local = [16]byte{}
		copy(l.local[:], a[:])
	}
	if z := c.Local.Zone(); z != "" {
		if n, err := strconv.ParseUint(z, 10, 32); err == nil {
			l.scope = uint32(n)
		} else if ifi, err := net.InterfaceByName(z); err == nil {
			l.scope = uint32(ifi.Index)
		} else {
			return nil, fmt.Errorf("%w: zone of Local: %v", ErrConfig, err)
		}
	}
	l.info = link.Info{
		Name:      "udp:" + netip.AddrPortFrom(c.Local, c.Port).String(),
		FrameSize: c.FrameSize,
		BatchSize: c.Batch,
		MAC:       macOf(c.Local),
		IP:        c.Local,
		Ports:     append([]uint16(nil), c.Entropies...),
	}
	if l.rx, err = pool.New(c.FrameSize, c.Frames); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if l.tx, err = pool.New(c.FrameSize, c.Frames); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := l.openSockets(); err != nil {
		l.closeFDs()
		return nil, err
	}
	l.setupMsgs()
	l.one[0] = 1 // eventfd adds a native-endian uint64; 1 on little-endian
	if nativeBigEndian() {
		l.one = [8]byte{7: 1}
	}
	return l, nil
}

func nativeBigEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 0
}

func (l *Link) openSockets() error {
	var err error
	l.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("udp: eventfd: %w", err)
	}
	l.roce, err = l.socket(l.cfg.Port, true)
	if err != nil {
		return err
	}
	l.socks = append(l.socks, l.roce)
	l.bySport = map[uint16]int32{l.cfg.Port: 0}
	for _, e := range l.cfg.Entropies {
		if _, ok := l.bySport[e]; ok {
			continue
		}
		fd, err := l.socket(e, false)
		if err != nil {
			return err
		}
		l.bySport[e] = int32(len(l.socks))
		l.socks = append(l.socks, fd)
	}
	return nil
}

// socket opens a blocking UDP socket bound to Local:port. The receiving one
// reports drops and TOS; the others get a filter that drops everything
// before they are bound, so that nothing ever queues on them.
func (l *Link) socket(port uint16, recv bool) (int, error) {
	family := unix.AF_INET
	if l.v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("udp: socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("udp: %s (port %d): %w", what, port, err)
	}
	size := l.cfg.SocketBuffer
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size) // capped, never refused
	}
	if l.v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("IPV6_V6ONLY", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1); err != nil {
			return fail("IPV6_DONTFRAG", err)
		}
	} else if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return fail("IP_MTU_DISCOVER", err)
	}
	if recv {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); err != nil {
			return fail("SO_RXQ_OVFL", err)
		}
		if l.v6 {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		} else {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
		if err != nil {
			return fail("receive TOS", err)
		}
	} else {
		drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
		prog := unix.SockFprog{Len: 1, Filter: &drop[0]}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
			return fail("SO_ATTACH_FILTER", err)
		}
	}
	var sa unix.Sockaddr
	if l.v6 {
		sa = &unix.SockaddrInet6{Port: int(port), Addr: l.local, ZoneId: l.scope}
	} else {
		sa = &unix.SockaddrInet4{Port: int(port), Addr: [4]byte(l.local[:4])}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind "+netip.AddrPortFrom(l.cfg.Local, port).String(), err)
	}
	return fd, nil
}

// setupMsgs points every message header at its own iovec, name and control
// buffer once, so that the hot path only sets lengths.
func (l *Link) setupMsgs() {
	b := l.batch
	l.rxMsgs = make([]unix.Mmsghdr, b)
	l.rxIov = make([]unix.Iovec, b)
	l.rxNames = make([]unix.RawSockaddrInet6, b)
	l.rxCtrl = make([]byte, b*rxCtrlLen)
	l.rxIDs = make([]uint32, b)
	l.txMsgs = make([]unix.Mmsghdr, b)
	l.txIov = make([]unix.Iovec, b)
	l.txNames = make([]unix.RawSockaddrInet6, b)
	l.txCtrl = make([]byte, b*txCtrlLen)
	l.txLen = make([]int, b)
	l.txP = make([]parsed, b)
	l.txSock = make([]int32, b)
	l.count = make([]int32, len(l.socks))
	l.pos = make([]int32, len(l.socks))
	for j := 0; j < b; j++ {
		h := &l.rxMsgs[j].Hdr
		h.Name = (*byte)(unsafe.Pointer(&l.rxNames[j]))
		h.Iov = &l.rxIov[j]
		h.Iovlen = 1
		h.Control = &l.rxCtrl[j*rxCtrlLen]
		h = &l.txMsgs[j].Hdr
		h.Name = (*byte)(unsafe.Pointer(&l.txNames[j]))
		h.Iov = &l.txIov[j]
		h.Iovlen = 1
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

// Recv fills fs with received datagrams, each behind synthesized Ethernet,
// IP and UDP headers. It never blocks.
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
		l.rxIov[k].Base = &buf[l.hdr]
		l.rxIov[k].SetLen(len(buf) - l.hdr)
		h := &l.rxMsgs[k].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(rxCtrlLen)
		h.Flags = 0
	}
	r, errno := mmsg(unix.SYS_RECVMMSG, l.roce, l.rxMsgs[:n], unix.MSG_DONTWAIT)
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
		plen := int(m.Len)
		tos := l.readCtrl(k, int(m.Hdr.Controllen))
		var src [16]byte
		var sport uint16
		name := &l.rxNames[k]
		if l.v6 {
			src = name.Addr
			sport = ntohs(name.Port)
		} else {
			sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
			copy(src[:4], sa.Addr[:])
			sport = ntohs(sa.Port)
		}
		srcMAC := macOfRaw(&src, l.v6)
		writeHeaders(buf, l.v6, &src, &l.local, &srcMAC, &l.info.MAC, sport, RoCEPort, tos, plen)
		fs[got] = link.Frame{Buf: buf[:l.hdr+plen], ID: tagRx | uint64(id)}
		got++
		bytes += l.hdr + plen
	}
	for k := max(r, 0); k < n; k++ {
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
	return got, fmt.Errorf("udp: recvmmsg: %w", errno)
}

// readCtrl walks message k's control data for the TOS and the socket's drop
// counter and returns the TOS.
func (l *Link) readCtrl(k, clen int) uint8 {
	c := l.rxCtrl[k*rxCtrlLen : k*rxCtrlLen+min(clen, rxCtrlLen)]
	var tos uint8
	for len(c) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		hl := int(h.Len)
		if hl < unix.SizeofCmsghdr || hl > len(c) {
			break
		}
		data := c[unix.CmsgLen(0):hl]
		switch {
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			d := uint64(*(*uint32)(unsafe.Pointer(&data[0])))
			for {
				old := l.rxKernelDrops.Load()
				if d <= old || l.rxKernelDrops.CompareAndSwap(old, d) {
					break
				}
			}
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		}
		sp := unix.CmsgSpace(hl - unix.CmsgLen(0))
		if sp > len(c) {
			break
		}
		c = c[sp:]
	}
	return tos
}

func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

func htons(p uint16) uint16 { return ntohs(p) }

func macOfRaw(a *[16]byte, v6 bool) [6]byte {
	if v6 {
		return [6]byte{0x02, 0x00, a[12], a[13], a[14], a[15]}
	}
	return [6]byte{0x02, 0x00, a[0], a[1], a[2], a[3]}
}

// sockFor picks the send socket for a UDP source port and reports whether
// the port has its own socket.
func (l *Link) sockFor(sport uint16) (int32, bool) {
	if s, ok := l.bySport[sport]; ok {
		return s, true
	}
	if len(l.socks) == 1 {
		return 0, false
	}
	return 1 + int32(int(sport)%(len(l.socks)-1)), false
}

// Send strips the lower headers of each frame and sends the UDP payloads
// with sendmmsg, grouped by source socket. It takes back every frame.
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
	clear(l.count)
	var bad, malformed, unknown uint64
	for i := range fs {
		l.txSock[i] = -1
		f := &fs[i]
		if !l.owned(f.ID) {
			bad++
			continue
		}
		p := &l.txP[i]
		if !parseFrame(f.Buf, l.v6, p) {
			malformed++
			continue
		}
		s, known := l.sockFor(p.sport)
		if !known {
			unknown++
		}
		l.txSock[i] = s
		l.count[s]++
	}
	var at int32
	for s, c := range l.count {
		l.pos[s] = at
		at += c
	}
	for i := range fs {
		s := l.txSock[i]
		if s < 0 {
			continue
		}
		j := l.pos[s]
		l.pos[s]++
		l.fillMsg(int(j), fs[i].Buf, &l.txP[i])
	}
	// Now pos[s] is the end of socket s's run of messages.
	sent, bytes := 0, 0
	var errs uint64
	for s, c := range l.count {
		if c == 0 {
			continue
		}
		end := int(l.pos[s])
		for off := end - int(c); off < end; {
			r, errno := mmsg(unix.SYS_SENDMMSG, l.socks[s], l.txMsgs[off:end], 0)
			if errno == unix.EINTR {
				continue
			}
			if errno != 0 || r <= 0 {
				// The message at off was refused; skip it.
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
	}
	for i := range fs {
		if l.txSock[i] >= 0 || bad == 0 || l.owned(fs[i].ID) {
			if !l.put(fs[i].ID) {
				l.badFrames.Add(1) // the same frame twice in one batch
			}
		}
	}
	l.txFrames.Add(uint64(sent))
	l.txBytes.Add(uint64(bytes))
	if d := uint64(len(fs) - sent); d > 0 {
		l.txDropped.Add(d)
		l.badFrames.Add(bad)
		l.txMalformed.Add(malformed)
		l.txErrs.Add(errs)
	}
	if unknown > 0 {
		l.txUnknown.Add(unknown)
	}
	return sent
}

func (l *Link) fillMsg(j int, b []byte, p *parsed) {
	l.txLen[j] = len(b)
	iov := &l.txIov[j]
	if p.plen > 0 {
		iov.Base = &b[p.payload]
	} else {
		iov.Base = nil
	}
	iov.SetLen(p.plen)
	h := &l.txMsgs[j].Hdr
	name := &l.txNames[j]
	if l.v6 {
		*name = unix.RawSockaddrInet6{Family: unix.AF_INET6, Port: htons(l.cfg.PeerPort), Addr: p.dst, Scope_id: l.scope}
		h.Namelen = unix.SizeofSockaddrInet6
	} else {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: htons(l.cfg.PeerPort), Addr: [4]byte(p.dst[:4])}
		h.Namelen = unix.SizeofSockaddrInet4
	}
	if p.tos == 0 {
		h.Control = nil
		h.SetControllen(0)
		return
	}
	c := l.txCtrl[j*txCtrlLen : (j+1)*txCtrlLen]
	ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	if l.v6 {
		ch.Level, ch.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	} else {
		ch.Level, ch.Type = unix.IPPROTO_IP, unix.IP_TOS
	}
	ch.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = int32(p.tos)
	h.Control = &c[0]
	h.SetControllen(txCtrlLen)
}

// mmsg calls sendmmsg or recvmmsg on msgs and returns the number of
// messages moved or the errno.
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

// Wait blocks in ppoll until a datagram arrives at Port, Wake is called or
// timeout passes (negative: no limit).
func (l *Link) Wait(timeout time.Duration) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	l.pfd[0] = unix.PollFd{Fd: int32(l.efd), Events: unix.POLLIN}
	l.pfd[1] = unix.PollFd{Fd: int32(l.roce), Events: unix.POLLIN}
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
		return fmt.Errorf("udp: ppoll: %w", err)
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
	l.closeFDs()
	return nil
}

func (l *Link) closeFDs() {
	for _, fd := range l.socks {
		unix.Close(fd)
	}
	if len(l.socks) == 0 && l.roce >= 0 {
		unix.Close(l.roce)
	}
	l.socks, l.roce = nil, -1
	if l.efd >= 0 {
		unix.Close(l.efd)
		l.efd = -1
	}
}

// Stats returns the link.Stats counters. Safe from any goroutine.
func (l *Link) Stats() link.Stats { return l.Counters().Stats }

// Counters returns all counters. Safe from any goroutine.
func (l *Link) Counters() Counters {
	c := Counters{
		TxMalformed:      l.txMalformed.Load(),
		TxUnknownEntropy: l.txUnknown.Load(),
		TxErrors:         l.txErrs.Load(),
		TxErrno:          l.txErrno.Load(),
		RxTruncated:      l.rxTrunc.Load(),
		RxKernelDrops:    l.rxKernelDrops.Load(),
		BadFrames:        l.badFrames.Load(),
	}
	c.RxFrames = l.rxFrames.Load()
	c.RxBytes = l.rxBytes.Load()
	c.TxFrames = l.txFrames.Load()
	c.TxBytes = l.txBytes.Load()
	c.TxDropped = l.txDropped.Load()
	c.RxDropped = c.RxTruncated + c.RxKernelDrops
	return c
}
