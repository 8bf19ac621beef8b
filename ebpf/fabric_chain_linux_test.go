//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport/wire"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestFabricChain sends spray data frames over two hops, h1 -> sw -> h2,
// through namespaces: h1's end (port 1/1) and sw's end towards h2 (port 2/2,
// shaped by a TBF qdisc to 1 Mbit/s) stamp INT; sw's end towards h1 (2/1) and
// h2's end (3/1) measure the queue delay of the port before them. A burst
// of frames queues in the TBF: the fabric measures that queue, fills QLen
// and marks ECN, while every frame arrives intact with two hop records.
func TestFabricChain(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	h1, sw, h2 := newNS(t), newNS(t), newNS(t)
	type end struct {
		ns    netns.NsHandle
		name  string
		addr  netip.Prefix
		index int
		mac   net.HardwareAddr
	}
	// link joins a and b with a veth pair, configures both ends and returns
	// them with their ifindex and MAC.
	link := func(a, b end) (end, end) {
		ha, err := netlink.NewHandleAt(a.ns)
		if err != nil {
			t.Fatal(err)
		}
		defer ha.Close()
		hb, err := netlink.NewHandleAt(b.ns)
		if err != nil {
			t.Fatal(err)
		}
		defer hb.Close()
		if err := ha.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a.name}, PeerName: b.name, PeerNamespace: netlink.NsFd(b.ns)}); err != nil {
			t.Fatalf("add veth: %v", err)
		}
		up := func(h *netlink.Handle, e *end) {
			l, err := h.LinkByName(e.name)
			if err != nil {
				t.Fatal(err)
			}
			ipn := &net.IPNet{IP: e.addr.Addr().AsSlice(), Mask: net.CIDRMask(e.addr.Bits(), 32)}
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			e.index, e.mac = l.Attrs().Index, l.Attrs().HardwareAddr
		}
		up(ha, &a)
		up(hb, &b)
		return a, b
	}
	h1e, sw1 := link(end{ns: h1, name: "spt-h1", addr: netip.MustParsePrefix("10.78.1.1/24")},
		end{ns: sw, name: "spt-sw1", addr: netip.MustParsePrefix("10.78.1.254/24")})
	sw2, h2e := link(end{ns: sw, name: "spt-sw2", addr: netip.MustParsePrefix("10.78.2.254/24")},
		end{ns: h2, name: "spt-h2", addr: netip.MustParsePrefix("10.78.2.1/24")})
	for _, r := range []struct {
		ns  netns.NsHandle
		gw  netip.Addr
		dst string
	}{{h1, sw1.addr.Addr(), "10.78.2.0/24"}, {h2, sw2.addr.Addr(), "10.78.1.0/24"}} {
		h, err := netlink.NewHandleAt(r.ns)
		if err != nil {
			t.Fatal(err)
		}
		_, dst, _ := net.ParseCIDR(r.dst)
		err = h.RouteAdd(&netlink.Route{Dst: dst, Gw: r.gw.AsSlice()})
		h.Close()
		if err != nil {
			t.Fatalf("route: %v", err)
		}
	}
	inNS(t, sw, func() {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	// 1 Mbit/s, a 64 KB queue: a 1000-byte frame takes 8 ms.
	const rateMbps = 1
	hs, err := netlink.NewHandleAt(sw)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	if err := hs.QdiscReplace(&netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: sw2.index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rateMbps * 1e6 / 8, Limit: 1 << 16, Buffer: netlink.Xmittime(rateMbps*1e6/8, 1600),
	}); err != nil {
		t.Fatalf("tbf: %v", err)
	}

	f := loadFabricTest(t)
	p11, p21, p22, p31 := PortID{1, 1}, PortID{2, 1}, PortID{2, 2}, PortID{3, 1}
	ecn := ECNConfig{KMin: 20 * time.Millisecond, KMax: 40 * time.Millisecond}
	for _, a := range []struct {
		e   end
		cfg PortConfig
	}{
		{h1e, PortConfig{ID: p11, RateMbps: 1000}},
		{sw1, PortConfig{ID: p21, RateMbps: 1000}},
		{sw2, PortConfig{ID: p22, RateMbps: rateMbps, ECN: ecn}},
		{h2e, PortConfig{ID: p31, RateMbps: 1000}},
	} {
		inNS(t, a.e.ns, func() {
			if err := f.AttachPort(a.e.index, a.cfg); err != nil {
				t.Fatalf("AttachPort %v: %v", a.cfg.ID, err)
			}
		})
	}

	sock := udpListen(t, h2, h2e.addr.Addr(), wire.UDPPort)
	if err := sock.SetReadBuffer(1 << 20); err != nil {
		t.Fatal(err)
	}
	// Resolve the neighbours on the path with a datagram first.
	udpSend(t, h1, h1e.addr.Addr(), netip.AddrPortFrom(h2e.addr.Addr(), wire.UDPPort), "hello")
	buf := make([]byte, 2048)
	sock.SetReadDeadline(time.Now().Add(guard))
	if n, err := sock.Read(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("first datagram over two hops: %q, %v", buf[:n], err)
	}

	var fd int
	inNS(t, h1, func() {
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			t.Fatal(err)
		}
	})
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: h1e.index, Halen: 6}
	copy(sa.Addr[:], sw1.mac)
	const n = 40
	payload := bytes.Repeat([]byte{0xa5}, 1000)
	frames := make([][]byte, n)
	for i := range frames {
		pk := wire.Packet{
			IP:   wire.IP{Src: h1e.addr.Addr(), Dst: h2e.addr.Addr(), TTL: 64, TOS: wire.ECNECT0},
			UDP:  wire.UDP{Src: 50000, Dst: wire.UDPPort},
			BTH:  wire.BTH{Opcode: wire.OpSprayData, DestQP: 5, PSN: uint32(i)},
			Data: wire.Data{MsgLen: n * 1000, Offset: uint32(i * 1000), Flags: wire.FlagINT, INTMax: 4},
		}
		copy(pk.Eth.Dst[:], sw1.mac)
		copy(pk.Eth.Src[:], h1e.mac)
		frames[i] = encode(t, &pk, payload)
	}
	for _, fr := range frames {
		if err := unix.Sendto(fd, fr, 0, sa); err != nil {
			t.Fatalf("raw send: %v", err)
		}
	}
	var maxQ uint32
	for i := range n {
		sock.SetReadDeadline(time.Now().Add(guard))
		m, err := sock.Read(buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		// The ICRC masks TTL, TOS and the IPv4 checksum, which the path
		// changed: the sent headers serve to check it.
		got := decode(t, append(bytes.Clone(frames[i][:14+20+8]), buf[:m]...))
		if got.BTH.PSN != uint32(i) || !bytes.Equal(got.Payload, payload) {
			t.Fatalf("frame %d: PSN %d, payload intact %v", i, got.BTH.PSN, bytes.Equal(got.Payload, payload))
		}
		if len(got.INT) != 2*wire.HopLen {
			t.Fatalf("frame %d: %d bytes of hop records, want two records", i, len(got.INT))
		}
		a, b := wire.HopAt(got.INT, 0), wire.HopAt(got.INT, 1)
		if a.Switch != 1 || a.Port != 1 || b.Switch != 2 || b.Port != 2 || b.RateMbps != rateMbps || b.TS <= a.TS {
			t.Fatalf("frame %d: hops %+v, %+v", i, a, b)
		}
		maxQ = max(maxQ, b.QLen)
	}
	c11, c22 := portCounters(t, f, p11), portCounters(t, f, p22)
	t.Logf("port 1/1: %v", c11)
	t.Logf("port 2/2: %v; largest QLen %d bytes", c22, maxQ)
	if c11.INTStamped != n || c11.Measured < n || c22.INTStamped != n || c22.Measured < n {
		t.Errorf("every frame stamped and measured at both hops: 1/1 %v, 2/2 %v", c11, c22)
	}
	// The 40th frame waits for 39 others: about 300 ms; require a third.
	if c22.MaxQueueDelay < 100*time.Millisecond {
		t.Errorf("largest delay in the 1 Mbit/s queue %v, want at least 100ms", c22.MaxQueueDelay)
	}
	if want := uint32(100e6 * rateMbps / 8000); maxQ < want {
		t.Errorf("largest QLen %d, want at least %d (100 ms at %d Mbit/s)", maxQ, want, rateMbps)
	}
	// Frames behind more than 5 others wait over 40 ms: marked.
	if c22.ECNMarked < n/2 || c22.ECNMarked > n || c11.ECNMarked != 0 {
		t.Errorf("ECN marks: %d at the shaped port, %d at the first; want at least %d and 0", c22.ECNMarked, c11.ECNMarked, n/2)
	}
	if c := portCounters(t, f, p21); c.RxPackets < n {
		t.Errorf("port 2/1 received %d, want at least %d", c.RxPackets, n)
	}
}
