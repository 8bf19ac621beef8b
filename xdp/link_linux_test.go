package xdp_test

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/telemetry"
	"github.com/sprayfabric/spray/xdp"
)

// A Link's per-queue counters can be exported.
var _ telemetry.QueueStatsReader = (*xdp.Link)(nil)

// routed is a sender namespace, a forwarding namespace and a receiver
// namespace: s --- r --- b, where r's veth towards b and b's veth have
// the given number of queues, so that r's transmit hash spreads the flows
// it forwards over b's RX queues, as a switch and a NIC's RSS do.
type routed struct {
	s, r, b  netns.NsHandle
	bName    string
	bIfindex int
	bMAC     [6]byte
	sIP, bIP netip.Addr
	mtu      int
	namePfx  string
}

func newRouted(t *testing.T, queues, mtu int) *routed {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	n := vethSeq.Add(1)
	x := &routed{mtu: mtu, namePfx: fmt.Sprintf("xl%d_%d", os.Getpid()%100000, n)}
	x.s, x.r, x.b = newNS(t), newNS(t), newNS(t)
	x.sIP = netip.MustParseAddr("10.98.1.1")
	x.bIP = netip.MustParseAddr("10.98.2.1")
	mk := func(a, b string, nsA, nsB netns.NsHandle, q int) {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: a, Namespace: netlink.NsFd(nsA), MTU: mtu,
				NumTxQueues: q, NumRxQueues: q},
			PeerName: b, PeerNamespace: netlink.NsFd(nsB),
			PeerNumTxQueues: uint32(q), PeerNumRxQueues: uint32(q),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			t.Fatalf("veth %s/%s: %v", a, b, err)
		}
	}
	mk(x.namePfx+"s", x.namePfx+"rs", x.s, x.r, 1)
	mk(x.namePfx+"rb", x.namePfx+"b", x.r, x.b, queues)
	x.bName = x.namePfx + "b"
	setup := func(ns netns.NsHandle, name, cidr string, gw string) *netlink.Handle {
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		lo, _ := h.LinkByName("lo")
		h.LinkSetUp(lo)
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := netlink.ParseAddr(cidr)
		if err := h.AddrAdd(l, a); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		if gw != "" {
			_, dst, _ := net.ParseCIDR("0.0.0.0/0")
			if err := h.RouteAdd(&netlink.Route{Dst: dst, Gw: net.ParseIP(gw), LinkIndex: l.Attrs().Index}); err != nil {
				t.Fatal(err)
			}
		}
		return h
	}
	setup(x.s, x.namePfx+"s", "10.98.1.1/24", "10.98.1.2")
	setup(x.r, x.namePfx+"rs", "10.98.1.2/24", "")
	setup(x.r, x.namePfx+"rb", "10.98.2.2/24", "")
	hb := setup(x.b, x.bName, "10.98.2.1/24", "10.98.2.2")
	inNS(t, x.r, func() {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
	})
	l, err := hb.LinkByName(x.bName)
	if err != nil {
		t.Fatal(err)
	}
	x.bIfindex = l.Attrs().Index
	copy(x.bMAC[:], l.Attrs().HardwareAddr)
	return x
}

// inNS runs fn on a locked thread inside ns.
func inNS(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	(&side{ns: ns}).in(t, fn)
}

// openLink opens a Link on b's device, closed in t.Cleanup.
func (x *routed) openLink(t *testing.T, cfg xdp.LinkConfig) *xdp.Link {
	t.Helper()
	cfg.Ifindex, cfg.MAC, cfg.IP = x.bIfindex, x.bMAC, x.bIP
	if cfg.Socket.Mode == xdp.Auto {
		cfg.Socket.Mode = xdp.Copy
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	var l *xdp.Link
	var err error
	inNS(t, x.b, func() { l, err = xdp.OpenLink(cfg) })
	if err != nil {
		t.Fatalf("OpenLink on %s: %v", x.bName, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// payload is datagram i's deterministic content of n bytes.
func payload(i, n int) []byte {
	p := make([]byte, n)
	binary.LittleEndian.PutUint32(p, uint32(i))
	v := uint64(i)*0x9E3779B97F4A7C15 + 1
	for j := 4; j < n; j++ {
		v ^= v << 13
		v ^= v >> 7
		v ^= v << 17
		p[j] = byte(v)
	}
	return p
}

// sendUDP sends count datagrams of size bytes from s to b:4791 through the
// forwarding namespace, from ports source ports, in a lockstep with the
// receiver: at most window datagrams ahead of what it has taken (got).
func (x *routed) sendUDP(t *testing.T, count, size, ports int, got func() int) {
	t.Helper()
	inNS(t, x.s, func() {
		conns := make([]*net.UDPConn, ports)
		for i := range conns {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(x.bIP, 4791)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns[i] = c
		}
		const window = 128
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; i < count; i++ {
			for i-got() >= window {
				if time.Now().After(deadline) {
					t.Fatalf("receiver stuck at %d of %d datagrams", got(), count)
				}
				time.Sleep(50 * time.Microsecond)
			}
			if _, err := conns[i%ports].Write(payload(i, size)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// receive drives l as an engine does and checks every datagram, until want
// have arrived or nothing comes for a while. It returns the distinct
// datagrams seen and the SHA-256 of their payloads in order.
func receive(t *testing.T, l link.Link, want, size int, got *atomic.Int64) (int, [32]byte) {
	seen := make([]bool, want)
	fs := make([]link.Frame, 64)
	n, bad := 0, 0
	last := time.Now()
	for n < want && time.Since(last) < 5*time.Second {
		k, err := l.Recv(fs)
		if err != nil {
			t.Errorf("Recv: %v", err)
			break
		}
		for _, f := range fs[:k] {
			b := f.Buf
			if len(b) != 42+size || binary.BigEndian.Uint16(b[36:]) != 4791 {
				bad++
				continue
			}
			p := b[42:]
			i := int(binary.LittleEndian.Uint32(p))
			if i >= want || seen[i] || string(p) != string(payload(i, size)) {
				bad++
				continue
			}
			seen[i] = true
			n++
		}
		l.Release(fs[:k])
		if k > 0 {
			last = time.Now()
			got.Store(int64(n))
			continue
		}
		if err := l.Wait(10 * time.Millisecond); err != nil {
			t.Errorf("Wait: %v", err)
			break
		}
	}
	if bad > 0 {
		t.Errorf("%d frames bad or duplicated", bad)
	}
	h := sha256.New()
	for i := range want {
		if seen[i] {
			h.Write(payload(i, size))
		}
	}
	return n, [32]byte(h.Sum(nil))
}

// TestLinkEveryQueue: a Link on a 4-queue device behind a forwarding
// namespace receives, through its one aggregate Recv/Wait, every datagram
// that the forwarder spread over the queues, and each queue's counters
// show its share.
func TestLinkEveryQueue(t *testing.T) {
	const queues, count, size = 4, 4000, 200
	x := newRouted(t, queues, 1500)
	l := x.openLink(t, xdp.LinkConfig{Socket: xdp.Config{RingSize: 512}})
	if got := len(l.Queues()); got != queues {
		t.Fatalf("link serves %d queues, want %d", got, queues)
	}
	if want := fmt.Sprintf("xdp:%s/q0-%d", x.bName, queues-1); l.Info().Name != want {
		t.Errorf("Info().Name = %q, want %q", l.Info().Name, want)
	}
	var got atomic.Int64
	done := make(chan struct{})
	var n int
	var sum [32]byte
	go func() {
		defer close(done)
		n, sum = receive(t, l, count, size, &got)
	}()
	x.sendUDP(t, count, size, 64, func() int { return int(got.Load()) })
	<-done
	h := sha256.New()
	for i := range count {
		h.Write(payload(i, size))
	}
	if n != count || sum != [32]byte(h.Sum(nil)) {
		t.Fatalf("received %d of %d datagrams intact", n, count)
	}
	var total uint64
	for i, st := range l.QueueStats() {
		t.Logf("queue %d: %d frames, %d bytes, %d dropped", l.Served()[i], st.RxFrames, st.RxBytes, st.RxDropped)
		if st.RxFrames == 0 {
			t.Errorf("queue %d received nothing: the forwarder's flows did not reach it", l.Served()[i])
		}
		total += st.RxFrames
		if c := l.QueueCounters()[i]; c.RxFrames != st.RxFrames {
			t.Errorf("queue %d: QueueCounters says %d frames, QueueStats %d", l.Served()[i], c.RxFrames, st.RxFrames)
		}
	}
	if ls := l.Stats(); ls.RxFrames != total || total != count {
		t.Errorf("link counts %d frames, queues %d, sent %d", ls.RxFrames, total, count)
	}
}

// TestLinkQueueBusy: a queue held by another AF_XDP socket fails OpenLink
// with ErrBusy, and with Partial the link serves the other queues.
func TestLinkQueueBusy(t *testing.T) {
	x := newRouted(t, 2, 1500)
	var other *xdp.Socket
	inNS(t, x.b, func() {
		var err error
		other, err = xdp.Open(xdp.Config{Ifindex: x.bIfindex, Queue: 1, Mode: xdp.Copy, RxFrames: 64, TxFrames: 64, RingSize: 64})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { other.Close() })
	var err error
	inNS(t, x.b, func() {
		var l *xdp.Link
		l, err = xdp.OpenLink(xdp.LinkConfig{Ifindex: x.bIfindex, Socket: xdp.Config{Mode: xdp.Copy}, Logf: t.Logf})
		if err == nil {
			l.Close()
		}
	})
	if !errors.Is(err, xdp.ErrBusy) {
		t.Fatalf("OpenLink with queue 1 held: %v, want ErrBusy", err)
	}
	t.Logf("as expected: %v", err)
	var logged []string
	l := x.openLink(t, xdp.LinkConfig{Partial: true, Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }})
	if got := l.Served(); len(got) != 1 || got[0] != 0 || l.Info().Name != "xdp:"+x.bName+"/q0" {
		t.Fatalf("partial link serves %v (%s), want queue 0", got, l.Info().Name)
	}
	if len(logged) == 0 {
		t.Errorf("no log line names the queue left to the kernel")
	}
	t.Logf("logged: %q", logged)
}

// TestLinkForeignProgram: a device with someone else's XDP program fails
// OpenLink with ErrBusy, and leaves that program attached.
func TestLinkForeignProgram(t *testing.T) {
	a, _ := newPair(t) // a has a steering program attached through a bpf_link
	var err error
	a.in(t, func() {
		var l *xdp.Link
		l, err = xdp.OpenLink(xdp.LinkConfig{Ifindex: a.ifindex, Socket: xdp.Config{Mode: xdp.Copy}, Logf: t.Logf})
		if err == nil {
			l.Close()
		}
	})
	if !errors.Is(err, xdp.ErrBusy) {
		t.Fatalf("OpenLink on a device with another XDP program: %v, want ErrBusy", err)
	}
	if _, ok := a.steer.Attached(a.ifindex); !ok {
		t.Errorf("the other program was detached")
	}
}

// TestLinkQueuesChanged: when the device's queue count changes while the
// link is open, Wait returns ErrQueuesChanged instead of serving part of
// the device in silence.
func TestLinkQueuesChanged(t *testing.T) {
	x := newRouted(t, 4, 1500)
	l := x.openLink(t, xdp.LinkConfig{Queues: 2, CheckEvery: 10 * time.Millisecond})
	// veth keeps its RX queues at least its peer's TX queues while XDP
	// is on: shrink the peer first.
	// A kernel whose veth cannot change its channels says EOPNOTSUPP.
	var err error
	inNS(t, x.r, func() { err = setRxChannels(x.namePfx+"rb", 2) })
	testutil.SkipIfNotSupported(t, err)
	inNS(t, x.b, func() { err = setRxChannels(x.bName, 2) })
	testutil.SkipIfNotSupported(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := l.Wait(20 * time.Millisecond)
		if errors.Is(err, xdp.ErrQueuesChanged) {
			t.Logf("as expected: %v", err)
			break
		}
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("Wait never reported the changed queue count")
		}
	}
	if _, err := l.Recv(make([]link.Frame, 4)); !errors.Is(err, xdp.ErrQueuesChanged) {
		t.Errorf("Recv after the change: %v, want ErrQueuesChanged", err)
	}
}

// setRxChannels sets the RX and TX channel counts of dev (ethtool -L dev rx n tx n).
func setRxChannels(dev string, n uint32) error {
	type channels struct {
		cmd              uint32
		_                [4]uint32 // maxima
		rxCount, txCount uint32
		_                [2]uint32 // other, combined
	}
	type ifreq struct {
		name [unix.IFNAMSIZ]byte
		data *channels
		_    [16]byte
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ch := &channels{cmd: unix.ETHTOOL_GCHANNELS}
	req := &ifreq{data: ch}
	copy(req.name[:], dev)
	if err := ioctl(fd, req); err != nil {
		return err
	}
	ch.cmd = unix.ETHTOOL_SCHANNELS
	ch.rxCount, ch.txCount = n, n
	return ioctl(fd, req)
}

func ioctl[T any](fd int, req *T) error {
	if _, _, e := syscall.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req))); e != 0 {
		return e
	}
	return nil
}

// TestLinkDeviceGone: when the device goes away under an open link, Wait
// reports it (ErrQueuesChanged) at the next check, sleeping rather than
// spinning until then, and Close still frees everything.
func TestLinkDeviceGone(t *testing.T) {
	x := newRouted(t, 2, 1500)
	l := x.openLink(t, xdp.LinkConfig{CheckEvery: 500 * time.Millisecond})
	inNS(t, x.b, func() {
		lk, err := netlink.LinkByName(x.bName)
		if err == nil {
			err = netlink.LinkDel(lk)
		}
		if err != nil {
			t.Fatalf("delete %s: %v", x.bName, err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	waits := 0
	for {
		err := l.Wait(50 * time.Millisecond)
		waits++
		if errors.Is(err, xdp.ErrQueuesChanged) {
			t.Logf("after %d waits: %v", waits, err)
			if waits > 200 {
				t.Errorf("%d calls of Wait(50ms) in one check interval of 500ms: spinning", waits)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Wait never reported the device gone (last: %v)", err)
		}
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestLinkQueuesOwnEngines: driven as a link.Multi, one goroutine per
// queue, each on its own Socket, the link receives every datagram the
// forwarder spread over its queues, each queue only its own.
func TestLinkQueuesOwnEngines(t *testing.T) {
	const queues, count, size = 4, 4000, 300
	x := newRouted(t, queues, 1500)
	l := x.openLink(t, xdp.LinkConfig{Socket: xdp.Config{RingSize: 512}})
	var m link.Multi = l
	var mu sync.Mutex
	seen := make([]bool, count)
	var got atomic.Int64
	bad := make([]int, queues)
	perQueue := make([]int, queues)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for q, ql := range m.Queues() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fs := make([]link.Frame, 64)
			for {
				select {
				case <-stop:
					return
				default:
				}
				k, err := ql.Recv(fs)
				if err != nil {
					t.Errorf("queue %d: Recv: %v", q, err)
					return
				}
				mu.Lock()
				for _, f := range fs[:k] {
					p := f.Buf[42:]
					i := int(binary.LittleEndian.Uint32(p))
					if len(f.Buf) != 42+size || i >= count || seen[i] || string(p) != string(payload(i, size)) {
						bad[q]++
						continue
					}
					seen[i] = true
					perQueue[q]++
					got.Add(1)
				}
				mu.Unlock()
				ql.Release(fs[:k])
				if k == 0 {
					ql.Wait(10 * time.Millisecond)
				}
			}
		}()
	}
	x.sendUDP(t, count, size, 64, func() int { return int(got.Load()) })
	for deadline := time.Now().Add(10 * time.Second); got.Load() < count && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	for _, ql := range m.Queues() {
		ql.Wake()
	}
	wg.Wait()
	t.Logf("per queue: %v", perQueue)
	if got.Load() != count {
		t.Fatalf("received %d of %d datagrams", got.Load(), count)
	}
	for q := range queues {
		if bad[q] != 0 || perQueue[q] == 0 || uint64(perQueue[q]) != l.QueueStats()[q].RxFrames {
			t.Errorf("queue %d: %d good, %d bad, counters say %d", q, perQueue[q], bad[q], l.QueueStats()[q].RxFrames)
		}
	}
}

// TestLinkCloseFrees: Close detaches the program and frees every queue, so
// that a new Link opens on the same device at once; the closed one answers
// link.ErrClosed.
func TestLinkCloseFrees(t *testing.T) {
	x := newRouted(t, 2, 1500)
	l := x.openLink(t, xdp.LinkConfig{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Recv(make([]link.Frame, 1)); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Recv after Close: %v", err)
	}
	if err := l.Wait(time.Millisecond); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Wait after Close: %v", err)
	}
	l2 := x.openLink(t, xdp.LinkConfig{})
	if len(l2.Queues()) != 2 {
		t.Fatalf("reopened link serves %d queues", len(l2.Queues()))
	}
}

// TestLinkWake: Wake from another goroutine ends a Wait without limit, and
// Close ends one with link.ErrClosed. Waits may return spuriously
// (link.Link's contract: a Wake left over from the first case ends one
// wait early), so the Close case waits until Wait reports an error.
func TestLinkWake(t *testing.T) {
	x := newRouted(t, 2, 1500)
	l := x.openLink(t, xdp.LinkConfig{CheckEvery: -1})
	for i, end := range []func(){l.Wake, func() { l.Close() }} {
		done := make(chan error, 1)
		go func() {
			for {
				err := l.Wait(-1)
				if i == 0 || err != nil {
					done <- err
					return
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		end()
		select {
		case err := <-done:
			if i == 0 && err != nil || i == 1 && !errors.Is(err, link.ErrClosed) {
				t.Errorf("Wait ended by %s returned %v", []string{"Wake", "Close"}[i], err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return")
		}
	}
}

// TestLinkNextHop: frames that the sender's Link addresses to the
// receiver's own MAC, as a QPInfo carries it, cross the forwarding
// namespace because the Link writes the router's MAC instead; with
// KeepDstMAC they go out as written and the router drops them.
func TestLinkNextHop(t *testing.T) {
	const size = 64
	x := newRouted(t, 1, 1500)
	b := x.openLink(t, xdp.LinkConfig{})
	var sIfindex int
	var sMAC [6]byte
	inNS(t, x.s, func() {
		l, err := netlink.LinkByName(x.namePfx + "s")
		if err != nil {
			t.Fatal(err)
		}
		sIfindex = l.Attrs().Index
		copy(sMAC[:], l.Attrs().HardwareAddr)
	})
	for _, keep := range []bool{false, true} {
		var s *xdp.Link
		var err error
		inNS(t, x.s, func() {
			s, err = xdp.OpenLink(xdp.LinkConfig{Ifindex: sIfindex, MAC: sMAC, IP: x.sIP,
				Socket: xdp.Config{Mode: xdp.Copy}, KeepDstMAC: keep, Logf: t.Logf})
		})
		if err != nil {
			t.Fatal(err)
		}
		if (s.NextHops() == nil) != keep {
			t.Fatalf("KeepDstMAC %v: NextHops %v", keep, s.NextHops())
		}
		const count = 20
		fs := make([]link.Frame, count)
		frames := func(port uint16) {
			if n := s.Alloc(fs); n != count {
				t.Fatalf("Alloc = %d", n)
			}
			for i := range fs {
				b := fs[i].Buf[:42+size]
				copy(b[0:6], x.bMAC[:])
				copy(b[6:12], sMAC[:])
				binary.BigEndian.PutUint16(b[12:], 0x0800)
				ip := b[14:34]
				clear(ip)
				ip[0], ip[8], ip[9] = 0x45, 64, 17
				binary.BigEndian.PutUint16(ip[2:], uint16(20+8+size))
				sa, da := x.sIP.As4(), x.bIP.As4()
				copy(ip[12:], sa[:])
				copy(ip[16:], da[:])
				var sum uint32
				for j := 0; j < 20; j += 2 {
					sum += uint32(binary.BigEndian.Uint16(ip[j:]))
				}
				sum = sum>>16 + sum&0xffff
				binary.BigEndian.PutUint16(ip[10:], ^uint16(sum+sum>>16))
				u := b[34:42]
				binary.BigEndian.PutUint16(u[0:], 49152)
				binary.BigEndian.PutUint16(u[2:], port)
				binary.BigEndian.PutUint16(u[4:], 8+size)
				binary.BigEndian.PutUint16(u[6:], 0)
				copy(b[42:], payload(i, size))
				fs[i].Buf = b
			}
		}
		if !keep {
			// The first frames to the receiver have the router resolved;
			// until it answers frames go out as written. Sent to another
			// port, they do not count.
			frames(4792)
			if n, err := s.Send(fs); n != count || err != nil {
				t.Fatalf("Send = %d, %v", n, err)
			}
			for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if _, ok := s.NextHops().Lookup(x.bIP); ok {
					break
				}
				if time.Now().After(end) {
					t.Fatal("router never resolved")
				}
			}
		}
		frames(4791)
		if n, err := s.Send(fs); n != count || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		s.Wait(0) // kicks the TX ring
		var got atomic.Int64
		n, _ := receive(t, b, count, size, &got)
		if keep && n != 0 || !keep && n != count {
			t.Fatalf("KeepDstMAC %v: %d of %d frames crossed the router", keep, n, count)
		}
		s.Close()
	}
}
