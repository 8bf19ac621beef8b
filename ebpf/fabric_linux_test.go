//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport/wire"
	"golang.org/x/sys/unix"
)

// Return codes of the fabric programs.
const (
	retNext = ^uint32(0) // TCX_NEXT (-1)
	retShot = 2          // TC_ACT_SHOT
)

// testPort is the port that the BPF_PROG_TEST_RUN tests add, without
// attaching it to any interface.
var testPort = PortID{Switch: 7, Port: 3}

const testRate = 25000 // Mbit/s

// loadFabricTest loads a Fabric, closed at the end of the test.
func loadFabricTest(tb testing.TB) *Fabric {
	tb.Helper()
	testutil.SkipIfNotRoot(tb)
	f, err := LoadFabric()
	if err != nil {
		tb.Fatalf("LoadFabric: %v", err)
	}
	tb.Cleanup(func() {
		if err := f.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return f
}

// testFabric is a Fabric with testPort added, and its programs.
type testFabric struct {
	*Fabric
	ingress, egress *ebpf.Program
}

// loadFabricRun loads a Fabric with testPort added for test runs.
func loadFabricRun(tb testing.TB, cfg PortConfig) testFabric {
	tb.Helper()
	f := loadFabricTest(tb)
	cfg.ID = testPort
	if err := f.addPort(1, cfg, false); err != nil {
		tb.Fatalf("add the test port: %v", err)
	}
	in, eg, err := f.programs(testPort)
	if err != nil {
		tb.Fatal(err)
	}
	return testFabric{f, in, eg}
}

// run runs prog on frame and returns its verdict and the frame it leaves.
func run(tb testing.TB, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	tb.Helper()
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	ret, err := prog.Run(&opts)
	if err != nil {
		tb.Fatalf("run on %d bytes: %v", len(frame), err)
	}
	return ret, opts.DataOut
}

func portCounters(tb testing.TB, f interface {
	PortCounters(PortID) (PortCounters, error)
}, id PortID) PortCounters {
	tb.Helper()
	c, err := f.PortCounters(id)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// sprayData returns a spray data packet with an INT region of intMax slots
// (none when 0), from 10.0.0.2 to 10.0.0.1 or their IPv6 equivalents.
func sprayData(v6 bool, intMax uint8, tos uint8) (wire.Packet, []byte) {
	p := wire.Packet{
		Eth: wire.Eth{Dst: testMACDst, Src: testMACSrc},
		IP:  wire.IP{Src: ip4B, Dst: ip4A, TOS: tos, TTL: 64, ID: 77},
		UDP: wire.UDP{Src: 49999, Dst: wire.UDPPort},
		BTH: wire.BTH{Opcode: wire.OpSprayData, DestQP: 0x123456, PSN: 0xabcdef, PKey: 0xffff},
		Data: wire.Data{MsgID: 9, Offset: 4096, MsgLen: 1 << 20, Kind: wire.KindSend,
			TxTime: 123456789},
	}
	if v6 {
		p.IP.Src, p.IP.Dst, p.IP.FlowLabel = ip6B, ip6A, 0x12345
	}
	if intMax > 0 {
		p.Data.Flags = wire.FlagINT
		p.Data.INTMax = intMax
	}
	payload := bytes.Repeat([]byte("spray payload "), 40)
	return p, payload
}

func encode(tb testing.TB, p *wire.Packet, payload []byte) []byte {
	tb.Helper()
	buf := make([]byte, wire.FrameLen(p, len(payload)))
	n, err := wire.Encode(buf, p, payload)
	if err != nil {
		tb.Fatal(err)
	}
	return buf[:n]
}

func decode(tb testing.TB, frame []byte) *wire.Packet {
	tb.Helper()
	var p wire.Packet
	if err := wire.Decode(frame, &p); err != nil {
		tb.Fatalf("decode of the frame the program left: %v", err)
	}
	return &p
}

func TestFabricINT(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			f := loadFabricRun(t, PortConfig{RateMbps: testRate})
			p, payload := sprayData(v6, 3, 0)
			orig := encode(t, &p, payload)

			ret, out := run(t, f.egress, orig)
			if ret != retNext {
				t.Fatalf("egress verdict %d, want TCX_NEXT", int32(ret))
			}
			got := decode(t, out)
			if n := len(got.INT) / wire.HopLen; n != 1 {
				t.Fatalf("%d hop records after egress, want 1", n)
			}
			hop := wire.HopAt(got.INT, 0)
			if hop.Switch != testPort.Switch || hop.Port != testPort.Port || hop.RateMbps != testRate ||
				hop.TS == 0 || hop.QLen != 0 || hop.TxBytes != uint32(len(orig)) {
				t.Errorf("hop after egress %+v; want switch/port %v, rate %d, a timestamp, QLen 0, TxBytes %d",
					hop, testPort, testRate, len(orig))
			}
			// Byte for byte what the software switch writes, IPv6 UDP
			// checksum included.
			want := bytes.Clone(orig)
			if ok, err := wire.StampHop(want, hop); !ok || err != nil {
				t.Fatalf("StampHop: %v %v", ok, err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("egress output differs from wire.StampHop's\n got %x\nwant %x", out, want)
			}
			if !bytes.Equal(got.Payload, payload) {
				t.Error("payload changed")
			}
			c := portCounters(t, f, testPort)
			if c.INTStamped != 1 || c.Packets != 1 || c.Bytes != uint64(len(orig)) {
				t.Errorf("counters after egress: %v", c)
			}

			// The next port's ingress measures the queue delay and fills
			// QLen of the record.
			ret, out2 := run(t, f.ingress, out)
			if ret != retNext {
				t.Fatalf("ingress verdict %d", int32(ret))
			}
			c = portCounters(t, f, testPort)
			if c.Measured != 1 || c.RxPackets != 1 || c.QueueDelaySum <= 0 || c.MaxQueueDelay != c.QueueDelaySum {
				t.Fatalf("counters after ingress: %v; want one delay measured", c)
			}
			got = decode(t, out2)
			hop2 := wire.HopAt(got.INT, 0)
			wantQ := uint64(c.QueueDelaySum) * testRate / 8000
			if uint64(hop2.QLen) != min(wantQ, 1<<32-1) {
				t.Errorf("QLen %d after a delay of %v at %d Mbit/s, want %d", hop2.QLen, c.QueueDelaySum, testRate, wantQ)
			}
			hop.QLen = hop2.QLen
			if hop2 != hop {
				t.Errorf("hop after ingress %+v, want %+v", hop2, hop)
			}
			want = bytes.Clone(orig)
			wire.StampHop(want, hop)
			if !bytes.Equal(out2, want) {
				t.Errorf("ingress output differs from wire.StampHop's\n got %x\nwant %x", out2, want)
			}
			// Ingress of a frame that no egress sent: nothing measured.
			ret, out3 := run(t, f.ingress, out2)
			if ret != retNext || !bytes.Equal(out3, out2) {
				t.Error("second ingress changed the frame")
			}
			if c2 := portCounters(t, f, testPort); c2.Measured != 1 {
				t.Errorf("measured %d after an unmatched ingress, want 1", c2.Measured)
			}
		})
	}
}

func TestFabricINTFull(t *testing.T) {
	f := loadFabricRun(t, PortConfig{RateMbps: testRate})
	p, payload := sprayData(false, 2, 0)
	frame := encode(t, &p, payload)
	for i := range 3 {
		var ret uint32
		ret, frame = run(t, f.egress, frame)
		if ret != retNext {
			t.Fatalf("verdict %d", int32(ret))
		}
		got := decode(t, frame)
		if n, want := len(got.INT)/wire.HopLen, min(i+1, 2); n != want {
			t.Errorf("after %d hops: %d records, want %d", i+1, n, want)
		}
	}
	if c := portCounters(t, f, testPort); c.INTStamped != 2 || c.INTFull != 1 {
		t.Errorf("counters %v; want 2 stamped, 1 full", c)
	}
	// TxBytes counts every byte sent.
	got := decode(t, frame)
	if tx := wire.HopAt(got.INT, 1).TxBytes; tx != uint32(2*len(frame)) {
		t.Errorf("TxBytes of the second hop %d, want %d", tx, 2*len(frame))
	}
}

// otherFrames are frames that are not spray data with INT: they must leave
// both programs unchanged.
func otherFrames(t *testing.T) map[string][]byte {
	p, payload := sprayData(false, 0, 0)
	noINT := encode(t, &p, payload)
	p, payload = sprayData(false, 2, 0)
	p.BTH.Opcode = wire.OpSendOnly
	p.Data = wire.Data{}
	send := encode(t, &p, payload)
	p, payload = sprayData(false, 2, 0)
	bad := encode(t, &p, payload)
	bad[14+20+8+wire.INTShimOff+wire.INTShimMaxOff] = 9 // more slots than the header says
	arp := append(append(append([]byte(nil), testMACDst[:]...), testMACSrc[:]...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	return map[string][]byte{
		"udp other port":    frameSpec{src: ip4B, dst: ip4A, srcPort: 5000, dstPort: 53, payload: make([]byte, 100)}.build(),
		"udp6 other port":   frameSpec{src: ip6B, dst: ip6A, srcPort: 5000, dstPort: 4792, payload: make([]byte, 100)}.build(),
		"tcp to 4791":       frameSpec{src: ip4B, dst: ip4A, proto: 6, protoSet: true, srcPort: 5000, dstPort: 4791, payload: make([]byte, 100)}.build(),
		"arp":               arp,
		"short":             make([]byte, 14),
		"spray without INT": noINT,
		"RC SEND":           send,
		"bad INT region":    bad,
	}
}

func TestFabricOtherTraffic(t *testing.T) {
	f := loadFabricRun(t, PortConfig{RateMbps: testRate, ECN: ECNConfig{KMax: 1}})
	frames := otherFrames(t)
	for name, frame := range frames {
		for _, prog := range []*ebpf.Program{f.egress, f.ingress} {
			ret, out := run(t, prog, frame)
			if ret != retNext || !bytes.Equal(out, frame) {
				t.Errorf("%s, %v: verdict %d, changed %v", name, prog, int32(ret), !bytes.Equal(out, frame))
			}
		}
	}
	c := portCounters(t, f, testPort)
	if c.Packets != uint64(len(frames)) || c.RxPackets != uint64(len(frames)) || c.INTStamped != 0 || c.ECNMarked != 0 || c.Drops() != 0 {
		t.Errorf("counters %v; want %d packets each way and nothing else", c, len(frames))
	}
}

func TestFabricFaults(t *testing.T) {
	f := loadFabricRun(t, PortConfig{})
	p, payload := sprayData(false, 2, 0)
	roce := encode(t, &p, payload)
	other := frameSpec{src: ip4B, dst: ip4A, srcPort: 5000, dstPort: 53, payload: make([]byte, 100)}.build()
	send := func(n int, frame []byte) (dropped int) {
		for range n {
			ret, _ := run(t, f.egress, frame)
			switch ret {
			case retShot:
				dropped++
			case retNext:
			default:
				t.Fatalf("verdict %d", int32(ret))
			}
		}
		return dropped
	}
	step := func(name string, faults Faults, frame []byte, n, wantDropped int, field func(PortCounters) uint64) {
		t.Helper()
		if err := f.SetFaults(testPort, faults); err != nil {
			t.Fatal(err)
		}
		before := portCounters(t, f, testPort)
		if d := send(n, frame); d != wantDropped {
			t.Errorf("%s: %d of %d dropped, want %d", name, d, n, wantDropped)
		}
		d := portCounters(t, f, testPort).Sub(before)
		if field(d) != uint64(wantDropped) || d.Drops() != uint64(wantDropped) || d.Packets != uint64(n-wantDropped) {
			t.Errorf("%s: counters moved by %v", name, d)
		}
	}
	loss := func(c PortCounters) uint64 { return c.DropLoss }
	hole := func(c PortCounters) uint64 { return c.DropBlackhole }
	step("no faults", Faults{}, roce, 50, 0, loss)
	step("loss 1", Faults{Loss: 1}, roce, 100, 100, loss)
	step("loss 1, other traffic", Faults{Loss: 1}, other, 20, 20, loss)
	step("loss 1, RoCE only, other traffic", Faults{Loss: 1, RoCEOnly: true}, other, 20, 0, loss)
	step("loss 1, RoCE only", Faults{Loss: 1, RoCEOnly: true}, roce, 20, 20, loss)
	step("blackhole", Faults{Blackhole: true}, roce, 30, 30, hole)
	step("blackhole, other traffic", Faults{Blackhole: true}, other, 30, 30, hole)
	step("blackhole off", Faults{}, roce, 30, 0, hole)

	// Random loss at 0.3: 3000 frames, mean 900, sd 25.
	if err := f.SetFaults(testPort, Faults{Loss: 0.3}); err != nil {
		t.Fatal(err)
	}
	if d := send(3000, other); d < 750 || d > 1050 {
		t.Errorf("loss 0.3: %d of 3000 dropped, want about 900", d)
	}

	// Gilbert-Elliott: P 0.1, R 0.5, all lost in the bad state: 1/6 of
	// frames lost, in bursts of 2 on average (1/R) where independent loss
	// would give runs of 1.2.
	if err := f.SetFaults(testPort, Faults{Burst: GilbertElliott{P: 0.1, R: 0.5}}); err != nil {
		t.Fatal(err)
	}
	before := portCounters(t, f, testPort)
	var dropped, runs int
	prev := false
	for range 3000 {
		ret, _ := run(t, f.egress, other)
		lost := ret == retShot
		if lost {
			dropped++
			if !prev {
				runs++
			}
		}
		prev = lost
	}
	if dropped < 300 || dropped > 700 {
		t.Errorf("burst loss: %d of 3000 dropped, want about 500", dropped)
	}
	if mean := float64(dropped) / float64(max(runs, 1)); mean < 1.5 {
		t.Errorf("burst loss: mean run of losses %.2f, want about 2", mean)
	}
	if d := portCounters(t, f, testPort).Sub(before); d.DropBurst != uint64(dropped) || d.DropLoss != 0 {
		t.Errorf("burst loss: counters moved by %v, want DropBurst %d", d, dropped)
	}

	// Bad settings are refused and change nothing.
	for _, bad := range []Faults{{Loss: 1.5}, {Loss: -0.1}, {Burst: GilbertElliott{P: 2}}} {
		if err := f.SetFaults(testPort, bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("SetFaults(%+v): %v, want ErrInvalidConfig", bad, err)
		}
	}
	if err := f.SetFaults(PortID{Switch: 99}, Faults{}); !errors.Is(err, ErrUnknownPort) {
		t.Errorf("SetFaults of an unknown port: %v, want ErrUnknownPort", err)
	}
}

func TestFabricECN(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			f := loadFabricRun(t, PortConfig{RateMbps: testRate})
			// pass runs a frame through egress and ingress of the port.
			pass := func(tos uint8, intMax uint8) *wire.Packet {
				p, payload := sprayData(v6, intMax, tos)
				_, out := run(t, f.egress, encode(t, &p, payload))
				_, out = run(t, f.ingress, out)
				return decode(t, out) // checks the IPv4 header checksum and the ICRC
			}
			// ECN off: nothing marked.
			if got := pass(wire.ECNECT0, 1); got.IP.TOS != wire.ECNECT0 {
				t.Errorf("ECN off: TOS %#x", got.IP.TOS)
			}
			// Every delay is at least 1 ns: always marked.
			if err := f.SetECN(testPort, ECNConfig{KMax: 1}); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct{ tos, want uint8 }{
				{wire.ECNECT0, wire.ECNCE},
				{wire.ECNECT1, wire.ECNCE},
				{0xb8 | wire.ECNECT0, 0xb8 | wire.ECNCE}, // DSCP kept
				{wire.ECNNotECT, wire.ECNNotECT},
				{wire.ECNCE, wire.ECNCE},
			} {
				for _, intMax := range []uint8{0, 2} {
					if got := pass(c.tos, intMax); got.IP.TOS != c.want {
						t.Errorf("TOS %#x (INT %d): got %#x, want %#x", c.tos, intMax, got.IP.TOS, c.want)
					}
				}
			}
			if c := portCounters(t, f, testPort); c.ECNMarked != 6 {
				t.Errorf("ECNMarked %d, want 6", c.ECNMarked)
			}
			// Far below KMin: never marked.
			if err := f.SetECN(testPort, ECNConfig{KMin: time.Hour, KMax: 2 * time.Hour}); err != nil {
				t.Fatal(err)
			}
			for range 20 {
				if got := pass(wire.ECNECT0, 0); got.IP.TOS != wire.ECNECT0 {
					t.Fatalf("delay below KMin: TOS %#x", got.IP.TOS)
				}
			}
			// Between KMin (0) and a KMax far above the delay, with PMax
			// 1: the probability is tiny.
			if err := f.SetECN(testPort, ECNConfig{KMax: time.Hour, PMax: 1}); err != nil {
				t.Fatal(err)
			}
			marked := 0
			for range 50 {
				if got := pass(wire.ECNECT0, 0); got.IP.TOS == wire.ECNCE {
					marked++
				}
			}
			if marked > 0 {
				t.Errorf("%d of 50 marked at a delay far below KMax", marked)
			}
			if err := f.SetECN(testPort, ECNConfig{KMin: 2, KMax: 1}); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("KMax < KMin: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestFabricPorts(t *testing.T) {
	f := loadFabricRun(t, PortConfig{})
	if err := f.addPort(1, PortConfig{ID: PortID{1, 1}}, false); !errors.Is(err, ErrAttached) {
		t.Errorf("same interface twice: %v, want ErrAttached", err)
	}
	if err := f.addPort(2, PortConfig{ID: testPort}, false); !errors.Is(err, ErrAttached) {
		t.Errorf("same id twice: %v, want ErrAttached", err)
	}
	if err := f.AttachPort(0, PortConfig{ID: PortID{1, 1}}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ifindex 0: %v, want ErrInvalidConfig", err)
	}
	if err := f.AttachPort(5, PortConfig{ID: PortID{1, 1}, Faults: Faults{Loss: 2}}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("loss 2: %v, want ErrInvalidConfig", err)
	}
	if ids := f.Ports(); len(ids) != 1 || ids[0] != testPort {
		t.Errorf("Ports() = %v", ids)
	}
	// Detach, then register again: counters start from zero.
	p, payload := sprayData(false, 0, 0)
	run(t, f.egress, encode(t, &p, payload))
	if err := f.DetachPort(testPort); err != nil {
		t.Fatal(err)
	}
	if _, err := f.PortCounters(testPort); !errors.Is(err, ErrUnknownPort) {
		t.Errorf("counters of a detached port: %v, want ErrUnknownPort", err)
	}
	if err := f.addPort(1, PortConfig{ID: testPort}, false); err != nil {
		t.Fatal(err)
	}
	if c := portCounters(t, f, testPort); c != (PortCounters{}) {
		t.Errorf("counters of a re-added port: %v", c)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.PortCounters(testPort); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	if err := f.AttachPort(1, PortConfig{ID: PortID{2, 2}}); !errors.Is(err, ErrClosed) {
		t.Errorf("AttachPort after Close: %v, want ErrClosed", err)
	}
}

// monoNow is bpf_ktime_get_ns(): CLOCK_MONOTONIC in ns.
func monoNow(tb testing.TB) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		tb.Fatal(err)
	}
	return uint64(ts.Nano())
}

// backdate moves the egress time of every frame in flight to delay before
// now, as if the frames had waited that long in the egress port's queue, and
// returns the new time.
func backdate(tb testing.TB, f *Fabric, delay time.Duration) uint64 {
	tb.Helper()
	var (
		k fabricFabricPktKey
		v fabricFabricInflightVal
	)
	var keys []fabricFabricPktKey
	it := f.maps.FabricInflight.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	ts := monoNow(tb) - uint64(delay)
	for _, k := range keys {
		if err := f.maps.FabricInflight.Lookup(&k, &v); err != nil {
			tb.Fatal(err)
		}
		v.Ts = ts
		if err := f.maps.FabricInflight.Update(&k, &v, ebpf.UpdateExist); err != nil {
			tb.Fatal(err)
		}
	}
	return ts
}

// TestFabricQueueDelay sets the queue delay of frames by hand and checks
// what the ingress does with it: RED marking probability, QLen, counters.
func TestFabricQueueDelay(t *testing.T) {
	f := loadFabricRun(t, PortConfig{RateMbps: testRate, ECN: ECNConfig{
		KMin: 100 * time.Millisecond, KMax: 300 * time.Millisecond, PMax: 0.8}})
	p, payload := sprayData(false, 0, wire.ECNECT0)
	frame := encode(t, &p, payload)
	// through sends frame through egress, waits delay, then ingress.
	through := func(frame []byte, delay time.Duration) []byte {
		_, out := run(t, f.egress, frame)
		ts := backdate(t, f.Fabric, delay)
		// The hop record carries the same egress time (the INT region is
		// not in the ICRC, the IPv4 UDP checksum is 0).
		if rec := decode(t, out).INT; len(rec) > 0 {
			h := wire.HopAt(rec, 0)
			h.TS = ts
			wire.PutHop(rec, 0, h)
		}
		_, out = run(t, f.ingress, out)
		return out
	}
	// Halfway between KMin and KMax: probability 0.4; 1000 frames, sd 15.5.
	const n = 1000
	marked := 0
	for range n {
		if decode(t, through(frame, 200*time.Millisecond)).IP.TOS == wire.ECNCE {
			marked++
		}
	}
	if marked < 320 || marked > 480 {
		t.Errorf("%d of %d marked at a delay halfway between KMin and KMax with PMax 0.8, want about 400", marked, n)
	}
	c := portCounters(t, f, testPort)
	if c.ECNMarked != uint64(marked) || c.Measured != n {
		t.Errorf("counters %v; want %d marked, %d measured", c, marked, n)
	}
	// The upper bounds here and below only leave room for a loaded machine
	// between back-dating and the ingress run.
	if c.MaxQueueDelay < 200*time.Millisecond || c.MaxQueueDelay > time.Second {
		t.Errorf("max queue delay %v, want a little above 200ms", c.MaxQueueDelay)
	}
	if m := c.MeanQueueDelay(); m < 200*time.Millisecond || m > c.MaxQueueDelay {
		t.Errorf("mean queue delay %v", m)
	}
	// Below KMin: never; above KMax: always.
	for _, c := range []struct {
		delay time.Duration
		want  uint8
	}{{10 * time.Millisecond, wire.ECNECT0}, {400 * time.Millisecond, wire.ECNCE}} {
		for range 20 {
			if got := decode(t, through(frame, c.delay)).IP.TOS; got != c.want {
				t.Fatalf("delay %v: TOS %#x, want %#x", c.delay, got, c.want)
			}
		}
	}

	// QLen = delay x rate: 1 ms at 25 Gbit/s is 3125000 bytes; 10 s
	// saturates.
	p, payload = sprayData(false, 1, 0)
	frame = encode(t, &p, payload)
	for _, c := range []struct {
		delay    time.Duration
		min, max uint32
	}{{time.Millisecond, 3125000, 3125000 * 100}, {10 * time.Second, 1<<32 - 1, 1<<32 - 1}} {
		q := wire.HopAt(decode(t, through(frame, c.delay)).INT, 0).QLen
		if q < c.min || q > c.max {
			t.Errorf("delay %v at %d Mbit/s: QLen %d, want %d..%d", c.delay, testRate, q, c.min, c.max)
		}
	}
}

// BenchmarkFabric measures the programs per frame with BPF_PROG_TEST_RUN
// (repeated runs reuse one skb, so the INT case fills its 8 slots and then
// finds the region full; ingress finds no egress time).
func BenchmarkFabric(b *testing.B) {
	p, payload := sprayData(false, 8, wire.ECNECT0)
	spray := encode(b, &p, payload)
	plain := frameSpec{src: ip4B, dst: ip4A, srcPort: 5000, dstPort: 53, payload: make([]byte, 100)}.build()
	f := loadFabricRun(b, PortConfig{RateMbps: testRate, ECN: ECNConfig{KMax: time.Microsecond},
		Faults: Faults{Loss: 1e-9, Burst: GilbertElliott{P: 1e-9, R: 0.5}}})
	for _, c := range []struct {
		name  string
		prog  *ebpf.Program
		frame []byte
	}{
		{"egress spray INT", f.egress, spray},
		{"egress plain UDP", f.egress, plain},
		{"ingress spray", f.ingress, spray},
	} {
		b.Run(c.name, func(b *testing.B) {
			const repeat = 100000
			var total time.Duration
			for b.Loop() {
				_, d, err := c.prog.Benchmark(c.frame, repeat, nil)
				if err != nil {
					b.Fatal(err)
				}
				total += d * repeat
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*repeat), "ns/frame")
		})
	}
}
