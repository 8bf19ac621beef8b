//go:build linux

package raw

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock"
	"github.com/sprayfabric/spray/link/nexthop"
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
	cfg  Config
	info link.Info
	fd   int
	c    sock.Core

	kdMu          sync.Mutex
	rxKernelDrops uint64

	// hops and hop rewrite each sent frame's destination MAC to its next
	// hop's; nil with Config.KeepDstMAC.
	hops *nexthop.Table
	hop  *nexthop.Cache
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
	l := &Link{cfg: c, fd: -1}
	l.info = link.Info{
		Name:      fmt.Sprintf("raw:%s", ifi.Name),
		FrameSize: c.FrameSize,
		BatchSize: c.Batch,
		MAC:       c.MAC,
		IP:        c.IP,
	}
	if err := l.c.Init("raw", c.FrameSize, c.Frames, c.Batch); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := l.openSocket(); err != nil {
		l.c.Close(nil)
		return nil, err
	}
	l.openGuard()
	if !c.KeepDstMAC {
		if l.hops, err = nexthop.Open(nexthop.Config{Ifindex: c.Ifindex}); err != nil {
			l.c.Close(nil)
			return nil, fmt.Errorf("raw: %w", err)
		}
		l.hop = l.hops.NewCache()
	}
	l.c.RxMsgs = sock.NewMsgs(c.Batch, false, rxCtrlLen)
	l.c.TxMsgs = sock.NewMsgs(c.Batch, false, 0)
	return l, nil
}

func (l *Link) openSocket() error {
	if err := l.c.OpenEventfd(); err != nil {
		return err
	}
	// Protocol 0: the socket receives nothing until bind, by which time
	// the filter is in place.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("raw: socket: %w", err)
	}
	l.fd = fd
	l.c.AddFD(fd, true)
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
	sock.SetRcvBuf(l.fd, l.cfg.SocketBuffer)
	sock.SetSndBuf(l.fd, l.cfg.SocketBuffer)
	sa := &unix.SockaddrLinklayer{Protocol: sock.Htons(unix.ETH_P_ALL), Ifindex: l.cfg.Ifindex}
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
	if sock.AttachDropFilter(fd) != nil || unix.Bind(fd, sa) != nil {
		unix.Close(fd)
		return
	}
	l.c.AddFD(fd, false)
}

// Info describes the link.
func (l *Link) Info() link.Info { return l.info }

// Alloc fills fs with free transmit buffers.
func (l *Link) Alloc(fs []link.Frame) int { return l.c.Alloc(fs) }

// Release returns received frames (or unsent transmit buffers) to the link.
func (l *Link) Release(fs []link.Frame) { l.c.Release(fs) }

// Recv fills fs with received frames. It never blocks.
func (l *Link) Recv(fs []link.Frame) (int, error) {
	return l.c.Recv(fs, vlanLen, l.frame) // room to put a tag back
}

// frame returns received message k, of n bytes at buf[vlanLen:], with the
// VLAN tag the kernel took off put back in place.
func (l *Link) frame(k int, buf []byte, n int) []byte {
	frame := buf[vlanLen : vlanLen+n]
	if tpid, tci, ok := l.vlanTag(k); ok && len(frame) >= 12 {
		copy(buf[0:12], frame[0:12])
		binary.BigEndian.PutUint16(buf[12:], tpid)
		binary.BigEndian.PutUint16(buf[14:], tci)
		frame = buf[:vlanLen+n]
	}
	return frame
}

// vlanTag reads the tag the kernel took off message k from its auxdata.
func (l *Link) vlanTag(k int) (tpid, tci uint16, ok bool) {
	c := l.c.RxMsgs.Control(k)
	for {
		h, data, rest, ok := sock.NextCmsg(c)
		if !ok {
			return 0, 0, false
		}
		if h.Level == unix.SOL_PACKET && h.Type == unix.PACKET_AUXDATA && len(data) >= sizeofAuxdata {
			a := (*unix.TpacketAuxdata)(unsafe.Pointer(&data[0]))
			if a.Status&unix.TP_STATUS_VLAN_VALID == 0 {
				return 0, 0, false
			}
			tpid = 0x8100
			if a.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 && a.Vlan_tpid != 0 {
				tpid = a.Vlan_tpid
			}
			return tpid, a.Vlan_tci, true
		}
		c = rest
	}
}

// Send transmits the frames with sendmmsg and takes every one of them back.
func (l *Link) Send(fs []link.Frame) (int, error) { return l.c.Send(fs, l.sendBatch) }

func (l *Link) sendBatch(fs []link.Frame) int {
	var bad, malformed uint64
	tx := &l.c.TxMsgs
	m := 0
	for i := range fs {
		f := &fs[i]
		if !l.c.Owned(f.ID) {
			bad++
			continue
		}
		if len(f.Buf) < 14 {
			malformed++
			continue
		}
		l.hop.Rewrite(f.Buf)
		tx.Iov[m].Base = &f.Buf[0]
		tx.Iov[m].SetLen(len(f.Buf))
		tx.Len[m] = len(f.Buf)
		m++
	}
	sent, bytes, errs := l.c.SendMsgs(l.fd, 0, m)
	l.c.SendDone(fs, sent, bytes, bad, malformed, errs)
	return sent
}

// Wait parks in the runtime poller until a frame arrives, Wake is called or
// timeout passes (negative: no limit; a timerfd keeps short timeouts
// precise).
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
func (l *Link) Close() error {
	err := l.c.Close(func() { l.kernelDrops() })
	if l.hops != nil {
		l.hops.Close()
	}
	return err
}

// NextHops returns the table that chooses each sent frame's destination
// MAC, for its counters; nil with Config.KeepDstMAC.
func (l *Link) NextHops() *nexthop.Table { return l.hops }

// kernelDrops folds the kernel's drop count (which reading resets) into
// the counter. Callers hold the Core's lock (either way).
func (l *Link) kernelDrops() uint64 {
	l.kdMu.Lock()
	defer l.kdMu.Unlock()
	if fd := l.c.RxFD(); fd >= 0 {
		if st, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			l.rxKernelDrops += uint64(st.Drops)
		}
	}
	return l.rxKernelDrops
}

// Stats returns the link.Stats counters. Safe from any goroutine.
func (l *Link) Stats() link.Stats { return l.Counters().Stats }

// Counters returns all counters. Safe from any goroutine.
func (l *Link) Counters() Counters {
	l.c.RLock()
	kd := l.kernelDrops()
	l.c.RUnlock()
	s := l.c.Snapshot(kd)
	return Counters{
		Stats:         s.Stats,
		TxMalformed:   s.TxMalformed,
		TxErrors:      s.TxErrors,
		TxErrno:       s.TxErrno,
		RxTruncated:   s.RxTruncated,
		RxKernelDrops: kd,
		BadFrames:     s.BadFrames,
	}
}
