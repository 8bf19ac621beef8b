package retransmit

import (
	"errors"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
)

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Mode: 2},
		{Capacity: -1},
		{Capacity: MaxCapacity + 1},
		{InitialRTT: -1},
		{MinRTO: -1},
		{MaxRTO: -1},
		{MinRTO: 10 * time.Millisecond, MaxRTO: time.Millisecond},
		{MinRTO: time.Second}, // above the default MaxRTO
		{MaxRetries: -1},
		{MinReorderWindow: -1},
		{MaxAckDelay: -1},
		{AckEvery: -1},
		{FixedRTO: -1},
		{FixedRTO: MaxDuration + 1},
		{InitialRTT: MaxDuration + 1},
		{MaxRTO: 1 << 62},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig", c, err)
		}
		if _, err := New(c, 0); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	s := mustNew(t, Config{}, 0)
	got := s.Config()
	want := Config{Capacity: DefaultCapacity, InitialRTT: DefaultInitialRTT, InitialRTO: DefaultInitialRTO, MinRTO: DefaultMinRTO,
		MaxRTO: DefaultMaxRTO, MaxRetries: DefaultMaxRetries, AckEvery: 2}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if s.RTO() != DefaultInitialRTO || s.SRTT() != DefaultInitialRTT || s.NextTimeout() != clock.Never {
		t.Errorf("fresh scoreboard: RTO %v SRTT %v next timeout %v", s.RTO(), s.SRTT(), s.NextTimeout())
	}
}

func TestSendAckCumulative(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{Capacity: 8}, first)
		for i := range 8 {
			sendNew(t, s, clock.Time(i)*us)
		}
		if !s.Full() || s.Outstanding() != 8 {
			t.Fatalf("Full %v Outstanding %d after 8 sends into capacity 8", s.Full(), s.Outstanding())
		}
		if err := s.OnSend(9*us, s.Next(), 1000, 0, 0); !errors.Is(err, ErrFull) {
			t.Fatalf("send beyond capacity: %v, want ErrFull", err)
		}
		if p, b := s.InFlight(); p != 8 || b != 8000 {
			t.Fatalf("InFlight %d/%d, want 8/8000", p, b)
		}
		ev, res := s.OnAck(30*us, Ack{Cum: first.Add(5)}, nil)
		acked, lost := split(ev)
		if !samePSNs(acked, psns(first, 0, 1, 2, 3, 4)) || len(lost) != 0 {
			t.Fatalf("acked %v lost %v", acked, lost)
		}
		if res.AckedPkts != 5 || res.AckedBytes != 5000 || !res.Progress || res.RTT != 26*time.Microsecond {
			t.Fatalf("result %+v, want 5 packets, 5000 B, RTT 26µs from PSN+4", res)
		}
		if ev[4].Tag != uint64(first.Add(4)) || ev[4].SentAt != 4*us || ev[4].Bytes != 1000 {
			t.Fatalf("event %+v does not carry OnSend's values", ev[4])
		}
		if s.Outstanding() != 3 || s.Full() || s.Oldest() != first.Add(5) {
			t.Fatalf("Outstanding %d Oldest %d", s.Outstanding(), s.Oldest())
		}
		mustCheck(t, s)
		ev, _ = s.OnAck(31*us, Ack{Cum: first.Add(8)}, ev[:0])
		if len(ev) != 3 || s.Outstanding() != 0 || s.NextTimeout() != clock.Never {
			t.Fatalf("%d events, Outstanding %d, next timeout %v", len(ev), s.Outstanding(), s.NextTimeout())
		}
		// A duplicate ACK changes nothing; an old one is stale.
		ev, res = s.OnAck(32*us, Ack{Cum: first.Add(8)}, ev[:0])
		ev, _ = s.OnAck(32*us, Ack{Cum: first.Add(3)}, ev)
		if len(ev) != 0 || res.Progress || s.Stats().StaleAcks != 1 || s.Stats().Acked != 8 {
			t.Fatalf("duplicate/old ACK: %d events, %+v, stats %+v", len(ev), res, s.Stats())
		}
		mustCheck(t, s)
	})
}

// reorderScript sends PSN+0..+9 at 0..9µs and acknowledges PSN+0 at 20µs so
// that SRTT = minRTT = 20µs and the reordering window is 5µs. PSN+1 is held
// back; PSN+2..+last are SACKed at their send time + 20µs.
func reorderScript(t *testing.T, s *Scoreboard, first psn.PSN, last int) (lostAt []int) {
	t.Helper()
	for i := range 10 {
		sendNew(t, s, clock.Time(i)*us)
	}
	if _, res := s.OnAck(20*us, sackOf(first.Add(1), first), nil); res.RTT != 20*time.Microsecond {
		t.Fatalf("first RTT %v", res.RTT)
	}
	if w := s.ReorderWindow(); w != 5*time.Microsecond {
		t.Fatalf("reorder window %v, want minRTT/4 = 5µs", w)
	}
	var got []psn.PSN
	for i := 2; i <= last; i++ {
		got = got[:0]
		var ps []psn.PSN
		for k := 2; k <= i; k++ {
			ps = append(ps, first.Add(uint32(k)))
		}
		ev, _ := s.OnAck(clock.Time(i+20)*us, sackOf(first.Add(1), first.Add(uint32(i)), ps...), nil)
		if _, lost := split(ev); len(lost) > 0 {
			lostAt = append(lostAt, i)
			if !samePSNs(lost, psns(first, 1)) {
				t.Fatalf("lost %v at the ACK of PSN+%d", lost, i)
			}
		}
		mustCheck(t, s)
	}
	return lostAt
}

func TestRACKLossOnlyAfterReorderWindow(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		// PSN+1 was sent at 1µs; PSN+2's ACK at 22µs gives RACK.rtt 20µs,
		// so PSN+1 is lost at 1+20+5 = 26µs.
		if lostAt := reorderScript(t, s, first, 5); len(lostAt) != 0 {
			t.Fatalf("declared lost at ACKs %v, within the reordering window", lostAt)
		}
		if s.NextTimeout() != 26*us {
			t.Fatalf("reorder timer at %v, want 26µs", s.NextTimeout())
		}
		ev, kind, err := s.OnTimeout(26*us-1, nil)
		if kind != None || len(ev) != 0 || err != nil || s.HasLost() {
			t.Fatalf("early OnTimeout: %v %v %v", kind, ev, err)
		}
		ev, kind, _ = s.OnTimeout(26*us, nil)
		if _, lost := split(ev); kind != Reorder || !samePSNs(lost, psns(first, 1)) {
			t.Fatalf("OnTimeout at 26µs: kind %v lost %v", kind, lost)
		}
		if p, _, ok := s.PopLost(); !ok || p != first.Add(1) {
			t.Fatalf("PopLost = %d %v", p, ok)
		}
		if st := s.Stats(); st.Lost != 1 || st.SpuriousRetransmits != 0 {
			t.Fatalf("stats %+v", st)
		}
		mustCheck(t, s)
	})
}

func TestRACKLossByLaterAck(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		// The ACK of PSN+6 comes at 26µs: PSN+1 is lost at that ACK.
		if lostAt := reorderScript(t, s, first, 6); len(lostAt) != 1 || lostAt[0] != 6 {
			t.Fatalf("declared lost at ACKs %v, want [6]", lostAt)
		}
	})
}

func TestRACKReorderedArrivalNotLost(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		reorderScript(t, s, first, 5)
		// PSN+1 arrives late but within the window.
		ev, res := s.OnAck(25*us+500, sackOf(first.Add(6), first.Add(1)), nil)
		if _, lost := split(ev); len(lost) != 0 || res.AckedPkts != 1 {
			t.Fatalf("late arrival: lost %v, result %+v", lost, res)
		}
		ev, _ = s.OnAck(30*us, Ack{Cum: first.Add(10)}, nil)
		if len(ev) != 4 || s.Stats().Lost != 0 || s.Outstanding() != 0 {
			t.Fatalf("%d events, stats %+v", len(ev), s.Stats())
		}
	})
}

func TestSpuriousRetransmitGrowsReorderWindow(t *testing.T) {
	for _, resend := range []bool{false, true} {
		name := "acked-while-queued"
		if resend {
			name = "acked-just-after-resend"
		}
		t.Run(name, func(t *testing.T) {
			forFirsts(t, func(t *testing.T, first psn.PSN) {
				s := mustNew(t, Config{}, first)
				reorderScript(t, s, first, 5)
				if _, kind, _ := s.OnTimeout(26*us, nil); kind != Reorder {
					t.Fatalf("kind %v", kind)
				}
				if resend {
					if got := resendLost(t, s, 26*us); !samePSNs(got, psns(first, 1)) {
						t.Fatalf("resent %v", got)
					}
				}
				// The original PSN+1 arrives at 27µs: sooner than minRTT after
				// the resend, so the ACK is for the original.
				ev, _ := s.OnAck(27*us, sackOf(first.Add(6), first.Add(1)), nil)
				if acked, _ := split(ev); !samePSNs(acked, psns(first, 1)) {
					t.Fatalf("acked %v", acked)
				}
				if st := s.Stats(); st.SpuriousRetransmits != 1 {
					t.Fatalf("SpuriousRetransmits %d, want 1", st.SpuriousRetransmits)
				}
				if s.HasLost() {
					t.Fatal("an acknowledged PSN is still queued for resend")
				}
				if w := s.ReorderWindow(); w != 10*time.Microsecond {
					t.Fatalf("reorder window %v after a spurious resend, want 2*minRTT/4 = 10µs", w)
				}
				// The same displacement again is now tolerated: PSN+10 and +11
				// (sent at 100 and 101µs) are held back while +12..+19 are
				// delivered until 129µs.
				base := first.Add(10)
				for i := range 10 {
					s.OnSend(clock.Time(100+i)*us, s.Next(), 1000, uint64(s.Next()), 0)
				}
				var ps []psn.PSN
				for i := 2; i <= 9; i++ {
					ps = append(ps, base.Add(uint32(i)))
					ev, _ := s.OnAck(clock.Time(120+i)*us, sackOf(base, base.Add(uint32(i)), ps...), nil)
					if _, lost := split(ev); len(lost) != 0 {
						t.Fatalf("lost %v at +%dµs with the wider window", lost, i)
					}
				}
				ev, _ = s.OnAck(129*us, Ack{Cum: first.Add(20)}, nil)
				if acked, lost := split(ev); !samePSNs(acked, psns(first, 10, 11)) || len(lost) != 0 {
					t.Fatalf("held-back PSN: acked %v lost %v", acked, lost)
				}
				if st := s.Stats(); st.Lost != 1 || s.Outstanding() != 0 {
					t.Fatalf("Lost %d Outstanding %d", st.Lost, s.Outstanding())
				}
				mustCheck(t, s)
			})
		})
	}
}

func TestReorderWindowBounds(t *testing.T) {
	s := mustNew(t, Config{MinReorderWindow: 30 * time.Microsecond}, 0)
	sendNew(t, s, 0)
	s.OnAck(20*us, Ack{Cum: 1}, nil)
	if w := s.ReorderWindow(); w != 30*time.Microsecond {
		t.Fatalf("window %v, want the 30µs floor", w)
	}
	// Growth is bounded by SRTT.
	s = mustNew(t, Config{}, 0)
	sendNew(t, s, 0)
	s.OnAck(20*us, Ack{Cum: 1}, nil)
	s.reoMult = maxReoMult
	if w := s.ReorderWindow(); w != s.SRTT() {
		t.Fatalf("window %v, want SRTT %v", w, s.SRTT())
	}
}

func TestTailLossProbe(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		for i := range 10 {
			sendNew(t, s, clock.Time(i)*us)
		}
		// PSN+0..+4 are acknowledged; the tail +5..+9 is lost.
		for i := range 5 {
			s.OnAck(clock.Time(20+i)*us, sackOf(first.Add(uint32(i+1)), first.Add(uint32(i))), nil)
		}
		// Five packets in flight, more than 2*AckEvery: three round trips
		// (TestProbeUnderFullFlight).
		pto := clock.Time(24 * us).Add(3 * s.SRTT())
		if s.NextTimeout() != pto || pto >= clock.Time(24*us).Add(s.RTO()) {
			t.Fatalf("next timeout %v, want PTO %v (before the RTO)", s.NextTimeout(), pto)
		}
		ev, kind, err := s.OnTimeout(pto, nil)
		if kind != Probe || err != nil || len(ev) != 0 {
			t.Fatalf("OnTimeout: %v %v %v", kind, ev, err)
		}
		if st := s.Stats(); st.TLPs != 1 || st.Lost != 0 {
			t.Fatalf("stats %+v", st)
		}
		if p, b := s.InFlight(); p != 5 || b != 5000 {
			t.Fatalf("a probe is no loss: in flight %d/%d", p, b)
		}
		got := resendLost(t, s, pto)
		if !samePSNs(got, psns(first, 9)) {
			t.Fatalf("probe resent %v, want the highest PSN+9", got)
		}
		if s.NextTimeout() != pto.Add(s.RTO()) {
			t.Fatalf("after the probe the RTO is armed: next %v want %v", s.NextTimeout(), pto.Add(s.RTO()))
		}
		// The probe's ACK reveals PSN+5..+8 at once (RFC 8985 7.4).
		ev, res := s.OnAck(pto+20*us, sackOf(first.Add(5), first.Add(9), first.Add(9)), nil)
		acked, lost := split(ev)
		if !samePSNs(acked, psns(first, 9)) || !samePSNs(lost, psns(first, 5, 6, 7, 8)) || res.LostPkts != 4 {
			t.Fatalf("probe ACK: acked %v lost %v %+v", acked, lost, res)
		}
		if res.RTT != 0 {
			t.Fatalf("RTT sample %v from a retransmitted packet", res.RTT)
		}
		if got := resendLost(t, s, pto+20*us); !samePSNs(got, psns(first, 5, 6, 7, 8)) {
			t.Fatalf("resent %v", got)
		}
		s.OnAck(pto+40*us, Ack{Cum: first.Add(10)}, nil)
		if s.Outstanding() != 0 || s.NextTimeout() != clock.Never || s.Stats().RTOs != 0 {
			t.Fatalf("Outstanding %d next %v stats %+v", s.Outstanding(), s.NextTimeout(), s.Stats())
		}
		mustCheck(t, s)
	})
}

// TestProbeWaitsForDelayedAck: the probe timeout holds MaxAckDelay while
// fewer packets than the receiver's AckEvery are in flight, since the
// receiver may hold their ACK that long; with AckEvery's default (2) only a
// single packet in flight does (RFC 8985 7.2).
func TestProbeWaitsForDelayedAck(t *testing.T) {
	const delay = 500 * time.Microsecond
	for _, c := range []struct {
		every, inFlight int
		held            bool
	}{{0, 1, true}, {0, 2, false}, {4, 1, true}, {4, 3, true}, {4, 4, false}} {
		s := mustNew(t, Config{MaxAckDelay: delay, AckEvery: c.every, MinRTO: 10 * time.Millisecond}, 0)
		sendNew(t, s, 0)
		s.OnAck(100*us, Ack{Cum: 1}, nil) // SRTT 100µs
		var last clock.Time
		for i := range c.inFlight {
			last = clock.Time(200+i) * us
			sendNew(t, s, last)
		}
		want := last.Add(2 * s.SRTT())
		if c.held {
			want = want.Add(delay)
		}
		if got := s.NextTimeout(); got != want {
			t.Errorf("AckEvery %d, %d in flight: probe at %v, want %v (SRTT %v, ACK held: %v)", c.every, c.inFlight, got, want, s.SRTT(), c.held)
		}
	}
}

func TestNoTLP(t *testing.T) {
	for _, cfg := range []Config{{NoTLP: true}, {Mode: GoBackN}} {
		s := mustNew(t, cfg, 0)
		sendNew(t, s, 0)
		sendNew(t, s, 0)
		s.OnAck(20*us, Ack{Cum: 1}, nil)
		if s.NextTimeout() != clock.Time(20*us).Add(s.RTO()) {
			t.Fatalf("%+v: next timeout %v, want the RTO", cfg, s.NextTimeout())
		}
		if _, kind, _ := s.OnTimeout(s.NextTimeout(), nil); kind != RTO {
			t.Fatalf("%+v: kind %v", cfg, kind)
		}
	}
}

func TestRTOBackoffAndFailure(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{NoTLP: true, InitialRTO: time.Millisecond, MinRTO: time.Millisecond, MaxRTO: 8 * time.Millisecond, MaxRetries: 5}, first)
		sendNew(t, s, 0)
		sendNew(t, s, 0)
		now := clock.Time(0)
		want := []time.Duration{1, 2, 4, 8, 8, 8}
		for i, w := range want {
			next := s.NextTimeout()
			if got := next.Sub(now); got != w*time.Millisecond {
				t.Fatalf("timeout %d after %v, want %vms", i, got, w)
			}
			now = next
			ev, kind, err := s.OnTimeout(now, nil)
			if i == len(want)-1 {
				if kind != Failed || !errors.Is(err, ErrRetryExceeded) || s.Err() == nil {
					t.Fatalf("after %d RTOs: kind %v err %v", i, kind, err)
				}
				break
			}
			if kind != RTO || err != nil {
				t.Fatalf("timeout %d: kind %v err %v", i, kind, err)
			}
			// The first timeout finds the peer silent and resends the
			// oldest alone (TestRTOSilentPeerResendsOldest).
			want := psns(first, 0, 1)
			if i == 0 {
				want = psns(first, 0)
			}
			if _, lost := split(ev); !samePSNs(lost, want) {
				t.Fatalf("RTO %d lost %v, want %v", i, lost, want)
			}
			if got := resendLost(t, s, now); !samePSNs(got, want) {
				t.Fatalf("resent %v", got)
			}
			mustCheck(t, s)
		}
		if st := s.Stats(); st.RTOs != 5 || st.Retransmitted != 9 {
			t.Fatalf("stats %+v", st)
		}
		if s.NextTimeout() != clock.Never {
			t.Fatal("a failed scoreboard still has a timer")
		}
		if err := s.OnSend(now, s.Next(), 10, 0, 0); !errors.Is(err, ErrRetryExceeded) {
			t.Fatalf("OnSend after failure: %v", err)
		}
		if ev, res := s.OnAck(now, Ack{Cum: first.Add(2)}, nil); len(ev) != 0 || res.Progress {
			t.Fatal("a failed scoreboard accepted an ACK")
		}
	})
}

// TestFixedRTO: with FixedRTO (classic RoCE's Local ACK Timeout) every
// timeout comes FixedRTO after the one before, whatever the RTT samples
// say, with no backoff, and the scoreboard fails at the (MaxRetries+1)th:
// (MaxRetries+1) x FixedRTO after the last progress. MinRTO and MaxRTO do
// not bound it.
func TestFixedRTO(t *testing.T) {
	const fixed = 67108864 * time.Nanosecond // 4.096µs x 2^14
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{Mode: GoBackN, FixedRTO: fixed, MinRTO: time.Millisecond, MaxRTO: 2 * time.Millisecond}, first)
		// An RTT sample of 30µs would give an adaptive RTO at MinRTO.
		sendNew(t, s, 0)
		if _, res := s.OnAck(30*us, Ack{Cum: first.Add(1)}, nil); res.RTT != 30*time.Microsecond {
			t.Fatalf("RTT sample %v", res.RTT)
		}
		start := clock.Time(time.Millisecond)
		sendNew(t, s, start)
		sendNew(t, s, start)
		if s.RTO() != fixed {
			t.Fatalf("RTO %v after a 30µs sample, want the fixed %v", s.RTO(), fixed)
		}
		now := start
		for i := range DefaultMaxRetries + 1 {
			next := s.NextTimeout()
			if got := next.Sub(now); got != fixed {
				t.Fatalf("timeout %d came %v after the one before, want %v", i, got, fixed)
			}
			now = next
			ev, kind, err := s.OnTimeout(now, nil)
			if i == DefaultMaxRetries {
				if kind != Failed || !errors.Is(err, ErrRetryExceeded) {
					t.Fatalf("timeout %d: kind %v err %v, want Failed", i, kind, err)
				}
				break
			}
			if _, lost := split(ev); kind != RTO || !samePSNs(lost, psns(first, 1, 2)) {
				t.Fatalf("timeout %d: kind %v lost %v", i, kind, lost)
			}
			resendLost(t, s, now)
		}
		if got, want := now.Sub(start), time.Duration(DefaultMaxRetries+1)*fixed; got != want {
			t.Fatalf("failed %v after the last progress, want %v", got, want)
		}
		if st := s.Stats(); st.RTOs != DefaultMaxRetries {
			t.Fatalf("%d RTOs counted, want %d", st.RTOs, DefaultMaxRetries)
		}
	})
}

func TestProgressResetsRetries(t *testing.T) {
	s := mustNew(t, Config{NoTLP: true, MaxRetries: 3}, 0)
	sendNew(t, s, 0)
	sendNew(t, s, 0)
	now := clock.Time(0)
	rto := func() TimeoutKind {
		now = s.NextTimeout()
		_, kind, _ := s.OnTimeout(now, nil)
		resendLost(t, s, now)
		return kind
	}
	for i := range 3 {
		if k := rto(); k != RTO {
			t.Fatalf("RTO %d: %v", i, k)
		}
	}
	backedOff := s.RTO()
	// PSN 0 is acknowledged: progress, but from a retransmitted packet, so
	// no RTT sample and the backoff stays (RFC 6298 5.7, Karn).
	_, res := s.OnAck(now+10*us, Ack{Cum: 1}, nil)
	if !res.Progress || res.RTT != 0 {
		t.Fatalf("result %+v", res)
	}
	if s.RTO() != backedOff {
		t.Fatalf("RTO %v after an ACK of a resend, want it still backed off at %v", s.RTO(), backedOff)
	}
	for i := range 3 {
		if k := rto(); k != RTO {
			t.Fatalf("RTO %d after progress: %v (retry count not reset)", i, k)
		}
	}
	if k := rto(); k != Failed {
		t.Fatalf("4th RTO without progress: %v", k)
	}
	// A fresh RTT sample ends the backoff.
	s = mustNew(t, Config{NoTLP: true, InitialRTO: DefaultMinRTO}, 0)
	sendNew(t, s, 0)
	s.OnTimeout(s.NextTimeout(), nil)
	resendLost(t, s, 0)
	if s.RTO() != 2*DefaultMinRTO {
		t.Fatalf("RTO %v", s.RTO())
	}
	p := sendNew(t, s, 2*clock.Time(time.Millisecond))
	s.OnAck(2*clock.Time(time.Millisecond)+20*us, sackOf(0, p, p), nil)
	if s.RTO() != DefaultMinRTO {
		t.Fatalf("RTO %v after a valid sample, want %v", s.RTO(), DefaultMinRTO)
	}
}

func TestGoBackNNak(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{Mode: GoBackN}, first)
		for i := range 10 {
			sendNew(t, s, clock.Time(i)*us)
		}
		ev, _ := s.OnAck(20*us, Ack{Cum: first.Add(3)}, nil)
		if len(ev) != 3 {
			t.Fatalf("%d events", len(ev))
		}
		// SACK information means nothing in GoBackN.
		ev, res := s.OnAck(21*us, sackOf(first.Add(3), first.Add(8), first.Add(8)), nil)
		if len(ev) != 0 || res.Progress {
			t.Fatalf("GoBackN used SACK bits: %v", ev)
		}
		ev, res = s.OnNak(25*us, first.Add(5), nil)
		acked, lost := split(ev)
		if !samePSNs(acked, psns(first, 3, 4)) || !samePSNs(lost, psns(first, 5, 6, 7, 8, 9)) || res.LostPkts != 5 {
			t.Fatalf("NAK: acked %v lost %v %+v", acked, lost, res)
		}
		// A second NAK for the same PSN while the resend is queued: ignored.
		if ev, _ = s.OnNak(26*us, first.Add(5), nil); len(ev) != 0 || s.Stats().DupNaks != 1 {
			t.Fatalf("dup NAK: %v, stats %+v", ev, s.Stats())
		}
		got := resendLost(t, s, 30*us)
		if !samePSNs(got, psns(first, 5, 6, 7, 8, 9)) {
			t.Fatalf("resent %v, want PSN+5..+9 in order", got)
		}
		// Still a duplicate less than one SRTT after the resend.
		if ev, _ = s.OnNak(30*us+clock.Time(s.SRTT())-1, first.Add(5), nil); len(ev) != 0 || s.Stats().DupNaks != 2 {
			t.Fatalf("dup NAK during resend: %v", ev)
		}
		// One SRTT later the same NAK means the resend was lost: go back again.
		ev, _ = s.OnNak(30*us+clock.Time(s.SRTT()), first.Add(5), nil)
		if _, lost := split(ev); !samePSNs(lost, psns(first, 5, 6, 7, 8, 9)) || s.Stats().Naks != 2 {
			t.Fatalf("second NAK: lost %v stats %+v", lost, s.Stats())
		}
		resendLost(t, s, 60*us)
		ev, _ = s.OnAck(80*us, Ack{Cum: first.Add(10)}, nil)
		if len(ev) != 5 || s.Outstanding() != 0 || s.NextTimeout() != clock.Never {
			t.Fatalf("%d events, Outstanding %d", len(ev), s.Outstanding())
		}
		// NAKs outside the window.
		s.OnNak(81*us, first.Add(20), nil)
		s.OnNak(81*us, first, nil)
		if st := s.Stats(); st.BadAcks != 1 || st.StaleAcks != 1 {
			t.Fatalf("stats %+v", st)
		}
		mustCheck(t, s)
	})
}

func TestGoBackNRTOFromOldest(t *testing.T) {
	s := mustNew(t, Config{Mode: GoBackN}, 1<<24-2)
	for range 6 {
		sendNew(t, s, 0)
	}
	s.OnAck(20*us, Ack{Cum: psn.New(1<<24 - 2).Add(2)}, nil)
	ev, kind, _ := s.OnTimeout(s.NextTimeout(), nil)
	if _, lost := split(ev); kind != RTO || !samePSNs(lost, []psn.PSN{0, 1, 2, 3}) {
		t.Fatalf("kind %v lost %v", kind, lost)
	}
	if got := resendLost(t, s, s.NextTimeout()); !samePSNs(got, []psn.PSN{0, 1, 2, 3}) {
		t.Fatalf("resent %v", got)
	}
}

func TestBadAcks(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		for range 10 {
			sendNew(t, s, 0)
		}
		longSack := make([]uint64, psn.Half/64+1)
		longSack[len(longSack)-1] = 1
		bad := []Ack{
			{Cum: first.Add(11)},
			{Cum: first.Add(1 << 22)},
			{Cum: first, SackBase: first, Sack: []uint64{1 << 12}},
			{Cum: first, SackBase: first.Add(60), Sack: []uint64{1 << 3, 0}},
			{Cum: first, SackBase: first, Sack: []uint64{0, 0, 0, 1}},
			{Cum: first, SackBase: first, Sack: longSack},
			{Cum: first, Acked: first.Add(10), HasAcked: true},
			{Cum: first.Add(3), SackBase: first, Sack: []uint64{1<<4 | 1<<10}},
		}
		for i, a := range bad {
			ev, res := s.OnAck(10*us, a, nil)
			if len(ev) != 0 || res != (AckResult{}) {
				t.Fatalf("bad ACK %d used: %v %+v", i, ev, res)
			}
			if got := s.Stats().BadAcks; got != uint64(i+1) {
				t.Fatalf("bad ACK %d: BadAcks %d", i, got)
			}
		}
		if s.Outstanding() != 10 {
			t.Fatalf("Outstanding %d", s.Outstanding())
		}
		// Stale SACK bits before the window are ignored, not bad.
		s.OnAck(10*us, Ack{Cum: first.Add(2)}, nil)
		ev, _ := s.OnAck(11*us, Ack{Cum: first, SackBase: first.Add(-4 & psn.Mask), Sack: []uint64{0xFF}}, nil)
		if acked, _ := split(ev); !samePSNs(acked, psns(first, 2, 3)) {
			t.Fatalf("acked %v", acked)
		}
		if st := s.Stats(); st.BadAcks != uint64(len(bad)) || st.StaleAcks != 1 {
			t.Fatalf("stats %+v", st)
		}
		// GoBackN checks Cum only.
		g := mustNew(t, Config{Mode: GoBackN}, first)
		sendNew(t, g, 0)
		g.OnAck(1, Ack{Cum: first.Add(2)}, nil)
		g.OnAck(1, Ack{Cum: first.Add(1), Sack: []uint64{^uint64(0)}}, nil)
		if g.Stats().BadAcks != 1 || g.Outstanding() != 0 {
			t.Fatalf("GoBackN stats %+v", g.Stats())
		}
		mustCheck(t, s)
	})
}

func TestOnSendErrors(t *testing.T) {
	s := mustNew(t, Config{}, 0)
	sendNew(t, s, 0)
	sendNew(t, s, 0)
	for _, tc := range []struct {
		p     psn.PSN
		bytes int
		want  error
	}{
		{1, 10, ErrUnexpectedPSN}, // in flight, not lost
		{5, 10, ErrUnexpectedPSN}, // beyond Next
		{psn.Mask, 10, ErrUnexpectedPSN},
		{2, -1, ErrBadLength},
		{2, 1 << 40, ErrBadLength},
	} {
		if err := s.OnSend(0, tc.p, tc.bytes, 0, 0); !errors.Is(err, tc.want) {
			t.Errorf("OnSend(%d, %d) = %v, want %v", tc.p, tc.bytes, err, tc.want)
		}
	}
	// A PSN popped for resend and acknowledged before the resend.
	s.OnTimeout(s.NextTimeout(), nil) // probe
	s.OnTimeout(s.NextTimeout(), nil) // RTO
	p, _, _ := s.PopLost()
	s.OnAck(10*us, Ack{Cum: 2}, nil)
	if err := s.OnSend(11*us, p, 10, 0, 0); !errors.Is(err, ErrUnexpectedPSN) {
		t.Fatalf("resend of an acked PSN: %v", err)
	}
	if s.Stats().Sent != 2 {
		t.Fatalf("Sent %d", s.Stats().Sent)
	}
	mustCheck(t, s)
}

// TestPoppedNotResent: a PSN that PopLost returned but the transport never
// resent is queued again by the next RTO rather than forgotten.
func TestPoppedNotResent(t *testing.T) {
	s := mustNew(t, Config{NoTLP: true}, 0)
	sendNew(t, s, 0)
	s.OnTimeout(s.NextTimeout(), nil)
	if _, _, ok := s.PopLost(); !ok {
		t.Fatal("nothing queued")
	}
	_, kind, _ := s.OnTimeout(s.NextTimeout(), nil)
	if p, _, ok := s.PopLost(); kind != RTO || !ok || p != 0 {
		t.Fatalf("kind %v, PopLost %d %v", kind, p, ok)
	}
	mustCheck(t, s)
}

// TestTimeoutsThatCount: a timer that expires while the previous RTO's
// resend of the oldest packet is still queued (the sender held it back)
// counts nothing, and PeerAlive starts the count over; a timeout after a
// resend that got no answer counts, and MaxRetries of them fail.
func TestTimeoutsThatCount(t *testing.T) {
	s := mustNew(t, Config{NoTLP: true, MaxRetries: 1}, 0)
	sendNew(t, s, 0)
	resend := func() {
		t.Helper()
		p, tag, ok := s.PopLost()
		if !ok {
			t.Fatal("nothing queued for resend")
		}
		if err := s.OnSend(s.NextTimeout()-1, p, 1000, tag, 1); err != nil {
			t.Fatal(err)
		}
	}
	timeout := func(want TimeoutKind) {
		t.Helper()
		if _, kind, _ := s.OnTimeout(s.NextTimeout(), nil); kind != want {
			t.Fatalf("timeout: %v, want %v", kind, want)
		}
	}
	timeout(RTO)  // one of one
	timeout(None) // the resend has not left: not counted
	resend()
	s.PeerAlive() // the peer answered: counted from zero again
	timeout(RTO)
	resend()
	timeout(Failed)
	if !errors.Is(s.Err(), ErrRetryExceeded) {
		t.Fatalf("Err() = %v", s.Err())
	}
	s.PeerAlive() // a failed scoreboard stays failed
	if _, kind, _ := s.OnTimeout(s.NextTimeout(), nil); kind != Failed {
		t.Fatalf("after PeerAlive on a failed scoreboard: %v", kind)
	}
}

func TestAllocs(t *testing.T) {
	s := mustNew(t, Config{Capacity: 256}, 1<<24-100)
	dst := make([]Event, 0, 256)
	now := clock.Time(0)
	sack := make([]uint64, 4)
	i := 0
	allocs := testing.AllocsPerRun(2000, func() {
		now += us
		for range 2 {
			p := s.Next()
			if s.Full() {
				break
			}
			s.OnSend(now, p, 1000, uint64(p), 1)
		}
		for {
			p, tag, ok := s.PopLost()
			if !ok {
				break
			}
			s.OnSend(now, p, 1000, tag, 2)
		}
		// Acknowledge all but every 7th packet out of order; the held-back
		// ones are declared lost and resent, then acknowledged cumulatively.
		i++
		var a Ack
		if i%7 == 0 {
			a = Ack{Cum: s.Next()}
		} else {
			clear(sack)
			base := s.Oldest()
			for d := range min(s.Outstanding(), 256) {
				if d%5 != 0 {
					sack[d/64] |= 1 << (d % 64)
				}
			}
			a = Ack{Cum: base, Sack: sack, SackBase: base, Acked: base.Add(1), HasAcked: true}
		}
		dst, _ = s.OnAck(now+20*us, a, dst[:0])
		if s.NextTimeout() <= now {
			dst, _, _ = s.OnTimeout(now, dst[:0])
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per send+ack", allocs)
	}
	if s.Stats().Acked == 0 || s.Stats().Lost == 0 {
		t.Fatalf("the loop did not exercise loss: %+v", s.Stats())
	}
	mustCheck(t, s)
}

func BenchmarkSendAck(b *testing.B) {
	s := mustNew(b, Config{}, 0)
	dst := make([]Event, 0, DefaultCapacity)
	now := clock.Time(0)
	b.ReportAllocs()
	for b.Loop() {
		now += us
		p := s.Next()
		s.OnSend(now, p, 1000, uint64(p), 0)
		if s.Outstanding() >= 64 {
			dst, _ = s.OnAck(now, sackOf(s.Oldest(), s.Oldest(), s.Oldest()), dst[:0])
		}
	}
}

// TestClockJumps: a clock far in the future or going backwards bends the
// estimates but never overflows a timer.
func TestClockJumps(t *testing.T) {
	s := mustNew(t, Config{}, 0)
	for range 4 {
		sendNew(t, s, 0)
	}
	far := clock.Time(1 << 62)
	_, res := s.OnAck(far, sackOf(1, 0, 2), nil)
	if res.RTT != MaxDuration || s.RTO() != DefaultMaxRTO || s.ReorderWindow() <= 0 {
		t.Fatalf("RTT %v RTO %v reorder window %v", res.RTT, s.RTO(), s.ReorderWindow())
	}
	if next := s.NextTimeout(); next < far || next == clock.Never {
		t.Fatalf("next timeout %v", next)
	}
	// Time going backwards: no sample, nothing breaks.
	sendNew(t, s, far)
	_, res = s.OnAck(5, sackOf(1, 4, 4), nil)
	if res.RTT != 0 || !res.Progress {
		t.Fatalf("backwards ACK: %+v", res)
	}
	for i := 0; s.NextTimeout() != clock.Never && i < 20; i++ {
		s.OnTimeout(s.NextTimeout(), nil)
		resendLost(t, s, far)
	}
	mustCheck(t, s)
}
