package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sprayfabric/spray/internal/testutil"
)

func testFabric(t *testing.T, cfg LeafSpineConfig) *Fabric {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	f, err := NewLeafSpine(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s built in %v", cfg, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { f.Close() })
	return f
}

// spineTx returns the bytes that each spine has sent.
func spineTx(t *testing.T, f *Fabric) []uint64 {
	t.Helper()
	st, err := f.PortStats()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint64, len(f.Spines))
	for _, p := range st {
		for i, s := range f.Spines {
			if p.Switch == s.Name {
				out[i] += p.TxBytes
			}
		}
	}
	return out
}

// udpRcvbufErrors returns the UDP datagrams that h's kernel dropped for a
// full socket receive buffer (a receiver the machine's load slowed down):
// Udp RcvbufErrors of the namespace, which /proc/thread-self shows for the
// thread inside it.
func udpRcvbufErrors(t *testing.T, h *Host) uint64 {
	t.Helper()
	var n uint64
	if err := h.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var names []string
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i, name := range names {
				if name == "RcvbufErrors" && i < len(f) {
					n, err = strconv.ParseUint(f[i], 10, 64)
					return err
				}
			}
		}
		return fmt.Errorf("no Udp RcvbufErrors in %s's snmp", h.Name)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// queueDrops returns the packets that the fabric's queues dropped.
func queueDrops(t *testing.T, f *Fabric) uint64 {
	t.Helper()
	st, err := f.Status(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, p := range st {
		n += p.DropQueue
	}
	return n
}

// marker is the payload of the datagrams that sendMarkers sends: shorter
// than any the tests count.
var marker = []byte{0x4d}

// udpReceiver counts the UDP payload bytes that arrive at h on a port, and
// the times of the first and last datagram; marker datagrams are counted
// apart.
type udpReceiver struct {
	conn        net.PacketConn
	mu          sync.Mutex
	n, bytes    int
	markers     int // datagrams of len(marker), not counted in n
	first, last time.Time
	done        chan struct{}
}

func listenUDP(t *testing.T, h *Host) *udpReceiver {
	t.Helper()
	r := &udpReceiver{done: make(chan struct{})}
	if err := h.Do(func() (err error) {
		r.conn, err = net.ListenPacket("udp4", net.JoinHostPort(h.IP.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		buf := make([]byte, 65536)
		for {
			n, _, err := r.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			now := time.Now()
			r.mu.Lock()
			if r.n == 0 {
				r.first = now
			}
			if n == len(marker) {
				r.markers++
				r.mu.Unlock()
				continue
			}
			r.n++
			r.bytes += n
			r.last = now
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *udpReceiver) stop() {
	r.conn.Close()
	<-r.done
}

func (r *udpReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// waitMarker sends marker datagrams from h to r, from many source ports so
// that some take every path that is up, until one arrives: a queue is
// first in, first out, so the datagrams sent before it on its path have
// arrived or are lost. A check that some datagrams must not arrive waits
// for it, since a late datagram would pass it.
func (r *udpReceiver) waitMarker(t *testing.T, h *Host, dst netip.AddrPort) {
	t.Helper()
	r.mu.Lock()
	before := r.markers
	r.mu.Unlock()
	arrived := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.markers > before
	}
	if !testutil.Poll(10*time.Second, func() bool {
		if err := h.Do(func() error {
			for range 16 {
				c, err := net.ListenPacket("udp4", net.JoinHostPort(h.IP.String(), "0"))
				if err != nil {
					return err
				}
				_, err = c.WriteTo(marker, net.UDPAddrFromAddrPort(dst))
				c.Close()
				if err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return testutil.Poll(50*time.Millisecond, arrived)
	}) {
		t.Fatalf("no marker datagram from %s reached %v", h.Name, dst)
	}
}

func (r *udpReceiver) port() int { return r.conn.LocalAddr().(*net.UDPAddr).Port }

// sprayUDP sends count datagrams of size bytes from each of ports fresh
// sockets (so from as many source ports) in h to dst.
func sprayUDP(t *testing.T, h *Host, dst netip.AddrPort, ports, count, size int) {
	t.Helper()
	msg := make([]byte, size)
	err := h.Do(func() error {
		for range ports {
			c, err := net.ListenPacket("udp4", net.JoinHostPort(h.IP.String(), "0"))
			if err != nil {
				return err
			}
			for range count {
				if _, err := c.WriteTo(msg, net.UDPAddrFromAddrPort(dst)); err != nil {
					c.Close()
					return err
				}
			}
			c.Close()
			time.Sleep(time.Millisecond) // let the queues drain: no drops
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLeafSpine(t *testing.T) {
	f := testFabric(t, LeafSpineConfig{Hosts: 2, Leaves: 2, Spines: 2})
	if len(f.Hosts) != 4 || len(f.Leaves) != 2 || len(f.Spines) != 2 {
		t.Fatalf("%d hosts, %d leaves, %d spines", len(f.Hosts), len(f.Leaves), len(f.Spines))
	}
	if got := f.Config; got.RateBps != 1e9 || got.HostRateBps != 1e9 || got.MTU != 1500 || got.BufferBytes != 125000 {
		t.Fatalf("defaults %+v", got)
	}
	for _, s := range f.Leaves {
		if len(s.Ports) != 4 || !strings.HasPrefix(s.Name, f.Prefix) {
			t.Fatalf("leaf %+v", s)
		}
	}
	for _, s := range f.Spines {
		if len(s.Ports) != 2 || s.Ports[1].Peer != f.Leaves[1].Name || s.Ports[1].RateBps != 1e9 {
			t.Fatalf("spine %+v", s)
		}
	}
	if f.Host(2, 0) != nil || f.Host(0, 2) != nil || f.Host(-1, 0) != nil || f.Host(1, 1) != f.Hosts[3] {
		t.Fatal("Host(leaf, i) does not index Hosts leaf by leaf")
	}
	a, b, c := f.Host(0, 0), f.Host(1, 1), f.Host(0, 1)
	if a.IP != netip.MustParseAddr("10.80.0.1") || b.IP != netip.MustParseAddr("10.80.1.3") || !f.HostSubnet(1).Contains(b.IP) {
		t.Fatalf("addresses %v %v", a.IP, b.IP)
	}
	if a.MAC == ([6]byte{}) || a.Ifindex == 0 || a.MTU != 1500 {
		t.Fatalf("host %+v", a)
	}
	for _, x := range [][2]*Host{{a, b}, {b, a}, {a, c}} {
		if err := ping(x[0], x[1].IP, 1400); err != nil {
			t.Fatalf("ping %s -> %s: %v", x[0].Name, x[1].Name, err)
		}
	}
	if err := tcpExchange(a, b); err != nil {
		t.Fatal(err)
	}
	// Switch.Do runs in the switch's namespace.
	if err := f.Spines[0].Do(func() error {
		_, err := net.InterfaceByName("down1")
		return err
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("spread", func(t *testing.T) {
		r := listenUDP(t, b)
		before := spineTx(t, f)
		const ports, count, size = 64, 20, 1000
		sprayUDP(t, a, netip.AddrPortFrom(b.IP, uint16(r.port())), ports, count, size)
		total := uint64(ports * count * (size + 42))
		var d0, d1 uint64
		testutil.Poll(10*time.Second, func() bool {
			after := spineTx(t, f)
			d0, d1 = after[0]-before[0], after[1]-before[1]
			return d0+d1 >= total
		})
		t.Logf("spine bytes: %d %d", d0, d1)
		if d0+d1 < total*9/10 {
			t.Fatalf("spines carried %d bytes of %d sent", d0+d1, total)
		}
		// 64 source ports hashed over two spines: each gets at least 12 of
		// them but with a chance of about 1e-6.
		if d0 < total*12/64 || d1 < total*12/64 {
			t.Fatalf("spine bytes %d and %d of %d: not spread", d0, d1, total)
		}
	})

	t.Run("linkdown", func(t *testing.T) {
		if err := f.SetLinkDown("leaf0", f.Spines[0].Name, true); err != nil {
			t.Fatal(err)
		}
		// No ping here: its reply crosses leaf1, which still hashes onto
		// spine0 until Reconverge (the rounds below), and whether the echo
		// reply's 3-tuple hashes there depends on the kernel's random
		// multipath hash seed.
		r := listenUDP(t, b)
		before := spineTx(t, f)
		sprayUDP(t, a, netip.AddrPortFrom(b.IP, uint16(r.port())), 32, 10, 1000)
		var d0, d1 uint64
		testutil.Poll(10*time.Second, func() bool {
			after := spineTx(t, f)
			d0, d1 = after[0]-before[0], after[1]-before[1]
			return d1 >= 32*10*1000
		})
		t.Logf("spine bytes with leaf0-spine0 down: %d %d", d0, d1)
		if d1 < 32*10*1000 || d0 > d1/100 {
			t.Fatalf("spine bytes %d and %d: traffic still crosses the cut link", d0, d1)
		}

		// The other way, leaf1 still sprays over spine0, which has no
		// route to leaf0 any more, until the fabric reconverges.
		ra := listenUDP(t, a)
		back := netip.AddrPortFrom(a.IP, uint16(ra.port()))
		for round := range 2 {
			before := ra.count()
			sprayUDP(t, b, back, 64, 10, 1000)
			if round == 1 {
				testutil.Poll(10*time.Second, func() bool { return ra.count()-before >= 640*95/100 })
			} else {
				ra.waitMarker(t, b, back)
			}
			got := ra.count() - before
			t.Logf("round %d: %d of %d datagrams from leaf1 to leaf0", round, got, 640)
			if round == 0 && got > 640*9/10 {
				t.Fatalf("%d of 640 datagrams crossed a spine without a route to leaf0", got)
			}
			if round == 1 && got < 640*95/100 {
				t.Fatalf("%d of 640 datagrams arrived after Reconverge", got)
			}
			if round == 0 {
				if err := f.Reconverge(); err != nil {
					t.Fatal(err)
				}
				if err := ping(a, b.IP, 56); err != nil {
					t.Fatalf("ping with spine0 cut from leaf0, after Reconverge: %v", err)
				}
			}
		}
		if err := f.SetLinkDown(f.Spines[0].Name, "leaf0", false); err != nil {
			t.Fatal(err)
		}
		if err := f.Reconverge(); err != nil {
			t.Fatal(err)
		}
		before = spineTx(t, f)
		sprayUDP(t, a, netip.AddrPortFrom(b.IP, uint16(r.port())), 64, 10, 1000)
		testutil.Poll(10*time.Second, func() bool {
			after := spineTx(t, f)
			d0, d1 = after[0]-before[0], after[1]-before[1]
			return d0+d1 >= 64*10*1042
		})
		t.Logf("spine bytes after repair: %d %d", d0, d1)
		if d0 < 12*10*1000 || d1 < 12*10*1000 {
			t.Fatalf("spine bytes %d and %d after repair: not spread", d0, d1)
		}
		if err := f.SetLinkDown("leaf0", "leaf1", true); !errors.Is(err, ErrConfig) {
			t.Fatalf("SetLinkDown of no link = %v", err)
		}
		if err := f.SetLinkDown("leaf0", "nowhere", true); !errors.Is(err, ErrConfig) {
			t.Fatalf("SetLinkDown of unknown node = %v", err)
		}
	})

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	assertGone(t, f.Prefix)
	if err := a.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v", err)
	}
	if _, err := f.PortStats(); !errors.Is(err, ErrClosed) {
		t.Fatalf("PortStats after Close = %v", err)
	}
	if err := f.SetLinkDown("leaf0", "spine0", true); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetLinkDown after Close = %v", err)
	}
}

// TestLeafSpineShaping sends UDP for a second at about three times the
// fabric's rate over one path and checks that the receiver gets no more
// bytes than the rate allows from the first send to the end of the drain,
// and that a switch queue dropped the excess. (The rate between the first
// and last arrival is only logged: a receiver that the machine's load
// delays reads a backlog in a burst, which shortens that span.)
func TestLeafSpineShaping(t *testing.T) {
	const rate = 50e6
	f := testFabric(t, LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 2, Rate: "50mbit"})
	if f.Config.HostRateBps != 100e6 {
		t.Fatalf("host rate %d, want 2 spines x 50 Mbit/s", f.Config.HostRateBps)
	}
	a, b := f.Host(0, 0), f.Host(1, 0)
	r := listenUDP(t, b)
	rcvbuf0 := udpRcvbufErrors(t, b)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.IP, uint16(r.port())))
	const size = 1400
	msg := make([]byte, size)
	sent := 0
	t0 := time.Now()
	err := a.Do(func() error {
		c, err := net.ListenPacket("udp4", net.JoinHostPort(a.IP.String(), "0"))
		if err != nil {
			return err
		}
		defer c.Close()
		// Paced by the clock, bounded by its own work: a second's worth
		// at three times the rate, however slow the sender.
		total := int(3*rate/8) / (size + 42)
		start := time.Now()
		for sent < total {
			el := time.Since(start)
			if el > time.Second {
				return nil
			}
			for sent < total && float64(sent*(size+42)*8) < 3*rate*el.Seconds() {
				if _, err := c.WriteTo(msg, dst); err != nil {
					return err
				}
				sent++
			}
			time.Sleep(500 * time.Microsecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The queues have drained when every datagram sent has arrived or was
	// counted dropped.
	if !testutil.Poll(30*time.Second, func() bool {
		return uint64(r.count())+queueDrops(t, f)+udpRcvbufErrors(t, b)-rcvbuf0 >= uint64(sent)
	}) {
		t.Fatalf("%d of %d datagrams arrived, %d were dropped at a queue, %d at the receiving socket: the rest vanished",
			r.count(), sent, queueDrops(t, f), udpRcvbufErrors(t, b)-rcvbuf0)
	}
	window := time.Since(t0)
	r.stop()
	r.mu.Lock()
	n, first, last := r.n, r.first, r.last
	r.mu.Unlock()
	if n < 10 {
		t.Fatalf("%d of %d datagrams arrived", n, sent)
	}
	got := float64((n-1)*(size+42)*8) / last.Sub(first).Seconds()
	t.Logf("sent %d datagrams, %d arrived at %.1f Mbit/s between the first and the last (shaped at %.0f)", sent, n, got/1e6, rate/1e6)
	if bits, most := float64(n*(size+42)*8), 1.2*rate*window.Seconds(); bits > most {
		t.Fatalf("%.0f bits arrived in %v through a %.0f Mbit/s fabric, at most %.0f could", bits, window.Round(time.Millisecond), rate/1e6, most)
	}
	st, err := f.PortStats()
	if err != nil {
		t.Fatal(err)
	}
	var drops uint64
	for _, p := range st {
		drops += p.QueueDrops
	}
	if n < sent && drops == 0 {
		t.Fatalf("%d of %d datagrams lost but no queue drops counted", sent-n, sent)
	}
	t.Logf("queue drops %d", drops)
}

func TestLeafSpineConfig(t *testing.T) {
	for _, c := range []LeafSpineConfig{
		{},
		{Hosts: 2, Leaves: 2},
		{Hosts: 65, Leaves: 1, Spines: 1},
		{Hosts: 64, Leaves: 64, Spines: 1},
		{Hosts: 1, Leaves: 1, Spines: 1, MTU: 100},
		{Hosts: 1, Leaves: 1, Spines: 1, Rate: "fast"},
		{Hosts: 1, Leaves: 1, Spines: 1, Rate: "1gbit", RateBps: 2e9},
		{Hosts: 1, Leaves: 1, Spines: 1, HostRateBps: 1},
		{Hosts: 1, Leaves: 1, Spines: 1, BufferBytes: 100},
		{Hosts: 1, Leaves: 1, Spines: 1, BufferBytes: -1},
	} {
		if _, err := NewLeafSpine(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewLeafSpine(%+v) = %v, want ErrConfig", c, err)
		}
	}
	c, err := LeafSpineConfig{Hosts: 4, Leaves: 2, Spines: 1, Rate: "1gbit", RateBps: 1e9}.resolve()
	if err != nil || c.HostRateBps != 250e6 || c.BufferBytes != 125000 || c.TrimBytes != 0 {
		t.Fatalf("resolve = %+v, %v", c, err)
	}
	if c, err := (LeafSpineConfig{Hosts: 1, Leaves: 1, Spines: 1, BufferBytes: 50000, Trim: true}).resolve(); err != nil || c.TrimBytes != 37500 {
		t.Fatalf("resolve with trim = %+v, %v; want a threshold of three quarters of the buffer", c, err)
	}
	if _, err := (LeafSpineConfig{Hosts: 1, Leaves: 1, Spines: 1, TrimBytes: 5000}).resolve(); !errors.Is(err, ErrConfig) {
		t.Fatalf("a threshold without trim: %v, want ErrConfig", err)
	}
}

func TestParseLeafSpine(t *testing.T) {
	for s, want := range map[string]LeafSpineConfig{
		"leafspine:4x2x4": {Hosts: 4, Leaves: 2, Spines: 4},
		"leafspine:1x1x1": {Hosts: 1, Leaves: 1, Spines: 1},
		"leafspine:2x2x2,rate=100mbit,hostrate=1gbit,buffer=64k,mtu=9000": {Hosts: 2, Leaves: 2, Spines: 2,
			Rate: "100mbit", HostRate: "1gbit", BufferBytes: 65536, MTU: 9000},
		"leafspine:1x2x2,queues=4,mtu=9000":   {Hosts: 1, Leaves: 2, Spines: 2, Queues: 4, MTU: 9000},
		"leafspine:2x1x1,buffer=64k,trim":     {Hosts: 2, Leaves: 1, Spines: 1, BufferBytes: 65536, Trim: true},
		"leafspine:2x1x1,trim=16k,buffer=64k": {Hosts: 2, Leaves: 1, Spines: 1, BufferBytes: 65536, Trim: true, TrimBytes: 16384},
	} {
		got, err := ParseLeafSpine(s)
		if err != nil || got != want {
			t.Errorf("ParseLeafSpine(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if again, err := ParseLeafSpine(got.String()); err != nil || again != got {
			t.Errorf("ParseLeafSpine(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
	for _, s := range []string{
		"", "pair", "leafspine:", "leafspine:4x2", "leafspine:4x2x4x1", "leafspine:0x1x1",
		"leafspine:+1x1x1", "leafspine:1x1x65", "leafspine:ax1x1", "leafspine:1x1x1,",
		"leafspine:1x1x1,rate", "leafspine:1x1x1,rate=1gbps", "leafspine:1x1x1,speed=1",
		"leafspine:1x1x1,buffer=-1", "leafspine:1x1x1,buffer=10", "leafspine:1x1x1,mtu=0",
		"leafspine:1x1x1,mtu=65536", "leafspine:64x64x64", "leafspine:1x1x1,queues=0",
		"leafspine:1x1x1,queues=65", "leafspine:1x1x1,queues=x",
		"leafspine:1x1x1,buffer=64k,trim=65k", "leafspine:1x1x1,trim=0", "leafspine:1x1x1,trim=x",
		"leafspine:1x1x1,trim=",
	} {
		if _, err := ParseLeafSpine(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseLeafSpine(%q) = %v, want ErrConfig", s, err)
		}
	}
}

func TestParseRate(t *testing.T) {
	for s, want := range map[string]uint64{
		"1gbit": 1e9, "1Gbit/s": 1e9, "2.5g": 2.5e9, "100mbit": 100e6, "100M": 100e6,
		"10kbit": 10e3, "1000000": 1e6, "1tbit": 1e12, " 1gbit ": 1e9, ".5gbit": 5e8,
	} {
		if got, err := ParseRate(s); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "gbit", "1gbps", "1 gbit", "-1gbit", "1kbit", "2tbit", "NaN", "Inf", "1e400", "0x10m", "1pbit"} {
		if _, err := ParseRate(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseRate(%q) = %v, want ErrConfig", s, err)
		}
	}
}

// FuzzParseLeafSpine checks that the parser never panics and that what it
// accepts survives a round trip through String.
func FuzzParseLeafSpine(f *testing.F) {
	for _, s := range []string{"leafspine:4x2x4", "leafspine:2x2x2,rate=100mbit,hostrate=1gbit,buffer=64k,mtu=9000",
		"leafspine:1x1x1,rate=1e9", "leafspine:1x1x1,buffer=1m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseLeafSpine(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		again, err := ParseLeafSpine(c.String())
		if err != nil || again != c {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, c, c.String(), again, err)
		}
	})
}

// TestLeafSpineMesh pings between every pair of hosts of a few shapes of
// fabric, including one leaf, one spine and jumbo frames.
func TestLeafSpineMesh(t *testing.T) {
	for _, c := range []LeafSpineConfig{
		{Hosts: 4, Leaves: 2, Spines: 4},
		{Hosts: 2, Leaves: 1, Spines: 1},
		{Hosts: 1, Leaves: 3, Spines: 1},
		{Hosts: 1, Leaves: 2, Spines: 3, MTU: 9000, Queues: 4},
	} {
		t.Run(c.String(), func(t *testing.T) {
			f := testFabric(t, c)
			if len(f.Hosts) != c.Hosts*c.Leaves || len(f.Leaves) != c.Leaves || len(f.Spines) != c.Spines {
				t.Fatalf("%d hosts, %d leaves, %d spines", len(f.Hosts), len(f.Leaves), len(f.Spines))
			}
			for _, h := range f.Hosts {
				var l netlink.Link
				if err := h.Do(func() (err error) { l, err = netlink.LinkByIndex(h.Ifindex); return err }); err != nil {
					t.Fatal(err)
				}
				if want := max(c.Queues, 1); l.Attrs().NumRxQueues != want || l.Attrs().NumTxQueues != want {
					t.Fatalf("%s: %d RX, %d TX queues; want %d", h.Name, l.Attrs().NumRxQueues, l.Attrs().NumTxQueues, want)
				}
			}
			size := 56
			if c.MTU == 9000 {
				size = 8900
			}
			for _, a := range f.Hosts {
				for _, b := range f.Hosts {
					if a == b {
						continue
					}
					if err := ping(a, b.IP, size); err != nil {
						t.Fatalf("ping %s -> %s: %v", a.Name, b.Name, err)
					}
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			assertGone(t, f.Prefix)
		})
	}
}

// TestLeafSpineSignal runs a process that makes a fabric and gets SIGTERM,
// then one that gets SIGKILL: the first fabric must be gone with its
// process, the second after CleanupStale.
func TestLeafSpineSignal(t *testing.T) {
	if os.Getenv("SPRAY_TESTBED_FABRIC_CHILD") == "1" {
		f, err := NewLeafSpine(context.Background(), LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 1})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(f.Prefix)
		time.Sleep(time.Minute)
		os.Exit(3)
	}
	testutil.SkipIfNotRoot(t)
	const namespaces = 5
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLeafSpineSignal$")
		cmd.Env = append(os.Environ(), "SPRAY_TESTBED_FABRIC_CHILD=1")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		prefix := strings.TrimSpace(line)
		if err != nil || !strings.HasPrefix(prefix, "spt") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child said %q, %v", line, err)
		}
		if left, _ := Leftovers(prefix); len(left) != namespaces {
			t.Errorf("child's fabric: %v", left)
		}
		cmd.Process.Signal(sig)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != sig {
			t.Errorf("child ended with %v, want death by %v", err, sig)
		}
		if sig == syscall.SIGKILL {
			if left, _ := Leftovers(prefix); len(left) != namespaces {
				t.Errorf("killed child's fabric: %v", left)
			}
			if err := CleanupStale(); err != nil {
				t.Error(err)
			}
		}
		if left, _ := Leftovers(prefix); len(left) > 0 {
			Cleanup(prefix)
			t.Fatalf("left behind after %v: %v", sig, left)
		}
	}
}

// TestLeafSpineNameClash makes a namespace with a name that the next fabric
// would use: NewLeafSpine must move on to another prefix and leave the
// stranger's namespace alone.
func TestLeafSpineNameClash(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	next := fmt.Sprintf("spt%d-%d-", os.Getpid()%1000, (seq.Load()+1)%100000)
	ns, err := newNamed(next + "spine0")
	if err != nil {
		t.Fatal(err)
	}
	defer deleteNamed(next + "spine0")
	defer ns.Close()
	f := testFabric(t, LeafSpineConfig{Hosts: 1, Leaves: 1, Spines: 1})
	if f.Prefix == next {
		t.Fatalf("fabric took the clashing prefix %s", next)
	}
	if left, _ := Leftovers(next); len(left) != 1 || left[0] != "netns "+next+"spine0" {
		t.Fatalf("under the clashing prefix: %v, want only the stranger's namespace", left)
	}
}
