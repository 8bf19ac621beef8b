package cc

import (
	"math"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

func TestSwiftDefaults(t *testing.T) {
	s := NewSwift(SwiftConfig{})
	if s.Cwnd() != 16 || s.Window() != 16*1400 || s.Rate() != 0 || s.NextTimer() != clock.Never {
		t.Fatalf("defaults: cwnd %v window %d rate %v timer %v", s.Cwnd(), s.Window(), s.Rate(), s.NextTimer())
	}
	// Flow scaling: BaseTarget + FlowScaleRange at fs_min_cwnd and below,
	// BaseTarget at fs_max_cwnd and above, falling in between; hops add.
	base := 25 * time.Microsecond
	for _, tc := range []struct {
		cwnd float64
		hops int
		want time.Duration
	}{{0, 0, 3 * base}, {0.01, 0, 3 * base}, {0.1, 0, 3 * base}, {100, 0, base}, {1000, 0, base}, {100, 3, base}} {
		if got := s.TargetDelay(tc.cwnd, tc.hops); absDur(got-tc.want) > time.Nanosecond {
			t.Errorf("target(%v, %d hops) = %v, want %v", tc.cwnd, tc.hops, got, tc.want)
		}
	}
	prev := s.TargetDelay(0.1, 0)
	for c := 0.2; c < 100; c *= 1.5 {
		if got := s.TargetDelay(c, 0); got >= prev || got <= base {
			t.Errorf("target(%v) = %v, want below %v and above %v", c, got, prev, base)
		} else {
			prev = got
		}
	}
	h := NewSwift(SwiftConfig{HopScale: time.Microsecond})
	if got := h.TargetDelay(100, 3); got != base+3*time.Microsecond {
		t.Errorf("3 hops: target %v", got)
	}
	bad := NewSwift(SwiftConfig{PacketBytes: -1, BaseTarget: -5, AI: math.NaN(), Beta: math.Inf(1), MaxCwnd: -1, FlowScaleMinCwnd: 50, FlowScaleMaxCwnd: 10})
	if bad.Cwnd() != 16 || bad.Window() != 16*1400 || bad.TargetDelay(100, 0) != base {
		t.Fatalf("bad config: cwnd %v window %d", bad.Cwnd(), bad.Window())
	}
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

// TestSwiftDecrease checks that the cut over the target is
// 1 - β(delay-target)/delay, bounded by MaxMDF.
func TestSwiftDecrease(t *testing.T) {
	for _, tc := range []struct {
		over float64 // delay / target
		want float64 // cwnd after / before
	}{{1.25, 1 - 0.8*0.25/1.25}, {1.5, 1 - 0.8*0.5/1.5}, {2, 0.6}, {10, 0.5}, {1000, 0.5}} {
		s := NewSwift(SwiftConfig{InitCwnd: 100})
		target := s.TargetDelay(100, 0)
		rtt := time.Duration(float64(target) * tc.over)
		s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: rtt})
		if got := s.Cwnd() / 100; math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("delay %.2f × target: cwnd ×%.4f, want ×%.4f", tc.over, got, tc.want)
		}
	}
	// The endpoint delay (hold time) is not fabric delay: a long hold with
	// a short fabric delay cuts the endpoint window only.
	s := NewSwift(SwiftConfig{InitCwnd: 100})
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: 210 * time.Microsecond, HoldTime: 200 * time.Microsecond})
	if s.FabricCwnd() <= 100 || s.EndpointCwnd() != 50 || s.Cwnd() != 50 {
		t.Fatalf("long hold: fabric %v endpoint %v cwnd %v, want fabric up, endpoint and cwnd 50", s.FabricCwnd(), s.EndpointCwnd(), s.Cwnd())
	}
}

// TestSwiftOncePerRTT sends ACKs every µs with a delay far over the target:
// the window is cut once per RTT, never by more than MaxMDF.
func TestSwiftOncePerRTT(t *testing.T) {
	const rtt = 200 * time.Microsecond
	s := NewSwift(SwiftConfig{InitCwnd: 1000, MaxCwnd: 1e6, MinCwnd: 1e-9})
	prev := s.Cwnd()
	cuts := 0
	var last clock.Time
	for now := clock.Time(0); now < clock.Time(time.Millisecond); now += clock.Time(time.Microsecond) {
		s.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: rtt})
		if c := s.Cwnd(); c < prev {
			if c < prev*0.5-1e-9 {
				t.Fatalf("cut from %v to %v", prev, c)
			}
			if cuts > 0 && now.Sub(last) < rtt {
				t.Fatalf("cuts at %v and %v, less than an RTT apart", last, now)
			}
			cuts++
			last = now
		}
		prev = s.Cwnd()
	}
	if cuts != 5 || s.Decreases() != 5 {
		t.Fatalf("%d cuts (%d counted) in 5 RTTs, want 5", cuts, s.Decreases())
	}
}

// TestSwiftIncrease checks the additive increase under the target: AI
// packets per RTT above one packet, AI per acked packet below it.
func TestSwiftIncrease(t *testing.T) {
	s := NewSwift(SwiftConfig{InitCwnd: 10, AI: 1})
	now := clock.Time(0)
	for rtt := range 10 {
		// One RTT: a window's worth of packets is acknowledged.
		start := s.Cwnd()
		for acked := 0.0; acked < start; acked++ {
			now += 1000
			s.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: 20 * time.Microsecond})
		}
		if want := float64(11 + rtt); math.Abs(s.Cwnd()-want) > 0.5 {
			t.Fatalf("after %d RTTs: cwnd %.2f, want about %v", rtt+1, s.Cwnd(), want)
		}
	}
	s = NewSwift(SwiftConfig{InitCwnd: 0.1})
	s.OnAck(Sample{Now: 1, AckedBytes: 140, RTT: 20 * time.Microsecond}) // a tenth of a packet
	if math.Abs(s.Cwnd()-0.2) > 1e-9 {
		t.Fatalf("below one packet: cwnd %v, want 0.2", s.Cwnd())
	}
	if s.Window() != 1400 || math.Abs(s.Rate()-0.2*1400/20e-6) > 1e-3 {
		t.Fatalf("cwnd 0.2: window %d rate %v, want one packet, 0.2 packets per RTT", s.Window(), s.Rate())
	}
}

// TestSwiftLossAndTimeout checks the loss cut (MaxMDF, once per RTT), the
// timeout to MinCwnd and the pacing below one packet.
func TestSwiftLossAndTimeout(t *testing.T) {
	s := NewSwift(SwiftConfig{InitCwnd: 64})
	s.OnAck(Sample{Now: 1, AckedBytes: 1400, RTT: 20 * time.Microsecond})
	c := s.Cwnd()
	s.OnLoss(2, 1400)
	s.OnLoss(3, 1400) // same RTT
	if s.Cwnd() != c/2 {
		t.Fatalf("two losses in an RTT: cwnd %v -> %v, want one cut to %v", c, s.Cwnd(), c/2)
	}
	s.OnTimeout(4)
	if s.Cwnd() != 0.001 || s.Window() != 1400 {
		t.Fatalf("after a timeout: cwnd %v window %d, want 0.001 and one packet", s.Cwnd(), s.Window())
	}
	if got, want := s.Rate(), 0.001*1400/20e-6; math.Abs(got-want) > 1e-6 {
		t.Fatalf("rate %v, want %v (cwnd packets per RTT)", got, want)
	}
	// It grows back under the target and stops pacing at one packet.
	now := clock.Time(time.Millisecond)
	for i := 0; s.Cwnd() < 1; i++ {
		if i > 10000 {
			t.Fatal("never grew back to a packet")
		}
		now += 1000
		s.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: 20 * time.Microsecond})
	}
	if s.Rate() != 0 {
		t.Fatalf("cwnd %v: still paced at %v", s.Cwnd(), s.Rate())
	}

	// With a reset threshold of 3, two timeouts cut and the third resets.
	s = NewSwift(SwiftConfig{InitCwnd: 64, RetxResetThreshold: 3})
	s.OnAck(Sample{Now: 1, AckedBytes: 1400, RTT: 20 * time.Microsecond})
	c = s.Cwnd()
	s.OnTimeout(clock.Time(time.Millisecond))
	s.OnTimeout(clock.Time(2 * time.Millisecond))
	if math.Abs(s.Cwnd()-c/4) > 1e-9 {
		t.Fatalf("two timeouts: cwnd %v, want %v", s.Cwnd(), c/4)
	}
	s.OnTimeout(clock.Time(3 * time.Millisecond))
	if s.Cwnd() != 0.001 {
		t.Fatalf("third timeout: cwnd %v", s.Cwnd())
	}
}

// TestSwiftConverges runs eight Swift senders, RTT by RTT, through a fluid
// model of one bottleneck: the link stays busy and the RTT settles at the
// target delay (which flow scaling raises with the number of flows); the
// windows stay within a factor of each other.
func TestSwiftConverges(t *testing.T) {
	const B = 12.5e9 // bytes/s
	const base = 10 * time.Microsecond
	for _, n := range []int{2, 8, 64} {
		ss := make([]*Swift, n)
		for i := range ss {
			ss[i] = NewSwift(SwiftConfig{PacketBytes: 4096, InitCwnd: float64(1 + i), BaseTarget: 25 * time.Microsecond})
		}
		now := clock.Time(0)
		var util, rtts float64
		rounds := 0
		for round := range 3000 {
			total := 0.0
			for _, s := range ss {
				total += s.Cwnd() * 4096
			}
			// Bytes beyond one BDP queue up; the RTT is base + queue/B.
			q := max(0, total-B*base.Seconds())
			rtt := base + time.Duration(q/B*1e9)
			for i, s := range ss {
				pkts := max(1, int(s.Cwnd()))
				for k := range pkts {
					s.OnAck(Sample{Now: now.Add(rtt * time.Duration(k) / time.Duration(pkts)).Add(time.Duration(i)), AckedBytes: int(min(s.Cwnd(), 1) * 4096), RTT: rtt})
				}
			}
			now = now.Add(rtt)
			if round >= 2000 {
				util += min(1, total/(B*base.Seconds()))
				rtts += float64(rtt)
				rounds++
			}
		}
		util /= float64(rounds)
		rtt := time.Duration(rtts / float64(rounds))
		target := ss[0].TargetDelay(ss[0].Cwnd(), 0)
		if util < 0.95 {
			t.Errorf("%d flows: link utilization %.3f", n, util)
		}
		if rtt < target*8/10 || rtt > target*13/10 {
			t.Errorf("%d flows: mean RTT %v, target %v", n, rtt, target)
		}
		lo, hi := math.Inf(1), 0.0
		for _, s := range ss {
			lo, hi = min(lo, s.Cwnd()), max(hi, s.Cwnd())
		}
		if hi > 4*lo {
			t.Errorf("%d flows: windows from %.2f to %.2f packets", n, lo, hi)
		}
		t.Logf("%d flows: utilization %.3f, mean RTT %v (target at cwnd %.2f: %v), windows %.2f..%.2f", n, util, rtt, ss[0].Cwnd(), target, lo, hi)
	}
}

func FuzzSwift(f *testing.F) {
	f.Add([]byte{0, 10, 200, 1, 3, 4, 9, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewSwift(SwiftConfig{})
		now := clock.Time(0)
		hops := make([]Hop, 4)
		for i := 0; i+1 < len(data); i += 2 {
			now += clock.Time(data[i]) * 100
			v := int(data[i+1])
			switch data[i] % 4 {
			case 0, 1:
				s.OnAck(Sample{Now: now, AckedBytes: v * 50, RTT: time.Duration(v) * time.Microsecond, HoldTime: time.Duration(data[i]) * time.Microsecond, INT: hops[:v%5]})
			case 2:
				s.OnLoss(now, v)
			case 3:
				s.OnTimeout(now)
			}
			if w, r, c := s.Window(), s.Rate(), s.Cwnd(); w < 1400 || r < 0 || math.IsNaN(r) || math.IsInf(r, 0) || c < 0.001 || c > 1024 {
				t.Fatalf("window %d rate %v cwnd %v", w, r, c)
			}
		}
	})
}

func BenchmarkSwiftOnAck(b *testing.B) {
	s := NewSwift(SwiftConfig{})
	var now clock.Time
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		s.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: time.Duration(20000 + now%20000), HoldTime: time.Microsecond})
	}
}

// hops returns INT records of n hops whose queues hold qdelay each at
// 200 Mbit/s.
func hops(n int, qdelay time.Duration) []Hop {
	rec := make([]Hop, n)
	for i := range n {
		rec[i] = Hop{Switch: uint16(i), RateMbps: 200, QLen: uint32(qdelay.Nanoseconds() * 200 / 8000)}
	}
	return rec
}

// TestSwiftINTFabricDelay: with INTFabricDelay, the fabric delay of an ACK
// with INT records is the queueing they report, so an RTT inflated by the
// endpoints (a descheduled engine) grows the window while the queue is
// under the target, and the cut follows the queue delay over the target;
// ACKs without INT records, and a Swift without the option, use the RTT.
func TestSwiftINTFabricDelay(t *testing.T) {
	cfg := SwiftConfig{InitCwnd: 100, INTFabricDelay: true}
	s := NewSwift(cfg)
	target := s.TargetDelay(100, 2)
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: 2 * time.Millisecond, INT: hops(2, target/4)})
	if s.Cwnd() <= 100 {
		t.Fatalf("queue at a quarter of the target, RTT 2ms: cwnd %v, want above 100", s.Cwnd())
	}
	s = NewSwift(cfg)
	q := 2 * target // two hops of one target each
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: 30 * time.Microsecond, INT: hops(2, target)})
	want := 100 * (1 - 0.8*float64(q-target)/float64(q))
	if math.Abs(s.Cwnd()-want) > 1e-6 {
		t.Fatalf("queue at twice the target, RTT 30µs: cwnd %v, want %v", s.Cwnd(), want)
	}
	// Without INT records the RTT rule applies.
	s = NewSwift(cfg)
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: 2 * time.Millisecond})
	if s.Cwnd() != 50 {
		t.Fatalf("no INT, RTT 2ms: cwnd %v, want 50", s.Cwnd())
	}
	// Without the option the same INT ACK with a 2ms RTT cuts.
	s = NewSwift(SwiftConfig{InitCwnd: 100})
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: 2 * time.Millisecond, INT: hops(2, target/4)})
	if s.Cwnd() != 50 {
		t.Fatalf("INTFabricDelay off, RTT 2ms: cwnd %v, want 50", s.Cwnd())
	}
}

// TestSwiftStandingDelay: with StandingDelay, one RTT sample inflated by
// a scheduling stall among normal ones does not cut the window, while a
// queue that raises every sample for an RTT does.
func TestSwiftStandingDelay(t *testing.T) {
	const rtt = 100 * time.Microsecond
	run := func(standing bool, delay func(i int) time.Duration) *Swift {
		s := NewSwift(SwiftConfig{InitCwnd: 100, StandingDelay: standing})
		now := clock.Time(0)
		for i := range 200 {
			now += clock.Time(rtt / 10)
			s.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: delay(i)})
		}
		return s
	}
	spike := func(i int) time.Duration {
		if i%20 == 10 {
			return 2 * time.Millisecond
		}
		return 20 * time.Microsecond
	}
	if s := run(true, spike); s.Decreases() != 0 {
		t.Errorf("standing: %d cuts from isolated 2ms samples", s.Decreases())
	}
	if s := run(false, spike); s.Decreases() == 0 {
		t.Errorf("per-ACK: isolated 2ms samples cut nothing; the test shows nothing")
	}
	queue := func(i int) time.Duration {
		if i >= 100 {
			return 20*time.Microsecond + 5*s0Target()
		}
		return 20 * time.Microsecond
	}
	if s := run(true, queue); s.Decreases() == 0 || s.Cwnd() >= 100 {
		t.Errorf("standing: a queue of 5 targets for 10 RTTs: %d cuts, cwnd %v", s.Decreases(), s.Cwnd())
	}
}

// s0Target is the largest fabric target of a default Swift.
func s0Target() time.Duration { return NewSwift(SwiftConfig{}).TargetDelay(0, 0) }

// TestSwiftCutBeforeRTT: losses reported before the first RTT sample (a
// start-up burst that overflowed a buffer) cut the window once, not once
// per lost packet.
func TestSwiftCutBeforeRTT(t *testing.T) {
	s := NewSwift(SwiftConfig{InitCwnd: 16})
	for range 10 {
		s.OnLoss(1000, 1400)
	}
	if s.Cwnd() != 8 || s.Decreases() != 1 {
		t.Fatalf("10 losses before an RTT sample: cwnd %v after %d cuts, want 8 after 1", s.Cwnd(), s.Decreases())
	}
}

// TestSwiftPacingSmoothedRTT: below one packet, one RTT sample stretched
// by a stall does not stretch the pacing: Rate uses the smaller of the
// latest and the smoothed RTT.
func TestSwiftPacingSmoothedRTT(t *testing.T) {
	s := NewSwift(SwiftConfig{InitCwnd: 0.5, BaseTarget: 10 * time.Millisecond})
	now := clock.Time(0)
	for range 50 {
		now += 1000
		s.OnAck(Sample{Now: now, RTT: 20 * time.Microsecond})
	}
	s.OnAck(Sample{Now: now + 1000, RTT: 2 * time.Millisecond})
	c := s.Cwnd()
	if c >= 1 {
		t.Fatalf("cwnd %v, want below one packet", c)
	}
	srtt := 20e-6 + (2e-3-20e-6)/8
	if got, want := s.Rate(), c*1400/srtt; math.Abs(got-want) > want*1e-6 {
		t.Fatalf("rate %v, want cwnd per smoothed RTT %v (per the 2ms sample: %v)", got, want, c*1400/2e-3)
	}
}

// TestByNameSwiftCalibration: with the line rate known, ByName's Swift
// starts at one BDP and adds half its target queue per RTT; without it,
// the defaults (16 packets).
func TestByNameSwiftCalibration(t *testing.T) {
	mk, err := ByName("swift", Params{LineRate: 25e6, BaseRTT: 100 * time.Microsecond, PacketBytes: 1350})
	if err != nil {
		t.Fatal(err)
	}
	s := mk().(*Swift)
	if bdp := 25e6 * 100e-6 / 1350; math.Abs(s.Cwnd()-bdp) > 1e-9 {
		t.Fatalf("200 Mbit/s, 100µs: initial cwnd %v, want the BDP %v", s.Cwnd(), bdp)
	}
	if ai := 25e6 * 50e-6 / 1350 / 2; math.Abs(s.ai-ai) > 1e-9 {
		t.Fatalf("ai %v, want %v", s.ai, ai)
	}
	mk, _ = ByName("swift", Params{})
	if s := mk().(*Swift); s.Cwnd() != 16 || s.ai != 1 {
		t.Fatalf("no line rate: cwnd %v ai %v, want 16 and 1", s.Cwnd(), s.ai)
	}
}

// TestSwiftRTTEndpointAllowance: with an endpoint allowance, an RTT-based
// fabric delay between the target and the target plus the allowance
// grows the window and one above both cuts it; an ACK with INT records is
// held to the fabric target alone.
func TestSwiftRTTEndpointAllowance(t *testing.T) {
	const allow = 100 * time.Microsecond
	cfg := SwiftConfig{InitCwnd: 100, INTFabricDelay: true, RTTEndpointAllowance: allow}
	target := NewSwift(cfg).TargetDelay(100, 0)
	s := NewSwift(cfg)
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: target + allow/2})
	if s.Cwnd() <= 100 || s.Decreases() != 0 {
		t.Fatalf("RTT at the target plus half the allowance: cwnd %v after %d cuts, want growth", s.Cwnd(), s.Decreases())
	}
	s = NewSwift(cfg)
	d := target + 2*allow
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: d})
	want := 100 * (1 - 0.8*float64(d-target-allow)/float64(d))
	if math.Abs(s.Cwnd()-want) > 1e-6 {
		t.Fatalf("RTT at the target plus twice the allowance: cwnd %v, want %v", s.Cwnd(), want)
	}
	// INT records: the queue they report against the fabric target.
	s = NewSwift(cfg)
	t2 := s.TargetDelay(100, 1)
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: 30 * time.Microsecond, INT: hops(1, t2+allow/2)})
	if s.Cwnd() >= 100 {
		t.Fatalf("INT queue at the target plus half the allowance: cwnd %v, want a cut", s.Cwnd())
	}
	// Without the option (the paper's), the first case cuts.
	s = NewSwift(SwiftConfig{InitCwnd: 100})
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: target + allow/2})
	if s.Cwnd() >= 100 {
		t.Fatalf("no allowance, RTT over the target: cwnd %v, want a cut", s.Cwnd())
	}
	mk, _ := ByName("swift", Params{})
	if got := mk().(*Swift).rttAllow; got != float64(SoftwareSwiftEndpointAllowance) {
		t.Fatalf("ByName's allowance %vns, want %v", got, SoftwareSwiftEndpointAllowance)
	}
}

// TestSwiftHostEndpointTarget: a sample whose hold counts from the packet's
// arrival at the host (HostHold) is held to HostEndpointTarget by the
// endpoint window, even where EndpointTarget is off; the same hold without
// HostHold (a delayed-ACK timer) is not, and a host hold under the target
// grows the window.
func TestSwiftHostEndpointTarget(t *testing.T) {
	const host = 500 * time.Microsecond
	cfg := SwiftConfig{InitCwnd: 100, EndpointTarget: -1, HostEndpointTarget: host}
	rtt := 2 * host // the fabric part (RTT - hold) is far below any target below
	s := NewSwift(cfg)
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: rtt, HoldTime: rtt - time.Microsecond, HostHold: true})
	if s.EndpointCwnd() >= 100 || s.FabricCwnd() < 100 {
		t.Fatalf("host hold over its target: endpoint cwnd %v, fabric %v; want the endpoint window cut", s.EndpointCwnd(), s.FabricCwnd())
	}
	s = NewSwift(cfg)
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: rtt, HoldTime: rtt - time.Microsecond})
	if s.Cwnd() <= 100 || s.Decreases() != 0 {
		t.Fatalf("the same hold without HostHold: cwnd %v after %d cuts, want growth", s.Cwnd(), s.Decreases())
	}
	s = NewSwift(cfg)
	s.OnAck(Sample{Now: 1000, AckedBytes: 1400, RTT: rtt, HoldTime: host / 2, HostHold: true})
	if s.EndpointCwnd() <= 100 {
		t.Fatalf("host hold under its target: endpoint cwnd %v, want growth", s.EndpointCwnd())
	}
	mk, _ := ByName("swift", Params{})
	if got := mk().(*Swift).hostETarget; got != float64(SoftwareSwiftHostTarget) {
		t.Fatalf("ByName's host endpoint target %vns, want %v", got, SoftwareSwiftHostTarget)
	}
}
