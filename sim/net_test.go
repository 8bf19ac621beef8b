package sim

import (
	"encoding/binary"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/transport/wire"
)

// udpFrame returns an IPv4/UDP frame of size bytes from host src to host
// dst with source port sport; ect marks it ECN-capable.
func udpFrame(src, dst int, sport uint16, size int, ect bool) []byte {
	f := make([]byte, size)
	dmac, dip := HostAddr(dst)
	smac, sip := HostAddr(src)
	copy(f[0:], dmac[:])
	copy(f[6:], smac[:])
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0] = 0x45
	if ect {
		ip[1] = 2
	}
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[8], ip[9] = 64, 17
	s4, d4 := sip.As4(), dip.As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	binary.BigEndian.PutUint16(f[34:], sport)
	binary.BigEndian.PutUint16(f[36:], 4791)
	binary.BigEndian.PutUint16(f[38:], uint16(size-34))
	binary.BigEndian.PutUint32(f[size-4:], uint32(src)<<16|uint32(sport)) // a tag
	return f
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		if i == 10 {
			continue
		}
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func newNet(t *testing.T, topo string, mod func(*FabricConfig)) *Net {
	t.Helper()
	tp, err := ParseTopo(topo)
	if err != nil {
		t.Fatal(err)
	}
	cfg := FabricConfig{Topo: tp, Seed: 1}
	if mod != nil {
		mod(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOneFrameTime: a frame across leaf, spine and leaf arrives after four
// serializations and four propagation delays, to the nanosecond (rounded
// up once).
func TestOneFrameTime(t *testing.T) {
	n := newNet(t, "leafspine:2x2x2,rate=100gbit,hostrate=100gbit,delay=1us,hostdelay=500ns", nil)
	var at clock.Time
	n.OnDeliver = func(h int, f []byte, now clock.Time) {
		if h != 3 {
			t.Errorf("frame delivered to host %d, want 3", h)
		}
		at = now
	}
	const size = 1500
	if !n.Host(0).Send(udpFrame(0, 3, 1000, size, false)) {
		t.Fatal("send refused")
	}
	n.Run(clock.Never, nil)
	ser := serPs(size, 100e9) // 4 hops at 100 Gbit/s
	want := clock.Time((4*ser + 2*500e3 + 2*1e6 + 999) / 1000)
	if at != want {
		t.Fatalf("arrived at %v, want %v (4 x %d ps + 3 us)", at, want, ser)
	}
}

// TestFlowTime: a train of frames from one host to another completes in one
// frame's path latency plus the serialization of the rest at line rate.
func TestFlowTime(t *testing.T) {
	n := newNet(t, "leafspine:2x2x2,rate=10gbit,hostrate=10gbit", func(c *FabricConfig) { c.NICFrames = 1000 })
	var last clock.Time
	got := 0
	n.OnDeliver = func(h int, f []byte, now clock.Time) { got++; last = now }
	const frames, size = 500, 1514
	for range frames {
		if !n.Host(0).Send(udpFrame(0, 2, 7, size, false)) {
			t.Fatal("send refused")
		}
	}
	n.Run(clock.Never, nil)
	if got != frames {
		t.Fatalf("%d frames arrived, want %d", got, frames)
	}
	ser := serPs(size, 10e9)
	want := clock.Time(((frames+3)*ser + 4*1e6 + 999) / 1000)
	if last != want {
		t.Fatalf("last frame at %v, want %v", last, want)
	}
}

// TestQueueDrop: an incast into a small buffer without PFC drops at the
// congested port, counts the drops, and never queues beyond the buffer.
func TestQueueDrop(t *testing.T) {
	n := newNet(t, "leafspine:4x1x1,rate=10gbit,hostrate=10gbit,buffer=30k", func(c *FabricConfig) { c.NICFrames = 100 })
	got := 0
	n.OnDeliver = func(h int, f []byte, now clock.Time) { got++ }
	for src := 1; src < 4; src++ {
		for range 100 {
			n.Host(src).Send(udpFrame(src, 0, 9, 1000, false))
		}
	}
	n.Run(clock.Never, nil)
	st := n.Stats()
	if st.Drops.Queue == 0 {
		t.Fatal("no queue drops in a 3:1 incast into 30 KB")
	}
	if uint64(got)+st.Drops.Queue != 300 {
		t.Fatalf("%d delivered + %d dropped, want 300", got, st.Drops.Queue)
	}
	if st.BufferMax > 1 {
		t.Fatalf("buffer occupancy %.2f above 1", st.BufferMax)
	}
	if ps := n.PortStats(0, 0); ps.MaxQueue > 30<<10 || ps.Drops.Queue != st.Drops.Queue {
		t.Fatalf("host port: max queue %d, drops %d of %d", ps.MaxQueue, ps.Drops.Queue, st.Drops.Queue)
	}
}

// TestECNProbability: marking follows RED between KMin and KMax.
func TestECNProbability(t *testing.T) {
	n := newNet(t, "leafspine:2x1x1,rate=10gbit", nil)
	e := &n.ports[n.switches[0].ports[0]]
	e.ecn = ECNConfig{KMin: 10000, KMax: 50000, PMax: 0.4}
	for _, c := range []struct {
		q    int
		want float64
	}{{5000, 0}, {10000, 0}, {30000, 0.2}, {45000, 0.35}, {50000, 1}, {90000, 1}} {
		marks := 0
		const trials = 20000
		for range trials {
			f := udpFrame(0, 1, 1, 200, true)
			if n.ecnMark(e, c.q, f) {
				marks++
				h := f[14:34]
				if binary.BigEndian.Uint16(h[10:]) != ipChecksum(h) || h[1]&3 != 3 {
					t.Fatalf("CE mark left a bad header: tos %#x", h[1])
				}
			}
		}
		p := float64(marks) / trials
		if math.Abs(p-c.want) > 0.02 {
			t.Errorf("queue %d B: marked %.3f, want %.3f", c.q, p, c.want)
		}
	}
	f := udpFrame(0, 1, 1, 200, false)
	if n.ecnMark(e, 90000, f) {
		t.Error("marked a frame that is not ECN-capable")
	}
}

// TestPFCPauseResume: a 3:1 incast with PFC loses nothing; the congested
// leaf pauses the senders' NICs, which stop (their paused time grows) and
// restart (every frame arrives).
func TestPFCPauseResume(t *testing.T) {
	n := newNet(t, "leafspine:4x1x1,rate=10gbit,hostrate=10gbit,buffer=60k", func(c *FabricConfig) {
		c.NICFrames = 200
		c.PFC.On = true
	})
	got := 0
	n.OnDeliver = func(h int, f []byte, now clock.Time) { got++ }
	for src := 1; src < 4; src++ {
		for range 200 {
			n.Host(src).Send(udpFrame(src, 0, 9, 1000, false))
		}
	}
	end := n.Run(clock.Never, nil)
	st := n.Stats()
	if st.Drops.Total() != 0 || got != 600 {
		t.Fatalf("lossless fabric: %d delivered, drops %+v", got, st.Drops)
	}
	if st.PauseFrames == 0 {
		t.Fatal("no PAUSE sent in a 3:1 incast into 60 KB")
	}
	for src := 1; src < 4; src++ {
		if n.HostPortStats(src).PausedTime == 0 {
			t.Errorf("host %d NIC never paused", src)
		}
	}
	// The bottleneck stays busy: 600 frames at line rate, plus the path.
	min := clock.Time(600 * serPs(1000, 10e9) / 1000)
	if end < min || end > min+min/10 {
		t.Errorf("incast took %v, want about %v", end, min)
	}
	if st.BufferMax > 1 {
		t.Fatalf("buffer occupancy %.2f above 1", st.BufferMax)
	}
}

// TestPFCHeadOfLine: PAUSE stops a whole upstream port, so that a flow to
// an idle host behind the same paused port waits too (head-of-line
// blocking), which it does not without PFC.
func TestPFCHeadOfLine(t *testing.T) {
	run := func(pfc bool) clock.Time {
		n := newNet(t, "leafspine:4x2x1,rate=100gbit,hostrate=10gbit,buffer=100k", func(c *FabricConfig) {
			c.NICFrames = 400
			c.PFC.On = pfc
		})
		var victim clock.Time
		n.OnDeliver = func(h int, f []byte, now clock.Time) {
			if h == 5 {
				victim = now
			}
		}
		// Hosts 1-3 (leaf 0) send to host 4 (leaf 1), 3:1 at its port;
		// host 0 sends one frame to host 5 (leaf 1, idle) meanwhile,
		// through the spine links, which are not congested.
		for src := 1; src < 4; src++ {
			for range 300 {
				n.Host(src).Send(udpFrame(src, 4, 9, 1000, false))
			}
		}
		n.At(clock.Time(200*time.Microsecond), func() { n.Host(0).Send(udpFrame(0, 5, 9, 1000, false)) })
		n.Run(clock.Never, nil)
		return victim
	}
	lossy, lossless := run(false), run(true)
	if lossless <= lossy {
		t.Fatalf("victim frame at %v with PFC, %v without: want it later with PFC", lossless, lossy)
	}
}

// TestECMPSpread: flows that differ only in their UDP source port spread
// evenly over the spines.
func TestECMPSpread(t *testing.T) {
	n := newNet(t, "leafspine:2x2x4,rate=10gbit", func(c *FabricConfig) { c.NICFrames = 5000 })
	count := map[int]int{}
	n.Trace = func(sw, port int, f []byte) {
		if sw == 0 && port >= 2 {
			count[port]++
		}
	}
	const flows = 4000
	for i := range flows {
		n.Host(0).Send(udpFrame(0, 2, uint16(49152+i), 100, false))
	}
	n.Run(clock.Never, nil)
	for p := 2; p < 6; p++ {
		if c := count[p]; math.Abs(float64(c)-flows/4) > 0.1*flows/4 {
			t.Errorf("uplink %d took %d of %d flows, want about %d", p, c, flows, flows/4)
		}
	}
	// Per-packet entropy: the same source port always takes one spine.
	count = map[int]int{}
	for range 100 {
		n.Host(0).Send(udpFrame(0, 2, 50000, 100, false))
	}
	n.Run(clock.Never, nil)
	if len(count) != 1 {
		t.Errorf("one 5-tuple took %d uplinks, want 1", len(count))
	}
}

// TestFailoverSpreads: the flows of a leaf's failed uplink spread evenly
// over its other uplinks, none taking twice its share.
func TestFailoverSpreads(t *testing.T) {
	n := newNet(t, "leafspine:2x2x4,rate=10gbit", func(c *FabricConfig) { c.NICFrames = 5000 })
	count := map[int]int{}
	n.Trace = func(sw, port int, f []byte) {
		if sw == 0 && port >= 2 {
			count[port]++
		}
	}
	if err := n.SetLinkDown(LinkRef{Switch: 0, Port: 2}, true, -1); err != nil {
		t.Fatal(err)
	}
	const flows = 3000
	for i := range flows {
		n.Host(0).Send(udpFrame(0, 2, uint16(49152+i), 100, false))
	}
	n.Run(clock.Never, nil)
	if count[2] != 0 {
		t.Errorf("the down uplink took %d flows", count[2])
	}
	for p := 3; p < 6; p++ {
		if c := count[p]; math.Abs(float64(c)-flows/3) > 0.1*flows/3 {
			t.Errorf("uplink %d took %d of %d flows, want about %d", p, c, flows, flows/3)
		}
	}
}

// TestLinkDownLoss: frames over a link that is down are blackholed;
// the local switch routes around its own down uplinks; random loss drops
// about its share.
func TestLinkDownLoss(t *testing.T) {
	n := newNet(t, "leafspine:1x2x2,rate=10gbit", func(c *FabricConfig) { c.NICFrames = 5000 })
	got := 0
	n.OnDeliver = func(h int, f []byte, now clock.Time) { got++ }
	// Spine 3's link to leaf 1 down: leaf 0 does not know.
	if err := n.SetLinkDown(LinkRef{Switch: 3, Port: 1}, true, -1); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		n.Host(0).Send(udpFrame(0, 1, uint16(i), 100, false))
	}
	n.Run(clock.Never, nil)
	st := n.Stats()
	if st.Drops.Blackhole == 0 || uint64(got)+st.Drops.Blackhole != 1000 {
		t.Fatalf("%d delivered, %d blackholed of 1000", got, st.Drops.Blackhole)
	}
	// Reconverged: nothing is lost any more.
	if err := n.SetLinkDown(LinkRef{Switch: 3, Port: 1}, true, 0); err != nil {
		t.Fatal(err)
	}
	n.Run(clock.Never, nil)
	got = 0
	for i := range 1000 {
		n.Host(0).Send(udpFrame(0, 1, uint16(i), 100, false))
	}
	n.Run(clock.Never, nil)
	if got != 1000 {
		t.Fatalf("after reconvergence %d of 1000 delivered", got)
	}
	got = 0
	if err := n.SetLinkDown(LinkRef{Switch: 3, Port: 1}, false, 0); err != nil {
		t.Fatal(err)
	}
	for _, l := range n.CoreLinks() {
		if err := n.SetLoss(l, 0.1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4000 {
		n.Host(0).Send(udpFrame(0, 1, uint16(i), 100, false))
	}
	n.Run(clock.Never, nil)
	if lost := 4000 - got; lost < 600 || lost > 920 { // two lossy links: 19%
		t.Fatalf("lost %d of 4000 at 10%% per link over two links", lost)
	}
}

// TestFatTreeRoutes: every host reaches every other on a k=4 fat-tree.
func TestFatTreeRoutes(t *testing.T) {
	n := newNet(t, "fattree:4,rate=10gbit", func(c *FabricConfig) { c.NICFrames = 100 })
	if n.Hosts() != 16 || n.Switches() != 20 {
		t.Fatalf("%d hosts, %d switches; want 16, 20", n.Hosts(), n.Switches())
	}
	seen := map[[2]int]bool{}
	n.OnDeliver = func(h int, f []byte, now clock.Time) {
		src := int(binary.BigEndian.Uint32(f[len(f)-4:]) >> 16)
		seen[[2]int{src, h}] = true
	}
	for s := range 16 {
		for d := range 16 {
			if s != d {
				n.Host(s).Send(udpFrame(s, d, uint16(d), 100, false))
			}
		}
	}
	n.Run(clock.Never, nil)
	if len(seen) != 16*15 {
		t.Fatalf("%d of %d pairs delivered", len(seen), 16*15)
	}
}

// TestShaperTBF: on a Shaper fabric (the netns testbed's TBF ports over
// veths) a frame on an idle path arrives after the links' delays alone,
// without serialization; a train of frames leaves a shaper a bucket at
// once and then one frame per frame time at the rate, by the frame's
// bytes without preamble, FCS or gap, as tc counts them.
func TestShaperTBF(t *testing.T) {
	const size = 3514
	topo := "leafspine:1x2x1,rate=100mbit,hostrate=200mbit,mtu=3514,delay=10us,hostdelay=20us,shaper=tbf"
	n := newNet(t, topo, func(c *FabricConfig) { c.NICFrames = 100 })
	var at []clock.Time
	n.OnDeliver = func(h int, f []byte, now clock.Time) { at = append(at, now) }
	if !n.Host(0).Send(udpFrame(0, 1, 5, size, false)) {
		t.Fatal("send refused")
	}
	n.Run(clock.Never, nil)
	if want := clock.Time(2*20e3 + 2*10e3); len(at) != 1 || at[0] != want {
		t.Fatalf("one frame arrived at %v, want [%v]: delays only", at, want)
	}

	n = newNet(t, topo, func(c *FabricConfig) { c.NICFrames = 100 })
	at = nil
	n.OnDeliver = func(h int, f []byte, now clock.Time) { at = append(at, now) }
	const frames = 10
	for range frames {
		if !n.Host(0).Send(udpFrame(0, 1, 5, size, false)) {
			t.Fatal("send refused")
		}
	}
	n.Run(clock.Never, nil)
	if len(at) != frames {
		t.Fatalf("%d frames arrived, want %d", len(at), frames)
	}
	// The bucket holds two frames (100 µs at 100 Mbit/s is less): the
	// first two leave the leaf at once, then one per frame time; the
	// spine's port, at the same rate, passes them as they come.
	ft := shaperPs(size, 100e6)
	for i, got := range at {
		dep := int64(max(i-1, 0)) * ft
		want := clock.Time((dep+999)/1000) + 2*20e3 + 2*10e3
		if got != want {
			t.Errorf("frame %d arrived at %v, want %v", i, got, want)
		}
	}
	// The train took its bytes at the rate, to within a frame: the bucket.
	if span, rate := time.Duration(at[frames-1]-at[0]), time.Duration((frames-2)*ft/1000); span != rate {
		t.Errorf("train spanned %v, want %v", span, rate)
	}
}

// TestShaperINT: at a shaper, INT QLen is the time a frame waits for its
// tokens times the rate (as the testbed's programs fill it): 0 for the
// frames the bucket passes at once, then the bytes ahead of it and its own.
func TestShaperINT(t *testing.T) {
	const size = 3514
	n := newNet(t, "leafspine:1x2x1,rate=100mbit,hostrate=200mbit,mtu=3514,shaper=tbf", func(c *FabricConfig) { c.NICFrames = 100 })
	var qlen []uint32
	n.OnDeliver = func(h int, f []byte, now clock.Time) {
		var p wire.Packet
		if err := wire.Decode(f, &p); err != nil || len(p.INT) == 0 {
			t.Fatalf("frame without INT: %v", err)
		}
		qlen = append(qlen, wire.HopAt(p.INT, 0).QLen) // the leaf's uplink
	}
	for range 5 {
		n.Host(0).Send(intFrame(t, 0, 1, size))
	}
	n.Run(clock.Never, nil)
	want := []uint32{0, 0, size, 2 * size, 3 * size}
	if len(qlen) != len(want) {
		t.Fatalf("%d frames, want %d", len(qlen), len(want))
	}
	for i := range want {
		// Tokens accrue during the µs the frames take to arrive: a few
		// bytes less than the frames ahead.
		if d := int(want[i]) - int(qlen[i]); d < 0 || d > 64 {
			t.Errorf("frame %d: QLen %d, want %d", i, qlen[i], want[i])
		}
	}
}

// intFrame returns a spray data frame of size bytes from host src to dst
// with room for 3 INT hop records.
func intFrame(t *testing.T, src, dst, size int) []byte {
	t.Helper()
	var p wire.Packet
	p.Eth.Dst, _ = HostAddr(dst)
	var sip, dip netip.Addr
	p.Eth.Src, sip = HostAddr(src)
	_, dip = HostAddr(dst)
	p.IP.Src, p.IP.Dst = sip, dip
	p.UDP = wire.UDP{Src: 1000, Dst: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: wire.OpSprayData, PSN: 1}
	p.Data = wire.Data{Kind: wire.KindWrite, Flags: wire.FlagINT, INTMax: 3}
	hl := wire.HeaderLen(&p)
	payload := make([]byte, size-hl-4)
	p.Data.MsgLen = uint32(len(payload))
	buf := make([]byte, wire.FrameLen(&p, len(payload)))
	n, err := wire.Encode(buf, &p, payload)
	if err != nil || n != size {
		t.Fatalf("encode: %d bytes, %v (want %d)", n, err, size)
	}
	return buf[:n]
}

// TestPortBuffer: with PortBuffer each egress queue holds its own bytes
// and drops at its limit (tail drop, a TBF's), whatever the other queues
// of the switch hold.
func TestPortBuffer(t *testing.T) {
	n := newNet(t, "leafspine:4x1x1,rate=10gbit,hostrate=10gbit,portbuffer=30k", func(c *FabricConfig) { c.NICFrames = 200 })
	got := map[int]int{}
	n.OnDeliver = func(h int, f []byte, now clock.Time) { got[h]++ }
	for src := 1; src < 4; src++ {
		for range 100 {
			n.Host(src).Send(udpFrame(src, 0, 9, 1000, false))
		}
	}
	// One frame to another port: its queue is empty, it gets through.
	if !n.Host(1).Send(udpFrame(1, 2, 9, 1000, false)) {
		t.Fatal("send refused")
	}
	n.Run(clock.Never, nil)
	ps := n.PortStats(0, 0)
	if ps.Drops.Queue == 0 || uint64(got[0])+ps.Drops.Queue != 300 {
		t.Fatalf("host 0: %d delivered, %d dropped, want drops and 300 in all", got[0], ps.Drops.Queue)
	}
	if ps.MaxQueue > 30<<10 {
		t.Fatalf("queue reached %d bytes, above its 30 KB", ps.MaxQueue)
	}
	if got[2] != 1 {
		t.Fatalf("host 2 got %d frames, want 1", got[2])
	}
	if b := n.SwitchBuffer(0); b != 5*30<<10 {
		t.Fatalf("switch buffer %d, want 5 ports x 30 KB", b)
	}
}

// TestECNDelay: thresholds given in time are each port's delay at its
// rate, so a port twice as fast marks at twice the bytes, as the
// testbed's programs mark by queue delay.
func TestECNDelay(t *testing.T) {
	n := newNet(t, "leafspine:1x2x1,rate=100mbit,hostrate=200mbit,mtu=3514", func(c *FabricConfig) {
		c.ECNDelay = ECNDelayConfig{KMin: 560 * time.Microsecond, KMax: 2240 * time.Microsecond, PMax: 0.2}
	})
	for _, p := range n.ports {
		want := ECNConfig{KMin: 7000, KMax: 28000, PMax: 0.2}
		if p.rate == 200e6 {
			want = ECNConfig{KMin: 14000, KMax: 56000, PMax: 0.2}
		}
		if p.ecn != want {
			t.Errorf("port at %d bit/s: ECN %+v, want %+v", p.rate, p.ecn, want)
		}
	}
	if _, err := New(FabricConfig{Topo: n.topo, ECNDelay: ECNDelayConfig{KMin: 2, KMax: 1}}); err == nil {
		t.Error("KMax below KMin accepted")
	}
}

// TestEdgeUnmeasured: with EdgeUnmeasured, a queue at a switch port that
// faces a host marks no ECN and reads 0 in INT, as on the testbed (no
// programs on hosts); without it the same incast marks and reports it.
func TestEdgeUnmeasured(t *testing.T) {
	for _, blind := range []bool{false, true} {
		n := newNet(t, "leafspine:3x1x1,rate=100mbit,hostrate=100mbit,mtu=3514,shaper=tbf", func(c *FabricConfig) {
			c.NICFrames = 100
			c.EdgeUnmeasured = blind
		})
		var maxQ uint32
		ce := 0
		n.OnDeliver = func(h int, f []byte, now clock.Time) {
			var p wire.Packet
			if err := wire.Decode(f, &p); err != nil || len(p.INT) == 0 {
				t.Fatalf("frame without INT: %v", err)
			}
			maxQ = max(maxQ, wire.HopAt(p.INT, 0).QLen)
			if f[15]&3 == 3 {
				ce++
			}
		}
		for range 20 {
			for src := 1; src < 3; src++ {
				f := intFrame(t, src, 0, 3514)
				f[15] |= 2 // ECT(0)
				binary.BigEndian.PutUint16(f[24:], ipChecksum(f[14:34]))
				n.Host(src).Send(f)
			}
		}
		n.Run(clock.Never, nil)
		if blind && (maxQ != 0 || ce != 0) {
			t.Errorf("unmeasured edge: QLen up to %d, %d CE marks; want none", maxQ, ce)
		}
		if !blind && (maxQ < 10*3514 || ce == 0) {
			t.Errorf("measured edge: QLen up to %d, %d CE marks; want a queue of 10+ frames and marks", maxQ, ce)
		}
	}
}

// TestFatTreeReroute: once the fabric has reconverged after a link
// between an edge and an aggregation switch fails, every host reaches
// every other on every 5-tuple, including from other pods, whose edge
// switches must avoid the aggregation switches whose cores lead only
// into the dead link (three switches ahead).
func TestFatTreeReroute(t *testing.T) {
	n := newNet(t, "fattree:4,rate=10gbit", func(c *FabricConfig) { c.NICFrames = 4000 })
	// Switch 0 is pod 0's first edge; its last port is its uplink to the
	// pod's last aggregation switch.
	l := LinkRef{Switch: 0, Port: len(n.switches[0].ports) - 1}
	if pi := n.switches[0].ports[l.Port]; n.ports[n.ports[pi].peer].host {
		t.Fatal("switch 0's last port faces a host")
	}
	if err := n.SetLinkDown(l, true, 0); err != nil {
		t.Fatal(err)
	}
	n.Run(clock.Never, nil)
	seen := map[[2]int]int{}
	n.OnDeliver = func(h int, f []byte, now clock.Time) {
		src := int(binary.BigEndian.Uint32(f[len(f)-4:]) >> 16)
		seen[[2]int{src, h}]++
	}
	const ports = 64
	for s := range 16 {
		for d := range 16 {
			for sp := range ports {
				if s != d {
					n.Host(s).Send(udpFrame(s, d, uint16(1000+sp), 100, false))
				}
			}
		}
	}
	n.Run(clock.Never, nil)
	if bh := n.Stats().Drops.Blackhole; bh != 0 {
		t.Errorf("%d frames blackholed after reconvergence", bh)
	}
	for s := range 16 {
		for d := range 16 {
			if s != d && seen[[2]int{s, d}] != ports {
				t.Errorf("%d -> %d: %d of %d frames delivered", s, d, seen[[2]int{s, d}], ports)
			}
		}
	}
}

// TestFatTreeLinkFailRun: under linkfail on a fat-tree, roce (one path
// per QP, Go-Back-N) completes every flow of an all-to-all with its bytes
// intact once the fabric has reconverged: no QP is left on a path into
// the dead link.
func TestFatTreeLinkFailRun(t *testing.T) {
	tp, err := ParseTopo("fattree:4")
	if err != nil {
		t.Fatal(err)
	}
	w, err := ParseWorkload("alltoall:256k", tp.Hosts(), 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Verify: true, Profiles: []string{ProfileRoCE}, Scenarios: []string{ScenarioLinkFail}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	if r.Done != r.Flows || r.Err != "" {
		t.Fatalf("%d of %d flows done: %s", r.Done, r.Flows, r.Err)
	}
	if r.Drops.Blackhole == 0 {
		t.Fatal("no frame blackholed: the link did not fail under the traffic")
	}
}
