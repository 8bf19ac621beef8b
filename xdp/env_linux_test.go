package xdp_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/xdp"
)

// side is one end of a veth pair, alone in its own network namespace, with
// spray's steering program, which redirects UDP:4791 frames to the socket
// registered for their receive queue.
type side struct {
	ns      netns.NsHandle
	name    string
	ifindex int
	mac     [6]byte
	steer   *ebpf.Steering
}

var vethSeq atomic.Uint32

// newPair makes two namespaces joined by a veth pair, each end up and with
// the steering program attached. Everything goes away in t.Cleanup.
func newPair(t testing.TB) (a, b *side) {
	t.Helper()
	return newPairQueues(t, 1)
}

// newPairQueues is newPair with the given number of RX and TX queues on
// each end.
func newPairQueues(t testing.TB, queues int) (a, b *side) {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	a, b = &side{}, &side{}
	n := vethSeq.Add(1)
	a.name = fmt.Sprintf("xdpa%d_%d", os.Getpid()%100000, n)
	b.name = fmt.Sprintf("xdpb%d_%d", os.Getpid()%100000, n)
	a.ns, b.ns = newNS(t), newNS(t)
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: a.name, Namespace: netlink.NsFd(a.ns),
			NumTxQueues: queues, NumRxQueues: queues},
		PeerName:        b.name,
		PeerNamespace:   netlink.NsFd(b.ns),
		PeerNumTxQueues: uint32(queues),
		PeerNumRxQueues: uint32(queues),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s/%s: %v", a.name, b.name, err)
	}
	for _, s := range []*side{a, b} {
		h, err := netlink.NewHandleAt(s.ns)
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.LinkByName(s.name)
		if err != nil {
			h.Close()
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			h.Close()
			t.Fatal(err)
		}
		h.Close()
		s.ifindex = l.Attrs().Index
		copy(s.mac[:], l.Attrs().HardwareAddr)
		s.attach(t)
	}
	return a, b
}

// newNS creates a network namespace without switching to it; it goes away
// when its handle is closed and nothing else uses it.
func newNS(t testing.TB) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the new namespace: keep it locked so that
		// it dies with this goroutine rather than serving others.
		runtime.LockOSThread()
		t.Fatalf("back to the original namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// in runs fn on a locked OS thread inside ns (AF_XDP sockets and bpf links
// belong to the namespace of the thread that makes them).
func (s *side) in(t testing.TB, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(s.ns); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			runtime.LockOSThread() // see newNS
			t.Errorf("back to the original namespace: %v", err)
		}
	}()
	fn()
}

// attach loads spray's steering program (package ebpf) and attaches it to
// the side's device in native mode (veth has native XDP).
func (s *side) attach(t testing.TB) {
	t.Helper()
	st, err := ebpf.LoadSteering(ebpf.SteerConfig{Queues: 16})
	if err != nil {
		t.Fatalf("load steering: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	s.steer = st
	s.in(t, func() {
		if err := st.Attach(s.ifindex, ebpf.Native); err != nil {
			t.Fatalf("attach steering to %s: %v", s.name, err)
		}
	})
}

// steered returns how many frames the side's steering program redirected
// to a socket.
func (s *side) steered(t testing.TB) uint64 {
	t.Helper()
	c, err := s.steer.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c.Steered
}

// open opens a socket on the side's device and cfg.Queue, registers it in
// the XSKMAP and closes it in t.Cleanup.
func (s *side) open(t testing.TB, cfg xdp.Config) *xdp.Socket {
	t.Helper()
	cfg.Ifindex = s.ifindex
	cfg.MAC = s.mac
	if cfg.Mode == xdp.Auto {
		cfg.Mode = xdp.Copy
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	var sock *xdp.Socket
	s.in(t, func() {
		var err error
		sock, err = xdp.Open(cfg)
		if err != nil {
			t.Fatalf("open on %s: %v", s.name, err)
		}
	})
	t.Cleanup(func() { sock.Close() })
	s.register(t, sock)
	return sock
}

func (s *side) register(t testing.TB, sock *xdp.Socket) {
	t.Helper()
	if err := s.steer.Register(sock.Queue(), sock.FD()); err != nil {
		t.Fatalf("register socket: %v", err)
	}
}

// frameLen is the length of the test frames (Ethernet+IPv4+UDP+payload).
const frameLen = 42 + 64

// buildFrame writes an Ethernet/IPv4/UDP:4791 frame from src to dst into
// buf, with seq and dir at the start of the payload and a pattern derived
// from them after, and returns its length.
func buildFrame(buf []byte, dst, src [6]byte, seq uint64, dir byte) int {
	b := buf[:frameLen]
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(frameLen-14))
	binary.BigEndian.PutUint32(ip[4:], 0)
	ip[8], ip[9] = 64, 17
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], []byte{10, 99, 0, dir})
	copy(ip[16:20], []byte{10, 99, 0, dir ^ 1})
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 49152+uint16(seq&0x3fff))
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(frameLen-34))
	binary.BigEndian.PutUint16(udp[6:], 0)
	p := b[42:]
	binary.LittleEndian.PutUint64(p, seq)
	p[8] = dir
	x := seq*0x9E3779B97F4A7C15 + uint64(dir)
	for i := 9; i < len(p); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
	return frameLen
}

// parseFrame checks a received test frame and returns its seq and dir.
func parseFrame(b []byte) (seq uint64, dir byte, ok bool) {
	if len(b) != frameLen || binary.BigEndian.Uint16(b[36:]) != 4791 {
		return 0, 0, false
	}
	p := b[42:]
	seq, dir = binary.LittleEndian.Uint64(p), p[8]
	if p[8] != dir {
		return 0, 0, false
	}
	var want [frameLen]byte
	buildFrame(want[:], [6]byte(b[0:6]), [6]byte(b[6:12]), seq, dir)
	return seq, dir, string(want[:]) == string(b)
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
