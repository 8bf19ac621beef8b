package retransmit

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
)

// runTimers runs every timer due up to until and returns what they did.
func runTimers(s *Scoreboard, until clock.Time) (kinds []TimeoutKind, lost int) {
	for at := s.NextTimeout(); at <= until; at = s.NextTimeout() {
		ev, kind, _ := s.OnTimeout(at, nil)
		kinds = append(kinds, kind)
		_, l := split(ev)
		lost += len(l)
	}
	return kinds, lost
}

// TestTimerUnderGrowingQueue: a QP sprays over a path without queue
// (entropy 2, 10µs) and paths whose queue doubles every round trip, as
// an N-to-1 fan-in builds (the INT records report it); each round's
// packet on the queued path takes a fresh entropy, as a QP's first
// packets do. Its ACK comes later than twice any earlier round trip of
// its own, but no probe, timeout or RACK loss fires for it (RFC 8985's
// rule, 10µs and a quarter of the minimum RTT after the send, would; so
// would a probe at twice SRTT). A packet that is lost (its path's next
// packet delivered) is still declared lost by RACK and resent, long
// before the retransmission timer.
func TestTimerUnderGrowingQueue(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		const base = 10 * us
		now := clock.Time(0)
		q := clock.Time(0)
		for round := range 8 {
			a := sendOn(t, s, now, uint16(100+round)) // the queued path
			b := sendOn(t, s, now+us, 2)              // no queue
			bAt, aAt := now+us+base, now+base+q
			if kinds, lost := runTimers(s, bAt); len(kinds) != 0 || lost != 0 {
				t.Fatalf("round %d: timers %v before the first ACK, %d lost", round, kinds, lost)
			}
			s.OnAck(bAt, sackOf(a, b, b), nil)
			if kinds, lost := runTimers(s, aAt-1); lost != 0 || len(kinds) > 0 && kinds[len(kinds)-1] != Reorder {
				t.Fatalf("round %d (queue %v): timers %v, %d lost before the queued packet's ACK at %v", round, time.Duration(q), kinds, lost, aAt)
			}
			_, res := s.OnAck(aAt, Ack{Cum: b.Next(), Acked: a, HasAcked: true}, nil)
			if res.AckedPkts != 1 {
				t.Fatalf("round %d: the queued packet's ACK acknowledged %d", round, res.AckedPkts)
			}
			s.NoteQueueDelay(time.Duration(q))
			now = aAt + us
			q = max(5*us, 2*q)
		}
		st := s.Stats()
		if st.Lost != 0 || st.TLPs != 0 || st.RTOs != 0 || st.Retransmitted != 0 {
			t.Fatalf("queue growth caused resends: %+v", st)
		}

		// A real loss on the fast path: the next packet on it is delivered.
		x := sendOn(t, s, now, 2)
		y := sendOn(t, s, now+us, 2)
		s.OnAck(now+us+base, sackOf(x, y, y), nil)
		kinds, lost := runTimers(s, now.Add(s.RTO()/2))
		if lost != 1 || len(kinds) == 0 || kinds[0] != Reorder {
			t.Fatalf("lost packet: timers %v, %d lost within half the RTO", kinds, lost)
		}
		if got := resendLost(t, s, now.Add(s.RTO()/2)); !samePSNs(got, []psn.PSN{x}) {
			t.Fatalf("resent %v, want %d", got, x)
		}
		if st := s.Stats(); st.LostRACK != 1 || st.Retransmitted != 1 || st.TLPs+st.RTOs != 0 {
			t.Fatalf("stats %+v: want one RACK loss, resent once", st)
		}
		mustCheck(t, s)
	})
}

// TestTrimResendsOnePSN: a receiver's report that a switch trimmed one
// transmission queues that PSN alone for resend at once; a report about an
// earlier transmission than the latest, about a PSN acknowledged or not
// outstanding, changes nothing.
func TestTrimResendsOnePSN(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		var ps []psn.PSN
		for i := range 8 {
			ps = append(ps, sendOn(t, s, clock.Time(i)*us, uint16(i%2)))
		}
		ev, ok := s.OnTrim(10*us, ps[3], 3*us, nil)
		if _, lost := split(ev); !ok || !samePSNs(lost, ps[3:4]) {
			t.Fatalf("OnTrim: %v, lost %v, want %d", ok, lost, ps[3])
		}
		if got := resendLost(t, s, 11*us); !samePSNs(got, ps[3:4]) {
			t.Fatalf("resent %v, want %d", got, ps[3])
		}
		// The first copy's trim again, a trimmed copy of the resend
		// later reported with its send time, an acknowledged PSN, and a
		// PSN never sent.
		if _, ok := s.OnTrim(12*us, ps[3], 3*us, nil); ok {
			t.Fatal("a report about the first copy resent the resend")
		}
		s.OnAck(20*us, sackOf(first, ps[5], ps[5]), nil)
		for _, c := range []struct {
			p  psn.PSN
			at clock.Time
		}{{ps[5], 5 * us}, {s.Next(), 0}, {first.Prev(), 0}} {
			if _, ok := s.OnTrim(21*us, c.p, c.at, nil); ok {
				t.Fatalf("OnTrim(%d) acted", c.p)
			}
		}
		if _, ok := s.OnTrim(22*us, ps[3], 11*us, nil); !ok {
			t.Fatal("the resend's own trim was ignored")
		}
		if st := s.Stats(); st.LostTrim != 2 || st.Lost-st.LostRACK != 2 || st.Retransmitted != 1 || st.TLPs+st.RTOs != 0 {
			t.Fatalf("stats %+v", st)
		}
		mustCheck(t, s)
	})
}

// TestRecentRTTSkipsTimeout: packets whose ACKs were all lost are
// acknowledged by the ACK of the retransmission timeout's resend, a timer
// period after they were sent; that time to proof measures the timer, not
// the path, so RecentRTT, and with it the probe and RACK's waits, keep the
// round trip measured before.
func TestRecentRTTSkipsTimeout(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		// A queue has built (SRTT over twice the minimum RTT), so the
		// timeout resends the oldest packet alone (F-RTO).
		const rtt = 40 * us
		a := sendOn(t, s, 0, 1)
		s.OnAck(10*us, sackOf(a.Next(), a), nil)
		now := 20 * us
		for range 8 {
			a = sendOn(t, s, now, 1)
			s.OnAck(now+rtt, sackOf(a.Next(), a), nil)
			now += rtt + us
		}
		b := sendOn(t, s, now, 2)
		c := sendOn(t, s, now+us, 3)
		// The probe's resend is lost too; then the timer fires.
		var at clock.Time
		for kind := None; kind != RTO; {
			var err error
			at = s.NextTimeout()
			if _, kind, err = s.OnTimeout(at, nil); kind == None || err != nil {
				t.Fatalf("timeout at %v: %v, %v", at, kind, err)
			}
			resendLost(t, s, at)
		}
		_, res := s.OnAck(at+rtt, sackOf(c.Next(), b), nil)
		if res.AckedPkts != 2 {
			t.Fatalf("the resend's ACK acknowledged %d, want 2", res.AckedPkts)
		}
		if r := s.RecentRTT(); r > 2*time.Duration(rtt) {
			t.Fatalf("RecentRTT %v after the RTO's ACK at %v, want the %v round trip", r, time.Duration(at), time.Duration(rtt))
		}
		mustCheck(t, s)
	})
}

// TestRACKSilentPath: a packet on an entropy with no delivery yet waits the
// fan-in's long wait (twice the recent round trip plus the queue) before
// RACK declares it lost; once one has been declared lost so and nothing on
// the entropy has been delivered since (a dead path: its packets stop being
// acknowledged while the others' are), the next one on it is lost after
// RFC 8985's RACK.rtt + reo_wnd. A delivery on the entropy restores the
// long wait.
func TestRACKSilentPath(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		const base, dead, fast = 10 * us, 9, 2
		now := clock.Time(0)
		for range 4 {
			p := sendOn(t, s, now, fast)
			s.OnAck(now+base, sackOf(p.Next(), p), nil)
			now += base + us
		}
		// lostAfter sends one packet on entropy e and one on the fast
		// path, acknowledges the fast one (its INT records report a 30µs
		// queue), and returns how long after its send the first was
		// declared lost.
		lostAfter := func(e uint16) clock.Time {
			t.Helper()
			s.NoteQueueDelay(time.Duration(30 * us))
			d := sendOn(t, s, now, e)
			f := sendOn(t, s, now+us, fast)
			s.OnAck(now+us+base, sackOf(s.Oldest(), f, f), nil)
			for at := s.NextTimeout(); at != clock.Never && at < now.Add(s.RTO()); at = s.NextTimeout() {
				ev, kind, _ := s.OnTimeout(at, nil)
				if _, lost := split(ev); kind == Reorder && len(lost) == 1 && lost[0] == d {
					resendLost(t, s, at)
					took := at - now
					s.OnAck(at+base, sackOf(s.Next(), d), nil)
					now = at + base + us
					return took
				}
			}
			t.Fatalf("the packet on entropy %d was never declared lost by RACK", e)
			return 0
		}
		long := lostAfter(dead)
		short := lostAfter(dead)
		if long < 50*us || short > 15*us {
			t.Fatalf("declared lost %v and then %v after the send, want at least 50µs (2 x 10µs + 30µs) and then at most 15µs (10µs + reo_wnd)",
				time.Duration(long), time.Duration(short))
		}
		// A delivery on the entropy: it is no longer silent.
		p := sendOn(t, s, now, dead)
		s.OnAck(now+base, sackOf(p.Next(), p), nil)
		now += base + us
		if again := lostAfter(dead); again < 50*us {
			t.Fatalf("after a delivery on the entropy, lost %v after the send, want the long wait again", time.Duration(again))
		}
		if st := s.Stats(); st.RTOs != 0 || st.LostRACK != 3 {
			t.Fatalf("stats %+v: want 3 RACK losses, no timeout", st)
		}
		mustCheck(t, s)
	})
}

// TestSpuriousWaitBacksOff: a packet on a fresh entropy is declared lost
// by RACK after the fan-in's wait (two round trips, no queue reported
// here); when the receiver's echo then shows that its original arrived (a
// spurious loss, as under a fan-in whose queue outgrew the round trips
// measured before it), the next packet on a fresh entropy waits three round
// trips. Real losses are still declared by RACK and resent long before the
// retransmission timer, and reoPersist loss recoveries without a spurious
// one bring the wait back to two round trips.
func TestSpuriousWaitBacksOff(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		const base, fast = 10 * us, 2
		now := clock.Time(0)
		for range 4 {
			p := sendOn(t, s, now, fast)
			s.OnAck(now+base, sackOf(p.Next(), p), nil)
			now += base + us
		}
		fresh := uint16(100)
		// lossAfter sends a packet on a fresh entropy and one on the fast
		// path, acknowledges the fast one, lets RACK declare the first
		// lost and resends it; the resend's ACK echoes the original's send
		// time when spurious. It returns how long the wait was, in round
		// trips (RecentRTT).
		lossAfter := func(spurious bool) float64 {
			t.Helper()
			fresh++
			d := sendOn(t, s, now, fresh)
			sent := now
			f := sendOn(t, s, now+us, fast)
			s.OnAck(now+us+base, sackOf(s.Oldest(), f, f), nil)
			rtt := s.RecentRTT()
			for at := s.NextTimeout(); at != clock.Never && at < now.Add(s.RTO()/2); at = s.NextTimeout() {
				ev, kind, _ := s.OnTimeout(at, nil)
				if _, lost := split(ev); kind != Reorder || len(lost) != 1 || lost[0] != d {
					continue
				}
				resendLost(t, s, at)
				a := sackOf(s.Next(), d)
				if spurious {
					a.AckedSentAt = sent
				}
				s.OnAck(at+base, a, nil)
				now = at + base + us
				return float64(at-sent) / float64(rtt)
			}
			t.Fatalf("the packet on entropy %d was not declared lost within half the RTO", fresh)
			return 0
		}
		if w := lossAfter(true); w < 2 || w >= 2.5 {
			t.Fatalf("first wait %.2f round trips, want 2", w)
		}
		if st := s.Stats(); st.SpuriousWaits != 1 {
			t.Fatalf("SpuriousWaits %d, want 1", st.SpuriousWaits)
		}
		if w := lossAfter(false); w < 3 || w >= 3.5 {
			t.Fatalf("wait after a spurious loss %.2f round trips, want 3", w)
		}
		// Backed off, the wait also allows for the queues the engine's
		// other QPs saw (NoteFabricQueue): 3 round trips + 10µs.
		s.NoteFabricQueue(time.Duration(base))
		if w := lossAfter(false); w < 4 || w >= 4.5 {
			t.Fatalf("wait after a spurious loss, with a fabric queue of one round trip: %.2f round trips, want 4", w)
		}
		s.NoteFabricQueue(0)
		for range reoPersist {
			lossAfter(false)
		}
		if w := lossAfter(false); w < 2 || w >= 2.5 {
			t.Fatalf("wait after %d clean recoveries %.2f round trips, want 2 again", reoPersist, w)
		}
		if st := s.Stats(); st.RTOs != 0 || st.TLPs != 0 || st.SpuriousWaits != 1 {
			t.Fatalf("stats %+v: want RACK alone, one spurious wait", st)
		}
		mustCheck(t, s)
	})
}

// TestProbeUnderFullFlight: with more than 2*AckEvery packets in flight and
// no ACK (a fan-in's queue holding them all), the tail loss probe waits
// three round trips; with a lost tail of two packets it still fires after
// two.
func TestProbeUnderFullFlight(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		for _, c := range []struct{ out, rtts int }{{8, 3}, {5, 3}, {4, 2}, {2, 2}} {
			s := mustNew(t, Config{}, first)
			p := sendNew(t, s, 0)
			s.OnAck(10*us, sackOf(p.Next(), p), nil)
			now := clock.Time(11 * us)
			for i := range c.out {
				sendNew(t, s, now+clock.Time(i))
			}
			at := now + clock.Time(c.out-1)
			want := at.Add(time.Duration(c.rtts) * s.RecentRTT())
			if got := s.NextTimeout(); got != want {
				t.Fatalf("%d in flight: next timeout %v, want a probe at %v (%d round trips)", c.out, got, want, c.rtts)
			}
			if _, kind, _ := s.OnTimeout(want, nil); kind != Probe {
				t.Fatalf("%d in flight: timeout %v, want a probe", c.out, kind)
			}
		}
		// A receiver that acknowledges every 8 packets: 12 in flight
		// and no ACK is still a queue, not a lost tail.
		s8 := mustNew(t, Config{AckEvery: 8}, first)
		p8 := sendNew(t, s8, 0)
		s8.OnAck(10*us, sackOf(p8.Next(), p8), nil)
		for i := range 12 {
			sendNew(t, s8, 11*us+clock.Time(i))
		}
		if got, want := s8.NextTimeout(), clock.Time(11*us+11).Add(3*s8.RecentRTT()); got != want {
			t.Fatalf("12 in flight, AckEvery 8: next timeout %v, want a probe at %v (3 round trips)", got, want)
		}
		// The queues the engine's other QPs saw (NoteFabricQueue) add to
		// the probe's wait.
		s := mustNew(t, Config{}, first)
		p := sendNew(t, s, 0)
		s.OnAck(10*us, sackOf(p.Next(), p), nil)
		s.NoteFabricQueue(50 * time.Microsecond)
		sendNew(t, s, 11*us)
		if got, want := s.NextTimeout(), clock.Time(11*us).Add(2*s.RecentRTT()+50*time.Microsecond); got != want {
			t.Fatalf("with a 50µs fabric queue: next timeout %v, want %v", got, want)
		}
	})
}

// TestProbeAfterTrimResend: a QP's last packets are out, the last one was
// trimmed and resent, and the resend is lost too (nothing was sent after
// it, so RACK cannot find it). The tail loss probe resends it a few round
// trips later, not the retransmission timer: a resend arms the probe once
// nothing is queued (the trim itself finds its PSN queued, when no probe
// may be armed).
func TestProbeAfterTrimResend(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		var ps []psn.PSN
		for i := range 4 {
			ps = append(ps, sendNew(t, s, clock.Time(i)*us))
		}
		s.OnAck(20*us, sackOf(ps[3], ps[2]), nil)
		if _, ok := s.OnTrim(25*us, ps[3], 3*us, nil); !ok {
			t.Fatal("OnTrim ignored the trim")
		}
		resent := clock.Time(26 * us)
		if got := resendLost(t, s, resent); !samePSNs(got, ps[3:]) {
			t.Fatalf("resent %v, want %d", got, ps[3])
		}
		at := s.NextTimeout()
		_, kind, err := s.OnTimeout(at, nil)
		if err != nil || kind != Probe || at.Sub(resent) > s.RTO()/4 {
			t.Fatalf("next timer %v after the resend: %v (%v), want a probe well before the RTO (%v)", at.Sub(resent), kind, err, s.RTO())
		}
		if got := resendLost(t, s, at); !samePSNs(got, ps[3:]) {
			t.Fatalf("the probe resent %v, want %d", got, ps[3])
		}
		mustCheck(t, s)
	})
}
