package sock

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock/socktest"
)

const headroom = 8

// end is one side of an AF_UNIX datagram socket pair driven through a
// Core, as a link would: frames go out whole and come in behind headroom
// bytes.
type end struct {
	c  Core
	fd int
}

func newEnd(t *testing.T, fd, frameSize, frames, batch int) *end {
	t.Helper()
	e := &end{fd: fd}
	if err := e.c.Init("test", frameSize, frames, batch); err != nil {
		t.Fatal(err)
	}
	if err := e.c.OpenEventfd(); err != nil {
		t.Fatal(err)
	}
	e.c.AddFD(fd, true)
	e.c.RxMsgs = NewMsgs(batch, false, 0)
	e.c.TxMsgs = NewMsgs(batch, false, 0)
	t.Cleanup(func() { e.c.Close(nil) })
	return e
}

func pair(t *testing.T, frameSize, frames, batch int) (*end, *end) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		SetSndBuf(fd, 1<<20)
		SetRcvBuf(fd, 1<<20)
	}
	return newEnd(t, fds[0], frameSize, frames, batch), newEnd(t, fds[1], frameSize, frames, batch)
}

func (e *end) sendBatch(fs []link.Frame) int {
	var bad, malformed uint64
	tx := &e.c.TxMsgs
	m := 0
	for i := range fs {
		f := &fs[i]
		if !e.c.Owned(f.ID) {
			bad++
			continue
		}
		if len(f.Buf) == 0 {
			malformed++
			continue
		}
		tx.Iov[m].Base = &f.Buf[0]
		tx.Iov[m].SetLen(len(f.Buf))
		tx.Len[m] = len(f.Buf)
		m++
	}
	sent, bytes, errs := e.c.SendMsgs(e.fd, 0, m)
	e.c.SendDone(fs, sent, bytes, bad, malformed, errs)
	return sent
}

func (e *end) frame(k int, buf []byte, n int) []byte { return buf[headroom : headroom+n] }

// The link.Link methods, so that socktest can drive an end.
func (e *end) Info() link.Info                   { return link.Info{} }
func (e *end) Alloc(fs []link.Frame) int         { return e.c.Alloc(fs) }
func (e *end) Release(fs []link.Frame)           { e.c.Release(fs) }
func (e *end) Send(fs []link.Frame) (int, error) { return e.c.Send(fs, e.sendBatch) }
func (e *end) Recv(fs []link.Frame) (int, error) { return e.c.Recv(fs, headroom, e.frame) }
func (e *end) Wait(d time.Duration) error        { return e.c.Wait(d) }
func (e *end) Wake()                             { e.c.Wake() }
func (e *end) Close() error                      { return e.c.Close(nil) }
func (e *end) Stats() link.Stats                 { return e.c.Snapshot(0).Stats }

var _ link.Link = (*end)(nil)

// TestExchange moves random-length frames across the pair in random
// batches and checks every byte, the counters and that no buffer leaks.
func TestExchange(t *testing.T) {
	r := testutil.Rand(t)
	a, b := pair(t, 256, 64, 16)
	fs := make([]link.Frame, 40)
	in := make([]link.Frame, 40)
	sent, got, bytesSent := 0, 0, 0
	for round := 0; round < 200; round++ {
		n := a.Alloc(fs[:1+r.IntN(len(fs))])
		for i := range n {
			fs[i].Buf = fs[i].Buf[:4+r.IntN(256-headroom-3)]
			socktest.Content(fs[i].Buf, uint32(sent+i))
			bytesSent += len(fs[i].Buf)
		}
		m, err := a.Send(fs[:n])
		if err != nil || m != n {
			t.Fatalf("Send = %d, %v; want %d", m, err, n)
		}
		sent += n
		for got < sent {
			k, err := socktest.Recv(b, in[:1+r.IntN(len(in))], 50*time.Millisecond)
			if err != nil || k == 0 {
				t.Fatalf("Recv = %d, %v after %d of %d", k, err, got, sent)
			}
			for _, f := range in[:k] {
				want := make([]byte, len(f.Buf))
				socktest.Content(want, uint32(got))
				if !bytes.Equal(f.Buf, want) {
					t.Fatalf("frame %d differs", got)
				}
				if f.ID&^0xFFFFFFFF != TagRx {
					t.Fatalf("frame %d: ID %#x without the receive tag", got, f.ID)
				}
				got++
			}
			b.Release(in[:k])
		}
	}
	sa, sb := a.c.Snapshot(0), b.c.Snapshot(0)
	if sa.TxFrames != uint64(sent) || sb.RxFrames != uint64(sent) || sa.TxBytes != uint64(bytesSent) ||
		sb.RxBytes != uint64(bytesSent) || sa.TxDropped != 0 || sb.RxDropped != 0 || sa.BadFrames|sb.BadFrames != 0 {
		t.Fatalf("counters a %+v b %+v after %d frames of %d bytes", sa, sb, sent, bytesSent)
	}
	if a.c.Tx.Free() != a.c.Tx.Len() || b.c.Rx.Free() != b.c.Rx.Len() {
		t.Fatalf("buffers leaked: tx %d/%d rx %d/%d", a.c.Tx.Free(), a.c.Tx.Len(), b.c.Rx.Free(), b.c.Rx.Len())
	}
}

// TestBadFrames: foreign IDs, frames given twice, malformed frames,
// truncated datagrams and refused messages are counted, never sent twice.
func TestBadFrames(t *testing.T) {
	a, b := pair(t, 64, 8, 8)
	fs := make([]link.Frame, 3)
	if a.Alloc(fs) != 3 {
		t.Fatal("Alloc")
	}
	fs[0].Buf = fs[0].Buf[:10]
	fs[1].Buf = fs[1].Buf[:0] // malformed for this test's link
	send := []link.Frame{fs[0], fs[1], {ID: TagTx | 99}, {ID: 12345}, fs[0]}
	n, err := a.Send(send)
	if err != nil || n != 2 { // fs[0] twice: both copies go, as in the links
		t.Fatalf("Send = %d, %v", n, err)
	}
	s := a.c.Snapshot(0)
	if s.TxFrames != 2 || s.TxMalformed != 1 || s.BadFrames != 3 || s.TxDropped != 3 {
		t.Fatalf("counters %+v", s)
	}
	in := make([]link.Frame, 4)
	for got := 0; got < 2; {
		k, err := socktest.Recv(b, in, 50*time.Millisecond)
		if err != nil || k == 0 {
			t.Fatalf("Recv = %d, %v after %d of 2", k, err, got)
		}
		got += k
		b.Release(in[:k])
	}
	a.Release(fs[2:3])
	a.Release(fs[2:3])
	if s := a.c.Snapshot(0); s.BadFrames != 4 || a.c.Tx.Free() != 8 {
		t.Fatalf("after a double Release: %+v, %d of 8 buffers free", s, a.c.Tx.Free())
	}

	// A datagram larger than b's buffers past headroom is dropped.
	if a.Alloc(fs[:2]) != 2 {
		t.Fatal("Alloc")
	}
	fs[0].Buf = fs[0].Buf[:64-headroom+1]
	fs[1].Buf = fs[1].Buf[:64-headroom]
	if n, _ := a.Send(fs[:2]); n != 2 {
		t.Fatalf("Send = %d", n)
	}
	k, err := socktest.Recv(b, in, 50*time.Millisecond)
	if err != nil || k != 1 || len(in[0].Buf) != 64-headroom {
		t.Fatalf("Recv = %d, %v", k, err)
	}
	if s := b.c.Snapshot(3); s.RxTruncated != 1 || s.RxDropped != 4 || s.RxFrames != 3 {
		t.Fatalf("receiver counters %+v", s)
	}
	b.Release(in[:k])
	if b.c.Rx.Free() != 8 {
		t.Fatalf("%d of 8 receive buffers back", b.c.Rx.Free())
	}

	// Messages the kernel refuses are skipped one by one and counted.
	if a.Alloc(fs[:3]) != 3 {
		t.Fatal("Alloc")
	}
	tx := &a.c.TxMsgs
	for j := range 3 {
		tx.Iov[j].Base = &fs[j].Buf[0]
		tx.Iov[j].SetLen(1)
		tx.Len[j] = 1
	}
	sent, nb, errs := a.c.SendMsgs(a.c.efd, 0, 3) // not a socket
	if sent != 0 || nb != 0 || errs != 3 || a.c.N.TxErrno.Load() != uint64(unix.ENOTSOCK) {
		t.Fatalf("SendMsgs on an eventfd = %d, %d, %d, errno %d", sent, nb, errs, a.c.N.TxErrno.Load())
	}
	a.Release(fs[:3])
}

func TestWaitWakeClose(t *testing.T) {
	a, b := pair(t, 64, 4, 4)
	if err := a.Wait(0); err != nil {
		t.Fatal(err)
	}
	a.Wake()
	if err := a.Wait(-1); err != nil { // returns at once: woken before
		t.Fatal(err)
	}
	// A datagram wakes the receiver.
	fs := make([]link.Frame, 1)
	a.Alloc(fs)
	fs[0].Buf = fs[0].Buf[:1]
	a.Send(fs)
	if err := b.Wait(-1); err != nil {
		t.Fatal(err)
	}
	// Close unblocks a pending Wait and runs its hook once, with the fds
	// still open.
	done := make(chan error)
	go func() { done <- a.Wait(-1) }()
	time.Sleep(10 * time.Millisecond)
	hooks := 0
	fd := a.fd
	hook := func() {
		hooks++
		if _, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
			t.Errorf("socket closed before the hook: %v", err)
		}
	}
	if err := a.c.Close(hook); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
	if err := a.c.Close(hook); err != nil || hooks != 1 {
		t.Fatalf("second Close = %v, hook ran %d times", err, hooks)
	}
	if _, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err == nil {
		t.Error("socket still open after Close")
	}
	if !a.c.Closed() {
		t.Fatal("Closed() = false")
	}
	if _, err := a.Recv(fs); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Recv after Close = %v", err)
	}
	if _, err := a.Send(fs); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	if err := a.Wait(0); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
	if a.Alloc(fs) != 0 {
		t.Fatal("Alloc after Close")
	}
	a.Wake()
	a.Release(fs)
}

// TestCloseAfterFailedOpen: Close cleans up a Core whose eventfd never
// opened.
func TestCloseAfterFailedOpen(t *testing.T) {
	var c Core
	if err := c.Init("test", 0, 1, 1); err == nil {
		t.Fatal("Init with frame size 0 succeeded")
	}
	if err := c.Close(nil); err != nil {
		t.Fatal(err)
	}
}

func TestNoAllocs(t *testing.T) {
	a, b := pair(t, 512, 32, 16)
	socktest.NoAllocs(t, a, b, func(i int, buf []byte) []byte { return buf[:100+i] })
}

func TestHtons(t *testing.T) {
	p := Htons(0x12B7)
	b := (*[2]byte)(unsafe.Pointer(&p))
	if b[0] != 0x12 || b[1] != 0xB7 || Htons(p) != 0x12B7 {
		t.Fatalf("Htons(0x12B7) = % x", b[:])
	}
}

// TestNextCmsg walks a buffer of two control messages as the kernel writes
// them and a truncated one.
func TestNextCmsg(t *testing.T) {
	buf := make([]byte, 2*unix.CmsgSpace(4))
	put := func(off int, level, typ int32, v uint32) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&buf[off]))
		h.Level, h.Type = level, typ
		h.SetLen(unix.CmsgLen(4))
		*(*uint32)(unsafe.Pointer(&buf[off+unix.CmsgLen(0)])) = v
	}
	put(0, 1, 2, 7)
	put(unix.CmsgSpace(4), 3, 4, 9)
	var seen []int32
	for c := buf; ; {
		h, data, rest, ok := NextCmsg(c)
		if !ok {
			break
		}
		if len(data) != 4 {
			t.Fatalf("data % x", data)
		}
		seen = append(seen, h.Level, h.Type, int32(*(*uint32)(unsafe.Pointer(&data[0]))))
		c = rest
	}
	if len(seen) != 6 || seen[0] != 1 || seen[1] != 2 || seen[2] != 7 || seen[3] != 3 || seen[4] != 4 || seen[5] != 9 {
		t.Fatalf("walked %v", seen)
	}
	if _, _, _, ok := NextCmsg(buf[:unix.CmsgLen(4)-1]); ok {
		t.Fatal("a cut message was accepted")
	}
}

// FuzzNextCmsg: walking any bytes ends, never reads outside them and never
// panics.
func FuzzNextCmsg(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 40))
	f.Add([]byte{20, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255, 1, 0, 0, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		// Control buffers are 8-byte aligned, as make gives them.
		words := make([]uint64, (len(in)+7)/8)
		c := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(in))
		copy(c, in)
		for steps := 0; ; steps++ {
			if steps > len(in) {
				t.Fatal("walk does not end")
			}
			h, data, rest, ok := NextCmsg(c)
			if !ok {
				return
			}
			if int(h.Len) > len(c) || len(data) > len(c) || len(rest) >= len(c) {
				t.Fatalf("message of %d bytes, data %d, rest %d in %d", h.Len, len(data), len(rest), len(c))
			}
			c = rest
		}
	})
}

// TestCloseWhileBusy closes a Core while its driver receives, sends and
// waits and another goroutine reads counters; run with -race.
func TestCloseWhileBusy(t *testing.T) {
	a, b := pair(t, 64, 16, 8)
	fs := make([]link.Frame, 8)
	n := b.Alloc(fs)
	for i := range n {
		fs[i].Buf = fs[i].Buf[:1]
	}
	b.Send(fs[:n])
	done := make(chan error)
	go func() {
		fs := make([]link.Frame, 8)
		for {
			n := a.Alloc(fs)
			a.Release(fs[:n])
			if _, err := a.Send(fs[:0]); err != nil { // a full peer would block it
				done <- err
				return
			}
			k, err := a.Recv(fs)
			if err != nil {
				done <- err
				return
			}
			a.Release(fs[:k])
			if err := a.Wait(time.Millisecond); err != nil {
				done <- err
				return
			}
		}
	}()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			a.c.RLock()
			_ = a.c.RxFD()
			a.c.RUnlock()
			_ = a.c.Snapshot(0)
			a.Wake()
		}
	}()
	// Close once the driver has received every frame, however slowly.
	received := testutil.Poll(10*time.Second, func() bool { return a.c.Snapshot(0).RxFrames == uint64(n) })
	a.Close()
	close(stop)
	if err := <-done; !errors.Is(err, link.ErrClosed) {
		t.Fatalf("driver stopped with %v", err)
	}
	if s := a.c.Snapshot(0); !received || s.RxFrames != uint64(n) {
		t.Fatalf("received %d of %d frames", s.RxFrames, n)
	}
}
