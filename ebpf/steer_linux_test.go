//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
)

var (
	ip4A = netip.MustParseAddr("10.0.0.1")
	ip4B = netip.MustParseAddr("10.0.0.2")
	ip4C = netip.MustParseAddr("10.0.0.3")
	ip6A = netip.MustParseAddr("fd00::1")
	ip6B = netip.MustParseAddr("fd00::2")
	ip6C = netip.MustParseAddr("fd00::3")
)

// loadTest loads a Steering for cfg, closed at the end of the test.
func loadTest(tb testing.TB, cfg SteerConfig) *Steering {
	tb.Helper()
	testutil.SkipIfNotRoot(tb)
	s, err := LoadSteering(cfg)
	if err != nil {
		tb.Fatalf("LoadSteering: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

// runFrame runs the program on frame with BPF_PROG_TEST_RUN (RX queue 0) and
// returns what it did: its return code and the change in the counters.
func runFrame(tb testing.TB, s *Steering, frame []byte) outcome {
	tb.Helper()
	before, err := s.Counters()
	if err != nil {
		tb.Fatal(err)
	}
	ret, err := s.Program().Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		tb.Fatalf("Run on %d bytes: %v", len(frame), err)
	}
	after, err := s.Counters()
	if err != nil {
		tb.Fatal(err)
	}
	return outcome{ret, after.Sub(before)}
}

// v4UDP returns a valid IPv4 UDP frame from ip4B to ip4A:4791.
func v4UDP() frameSpec {
	return frameSpec{src: ip4B, dst: ip4A, srcPort: 49152, dstPort: 4791, payload: []byte("0123456789abcdef0123")}
}

func v6UDP() frameSpec {
	f := v4UDP()
	f.src, f.dst = ip6B, ip6A
	return f
}

func TestDecisions(t *testing.T) {
	s := loadTest(t, SteerConfig{})
	with := func(f frameSpec, change func(*frameSpec)) frameSpec { change(&f); return f }
	arp := append(append(append([]byte(nil), testMACDst[:]...), testMACSrc[:]...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	cases := []struct {
		name  string
		frame []byte
		want  outcome
	}{
		{"ipv4", v4UDP().build(), outNoSocket},
		{"ipv4 padded", with(v4UDP(), func(f *frameSpec) { f.payload = nil; f.pad = 18 }).build(), outNoSocket},
		{"ipv4 802.1Q", with(v4UDP(), func(f *frameSpec) { f.vlanTPIDs = []uint16{0x8100} }).build(), outNoSocket},
		{"ipv4 802.1ad", with(v4UDP(), func(f *frameSpec) { f.vlanTPIDs = []uint16{0x88A8} }).build(), outNoSocket},
		{"ipv4 two tags", with(v4UDP(), func(f *frameSpec) { f.vlanTPIDs = []uint16{0x88A8, 0x8100} }).build(), outPassed},
		{"ipv6", v6UDP().build(), outNoSocket},
		{"ipv6 802.1Q", with(v6UDP(), func(f *frameSpec) { f.vlanTPIDs = []uint16{0x8100} }).build(), outNoSocket},
		{"ipv6 hop-by-hop", with(v6UDP(), func(f *frameSpec) { f.proto, f.protoSet = 0, true }).build(), outPassed},
		{"ipv4 other port", with(v4UDP(), func(f *frameSpec) { f.dstPort = 4792 }).build(), outPassed},
		{"ipv6 other port", with(v6UDP(), func(f *frameSpec) { f.dstPort = 53 }).build(), outPassed},
		{"ipv4 source port 4791", with(v4UDP(), func(f *frameSpec) { f.srcPort, f.dstPort = 4791, 1 }).build(), outPassed},
		{"ipv4 tcp", with(v4UDP(), func(f *frameSpec) { f.proto, f.protoSet = 6, true }).build(), outPassed},
		{"ipv6 tcp", with(v6UDP(), func(f *frameSpec) { f.proto, f.protoSet = 6, true }).build(), outPassed},
		{"arp", arp, outPassed},
		{"ipv4 more fragments", with(v4UDP(), func(f *frameSpec) { f.fragment = 0x2000 }).build(), outPassed},
		{"ipv4 fragment offset", with(v4UDP(), func(f *frameSpec) { f.fragment = 0x0010 }).build(), outPassed},
		{"ipv4 don't fragment", with(v4UDP(), func(f *frameSpec) { f.fragment = 0x4000 }).build(), outNoSocket},
		{"ipv4 ethertype, ipv6 header", with(v6UDP(), func(f *frameSpec) { f.etherType = 0x0800 }).build(), outPassed},
	}
	for opt := 4; opt <= 40; opt += 4 {
		cases = append(cases, struct {
			name  string
			frame []byte
			want  outcome
		}{fmt.Sprintf("ipv4 %d option bytes", opt), with(v4UDP(), func(f *frameSpec) { f.options = opt }).build(), outNoSocket})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := runFrame(t, s, c.frame); got != c.want {
				t.Errorf("got %v %+v, want %v", got, got.counter, c.want)
			}
			if got := model(c.frame, SteerConfig{}, false); got != c.want {
				t.Errorf("model says %v, want %v", got, c.want)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	s := loadTest(t, SteerConfig{})
	v4 := v4UDP().build()
	v6 := v6UDP().build()
	patch := func(frame []byte, off int, vals ...byte) []byte {
		f := append([]byte(nil), frame...)
		copy(f[off:], vals)
		return f
	}
	cases := []struct {
		name  string
		frame []byte
	}{
		{"ipv4 version 6", patch(v4, 14, 0x65)},
		{"ipv4 version 0", patch(v4, 14, 0x05)},
		{"ipv4 total length beyond frame", patch(v4, 16, 0x01, 0x00)},
		{"ipv4 total length below header", patch(v4, 16, 0, 19)},
		{"ipv4 no room for UDP", patch(v4, 16, 0, 27)},
		{"ipv4 IHL beyond total length", patch(v4, 14, 0x4f)},
		{"ipv4 UDP length 0", patch(v4, 14+20+4, 0, 0)},
		{"ipv4 UDP length 7", patch(v4, 14+20+4, 0, 7)},
		{"ipv4 UDP length beyond IP", patch(v4, 14+20+4, 0, 29)},
		{"ipv6 version 4", patch(v6, 14, 0x40)},
		{"ipv6 payload beyond frame", patch(v6, 14+4, 0, 29)},
		{"ipv6 payload below UDP header", patch(v6, 14+4, 0, 7)},
		{"ipv6 UDP length 0", patch(v6, 14+40+4, 0, 0)},
		{"ipv6 UDP length beyond IP", patch(v6, 14+40+4, 0xff, 0xff)},
	}
	for ihl := range 5 {
		cases = append(cases, struct {
			name  string
			frame []byte
		}{fmt.Sprintf("ipv4 IHL %d", ihl), patch(v4, 14, 0x40|byte(ihl))})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := runFrame(t, s, c.frame); got != outMalformed {
				t.Errorf("got %v %+v, want malformed", got, got.counter)
			}
			if got := model(c.frame, SteerConfig{}, false); got != outMalformed {
				t.Errorf("model says %v, want malformed", got)
			}
		})
	}
}

// TestTruncated cuts valid frames at every length that BPF_PROG_TEST_RUN
// accepts (14 bytes and up): until the protocol byte is in, they pass; from
// there on they are malformed.
func TestTruncated(t *testing.T) {
	s := loadTest(t, SteerConfig{})
	tagged := func(f frameSpec) frameSpec { f.vlanTPIDs = []uint16{0x8100}; return f }
	withOpts := v4UDP()
	withOpts.options = 12
	cases := []struct {
		name      string
		frame     []byte
		protoByte int // offset of the IP protocol / next header byte
	}{
		{"ipv4", v4UDP().build(), 14 + 9},
		{"ipv4 options", withOpts.build(), 14 + 9},
		{"ipv4 802.1Q", tagged(v4UDP()).build(), 18 + 9},
		{"ipv6", v6UDP().build(), 14 + 6},
		{"ipv6 802.1Q", tagged(v6UDP()).build(), 18 + 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for n := 14; n < len(c.frame); n++ {
				want := outMalformed
				if n <= c.protoByte {
					want = outPassed
				}
				if got := runFrame(t, s, c.frame[:n]); got != want {
					t.Errorf("cut at %d of %d: got %v %+v, want %v", n, len(c.frame), got, got.counter, want)
				}
				if got := model(c.frame[:n], SteerConfig{}, false); got != want {
					t.Errorf("cut at %d: model says %v, want %v", n, got, want)
				}
			}
		})
	}
}

func TestPortLocalAllow(t *testing.T) {
	cfg := SteerConfig{
		Port:  9999,
		Local: []netip.Addr{ip4A, ip6A, netip.MustParseAddr("::ffff:10.9.9.9")},
		Allow: []netip.Addr{ip4B, netip.MustParseAddr("fd00::2%eth0")},
	}
	s := loadTest(t, cfg)
	f := func(src, dst netip.Addr, port uint16) []byte {
		return frameSpec{src: src, dst: dst, srcPort: 1000, dstPort: port, payload: []byte("x")}.build()
	}
	cases := []struct {
		name  string
		frame []byte
		want  outcome
	}{
		{"v4 to local from allowed", f(ip4B, ip4A, 9999), outNoSocket},
		{"v4 to 4791 is not steered", f(ip4B, ip4A, 4791), outPassed},
		{"v4 to mapped local", f(ip4B, netip.MustParseAddr("10.9.9.9"), 9999), outNoSocket},
		{"v4 to other address", f(ip4B, ip4C, 9999), outPassed},
		{"v4 from refused", f(ip4C, ip4A, 9999), outRefused},
		{"v4 from refused, other port", f(ip4C, ip4A, 9998), outPassed},
		{"v4 from refused, other address", f(ip4C, ip4B, 9999), outPassed},
		{"v6 to local from allowed", f(ip6B, ip6A, 9999), outNoSocket},
		{"v6 to other address", f(ip6B, ip6C, 9999), outPassed},
		{"v6 from refused", f(ip6C, ip6A, 9999), outRefused},
		{"v6 mapped is not v4", f(ip6B, netip.MustParseAddr("::ffff:10.0.0.1"), 9999), outPassed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := runFrame(t, s, c.frame); got != c.want {
				t.Errorf("got %v %+v, want %v", got, got.counter, c.want)
			}
			if got := model(c.frame, cfg, false); got != c.want {
				t.Errorf("model says %v, want %v", got, c.want)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	s := loadTest(t, SteerConfig{Allow: []netip.Addr{ip4B}})
	fromB := v4UDP().build()
	fromC := v4UDP()
	fromC.src = ip4C
	if got := runFrame(t, s, fromC.build()); got != outRefused {
		t.Fatalf("before update: from C %v, want refused", got)
	}
	steps := []struct {
		cfg          SteerConfig
		wantB, wantC outcome
	}{
		{SteerConfig{Allow: []netip.Addr{ip4C}}, outRefused, outNoSocket},
		{SteerConfig{Allow: []netip.Addr{ip4B, ip4C}}, outNoSocket, outNoSocket},
		{SteerConfig{}, outNoSocket, outNoSocket},
		{SteerConfig{Port: 1}, outPassed, outPassed},
		{SteerConfig{Local: []netip.Addr{ip4C}}, outPassed, outPassed},
		{SteerConfig{Local: []netip.Addr{ip4A}, Allow: []netip.Addr{ip4B}}, outNoSocket, outRefused},
	}
	for i, st := range steps {
		if err := s.Update(st.cfg); err != nil {
			t.Fatalf("step %d: Update: %v", i, err)
		}
		if got := runFrame(t, s, fromB); got != st.wantB {
			t.Errorf("step %d: from B %v, want %v", i, got, st.wantB)
		}
		if got := runFrame(t, s, fromC.build()); got != st.wantC {
			t.Errorf("step %d: from C %v, want %v", i, got, st.wantC)
		}
	}
	// Stale entries are gone: only B is left in the allowlist.
	var k steerSteerAddr
	var v uint8
	n := 0
	for it := s.objs.SteerAllow.Iterate(); it.Next(&k, &v); n++ {
	}
	if n != 1 {
		t.Errorf("allowlist holds %d entries after the last update, want 1", n)
	}
	if err := s.Update(SteerConfig{Allow: []netip.Addr{{}}}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Update with an invalid address: %v, want ErrInvalidConfig", err)
	}
}

// randomFrame builds a frame that is valid, nearly valid or garbage, with
// addresses and ports drawn from small sets so that every rule gets hit.
func randomFrame(r *rand.Rand) []byte {
	addrs4 := []netip.Addr{ip4A, ip4B, ip4C}
	addrs6 := []netip.Addr{ip6A, ip6B, ip6C}
	f := frameSpec{srcPort: uint16(r.IntN(65536)), dstPort: []uint16{4791, 9999, 4792, 53}[r.IntN(4)]}
	if r.IntN(2) == 0 {
		f.src, f.dst = addrs4[r.IntN(3)], addrs4[r.IntN(3)]
		f.options = 4 * r.IntN(11)
		if r.IntN(8) == 0 {
			f.fragment = uint16(r.IntN(65536))
		}
	} else {
		f.src, f.dst = addrs6[r.IntN(3)], addrs6[r.IntN(3)]
	}
	for range r.IntN(3) {
		f.vlanTPIDs = append(f.vlanTPIDs, []uint16{0x8100, 0x88A8}[r.IntN(2)])
	}
	if r.IntN(8) == 0 {
		f.proto, f.protoSet = uint8(r.IntN(256)), true
	}
	if r.IntN(10) == 0 {
		f.etherType = uint16(r.IntN(65536))
	}
	f.payload = make([]byte, r.IntN(200))
	f.pad = r.IntN(3) * r.IntN(40)
	b := f.build()
	// Set the fields that the rules look at to nearby or random values.
	l3 := 14 + 4*len(f.vlanTPIDs)
	l4 := l3 + 40
	if f.src.Is4() {
		l4 = l3 + 20 + f.options
	}
	near := func(v int) uint16 { return uint16(max(0, v+r.IntN(21)-10)) }
	for range max(0, r.IntN(5)-2) {
		switch r.IntN(4) {
		case 0: // version and IHL
			b[l3] = byte(r.IntN(256))
		case 1: // IPv4 total length or IPv6 payload length
			if f.src.Is4() {
				binary.BigEndian.PutUint16(b[l3+2:], near(len(b)-l3))
			} else {
				binary.BigEndian.PutUint16(b[l3+4:], near(len(b)-l4))
			}
		case 2: // UDP length
			binary.BigEndian.PutUint16(b[l4+4:], near([]int{8, 8 + len(f.payload)}[r.IntN(2)]))
		case 3: // UDP length, anything
			binary.BigEndian.PutUint16(b[l4+4:], uint16(r.IntN(65536)))
		}
	}
	// Flip a few bytes anywhere in the headers now and then.
	for range max(0, r.IntN(6)-3) {
		i := r.IntN(min(len(b), 120))
		b[i] = byte(r.IntN(256))
	}
	if r.IntN(6) == 0 {
		b = b[:14+r.IntN(len(b)-13)]
	}
	return b
}

func randomConfig(r *rand.Rand) SteerConfig {
	pool := []netip.Addr{ip4A, ip4B, ip4C, ip6A, ip6B, ip6C}
	pick := func() []netip.Addr {
		var as []netip.Addr
		for _, a := range pool {
			if r.IntN(3) == 0 {
				as = append(as, a)
			}
		}
		return as
	}
	return SteerConfig{Port: []uint16{0, 9999}[r.IntN(2)], Local: pick(), Allow: pick(), Stamp: r.IntN(2) == 0}
}

// TestAgainstModel runs random frames under random configurations through
// the kernel program and the Go model and compares what they do. No socket
// is registered, so no frame is stamped: with Stamp or without, every frame
// leaves the program unchanged.
func TestAgainstModel(t *testing.T) {
	r := testutil.Rand(t)
	s := loadTest(t, SteerConfig{})
	seen := map[outcome]int{}
	for range 100 {
		cfg := randomConfig(r)
		if err := s.Update(cfg); err != nil {
			t.Fatal(err)
		}
		for range 100 {
			frame := randomFrame(r)
			want := model(frame, cfg, false)
			got, out := runOut(t, s, frame)
			if got != want {
				t.Fatalf("config %+v, frame %x: program %v %+v, model %v", cfg, frame, got, got.counter, want)
			}
			if !bytes.Equal(out, frame) {
				t.Fatalf("config %+v, frame %x: the program changed it to %x", cfg, frame, out)
			}
			seen[want]++
		}
	}
	t.Logf("outcomes: %v", seen)
	for _, o := range []outcome{outPassed, outMalformed, outRefused, outNoSocket} {
		if seen[o] == 0 {
			t.Errorf("no frame was %v: the generator misses a rule", o)
		}
	}
}

// FuzzSteer compares the kernel program with the model on arbitrary frames.
// The first byte picks one of four configurations.
func FuzzSteer(f *testing.F) {
	testutil.SkipIfNotRoot(f)
	cfgs := []SteerConfig{
		{},
		{Port: 9999},
		{Local: []netip.Addr{ip4A, ip6A}},
		{Allow: []netip.Addr{ip4B, ip6B}},
	}
	progs := make([]*Steering, len(cfgs))
	for i, c := range cfgs {
		progs[i] = loadTest(f, c)
	}
	f.Add(append([]byte{0}, v4UDP().build()...))
	f.Add(append([]byte{3}, v6UDP().build()...))
	r := testutil.Rand(f)
	for i := range 16 {
		f.Add(append([]byte{byte(i)}, randomFrame(r)...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1+14 || len(data) > 1+3000 {
			return // BPF_PROG_TEST_RUN takes 14 bytes to about a page
		}
		i := int(data[0]) % len(cfgs)
		frame := data[1:]
		want := model(frame, cfgs[i], false)
		if got := runFrame(t, progs[i], frame); got != want {
			t.Fatalf("config %+v: program %v %+v, model %v", cfgs[i], got, got.counter, want)
		}
	})
}

func TestQueuesAndClose(t *testing.T) {
	s := loadTest(t, SteerConfig{Queues: 4})
	if got := s.XSKMap().MaxEntries(); got != 4 {
		t.Errorf("XSKMAP has %d entries, want 4", got)
	}
	for _, q := range []int{-1, 4, 1 << 20} {
		if err := s.Register(q, 0); !errors.Is(err, ErrBadQueue) {
			t.Errorf("Register(%d): %v, want ErrBadQueue", q, err)
		}
		if err := s.Unregister(q); !errors.Is(err, ErrBadQueue) {
			t.Errorf("Unregister(%d): %v, want ErrBadQueue", q, err)
		}
	}
	if err := s.Register(0, -1); !errors.Is(err, ErrBadQueue) {
		t.Errorf("Register(0, -1): %v, want ErrBadQueue", err)
	}
	// A descriptor that is not an AF_XDP socket is refused by the kernel.
	nul, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer nul.Close()
	if err := s.Register(1, int(nul.Fd())); err == nil {
		t.Error("Register with /dev/null succeeded")
	}
	if err := s.Unregister(1); err != nil {
		t.Errorf("Unregister of an empty slot: %v", err)
	}
	if err := s.Attach(0, Native); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Attach(0): %v, want ErrInvalidConfig", err)
	}
	if err := s.Attach(1, AttachMode(7)); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Attach with mode 7: %v, want ErrInvalidConfig", err)
	}
	if err := s.Detach(12345); err != nil {
		t.Errorf("Detach of an interface not attached: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for name, err := range map[string]error{
		"Register":   s.Register(0, 3),
		"Unregister": s.Unregister(0),
		"Attach":     s.Attach(1, Generic),
		"Update":     s.Update(SteerConfig{}),
	} {
		if !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if _, err := s.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters after Close: %v, want ErrClosed", err)
	}
}

func TestLoadInvalid(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	for _, cfg := range []SteerConfig{
		{Queues: -1},
		{Queues: MaxQueues + 1},
		{Local: []netip.Addr{{}}},
	} {
		if s, err := LoadSteering(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("LoadSteering(%+v): %v, want ErrInvalidConfig", cfg, err)
			if s != nil {
				s.Close()
			}
		}
	}
}

// BenchmarkProgram measures the program in the kernel with
// BPF_PROG_TEST_RUN: ns/op is the time per frame, for a frame that passes
// every check and finds no socket (the longest path short of a redirect).
func BenchmarkProgram(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  SteerConfig
		f    frameSpec
	}{
		{"ipv4", SteerConfig{}, v4UDP()},
		{"ipv4 local allow", SteerConfig{Local: []netip.Addr{ip4A}, Allow: []netip.Addr{ip4B}}, v4UDP()},
		{"ipv6 local allow", SteerConfig{Local: []netip.Addr{ip6A}, Allow: []netip.Addr{ip6B}}, v6UDP()},
		{"tcp", SteerConfig{}, frameSpec{src: ip4B, dst: ip4A, proto: 6, protoSet: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := loadTest(b, c.cfg)
			frame := c.f.build()
			const repeat = 100000
			var total time.Duration
			for b.Loop() {
				_, d, err := s.Program().Benchmark(frame, repeat, nil)
				if err != nil {
					b.Fatal(err)
				}
				total += d * repeat
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*repeat), "ns/frame")
		})
	}
}
