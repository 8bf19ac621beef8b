//go:build linux

package udp

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock"
)

var (
	rxCtrlLen = 3 * unix.CmsgSpace(4) // SO_RXQ_OVFL, IP_TOS / IPV6_TCLASS, UDP_GRO
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
	c       sock.Core

	txP    []parsed
	slotOf []int32 // frame of message slot j
	txSock []int32 // socket of frame i, -1: dropped
	count  []int32 // frames per socket in this batch
	pos    []int32 // next message slot per socket
	off    offload

	txUnknown, rxKernelDrops atomic.Uint64
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
	l := &Link{cfg: c, v6: c.Local.Is6(), batch: c.Batch, roce: -1}
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
	}
	if err := l.c.Init("udp", c.FrameSize, c.Frames, c.Batch); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := l.openSockets(); err != nil {
		l.c.Close(nil)
		return nil, err
	}
	l.setupMsgs()
	l.setupOffload()
	l.info.Segments = l.off.segments(l)
	l.info.Ports = l.ports()
	return l, nil
}

// ports lists the source ports the link sprays over: Entropies without
// duplicates, else the ephemeral ports bound, else Port alone.
func (l *Link) ports() []uint16 {
	if len(l.socks) == 1 {
		return []uint16{l.cfg.Port}
	}
	var ps []uint16
	seen := map[uint16]bool{}
	for _, e := range l.cfg.Entropies {
		if !seen[e] {
			seen[e] = true
			ps = append(ps, e)
		}
	}
	if len(ps) > 0 {
		return ps
	}
	ps = make([]uint16, len(l.socks))
	for p, i := range l.bySport {
		ps[i] = p
	}
	return ps[1:]
}

func (l *Link) openSockets() error {
	if err := l.c.OpenEventfd(); err != nil {
		return err
	}
	var err error
	l.roce, err = l.socket(l.cfg.Port, true)
	if err != nil {
		return err
	}
	l.c.AddFD(l.roce, true)
	l.socks = append(l.socks, l.roce)
	l.bySport = map[uint16]int32{l.cfg.Port: 0}
	add := func(fd int, port uint16) {
		l.c.AddFD(fd, false)
		l.bySport[port] = int32(len(l.socks))
		l.socks = append(l.socks, fd)
	}
	for _, e := range l.cfg.Entropies {
		if _, ok := l.bySport[e]; ok {
			continue
		}
		fd, err := l.socket(e, false)
		if err != nil {
			return err
		}
		add(fd, e)
	}
	for i := 0; len(l.cfg.Entropies) == 0 && i < l.cfg.EphemeralEntropies; i++ {
		fd, err := l.socket(0, false)
		if err != nil {
			return err
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("udp: getsockname: %w", err)
		}
		var port int
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			port = a.Port
		case *unix.SockaddrInet6:
			port = a.Port
		}
		add(fd, uint16(port))
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
	sock.SetSndBuf(fd, l.cfg.SocketBuffer)
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
		sock.SetRcvBuf(fd, l.cfg.SocketBuffer)
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
		if err := sock.AttachDropFilter(fd); err != nil {
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

// setupMsgs makes the message batches, each message with its own address
// and control buffer, and the per-socket grouping arrays of Send.
func (l *Link) setupMsgs() {
	b := l.batch
	l.c.RxMsgs = sock.NewMsgs(b, true, rxCtrlLen)
	l.c.TxMsgs = sock.NewMsgs(b, true, txCtrlLen)
	l.txP = make([]parsed, b)
	l.txSock = make([]int32, b)
	l.slotOf = make([]int32, b)
	l.count = make([]int32, len(l.socks))
	l.pos = make([]int32, len(l.socks))
}

// Info describes the link.
func (l *Link) Info() link.Info { return l.info }

// Alloc fills fs with free transmit buffers.
func (l *Link) Alloc(fs []link.Frame) int { return l.c.Alloc(fs) }

// Release returns received frames (or unsent transmit buffers) to the link.
func (l *Link) Release(fs []link.Frame) { l.c.Release(fs) }

// Recv fills fs with received datagrams, each behind synthesized Ethernet,
// IP and UDP headers. It never blocks.
func (l *Link) Recv(fs []link.Frame) (int, error) {
	if l.off.gro {
		return l.recvCoalesced(fs)
	}
	return l.c.Recv(fs, l.hdr, l.frame)
}

// frame writes the headers in front of received datagram k, of plen bytes
// at buf[l.hdr:], and returns the frame.
func (l *Link) frame(k int, buf []byte, plen int) []byte {
	tos, _ := l.readCtrl(k)
	src, sport := l.source(k)
	srcMAC := macOfRaw(&src, l.v6)
	writeHeaders(buf, l.v6, &src, &l.local, &srcMAC, &l.info.MAC, sport, RoCEPort, tos, plen)
	return buf[:l.hdr+plen]
}

// source returns the sender's address and port of received message k.
func (l *Link) source(k int) (src [16]byte, sport uint16) {
	name := &l.c.RxMsgs.Names[k]
	if l.v6 {
		return name.Addr, sock.Htons(name.Port)
	}
	sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
	copy(src[:4], sa.Addr[:])
	return src, sock.Htons(sa.Port)
}

// readCtrl walks message k's control data for the TOS, the segment size of
// a coalesced datagram (0: not coalesced) and the socket's drop counter,
// and returns the first two.
func (l *Link) readCtrl(k int) (tos uint8, gso int) {
	c := l.c.RxMsgs.Control(k)
	for {
		h, data, rest, ok := sock.NextCmsg(c)
		if !ok {
			return tos, gso
		}
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
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			gso = int(*(*int32)(unsafe.Pointer(&data[0])))
		}
		c = rest
	}
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
func (l *Link) Send(fs []link.Frame) (int, error) { return l.c.Send(fs, l.sendBatch) }

func (l *Link) sendBatch(fs []link.Frame) int {
	clear(l.count)
	var bad, malformed, unknown uint64
	for i := range fs {
		l.txSock[i] = -1
		f := &fs[i]
		if !l.c.Owned(f.ID) {
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
		l.slotOf[j] = int32(i)
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
		var n, b int
		var e uint64
		if l.off.gso {
			n, b, e = l.sendRun(l.socks[s], end-int(c), end)
		} else {
			n, b, e = l.c.SendMsgs(l.socks[s], end-int(c), end)
		}
		sent, bytes, errs = sent+n, bytes+b, errs+e
	}
	l.c.SendDone(fs, sent, bytes, bad, malformed, errs)
	if unknown > 0 {
		l.txUnknown.Add(unknown)
	}
	return sent
}

func (l *Link) fillMsg(j int, b []byte, p *parsed) {
	tx := &l.c.TxMsgs
	tx.Len[j] = len(b)
	iov := &tx.Iov[j]
	if p.plen > 0 {
		iov.Base = &b[p.payload]
	} else {
		iov.Base = nil
	}
	iov.SetLen(p.plen)
	h := &tx.Hdr[j].Hdr
	name := &tx.Names[j]
	if l.v6 {
		*name = unix.RawSockaddrInet6{Family: unix.AF_INET6, Port: sock.Htons(l.cfg.PeerPort), Addr: p.dst, Scope_id: l.scope}
		h.Namelen = unix.SizeofSockaddrInet6
	} else {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: sock.Htons(l.cfg.PeerPort), Addr: [4]byte(p.dst[:4])}
		h.Namelen = unix.SizeofSockaddrInet4
	}
	if p.tos == 0 {
		h.Control = nil
		h.SetControllen(0)
		return
	}
	c := tx.CtrlSlot(j)
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

// Wait parks in the runtime poller until a datagram arrives at Port, Wake is
// called or timeout passes (negative: no limit; a timerfd keeps short
// timeouts precise).
func (l *Link) Wait(timeout time.Duration) error { return l.c.Wait(timeout) }

// PrepareWait and Block split Wait (link.WaitSplitter): Recv and Send may
// run on another goroutine while Block blocks.
func (l *Link) PrepareWait(timeout time.Duration) (time.Duration, bool, error) {
	return l.c.PrepareWait(timeout)
}

// Block blocks like Wait after PrepareWait.
func (l *Link) Block(timeout time.Duration) error { return l.c.Block(timeout) }

// Wake makes a pending or the next Wait return. Safe from any goroutine.
func (l *Link) Wake() { l.c.Wake() }

// Close closes the sockets, unblocking a pending Wait. It is idempotent and
// safe from any goroutine; afterwards methods return link.ErrClosed.
func (l *Link) Close() error { return l.c.Close(nil) }

// Stats returns the link.Stats counters. Safe from any goroutine.
func (l *Link) Stats() link.Stats { return l.Counters().Stats }

// Counters returns all counters. Safe from any goroutine.
func (l *Link) Counters() Counters {
	kd := l.rxKernelDrops.Load()
	nb := l.off.rxNoBuffer.Load()
	s := l.c.Snapshot(kd + nb)
	return Counters{
		TxSegmented:      l.off.txSegmented.Load(),
		TxSegmentMsgs:    l.off.txSegmentMsgs.Load(),
		RxCoalesced:      l.off.rxCoalesced.Load(),
		RxCoalescedMsgs:  l.off.rxCoalescedMsgs.Load(),
		RxNoBuffer:       nb,
		Stats:            s.Stats,
		TxMalformed:      s.TxMalformed,
		TxUnknownEntropy: l.txUnknown.Load(),
		TxErrors:         s.TxErrors,
		TxErrno:          s.TxErrno,
		RxTruncated:      s.RxTruncated,
		RxKernelDrops:    kd,
		BadFrames:        s.BadFrames,
	}
}
