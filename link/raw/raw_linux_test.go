package raw

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock/socktest"
	"github.com/sprayfabric/spray/testbed"
)

func pair(t *testing.T, mtu int) *testbed.Pair {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	testutil.RealClock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func openIn(t *testing.T, h *testbed.Host, cfg Config) *Link {
	t.Helper()
	var l *Link
	if cfg.Ifindex == 0 {
		cfg.Ifindex = h.Ifindex
	}
	if !cfg.IP.IsValid() {
		cfg.IP = h.IP
	}
	err := h.Do(func() (err error) {
		l, err = Open(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// udpFrame writes Ethernet | IPv4 | UDP | payload from host a to host b.
func udpFrame(buf []byte, a, b *testbed.Host, sport, dport uint16, payload []byte) []byte {
	copy(buf[0:6], b.MAC[:])
	copy(buf[6:12], a.MAC[:])
	binary.BigEndian.PutUint16(buf[12:], 0x0800)
	ip := buf[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(payload)))
	binary.BigEndian.PutUint32(ip[4:], 0x4000)
	ip[8], ip[9], ip[10], ip[11] = 64, 17, 0, 0
	s, d := a.IP.As4(), b.IP.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	sum = sum>>16 + sum&0xFFFF
	sum += sum >> 16
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	u := buf[34:42]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	binary.BigEndian.PutUint16(u[6:], 0)
	n := copy(buf[42:], payload)
	return buf[:42+n]
}

// TestExchange sends 100k frames of random length from one host to the
// other and checks every byte, while a TCP connection between the same hosts
// keeps working and frames the filter must refuse are refused.
func TestExchange(t *testing.T) {
	r := testutil.Rand(t)
	p := pair(t, 1500)
	a := openIn(t, p.A, Config{})
	b := openIn(t, p.B, Config{Batch: 32})
	if a.Info().MAC != p.A.MAC || a.Info().FrameSize != 1518 || a.Info().IP != p.A.IP {
		t.Fatalf("Info %+v", a.Info())
	}

	// TCP between the hosts, from start to end of the exchange.
	tcpDone := make(chan error, 1)
	go func() { tcpDone <- tcpEcho(p.A, p.B, 2<<20) }()

	const total = 100000
	const window = 256
	seen := make([]bool, total)
	fs := make([]link.Frame, 64)
	in := make([]link.Frame, 64)
	sent, got, noise := 0, 0, 0
	payload := make([]byte, 1500-28)
	last := time.Now()
	for got < total {
		if sent < total && sent-got < window {
			n := a.Alloc(fs[:min(len(fs), total-sent, window-(sent-got))])
			for i := range n {
				seq := uint32(sent + i)
				pl := payload[:4+r.IntN(len(payload)-3)]
				socktest.Content(pl, seq)
				fs[i].Buf = udpFrame(fs[i].Buf, p.A, p.B, uint16(49152+r.IntN(16)), 4791, pl)
			}
			// Now and then a frame that B's filter must refuse.
			k := n
			if r.IntN(8) == 0 && n < len(fs) && a.Alloc(fs[n:n+1]) == 1 {
				fs[n].Buf = udpFrame(fs[n].Buf, p.A, p.B, 4791, 4792, []byte("wrong port"))
				k++
				noise++
			}
			if m, err := a.Send(fs[:k]); m != k || err != nil {
				t.Fatalf("Send = %d, %v (%+v)", m, err, a.Counters())
			}
			sent += n
		}
		n, err := b.Recv(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range in[:n] {
			if len(f.Buf) < 46 || binary.BigEndian.Uint16(f.Buf[36:]) != 4791 {
				t.Fatalf("received a frame the filter should have refused: % x", f.Buf[:min(len(f.Buf), 48)])
			}
			pl := f.Buf[42:]
			seq := binary.BigEndian.Uint32(pl)
			if seq >= total || seen[seq] {
				t.Fatalf("seq %d duplicated or out of range", seq)
			}
			seen[seq] = true
			want := make([]byte, len(pl))
			socktest.Content(want, seq)
			if string(want) != string(pl) || [6]byte(f.Buf[0:6]) != p.B.MAC || [6]byte(f.Buf[6:12]) != p.A.MAC {
				t.Fatalf("seq %d: frame differs", seq)
			}
		}
		b.Release(in[:n])
		got += n
		if n > 0 {
			last = time.Now()
		} else if sent-got >= window || sent == total {
			b.Wait(100 * time.Millisecond)
			if time.Since(last) > 10*time.Second {
				t.Fatalf("stalled: sent %d got %d; a %+v b %+v", sent, got, a.Counters(), b.Counters())
			}
		}
	}
	if err := <-tcpDone; err != nil {
		t.Fatalf("TCP alongside the raw links: %v", err)
	}
	// B sends too; it must not receive its own frame, A must.
	fs = fs[:1]
	b.Alloc(fs)
	fs[0].Buf = udpFrame(fs[0].Buf, p.B, p.A, 1234, 4791, []byte("back"))
	if m, _ := b.Send(fs); m != 1 {
		t.Fatal("Send from B")
	}
	for i := 0; i < 100; i++ {
		if n, _ := a.Recv(in); n == 1 {
			if !strings.HasSuffix(string(in[0].Buf), "back") {
				t.Fatalf("A received % x", in[0].Buf)
			}
			break
		}
		a.Wait(50 * time.Millisecond)
	}
	// B must not receive its own frame: it would come before a marker
	// that A sends after it.
	fs = fs[:1]
	a.Alloc(fs)
	fs[0].Buf = udpFrame(fs[0].Buf, p.A, p.B, 1234, 4791, []byte("marker"))
	if m, _ := a.Send(fs); m != 1 {
		t.Fatal("Send of the marker from A")
	}
	if !testutil.Poll(10*time.Second, func() bool {
		b.Wait(10 * time.Millisecond)
		n, _ := b.Recv(in)
		for _, f := range in[:n] {
			if !strings.HasSuffix(string(f.Buf), "marker") {
				t.Fatalf("B received % x before the marker: its own frame", f.Buf)
			}
		}
		b.Release(in[:n])
		return n > 0
	}) {
		t.Fatal("the marker from A did not reach B")
	}
	ca, cb := a.Counters(), b.Counters()
	if ca.TxFrames != uint64(total+noise+1) || cb.RxFrames != total+1 || ca.RxFrames != 1 || cb.RxDropped != 0 || ca.TxDropped != 0 {
		t.Fatalf("counters a %+v b %+v", ca, cb)
	}
	t.Logf("a %+v", ca)
	t.Logf("b %+v", cb)
}

// tcpEcho sends n bytes from a to an echo server on b and checks them.
func tcpEcho(a, b *testbed.Host, n int) error {
	var ln net.Listener
	if err := b.Do(func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(b.IP.String(), "0"))
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()
	var c net.Conn
	if err := a.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", ln.Addr().String(), 10*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	want := make([]byte, n)
	socktest.Content(want, 7)
	go c.Write(want)
	got := make([]byte, n)
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != string(want) {
		return errors.New("TCP bytes differ")
	}
	return nil
}

// TestBadInput: malformed, foreign and oversized frames are counted drops.
func TestBadInput(t *testing.T) {
	p := pair(t, 1500)
	a := openIn(t, p.A, Config{FrameSize: 3000})
	b := openIn(t, p.B, Config{FrameSize: 200})
	fs := make([]link.Frame, 4)
	if a.Alloc(fs) != 4 {
		t.Fatal("Alloc")
	}
	fs[0].Buf = fs[0].Buf[:10]                                                  // shorter than Ethernet
	fs[1].Buf = udpFrame(fs[1].Buf, p.A, p.B, 1, 4791, make([]byte, 2000))      // over the MTU
	fs[2].Buf = udpFrame(fs[2].Buf, p.A, p.B, 1, 4791, make([]byte, 300))       // over B's FrameSize
	fs[3].Buf = udpFrame(fs[3].Buf, p.A, p.B, 1, 4791, []byte("fits in 200 B")) // fine
	send := append(fs, link.Frame{ID: 99})
	n, err := a.Send(send)
	if err != nil || n != 2 {
		t.Fatalf("Send = %d, %v", n, err)
	}
	c := a.Counters()
	if c.TxMalformed != 1 || c.TxErrors != 1 || c.TxErrno != 90 /* EMSGSIZE */ || c.BadFrames != 1 || c.TxDropped != 3 {
		t.Fatalf("counters %+v", c)
	}
	// A marker sent after them: once it is in, every frame before it has
	// been received or counted.
	fs = fs[:1]
	if a.Alloc(fs) != 1 {
		t.Fatal("Alloc")
	}
	fs[0].Buf = udpFrame(fs[0].Buf, p.A, p.B, 1, 4791, []byte("marker"))
	if n, err := a.Send(fs); n != 1 || err != nil {
		t.Fatalf("Send of the marker = %d, %v", n, err)
	}
	in := make([]link.Frame, 4)
	var got []string
	testutil.Poll(10*time.Second, func() bool {
		b.Wait(10 * time.Millisecond)
		n, _ := b.Recv(in)
		for _, f := range in[:n] {
			got = append(got, string(f.Buf[len(f.Buf)-13:]))
		}
		b.Release(in[:n])
		return len(got) > 0 && strings.HasSuffix(got[len(got)-1], "marker")
	})
	if len(got) != 2 || got[0] != "fits in 200 B" {
		t.Fatalf("received %q, want the frame that fits, then the marker", got)
	}
	if c := b.Counters(); c.RxFrames != 2 || c.RxTruncated != 1 {
		t.Fatalf("receiver counters %+v", c)
	}
}

func TestCloseAndConfig(t *testing.T) {
	p := pair(t, 1500)
	a := openIn(t, p.A, Config{})
	done := make(chan error)
	go func() { done <- a.Wait(-1) }()
	time.Sleep(10 * time.Millisecond)
	a.Close()
	if err := <-done; !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Recv(make([]link.Frame, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv after Close = %v", err)
	}
	err := p.A.Do(func() error {
		for _, c := range []Config{{}, {Ifindex: p.A.Ifindex, FrameSize: 20}, {Ifindex: p.A.Ifindex, Batch: 5000}, {Ifindex: 1 << 30}} {
			if _, err := Open(c); !errors.Is(err, ErrConfig) {
				t.Errorf("Open(%+v) = %v, want ErrConfig", c, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = netip.Addr{}
}

// TestNoAllocs asserts that the steady-state data path does not allocate.
func TestNoAllocs(t *testing.T) {
	p := pair(t, 1500)
	a := openIn(t, p.A, Config{})
	b := openIn(t, p.B, Config{})
	payload := make([]byte, 512)
	socktest.NoAllocs(t, a, b, func(i int, buf []byte) []byte {
		return udpFrame(buf, p.A, p.B, 1, 4791, payload)
	})
}

// TestKernelDrops overflows a small receive buffer and checks the drops
// show in the counters.
func TestKernelDrops(t *testing.T) {
	p := pair(t, 1500)
	a := openIn(t, p.A, Config{})
	b := openIn(t, p.B, Config{SocketBuffer: 4096})
	fs := make([]link.Frame, 64)
	n := a.Alloc(fs)
	for i := range n {
		fs[i].Buf = udpFrame(fs[i].Buf, p.A, p.B, 1, 4791, make([]byte, 1000))
	}
	if m, _ := a.Send(fs[:n]); m != n {
		t.Fatalf("sent %d of %d", m, n)
	}
	// Every frame is either received or counted dropped by the kernel.
	in := make([]link.Frame, 64)
	testutil.Poll(10*time.Second, func() bool {
		for {
			k, err := b.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				break
			}
			b.Release(in[:k])
		}
		c := b.Counters()
		return c.RxFrames+c.RxKernelDrops >= uint64(n)
	})
	c := b.Counters()
	if c.RxKernelDrops == 0 || c.RxFrames+c.RxKernelDrops != uint64(n) || c.RxDropped != c.RxKernelDrops {
		t.Fatalf("counters %+v after %d frames", c, n)
	}
	t.Logf("received %d, kernel dropped %d", c.RxFrames, c.RxKernelDrops)
}

// TestIPv6AndVLAN checks the kernel runs the filter as the model does for
// IPv6 and 802.1Q-tagged frames: port 4791 in, anything else out, and a
// tag that the receiving kernel takes off is put back in place.
func TestIPv6AndVLAN(t *testing.T) {
	p := pair(t, 1500)
	a := openIn(t, p.A, Config{})
	b := openIn(t, p.B, Config{})
	type tc struct {
		vlan, v6 bool
		port     uint16
	}
	var cases []tc
	for _, vlan := range []bool{false, true} {
		for _, v6 := range []bool{false, true} {
			for _, port := range []uint16{4791, 4792} {
				cases = append(cases, tc{vlan, v6, port})
			}
		}
	}
	fs := make([]link.Frame, len(cases))
	if a.Alloc(fs) != len(fs) {
		t.Fatal("Alloc")
	}
	for i, c := range cases {
		f := frame(c.vlan, c.v6, c.port)
		copy(f[0:6], p.B.MAC[:])
		copy(f[6:12], p.A.MAC[:])
		f = append(f, byte(i))
		fs[i].Buf = fs[i].Buf[:copy(fs[i].Buf, f)]
	}
	if n, err := a.Send(fs); n != len(fs) || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	in := make([]link.Frame, 16)
	got := map[int]bool{}
	deadline := time.Now().Add(2 * time.Second)
	for len(got) < len(cases)/2 && time.Now().Before(deadline) {
		b.Wait(50 * time.Millisecond)
		n, _ := b.Recv(in)
		for _, f := range in[:n] {
			i := int(f.Buf[len(f.Buf)-1])
			got[i] = true
			if want := frame(cases[i].vlan, cases[i].v6, 4791); len(f.Buf) != len(want)+1 ||
				string(f.Buf[12:len(want)]) != string(want[12:]) {
				t.Errorf("%+v: received % x", cases[i], f.Buf)
			}
		}
		b.Release(in[:n])
	}
	// The frames to port 4792 must not arrive: they would come before a
	// marker sent after them.
	mark := frame(false, false, 4791)
	copy(mark[0:6], p.B.MAC[:])
	copy(mark[6:12], p.A.MAC[:])
	mark = append(mark, 0xff)
	fs = fs[:1]
	if a.Alloc(fs) != 1 {
		t.Fatal("Alloc")
	}
	fs[0].Buf = fs[0].Buf[:copy(fs[0].Buf, mark)]
	if n, err := a.Send(fs); n != 1 || err != nil {
		t.Fatalf("Send of the marker = %d, %v", n, err)
	}
	if !testutil.Poll(10*time.Second, func() bool {
		b.Wait(10 * time.Millisecond)
		n, _ := b.Recv(in)
		marked := false
		for _, f := range in[:n] {
			if i := int(f.Buf[len(f.Buf)-1]); i == 0xff {
				marked = true
			} else {
				got[i] = true
			}
		}
		b.Release(in[:n])
		return marked
	}) {
		t.Fatal("the marker frame did not arrive")
	}
	for i, c := range cases {
		if got[i] != (c.port == 4791) {
			t.Errorf("%+v: received %v", c, got[i])
		}
	}
}

// BenchmarkVeth measures Send+Recv of 64-frame batches of 1 KiB frames
// across a veth pair.
func BenchmarkVeth(b *testing.B) {
	testutil.SkipIfNotRoot(b)
	p, err := testbed.NewPair(context.Background(), testbed.PairConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var x, y *Link
	if err := p.A.Do(func() (err error) { x, err = Open(Config{Ifindex: p.A.Ifindex, IP: p.A.IP}); return }); err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	if err := p.B.Do(func() (err error) { y, err = Open(Config{Ifindex: p.B.Ifindex, IP: p.B.IP}); return }); err != nil {
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
			fs[i].Buf = udpFrame(fs[i].Buf, p.A, p.B, 1, 4791, payload)
		}
		socktest.Exchange(x, y, fs[:n], in, 100*time.Millisecond)
	}
}

// TestJumbo: on a veth of MTU 9000 the default FrameSize (MTU+18) carries
// full 9014-byte frames both ways, intact.
func TestJumbo(t *testing.T) {
	p := pair(t, 9000)
	a := openIn(t, p.A, Config{})
	b := openIn(t, p.B, Config{})
	if a.Info().FrameSize != 9018 {
		t.Fatalf("FrameSize %d, want 9018", a.Info().FrameSize)
	}
	const total = 200
	payload := make([]byte, 9000-28)
	fs := make([]link.Frame, 1)
	in := make([]link.Frame, 8)
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; got < total && time.Now().Before(deadline); {
		if sent < total && sent-got < 32 && a.Alloc(fs) == 1 {
			socktest.Content(payload, uint32(sent))
			fs[0].Buf = udpFrame(fs[0].Buf, p.A, p.B, 49152, 4791, payload)
			if len(fs[0].Buf) != 9014 {
				t.Fatalf("frame of %d bytes", len(fs[0].Buf))
			}
			if m, err := a.Send(fs); m != 1 || err != nil {
				t.Fatalf("Send = %d, %v", m, err)
			}
			sent++
		}
		n, err := b.Recv(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range in[:n] {
			socktest.Content(payload, uint32(got))
			want := udpFrame(make([]byte, 9014), p.A, p.B, 49152, 4791, payload)
			if string(f.Buf) != string(want) {
				t.Fatalf("frame %d: %d bytes, differs", got, len(f.Buf))
			}
			got++
		}
		b.Release(in[:n])
		if n == 0 {
			b.Wait(time.Millisecond)
		}
	}
	if got != total {
		t.Fatalf("received %d of %d jumbo frames", got, total)
	}
}

// TestNextHopMAC sends frames to B whose destination MAC is wrong (as a
// peer's own MAC is across a router): by default the link writes the
// next hop's (B's) and B receives them; with KeepDstMAC they go out as
// written and B's interface drops them.
func TestNextHopMAC(t *testing.T) {
	p := pair(t, 1500)
	b := openIn(t, p.B, Config{})
	wrong := [6]byte{2, 0x72, 0x74, 0, 0, 0x99}
	for _, keep := range []bool{false, true} {
		a := openIn(t, p.A, Config{KeepDstMAC: keep})
		if (a.NextHops() == nil) != keep {
			t.Fatalf("KeepDstMAC %v: NextHops %v", keep, a.NextHops())
		}
		got := 0
		in := make([]link.Frame, 16)
		for try := 0; try < 20 && got == 0; try++ {
			fs := make([]link.Frame, 1)
			if a.Alloc(fs) != 1 {
				t.Fatal("no transmit buffer")
			}
			fs[0].Buf = udpFrame(fs[0].Buf, p.A, p.B, 49152, 4791, []byte("to the next hop"))
			copy(fs[0].Buf[0:6], wrong[:])
			if n, err := a.Send(fs); n != 1 || err != nil {
				t.Fatalf("Send = %d, %v", n, err)
			}
			if err := b.Wait(50 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			n, err := b.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range in[:n] {
				if [6]byte(f.Buf[0:6]) != p.B.MAC || string(f.Buf[42:]) != "to the next hop" {
					t.Fatalf("KeepDstMAC %v: received % x", keep, f.Buf)
				}
			}
			b.Release(in[:n])
			got += n
		}
		if (got > 0) == keep {
			t.Fatalf("KeepDstMAC %v: B received %d frames", keep, got)
		}
		a.Close()
	}
}
