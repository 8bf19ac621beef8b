//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock/socktest"
)

// loopbackPair returns two distinct loopback addresses that no other test
// (or engineer) on this machine is likely to be using (testutil.LoopbackNet).
func loopbackPair(r *rand.Rand) (netip.Addr, netip.Addr) {
	b, c := testutil.LoopbackNet(r)
	return netip.AddrFrom4([4]byte{127, b, c, 1}), netip.AddrFrom4([4]byte{127, b, c, 2})
}

func open(t *testing.T, cfg Config) *Link {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestExchange sends 100k frames with random lengths and entropies from one
// link to another over loopback and checks every byte and every address
// written in the synthesized headers.
func TestExchange(t *testing.T) {
	r := testutil.Rand(t)
	ipA, ipB := loopbackPair(r)
	base := uint16(20000 + r.IntN(30000))
	var ents []uint16
	for i := range 8 {
		ents = append(ents, base+uint16(i))
	}
	a := open(t, Config{Local: ipA, Entropies: ents, Batch: 32})
	b := open(t, Config{Local: ipB})
	if a.Info().IP != ipA || a.Info().MAC != [6]byte{2, 0, 127, ipA.As4()[1], ipA.As4()[2], 1} {
		t.Fatalf("Info %+v", a.Info())
	}
	const total = 100000
	const window = 256
	maxPayload := a.Info().FrameSize - 42
	seen := make([]bool, total)
	sent, got, unknown := 0, 0, 0
	fs := make([]link.Frame, 32)
	in := make([]link.Frame, 64)
	sportOf := make([]uint16, total)
	lastProgress := time.Now()
	for got < total {
		if sent < total && sent-got < window {
			n := a.Alloc(fs[:min(len(fs), total-sent, window-(sent-got))])
			for i := 0; i < n; i++ {
				seq := uint32(sent + i)
				plen := 4 + r.IntN(maxPayload-3)
				if r.IntN(4) == 0 {
					plen = 4 + r.IntN(64)
				}
				sport := ents[r.IntN(len(ents))]
				if r.IntN(100) == 0 {
					sport = 1 // unknown entropy
					unknown++
				}
				sportOf[seq] = sport
				p := make([]byte, plen)
				socktest.Content(p, seq)
				fs[i].Buf = buildFrame(fs[i].Buf, ipA, ipB, sport, 0, p)
			}
			m, err := a.Send(fs[:n])
			if err != nil || m != n {
				t.Fatalf("Send = %d, %v; want %d (counters %+v)", m, err, n, a.Counters())
			}
			sent += n
		}
		n, err := b.Recv(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range in[:n] {
			h, err := parseRx(f.Buf)
			if err != nil {
				t.Fatalf("frame %d: %v: % x", got, err, f.Buf[:min(len(f.Buf), 64)])
			}
			seq := binary.BigEndian.Uint32(h.payload)
			if seq >= total || seen[seq] {
				t.Fatalf("seq %d duplicated or out of range", seq)
			}
			seen[seq] = true
			want := make([]byte, len(h.payload))
			socktest.Content(want, seq)
			if string(want) != string(h.payload) {
				t.Fatalf("seq %d: payload differs", seq)
			}
			if h.src != ipA || h.dst != ipB || h.dport != 4791 {
				t.Fatalf("seq %d: addressing %v:%d -> %v:%d", seq, h.src, h.sport, h.dst, h.dport)
			}
			if s := sportOf[seq]; s != 1 && h.sport != s {
				t.Fatalf("seq %d: source port %d, sent with entropy %d", seq, h.sport, s)
			}
			if h.sport < base || h.sport >= base+8 {
				t.Fatalf("seq %d: source port %d is not an entropy socket", seq, h.sport)
			}
			if [6]byte(f.Buf[0:6]) != b.Info().MAC {
				t.Fatalf("dst MAC % x", f.Buf[0:6])
			}
		}
		b.Release(in[:n])
		got += n
		if n > 0 {
			lastProgress = time.Now()
		} else if sent-got >= window || sent == total {
			if err := b.Wait(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if time.Since(lastProgress) > 10*time.Second {
				t.Fatalf("stalled: sent %d got %d; a %+v b %+v", sent, got, a.Counters(), b.Counters())
			}
		}
	}
	ca, cb := a.Counters(), b.Counters()
	if ca.TxFrames != total || cb.RxFrames != total || ca.TxDropped != 0 || cb.RxDropped != 0 {
		t.Fatalf("counters: a %+v b %+v", ca, cb)
	}
	if ca.TxUnknownEntropy != uint64(unknown) {
		t.Fatalf("TxUnknownEntropy %d, want %d", ca.TxUnknownEntropy, unknown)
	}
	if ca.TxBytes != cb.RxBytes {
		t.Fatalf("TxBytes %d != RxBytes %d", ca.TxBytes, cb.RxBytes)
	}
	if a.c.Tx.Free() != a.c.Tx.Len() || b.c.Rx.Free() != b.c.Rx.Len() {
		t.Fatalf("buffers leaked: tx %d/%d rx %d/%d", a.c.Tx.Free(), a.c.Tx.Len(), b.c.Rx.Free(), b.c.Rx.Len())
	}
}

// exchangeOne sends one frame from a to b and returns what b received.
func exchangeOne(t *testing.T, a, b *Link, frame func([]byte) []byte) (rx, link.Frame) {
	t.Helper()
	fs := make([]link.Frame, 1)
	if a.Alloc(fs) != 1 {
		t.Fatal("Alloc")
	}
	fs[0].Buf = frame(fs[0].Buf)
	if n, err := a.Send(fs); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v (%+v)", n, err, a.Counters())
	}
	n, err := socktest.Recv(b, fs, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("nothing received (%+v)", b.Counters())
	}
	h, err := parseRx(fs[0].Buf)
	if err != nil {
		t.Fatal(err)
	}
	return h, fs[0]
}

// TestIPv6 runs two links on ::1 with different ports, checks the
// synthesized IPv6 and UDP headers (checksum included) and that the traffic
// class, ECN bits included, crosses.
func TestIPv6(t *testing.T) {
	r := testutil.Rand(t)
	lo := netip.IPv6Loopback()
	pa, pb := testutil.LoopbackPort(r, 20000, 19999), testutil.LoopbackPort(r, 40000, 20000)
	a, err := Open(Config{Local: lo, Port: pa, PeerPort: pb, Entropies: []uint16{pa + 1}})
	// A kernel without IPv6 has no ::1 to bind.
	testutil.SkipIfNotSupported(t, err, syscall.EADDRNOTAVAIL)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := open(t, Config{Local: lo, Port: pb, PeerPort: pa})
	for _, plen := range []int{0, 1, 2, 3, 999, 1400} {
		p := make([]byte, plen)
		socktest.Content(p, uint32(plen))
		h, f := exchangeOne(t, a, b, func(buf []byte) []byte { return buildFrame(buf, lo, lo, pa+1, 0xB9, p) })
		if h.src != lo || h.dst != lo || h.sport != pa+1 || h.dport != 4791 || h.tos != 0xB9 || string(h.payload) != string(p) {
			t.Fatalf("plen %d: got %+v", plen, h)
		}
		b.Release([]link.Frame{f})
	}
	// The other way, from Port itself (no entropies configured on b).
	h, _ := exchangeOne(t, b, a, func(buf []byte) []byte { return buildFrame(buf, lo, lo, pb, 0, []byte("hello")) })
	if h.sport != pb || string(h.payload) != "hello" {
		t.Fatalf("got %+v", h)
	}
}

// TestTOS checks that DSCP and ECN of an IPv4 frame cross the kernel.
func TestTOS(t *testing.T) {
	ipA, ipB := loopbackPair(testutil.Rand(t))
	a := open(t, Config{Local: ipA})
	b := open(t, Config{Local: ipB})
	for _, tos := range []uint8{0, 1, 2, 3, 0x68 | 3} {
		h, f := exchangeOne(t, a, b, func(buf []byte) []byte { return buildFrame(buf, ipA, ipB, 4791, tos, []byte("tos")) })
		if h.tos != tos {
			t.Errorf("TOS %#x arrived as %#x", tos, h.tos)
		}
		b.Release([]link.Frame{f})
	}
}

// TestBadInput feeds Send and Release frames that are malformed, of the
// wrong family, or not the link's, and checks they are counted, not sent,
// and that the buffers come back.
func TestBadInput(t *testing.T) {
	r := testutil.Rand(t)
	ipA, ipB := loopbackPair(r)
	a := open(t, Config{Local: ipA, Frames: 8})
	b := open(t, Config{Local: ipB})
	fs := make([]link.Frame, 8)
	if n := a.Alloc(fs); n != 8 {
		t.Fatalf("Alloc = %d", n)
	}
	if n := a.Alloc(make([]link.Frame, 1)); n != 0 {
		t.Fatalf("Alloc from an empty pool = %d", n)
	}
	good := buildFrame(fs[0].Buf, ipA, ipB, 4791, 0, []byte("good"))
	fs[0].Buf = good
	fs[1].Buf = fs[1].Buf[:10]                                                                          // too short
	fs[2].Buf = buildFrame(fs[2].Buf, netip.IPv6Loopback(), netip.IPv6Loopback(), 4791, 0, []byte("6")) // wrong family
	fs[3].Buf = buildFrame(fs[3].Buf, ipA, ipB, 4791, 0, []byte("udp length lies"))
	binary.BigEndian.PutUint16(fs[3].Buf[34+4:], 2000)
	fs[4].Buf = buildFrame(fs[4].Buf, ipA, ipB, 4791, 0, []byte("not udp"))
	fs[4].Buf[14+9] = 6
	r.Shuffle(5, func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	// A foreign frame and a zero frame.
	send := append(fs[:5:5], link.Frame{Buf: good, ID: 12345}, link.Frame{})
	n, err := a.Send(send)
	if err != nil || n != 1 {
		t.Fatalf("Send = %d, %v; want 1", n, err)
	}
	c := a.Counters()
	if c.TxMalformed != 4 || c.BadFrames != 2 || c.TxDropped != 6 || c.TxFrames != 1 {
		t.Fatalf("counters %+v", c)
	}
	a.Release(fs[5:])
	a.Release(fs[5:6]) // twice
	if c := a.Counters(); c.BadFrames != 3 {
		t.Fatalf("double Release not counted: %+v", c)
	}
	if a.c.Tx.Free() != 8 {
		t.Fatalf("%d of 8 transmit buffers back", a.c.Tx.Free())
	}
	in := make([]link.Frame, 4)
	for range 100 {
		if n, _ := b.Recv(in); n > 0 {
			h, err := parseRx(in[0].Buf)
			if err != nil || string(h.payload) != "good" || n != 1 {
				t.Fatalf("received %d frames, first %+v %v", n, h, err)
			}
			return
		}
		b.Wait(50 * time.Millisecond)
	}
	t.Fatal("good frame not received")
}

// TestTruncated sends a datagram larger than the receiver's FrameSize.
func TestTruncated(t *testing.T) {
	ipA, ipB := loopbackPair(testutil.Rand(t))
	a := open(t, Config{Local: ipA, FrameSize: 9000})
	b := open(t, Config{Local: ipB, FrameSize: 200})
	big := make([]byte, 1000)
	fs := make([]link.Frame, 2)
	a.Alloc(fs)
	fs[0].Buf = buildFrame(fs[0].Buf, ipA, ipB, 4791, 0, big)
	fs[1].Buf = buildFrame(fs[1].Buf, ipA, ipB, 4791, 0, big[:200-42])
	if n, err := a.Send(fs); n != 2 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	in := make([]link.Frame, 2)
	for i := 0; i < 100 && b.Counters().RxFrames == 0; i++ {
		n, err := b.Recv(in)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 && len(in[0].Buf) != 200 {
			t.Fatalf("got %d bytes", len(in[0].Buf))
		}
		b.Wait(50 * time.Millisecond)
	}
	if c := b.Counters(); c.RxTruncated != 1 || c.RxDropped != 1 || c.RxFrames != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// TestKernelDrops overflows a small receive buffer and checks that the drops
// show in the counters.
func TestKernelDrops(t *testing.T) {
	ipA, ipB := loopbackPair(testutil.Rand(t))
	// Without segmentation: one coalesced datagram fits any empty buffer.
	a := open(t, Config{Local: ipA, NoOffload: true})
	b := open(t, Config{Local: ipB, SocketBuffer: 4096})
	fs := make([]link.Frame, 64)
	in := make([]link.Frame, 64)
	send := func(k int) {
		n := a.Alloc(fs[:k])
		for i := range n {
			fs[i].Buf = buildFrame(fs[i].Buf, ipA, ipB, 4791, 0, make([]byte, 1000))
		}
		a.Send(fs[:n])
	}
	drain := func() {
		for {
			n, err := b.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			b.Release(in[:n])
		}
	}
	send(64)
	b.Wait(100 * time.Millisecond)
	drain()
	for i := 0; i < 100 && b.Counters().RxKernelDrops == 0; i++ {
		send(1)
		b.Wait(50 * time.Millisecond)
		drain()
	}
	c := b.Counters()
	if c.RxKernelDrops == 0 || c.RxDropped < c.RxKernelDrops || c.RxFrames >= 64 {
		t.Fatalf("counters %+v", c)
	}
	t.Logf("received %d, kernel dropped %d", c.RxFrames, c.RxKernelDrops)
}

func TestWaitWakeClose(t *testing.T) {
	ipA, _ := loopbackPair(testutil.Rand(t))
	a := open(t, Config{Local: ipA})
	if err := a.Wait(0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(10 * time.Millisecond)
		a.Wake()
	}()
	if err := a.Wait(-1); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Close unblocks a pending Wait.
	done := make(chan error)
	go func() { done <- a.Wait(-1) }()
	time.Sleep(10 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, link.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	fs := make([]link.Frame, 1)
	if _, err := a.Recv(fs); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Recv after Close = %v", err)
	}
	if _, err := a.Send(fs); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	if a.Alloc(fs) != 0 {
		t.Fatal("Alloc after Close")
	}
	a.Wake()
	a.Release(fs)
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{Local: netip.IPv4Unspecified()},
		{Local: netip.MustParseAddr("127.0.0.1"), Batch: MaxBatch + 1},
		{Local: netip.MustParseAddr("127.0.0.1"), FrameSize: 50},
		{Local: netip.MustParseAddr("127.0.0.1"), FrameSize: 70000},
		{Local: netip.MustParseAddr("127.0.0.1"), Entropies: []uint16{0}},
		{Local: netip.MustParseAddr("127.0.0.1"), Frames: -1},
		{Local: netip.MustParseAddr("127.0.0.1"), Frames: 1 << 20, FrameSize: 9014},
	} {
		if _, err := Open(c); !errors.Is(err, ErrConfig) {
			t.Errorf("Open(%+v) = %v, want ErrConfig", c, err)
		}
	}
	// A port in use is a system error, not a panic.
	ipA, _ := loopbackPair(testutil.Rand(t))
	a := open(t, Config{Local: ipA})
	if _, err := Open(Config{Local: ipA}); err == nil {
		t.Fatal("second Open on the same address and port succeeded")
	}
	_ = a
}

// TestNoAllocs asserts that the steady-state data path does not allocate.
func TestNoAllocs(t *testing.T) {
	ipA, ipB := loopbackPair(testutil.Rand(t))
	a := open(t, Config{Local: ipA, Entropies: []uint16{30001, 30002}})
	b := open(t, Config{Local: ipB})
	payload := make([]byte, 512)
	socktest.NoAllocs(t, a, b, func(i int, buf []byte) []byte {
		return buildFrame(buf, ipA, ipB, 30001+uint16(i%3), uint8(i%4), payload)
	})
}

// BenchmarkLoopback measures Send+Recv of 64-frame batches of 1 KiB frames
// between two links over loopback.
func BenchmarkLoopback(b *testing.B) {
	r := testutil.Rand(b)
	ipA, ipB := loopbackPair(r)
	x, err := Open(Config{Local: ipA, Entropies: []uint16{30001, 30002, 30003, 30004}})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	y, err := Open(Config{Local: ipB})
	if err != nil {
		b.Fatal(err)
	}
	defer y.Close()
	fs := make([]link.Frame, 64)
	in := make([]link.Frame, 64)
	payload := make([]byte, 1024-42)
	b.ReportAllocs()
	b.SetBytes(64 * 1024)
	for b.Loop() {
		n := x.Alloc(fs)
		for i := range n {
			fs[i].Buf = buildFrame(fs[i].Buf, ipA, ipB, 30001+uint16(i%4), 0, payload)
		}
		socktest.Exchange(x, y, fs[:n], in, 100*time.Millisecond)
	}
}
