//go:build linux

package udp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock"
)

// Limits of one offloaded message.
const (
	// maxSegments is the most frames one UDP_SEGMENT message carries
	// (the kernel's UDP_MAX_SEGMENTS was 64 before Linux 6.2).
	maxSegments = 64
	// maxCoalesced is the largest datagram the kernel coalesces (UDP_GRO):
	// an IP packet's length field bounds it.
	maxCoalesced = 65535
	// groSlots bounds the messages of one coalescing recvmmsg: each holds
	// maxCoalesced bytes of scratch.
	groSlots = 64
)

var (
	gsoCtrlLen = unix.CmsgSpace(2) + unix.CmsgSpace(4) // UDP_SEGMENT, IP_TOS / IPV6_TCLASS
)

// offload is the state of UDP_SEGMENT on send and UDP_GRO on receive.
type offload struct {
	gso bool // send runs as UDP_SEGMENT messages
	gro bool // the receiving socket coalesces

	// Send: one message per run of slots of TxMsgs.
	msgs  []unix.Mmsghdr
	ctrl  []byte
	start []int32 // first slot of message m
	segs  []int32 // its frames
	bytes []int   // their frame bytes (TxMsgs.Len)

	// Receive: message k reads into a pool frame, then scratch[k].
	iov     []unix.Iovec // 2 per message
	scratch []byte       // groSlots * maxCoalesced
	pending []link.Frame // segments split out beyond the caller's slice
	head    int          // next pending frame to hand out

	txSegmented, txSegmentMsgs, rxCoalesced, rxCoalescedMsgs, rxNoBuffer atomic.Uint64
}

// setupOffload turns UDP_GRO on at the receiving socket and makes the
// message arrays of both directions; offloads the kernel refuses stay off.
func (l *Link) setupOffload() {
	o := &l.off
	if l.cfg.NoOffload {
		return
	}
	b := l.batch
	o.gso = true
	o.msgs = make([]unix.Mmsghdr, b)
	o.ctrl = make([]byte, b*gsoCtrlLen)
	o.start = make([]int32, b)
	o.segs = make([]int32, b)
	o.bytes = make([]int, b)
	if unix.SetsockoptInt(l.roce, unix.IPPROTO_UDP, unix.UDP_GRO, 1) != nil {
		return
	}
	o.gro = true
	n := min(b, groSlots)
	o.iov = make([]unix.Iovec, 2*n)
	o.scratch = make([]byte, n*maxCoalesced)
	rx := &l.c.RxMsgs
	for k := range n {
		h := &rx.Hdr[k].Hdr
		h.Iov = &o.iov[2*k]
		h.Iovlen = 2
		o.iov[2*k+1].Base = &o.scratch[k*maxCoalesced]
		o.iov[2*k+1].SetLen(maxCoalesced)
	}
	o.pending = make([]link.Frame, 0, l.cfg.Frames)
}

// segments is the most full frames one UDP_SEGMENT message carries (the
// link.Info.Segments of the link), 0 without offload: maxSegments, or
// fewer when their payloads pass maxCoalesced (18 frames of 3514 bytes).
func (o *offload) segments(l *Link) int {
	if !o.gso {
		return 0
	}
	limit := maxCoalesced - udpLen - ipv4Len
	if l.v6 {
		limit = maxCoalesced - udpLen
	}
	return min(maxSegments, limit/max(l.cfg.FrameSize-l.hdr, 1))
}

// sendRun sends TxMsgs[from:to], the messages of one socket, as
// UDP_SEGMENT messages: a run of frames to the same destination with the
// same TOS, all of one payload length but the last, which may be shorter,
// goes in one message of at most maxSegments frames and maxCoalesced
// bytes. A run the kernel refuses is sent again frame by frame, so a frame
// larger than the path MTU is refused alone, as without offload; a kernel
// without segmentation offload turns it off for good.
func (l *Link) sendRun(fd, from, to int) (sent, bytes int, errs uint64) {
	o := &l.off
	tx := &l.c.TxMsgs
	limit := maxCoalesced - udpLen - ipv4Len
	if l.v6 {
		limit = maxCoalesced - udpLen
	}
	nm := 0
	for j := from; j < to; {
		p := &l.txP[l.slotOf[j]]
		g := p.plen
		k := j + 1
		total := g
		if g > 0 {
			for k < to && k-j < maxSegments {
				q := &l.txP[l.slotOf[k]]
				if q.plen > g || q.plen == 0 || q.tos != p.tos || q.dst != p.dst || total+q.plen > limit {
					break
				}
				total += q.plen
				k++
				if q.plen < g {
					break
				}
			}
		}
		m := &o.msgs[nm]
		h := &m.Hdr
		h.Name = tx.Hdr[j].Hdr.Name
		h.Namelen = tx.Hdr[j].Hdr.Namelen
		h.Iov = &tx.Iov[j]
		h.Iovlen = uint64(k - j)
		c := o.ctrl[nm*gsoCtrlLen : (nm+1)*gsoCtrlLen]
		cl := 0
		if k-j > 1 {
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			ch.Level, ch.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
			ch.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(g)
			cl = unix.CmsgSpace(2)
		}
		if p.tos != 0 {
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[cl]))
			if l.v6 {
				ch.Level, ch.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
			} else {
				ch.Level, ch.Type = unix.IPPROTO_IP, unix.IP_TOS
			}
			ch.SetLen(unix.CmsgLen(4))
			*(*int32)(unsafe.Pointer(&c[cl+unix.CmsgLen(0)])) = int32(p.tos)
			cl += unix.CmsgSpace(4)
		}
		if cl > 0 {
			h.Control = &c[0]
		} else {
			h.Control = nil
		}
		h.SetControllen(cl)
		o.start[nm], o.segs[nm] = int32(j), int32(k-j)
		b := 0
		for i := j; i < k; i++ {
			b += tx.Len[i]
		}
		o.bytes[nm] = b
		nm++
		j = k
	}
	for off := 0; off < nm; {
		r, errno := sock.Mmsg(unix.SYS_SENDMMSG, fd, o.msgs[off:nm], 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || r <= 0 {
			// The first message of o.msgs[off:] was refused: send its
			// frames alone, which counts them as it should.
			s, e := int(o.start[off]), int(o.start[off]+o.segs[off])
			if o.segs[off] > 1 {
				switch errno {
				case unix.EIO, unix.ENOPROTOOPT, unix.EOPNOTSUPP:
					o.gso = false
				}
			}
			n, b, x := l.c.SendMsgs(fd, s, e)
			sent, bytes, errs = sent+n, bytes+b, errs+x
			off++
			continue
		}
		var segd, msgs uint64
		for m := off; m < off+r; m++ {
			sent += int(o.segs[m])
			bytes += o.bytes[m]
			if o.segs[m] > 1 {
				segd += uint64(o.segs[m])
				msgs++
			}
		}
		if msgs > 0 {
			o.txSegmented.Add(segd)
			o.txSegmentMsgs.Add(msgs)
		}
		off += r
	}
	return sent, bytes, errs
}

// recvCoalesced is Recv on a socket with UDP_GRO: a datagram the kernel
// coalesced is split back into its segments, the first in place in its
// pool frame, the others copied into frames of their own, each behind its
// own synthesized headers. Segments beyond fs wait in pending for the next
// Recv; the number of datagrams read is bounded so that their segments
// (at most 64 each, the kernel's limit) find free frames.
func (l *Link) recvCoalesced(fs []link.Frame) (int, error) {
	c := &l.c
	c.RLock()
	defer c.RUnlock()
	if c.Closed() {
		return 0, link.ErrClosed
	}
	o := &l.off
	got := 0
	for o.head < len(o.pending) && got < len(fs) {
		fs[got] = o.pending[o.head]
		got++
		o.head++
	}
	if o.head < len(o.pending) {
		return got, nil
	}
	o.pending, o.head = o.pending[:0], 0
	n := min(len(fs)-got, l.batch, groSlots, c.Rx.Free()/maxSegments)
	if n <= 0 && got == 0 && len(fs) > 0 {
		n = min(1, c.Rx.Free())
	}
	if n <= 0 {
		return got, nil
	}
	m := &c.RxMsgs
	for k := 0; k < n; k++ {
		id, _ := c.Rx.Get()
		m.IDs[k] = id
		buf := c.Rx.Buf(id)
		o.iov[2*k].Base = &buf[l.hdr]
		o.iov[2*k].SetLen(len(buf) - l.hdr)
		h := &m.Hdr[k].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(m.CtrlLen)
		h.Flags = 0
	}
	r, errno := sock.Mmsg(unix.SYS_RECVMMSG, c.RxFD(), m.Hdr[:n], unix.MSG_DONTWAIT)
	frames, bytes, trunc := 0, 0, 0
	var coalesced, cmsgs, nobuf uint64
	for k := 0; k < r; k++ {
		id := m.IDs[k]
		buf := c.Rx.Buf(id)
		capa := len(buf) - l.hdr
		size := int(m.Hdr[k].Len)
		tos, gsz := l.readCtrl(k)
		if m.Hdr[k].Hdr.Flags&unix.MSG_TRUNC != 0 {
			trunc++
			_ = c.Rx.Put(id)
			continue
		}
		if gsz <= 0 || size <= gsz {
			gsz = max(size, 1)
		}
		src, sport := l.source(k)
		srcMAC := macOfRaw(&src, l.v6)
		scratch := o.scratch[k*maxCoalesced:]
		inPlace := false
		for at := 0; at < max(size, 1); at += gsz {
			plen := min(gsz, size-at)
			if plen > capa {
				trunc++
				continue
			}
			fid, fbuf := id, buf
			if at == 0 {
				inPlace = true
			} else {
				var ok bool
				if fid, ok = c.Rx.Get(); !ok {
					nobuf++
					continue
				}
				fbuf = c.Rx.Buf(fid)
				// The segment's bytes: what of it the first frame
				// took, then the scratch.
				dst := fbuf[l.hdr : l.hdr+plen]
				w := 0
				if at < capa {
					w = copy(dst, buf[l.hdr+at:l.hdr+min(capa, at+plen)])
				}
				if w < plen {
					copy(dst[w:], scratch[at+w-capa:at+plen-capa])
				}
			}
			if size > gsz {
				coalesced++
				if at == 0 {
					cmsgs++
				}
			}
			writeHeaders(fbuf, l.v6, &src, &l.local, &srcMAC, &l.info.MAC, sport, RoCEPort, tos, plen)
			f := link.Frame{Buf: fbuf[:l.hdr+plen], ID: sock.TagRx | uint64(fid)}
			bytes += len(f.Buf)
			frames++
			if got < len(fs) {
				fs[got] = f
				got++
			} else {
				o.pending = append(o.pending, f)
			}
		}
		if !inPlace {
			_ = c.Rx.Put(id)
		}
	}
	for k := r; k < n; k++ {
		_ = c.Rx.Put(m.IDs[k])
	}
	if frames > 0 {
		c.N.RxFrames.Add(uint64(frames))
		c.N.RxBytes.Add(uint64(bytes))
	}
	if trunc > 0 {
		c.N.RxTruncated.Add(uint64(trunc))
	}
	if coalesced > 0 {
		o.rxCoalesced.Add(coalesced)
		o.rxCoalescedMsgs.Add(cmsgs)
	}
	if nobuf > 0 {
		o.rxNoBuffer.Add(nobuf)
	}
	switch errno {
	case 0, unix.EAGAIN, unix.EINTR:
		return got, nil
	}
	return got, fmt.Errorf("udp: recvmmsg: %w", errno)
}
