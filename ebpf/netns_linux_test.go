//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// guard bounds every blocking call of these tests so that a broken kernel
// path fails the test instead of hanging it. It is not a timed assertion.
const guard = 30 * time.Second

// inNS runs fn on an OS thread that is inside ns, then puts the thread back
// into its original namespace. Sockets and bpf_links created by fn belong to
// ns for their whole life.
func inNS(tb testing.TB, ns netns.NsHandle, fn func()) {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("get current netns: %v", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("enter netns: %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime discards it when this
			// goroutine ends, which Fatalf makes happen now.
			tb.Fatalf("return to the original netns: %v", err)
		}
		runtime.UnlockOSThread()
	}()
	fn()
}

// newNS creates an unnamed network namespace, held by the handle it
// returns and closed at the end of the test: nothing names it, so a test
// that crashes leaves nothing behind.
func newNS(tb testing.TB) netns.NsHandle {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("get current netns: %v", err)
	}
	defer orig.Close()
	ns, err := netns.New() // enters it
	if err != nil {
		if err := netns.Set(orig); err != nil {
			tb.Fatalf("return to the original netns: %v", err) // thread stays locked
		}
		runtime.UnlockOSThread()
		tb.Fatalf("create netns: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		tb.Fatalf("return to the original netns: %v", err) // thread stays locked
	}
	runtime.UnlockOSThread()
	tb.Cleanup(func() { ns.Close() })
	return ns
}

// vethPair is two namespaces joined by a veth pair: a (10.77.0.1/24) and b
// (10.77.0.2/24 and 10.77.0.3/24).
type vethPair struct {
	a, b         netns.NsHandle
	aIdx, bIdx   int
	aMAC, bMAC   net.HardwareAddr
	aIP, bIP, b2 netip.Addr
}

func newVethPair(tb testing.TB) *vethPair {
	tb.Helper()
	testutil.SkipIfNotRoot(tb)
	p := &vethPair{
		a: newNS(tb), b: newNS(tb),
		aIP: netip.MustParseAddr("10.77.0.1"),
		bIP: netip.MustParseAddr("10.77.0.2"),
		b2:  netip.MustParseAddr("10.77.0.3"),
	}
	ha, err := netlink.NewHandleAt(p.a)
	if err != nil {
		tb.Fatal(err)
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(p.b)
	if err != nil {
		tb.Fatal(err)
	}
	defer hb.Close()
	// Only the tests' frames cross the pair, so that port counters count
	// them alone: no IPv6 (DAD, router solicitations, MLD reports leave at
	// times of the kernel's choosing) and no ARP (permanent neighbours,
	// below). TestFabricPin counts one blackholed frame and fails with a
	// stray one.
	for _, ns := range []netns.NsHandle{p.a, p.b} {
		inNS(tb, ns, func() {
			for _, k := range []string{"all", "default"} {
				err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0o644)
				if err != nil && !errors.Is(err, os.ErrNotExist) { // ErrNotExist: a kernel without IPv6
					tb.Fatalf("disable IPv6: %v", err)
				}
			}
		})
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: "spt-a"},
		PeerName:      "spt-b",
		PeerNamespace: netlink.NsFd(p.b),
	}
	if err := ha.LinkAdd(veth); err != nil {
		tb.Fatalf("add veth: %v", err)
	}
	setup := func(h *netlink.Handle, name string, addrs ...netip.Addr) netlink.Link {
		l, err := h.LinkByName(name)
		if err != nil {
			tb.Fatal(err)
		}
		for _, a := range addrs {
			ipn := &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(24, 32)}
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
				tb.Fatalf("add %v to %s: %v", a, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			tb.Fatal(err)
		}
		lo, err := h.LinkByName("lo")
		if err != nil {
			tb.Fatal(err)
		}
		if err := h.LinkSetUp(lo); err != nil {
			tb.Fatal(err)
		}
		return l
	}
	la := setup(ha, "spt-a", p.aIP)
	lb := setup(hb, "spt-b", p.bIP, p.b2)
	p.aIdx, p.aMAC = la.Attrs().Index, la.Attrs().HardwareAddr
	p.bIdx, p.bMAC = lb.Attrs().Index, lb.Attrs().HardwareAddr
	neigh := func(h *netlink.Handle, idx int, mac net.HardwareAddr, ips ...netip.Addr) {
		for _, ip := range ips {
			n := &netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
			if err := h.NeighSet(n); err != nil {
				tb.Fatalf("neighbour %v: %v", ip, err)
			}
		}
	}
	neigh(ha, p.aIdx, p.bMAC, p.bIP, p.b2)
	neigh(hb, p.bIdx, p.aMAC, p.aIP)
	return p
}

// udpListen opens a UDP socket on addr:port in ns.
func udpListen(tb testing.TB, ns netns.NsHandle, addr netip.Addr, port int) *net.UDPConn {
	tb.Helper()
	var c *net.UDPConn
	inNS(tb, ns, func() {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
		if err != nil {
			tb.Fatal(err)
		}
	})
	tb.Cleanup(func() { c.Close() })
	return c
}

// udpSend sends each payload from src (any port) to dst in ns.
func udpSend(tb testing.TB, ns netns.NsHandle, src netip.Addr, dst netip.AddrPort, payloads ...string) {
	tb.Helper()
	c := udpListen(tb, ns, src, 0)
	for _, pl := range payloads {
		if _, err := c.WriteToUDPAddrPort([]byte(pl), dst); err != nil {
			tb.Fatalf("send %q: %v", pl, err)
		}
	}
}

// udpRecv reads one datagram.
func udpRecv(tb testing.TB, c *net.UDPConn) string {
	tb.Helper()
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(guard))
	n, err := c.Read(buf)
	if err != nil {
		tb.Fatalf("receive: %v", err)
	}
	return string(buf[:n])
}

// rawSend sends whole Ethernet frames from b's veth end through an
// AF_PACKET socket.
func rawSend(tb testing.TB, p *vethPair, frames ...[]byte) {
	tb.Helper()
	var fd int
	inNS(tb, p.b, func() {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
	})
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: p.bIdx, Halen: 6}
	copy(sa.Addr[:], p.aMAC)
	for _, f := range frames {
		copy(f[0:6], p.aMAC)
		copy(f[6:12], p.bMAC)
		if err := unix.Sendto(fd, f, 0, sa); err != nil {
			tb.Fatalf("raw send of %d bytes: %v", len(f), err)
		}
	}
}

func counters(tb testing.TB, s *Steering) SteerCounters {
	tb.Helper()
	c, err := s.Counters()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestNetns(t *testing.T) {
	p := newVethPair(t)
	s := loadTest(t, SteerConfig{})
	inNS(t, p.a, func() {
		if err := s.Attach(p.aIdx, Native); err != nil {
			t.Fatalf("attach native to veth: %v", err)
		}
		if err := s.Attach(p.aIdx, Generic); !errors.Is(err, ErrAttached) {
			t.Errorf("second Attach: %v, want ErrAttached", err)
		}
	})
	if mode, ok := s.Attached(p.aIdx); !ok || mode != Native {
		t.Fatalf("Attached = %v, %v; want native, true", mode, ok)
	}
	roce := udpListen(t, p.a, p.aIP, DefaultPort)
	to4791 := netip.AddrPortFrom(p.aIP, DefaultPort)

	t.Run("tcp passes", func(t *testing.T) {
		before := counters(t, s)
		var ln net.Listener
		inNS(t, p.a, func() {
			var err error
			if ln, err = net.Listen("tcp4", netip.AddrPortFrom(p.aIP, 0).String()); err != nil {
				t.Fatal(err)
			}
		})
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(guard))
			io.Copy(c, c)
		}()
		var c net.Conn
		inNS(t, p.b, func() {
			var err error
			if c, err = net.DialTimeout("tcp4", ln.Addr().String(), guard); err != nil {
				t.Fatalf("TCP across the veth with the program attached: %v", err)
			}
		})
		defer c.Close()
		c.SetDeadline(time.Now().Add(guard))
		msg := bytes.Repeat([]byte("spray tcp "), 1000)
		go c.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo over TCP: %v, intact %v", err, bytes.Equal(got, msg))
		}
		d := counters(t, s).Sub(before)
		if d.Passed < 3 || d.Steered != 0 || d.Malformed != 0 || d.NoSocket != 0 {
			t.Errorf("counters moved by %v; want Passed >= 3 and nothing else", d)
		}
	})

	t.Run("no socket passes", func(t *testing.T) {
		before := counters(t, s)
		msgs := []string{"one", "two", "three"}
		udpSend(t, p.b, p.bIP, to4791, msgs...)
		for _, m := range msgs {
			if got := udpRecv(t, roce); got != m {
				t.Fatalf("UDP 4791 socket got %q, want %q", got, m)
			}
		}
		if d := counters(t, s).Sub(before); d.NoSocket != 3 || d.Steered != 0 {
			t.Errorf("counters moved by %v; want NoSocket 3", d)
		}
	})

	t.Run("malformed dropped", func(t *testing.T) {
		before := counters(t, s)
		valid := frameSpec{src: p.bIP, dst: p.aIP, srcPort: 40000, dstPort: DefaultPort, payload: []byte("raw ok")}
		patch := func(off int, vals ...byte) []byte {
			f := valid.build()
			copy(f[off:], vals)
			return f
		}
		bad := [][]byte{
			patch(14, 0x43),            // IHL 3
			patch(14, 0x4f),            // IHL 15: beyond the packet
			patch(16, 0x04, 0x00),      // total length beyond the frame
			patch(14+24, 0x10, 0x00),   // UDP length beyond the packet
			patch(14+24, 0x00, 0x04),   // UDP length 4
			valid.build()[:14+20+5],    // UDP header cut short
			valid.build()[:14+15],      // IP header cut short
			append(patch(14, 0x65), 0), // version 6 in an IPv4 frame
		}
		frames := append([][]byte{bad[0], valid.build()}, bad[1:]...)
		rawSend(t, p, frames...)
		udpSend(t, p.b, p.bIP, to4791, "sentinel")
		// The socket sees the valid raw frame and the sentinel, in order,
		// and nothing of the malformed frames sent before the sentinel.
		for _, want := range []string{"raw ok", "sentinel"} {
			if got := udpRecv(t, roce); got != want {
				t.Fatalf("UDP 4791 socket got %q, want %q", got, want)
			}
		}
		if d := counters(t, s).Sub(before); d.Malformed != uint64(len(bad)) || d.NoSocket != 2 {
			t.Errorf("counters moved by %v; want Malformed %d, NoSocket 2", d, len(bad))
		}
	})

	t.Run("refused", func(t *testing.T) {
		if err := s.Update(SteerConfig{Allow: []netip.Addr{p.b2}}); err != nil {
			t.Fatal(err)
		}
		defer s.Update(SteerConfig{})
		before := counters(t, s)
		udpSend(t, p.b, p.bIP, to4791, "from .2", "from .2 again")
		udpSend(t, p.b, p.b2, to4791, "from .3")
		if got := udpRecv(t, roce); got != "from .3" {
			t.Fatalf("UDP 4791 socket got %q, want the allowed sender's datagram", got)
		}
		if d := counters(t, s).Sub(before); d.Refused != 2 || d.NoSocket != 1 {
			t.Errorf("counters moved by %v; want Refused 2, NoSocket 1", d)
		}
	})

	t.Run("generic and auto", func(t *testing.T) {
		for _, mode := range []AttachMode{Generic, Auto} {
			if err := s.Detach(p.aIdx); err != nil {
				t.Fatal(err)
			}
			if _, ok := s.Attached(p.aIdx); ok {
				t.Fatal("still attached after Detach")
			}
			inNS(t, p.a, func() {
				if err := s.Attach(p.aIdx, mode); err != nil {
					t.Fatalf("attach %v: %v", mode, err)
				}
			})
			want := mode
			if mode == Auto {
				want = Native // veth has native XDP
			}
			if got, _ := s.Attached(p.aIdx); got != want {
				t.Errorf("attached %v, want %v", got, want)
			}
			before := counters(t, s)
			udpSend(t, p.b, p.bIP, to4791, mode.String())
			if got := udpRecv(t, roce); got != mode.String() {
				t.Fatalf("got %q", got)
			}
			if d := counters(t, s).Sub(before); d.NoSocket != 1 {
				t.Errorf("%v: counters moved by %v; want NoSocket 1", mode, d)
			}
		}
	})

	t.Run("close detaches", func(t *testing.T) {
		s2 := loadTest(t, SteerConfig{})
		inNS(t, p.b, func() {
			if err := s2.Attach(p.bIdx, Auto); err != nil {
				t.Fatal(err)
			}
		})
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		var link netlink.Link
		inNS(t, p.b, func() {
			var err error
			if link, err = netlink.LinkByIndex(p.bIdx); err != nil {
				t.Fatal(err)
			}
		})
		if x := link.Attrs().Xdp; x != nil && x.Attached {
			t.Errorf("an XDP program is still attached to spt-b after Close: %+v", x)
		}
	})
}
