package cc

import (
	"math"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/transport/wire"
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
		hops := make([]byte, 4*wire.HopLen)
		for i := 0; i+1 < len(data); i += 2 {
			now += clock.Time(data[i]) * 100
			v := int(data[i+1])
			switch data[i] % 4 {
			case 0, 1:
				s.OnAck(Sample{Now: now, AckedBytes: v * 50, RTT: time.Duration(v) * time.Microsecond, HoldTime: time.Duration(data[i]) * time.Microsecond, INT: hops[:v%5*wire.HopLen]})
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
