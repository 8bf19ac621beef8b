package retransmit

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
)

// sendOn sends one new packet of 1000 bytes on entropy at now.
func sendOn(t *testing.T, s *Scoreboard, now clock.Time, entropy uint16) psn.PSN {
	t.Helper()
	p := s.Next()
	if err := s.OnSend(now, p, 1000, uint64(p), entropy); err != nil {
		t.Fatalf("OnSend(%d): %v", p, err)
	}
	return p
}

// TestRACKPerPath: packets sprayed over a slow path (entropy 1, 300µs) and
// a fast one (entropy 2, 100µs). A packet on the slow path is not declared
// lost because a later packet on the fast path came back first, as plain
// RACK (a 25µs window) would; a packet on the slow path is declared lost
// once a later packet on its own path is delivered and its window passed.
func TestRACKPerPath(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		// Warm up both paths.
		p0 := sendOn(t, s, 0, 1)
		p1 := sendOn(t, s, 1*us, 2)
		s.OnAck(101*us, sackOf(first, p1, p1), nil)
		s.OnAck(300*us, Ack{Cum: p1.Next(), Acked: p0, HasAcked: true}, nil)
		if s.Outstanding() != 0 || s.Stats().Lost != 0 {
			t.Fatalf("warm-up: outstanding %d, stats %+v", s.Outstanding(), s.Stats())
		}
		base := p1.Next()

		// Slow then fast; the fast one's ACK first.
		a := sendOn(t, s, 400*us, 1)
		b := sendOn(t, s, 401*us, 2)
		ev, _ := s.OnAck(501*us, sackOf(base, b, b), nil)
		if _, lost := split(ev); len(lost) != 0 {
			t.Fatalf("lost %v when the fast path's later packet came back", lost)
		}
		// Plain RACK would fire at 400+100+25µs; the slow path gets twice
		// its RTT.
		if at := s.NextTimeout(); at < 1000*us {
			if ev, kind, _ := s.OnTimeout(at, nil); len(ev) != 0 {
				t.Fatalf("timer %v at %v declared %v lost", kind, at, ev)
			}
		}
		ev, _ = s.OnAck(700*us, sackOf(b.Next(), a), nil)
		if acked, lost := split(ev); len(lost) != 0 || !samePSNs(acked, []psn.PSN{a}) {
			t.Fatalf("slow packet: acked %v lost %v", acked, lost)
		}

		// A loss on the slow path: the next packet on it is delivered.
		c := sendOn(t, s, 800*us, 1)
		d := sendOn(t, s, 810*us, 1)
		cum := b.Next()
		ev, _ = s.OnAck(1110*us, sackOf(cum, d, d), nil)
		if _, lost := split(ev); len(lost) != 0 {
			t.Fatalf("lost %v before the window passed", lost)
		}
		// c is lost at 800 + 300 (d's RTT) + 25 (minRTT/4) µs.
		if at := s.NextTimeout(); at != 1125*us {
			t.Fatalf("reorder timer at %v, want 1.125ms", at)
		}
		ev, kind, _ := s.OnTimeout(1125*us, nil)
		if _, lost := split(ev); kind != Reorder || !samePSNs(lost, []psn.PSN{c}) {
			t.Fatalf("timeout %v: lost %v, want %d", kind, lost, c)
		}
		mustCheck(t, s)
	})
}

// TestRACKDeadPath: the packets of a path that stopped delivering are
// declared lost two of its RTTs after they were sent, once later packets
// on other paths are delivered.
func TestRACKDeadPath(t *testing.T) {
	s := mustNew(t, Config{}, 0)
	p0 := sendOn(t, s, 0, 1)
	p1 := sendOn(t, s, 1*us, 2)
	s.OnAck(100*us, Ack{Cum: p0.Next(), Acked: p0, HasAcked: true}, nil)
	s.OnAck(101*us, Ack{Cum: p1.Next(), Acked: p1, HasAcked: true}, nil)
	dead := sendOn(t, s, 200*us, 1)
	// The live path sends every 10µs, each packet acknowledged 100µs later.
	var live []psn.PSN
	for i := range 40 {
		live = append(live, sendOn(t, s, clock.Time(201+i*10)*us, 2))
	}
	var lostAt clock.Time
	for i, p := range live {
		now := clock.Time(301+i*10) * us
		ev, _ := s.OnAck(now, sackOf(dead, p, live[:i+1]...), nil)
		if _, lost := split(ev); len(lost) > 0 {
			lostAt = now
			break
		}
		if at := s.NextTimeout(); at <= now+10*us {
			if ev, _, _ := s.OnTimeout(at, nil); len(ev) > 0 {
				lostAt = at
				break
			}
		}
	}
	if lostAt < 400*us || lostAt > 420*us {
		t.Fatalf("dead path's packet declared lost at %v, want 200µs + 2x100µs", lostAt)
	}
	if p, _, ok := s.PopLost(); !ok || p != dead {
		t.Fatalf("PopLost = %d %v, want %d", p, ok, dead)
	}
}

// queued makes s see a queue: a 10µs round trip, then a 200µs one, so that
// SRTT is more than twice the smallest RTT. It returns the time after.
func queued(t *testing.T, s *Scoreboard) clock.Time {
	t.Helper()
	p := sendOn(t, s, 0, 1)
	s.OnAck(10*us, sackOf(p.Next(), p, p), nil)
	p = sendOn(t, s, 10*us, 1)
	s.OnAck(210*us, sackOf(p.Next(), p, p), nil)
	if !s.queueing() {
		t.Fatalf("SRTT %v, min RTT %v: no queue", s.SRTT(), s.MinRTT())
	}
	return 210 * us
}

// TestRTOResendsOldestOnly: in SelectiveRepeat, when the round trip shows a
// queue, a timeout resends the oldest packet alone, however long ago the
// others were sent, and the resend's ACK decides: RACK then declares lost
// the packets sent before it. Without a queue, and in Go-Back-N, the
// timeout resends the old packets too.
func TestRTOResendsOldestOnly(t *testing.T) {
	for _, c := range []struct {
		mode  Mode
		queue bool
	}{{SelectiveRepeat, true}, {SelectiveRepeat, false}, {GoBackN, false}} {
		s := mustNew(t, Config{Mode: c.mode, NoTLP: true}, 0)
		start := clock.Time(0)
		if c.queue {
			start = queued(t, s)
		}
		first := s.Next()
		sendOn(t, s, start, 1)
		sendOn(t, s, start+10*us, 1)
		sendOn(t, s, start+20*us, 1)
		now := s.NextTimeout()
		if _, kind, err := s.OnTimeout(now, nil); kind != RTO || err != nil {
			t.Fatalf("%+v: kind %v err %v", c, kind, err)
		}
		lost := resendLost(t, s, now)
		// Queue or not, the peer is silent: the oldest alone.
		want := psns(first, 0, 1, 2)
		if c.mode == SelectiveRepeat {
			want = psns(first, 0)
		}
		if !samePSNs(lost, want) {
			t.Fatalf("%+v: RTO resent %v, want %v", c, lost, want)
		}
		mustCheck(t, s)
		if !c.queue {
			continue
		}
		// The resend alone arrives: the others, sent before it, are lost.
		s.OnAck(now+20*us, sackOf(first, first, first), nil)
		if got := resendLost(t, s, now+20*us); !samePSNs(got, psns(first, 1, 2)) {
			t.Fatalf("after the resend's ACK resent %v, want the other two", got)
		}
		if st := s.Stats(); st.SpuriousRTOs != 0 || st.Retransmitted != 3 {
			t.Fatalf("stats %+v", st)
		}
		mustCheck(t, s)
	}
}

// TestRTOResendEchoBeatsMinRTT: the ACK of a timeout's resend that echoes
// the resend's own send time is the resend's, even when it comes sooner
// than the smallest RTT measured (the fabric drained since the samples were
// taken under load): RACK declares lost the packets sent before it. An ACK
// with no echoed time that soon is still taken for the original's.
func TestRTOResendEchoBeatsMinRTT(t *testing.T) {
	for _, echo := range []bool{true, false} {
		s := mustNew(t, Config{NoTLP: true}, 0)
		start := queued(t, s)
		first := s.Next()
		sendOn(t, s, start, 1)
		sendOn(t, s, start+10*us, 2)
		sendOn(t, s, start+20*us, 3)
		now := s.NextTimeout()
		s.OnTimeout(now, nil)
		if got := resendLost(t, s, now); !samePSNs(got, psns(first, 0)) {
			t.Fatalf("echo %v: RTO resent %v, want the oldest", echo, got)
		}
		a := sackOf(first.Next(), first)
		if echo {
			a.AckedSentAt = now
		}
		at := now + 5*us // under the 10µs minimum RTT
		s.OnAck(at, a, nil)
		want := []psn.PSN(nil)
		if echo {
			want = psns(first, 1, 2)
		}
		if got := resendLost(t, s, at); !samePSNs(got, want) {
			t.Fatalf("echo %v: after the resend's ACK resent %v, want %v", echo, got, want)
		}
		mustCheck(t, s)
	}
}

// TestSpuriousRTO: a queue longer than the timer, not a loss. The
// originals' ACK comes after the timeout's resend left; the timeout is
// counted spurious and one packet was resent, not the window.
func TestSpuriousRTO(t *testing.T) {
	s := mustNew(t, Config{NoTLP: true}, 0)
	start := queued(t, s)
	first := s.Next()
	for range 8 {
		sendOn(t, s, start, 1)
	}
	now := s.NextTimeout()
	s.OnTimeout(now, nil)
	if got := resendLost(t, s, now); !samePSNs(got, psns(first, 0)) {
		t.Fatalf("resent %v, want the oldest", got)
	}
	// The originals arrive 5ms after they were sent; the ACK echoes the
	// oldest's original send time.
	a := sackOf(first.Add(8), first)
	a.AckedSentAt = start
	s.OnAck(start+clock.Time(5*time.Millisecond), a, nil)
	if st := s.Stats(); st.SpuriousRTOs != 1 || st.Retransmitted != 1 || s.Outstanding() != 0 {
		t.Fatalf("stats %+v outstanding %d", st, s.Outstanding())
	}
	mustCheck(t, s)
}

// TestSpuriousProbeBacksOff: a probe whose original is acknowledged first
// doubles the probe timeout.
func TestSpuriousProbeBacksOff(t *testing.T) {
	s := mustNew(t, Config{MinRTO: 10 * time.Millisecond}, 0)
	sendOn(t, s, 0, 1)
	s.OnAck(100*us, sackOf(1, 0, 0), nil) // RTT 100µs
	p := sendOn(t, s, 100*us, 1)
	sendOn(t, s, 100*us, 1)
	pto := s.NextTimeout()
	if pto != 300*us {
		t.Fatalf("probe at %v, want 2 x 100µs after the send", pto)
	}
	if _, kind, _ := s.OnTimeout(pto, nil); kind != Probe {
		t.Fatalf("kind %v", kind)
	}
	resendLost(t, s, pto)
	// Both originals arrive later (a queue); the ACK echoes the probed
	// packet's original stamp.
	a := sackOf(p.Add(2), p.Add(1))
	a.AckedSentAt = 100 * us
	s.OnAck(500*us, a, nil)
	if st := s.Stats(); st.SpuriousTLPs != 1 {
		t.Fatalf("stats %+v", st)
	}
	sendOn(t, s, 500*us, 1)
	sendOn(t, s, 500*us, 1)
	if got, base := s.NextTimeout().Sub(500*us), 2*s.RecentRTT(); got != 2*base {
		t.Fatalf("probe %v after the send, want twice %v", got, base)
	}
	mustCheck(t, s)
}

// TestEchoedSendTimeSpurious: an ACK that echoes the send time of an
// earlier transmission than the latest one shows the resend was spurious,
// even when it comes long after the resend, and widens the reordering
// window.
func TestEchoedSendTimeSpurious(t *testing.T) {
	forFirsts(t, func(t *testing.T, first psn.PSN) {
		s := mustNew(t, Config{}, first)
		start := clock.Time(1000) * us
		reorderScriptAt(t, s, first, start)
		w0 := s.ReorderWindow()
		resent := resendLost(t, s, start+30*us)
		if !samePSNs(resent, psns(first, 1)) {
			t.Fatalf("resent %v", resent)
		}
		// The original (sent at start+1µs) arrives 200µs after the resend.
		a := sackOf(first.Add(6), first.Add(1), first.Add(1))
		a.AckedSentAt = start + 1*us
		s.OnAck(start+230*us, a, nil)
		if st := s.Stats(); st.SpuriousRetransmits != 1 {
			t.Fatalf("SpuriousRetransmits %d, want 1", st.SpuriousRetransmits)
		}
		if w := s.ReorderWindow(); w <= w0 {
			t.Fatalf("reorder window %v after a spurious resend, was %v", w, w0)
		}
		// The resend's own echo is no evidence.
		s2 := mustNew(t, Config{}, first)
		reorderScriptAt(t, s2, first, start)
		resendLost(t, s2, start+30*us)
		a.AckedSentAt = start + 30*us
		s2.OnAck(start+230*us, a, nil)
		if st := s2.Stats(); st.SpuriousRetransmits != 0 {
			t.Fatalf("SpuriousRetransmits %d for the resend's own ACK", st.SpuriousRetransmits)
		}
	})
}

// reorderScriptAt sends first..first+5 (1µs apart from start, on one
// entropy: RACK as RFC 8985 has it), acknowledges first, then first+2..+5 20µs after each was
// sent, and runs the reorder timer so that first+1 is declared lost.
func reorderScriptAt(t *testing.T, s *Scoreboard, first psn.PSN, start clock.Time) {
	t.Helper()
	for i := range 6 {
		sendOn(t, s, start+clock.Time(i)*us, 100)
	}
	s.OnAck(start+20*us, sackOf(first.Add(1), first), nil)
	var ps []psn.PSN
	for i := 2; i < 6; i++ {
		ps = append(ps, first.Add(uint32(i)))
		s.OnAck(start+clock.Time(20+i)*us, sackOf(first.Add(1), first.Add(uint32(i)), ps...), nil)
	}
	for s.NextTimeout() <= start+29*us {
		s.OnTimeout(s.NextTimeout(), nil)
	}
	if !s.HasLost() {
		t.Fatalf("first+1 not declared lost by %v: stats %+v", start+29*us, s.Stats())
	}
}

// TestRACKPathSlotsShared: entropies whose home slot in the per-entropy
// table is the same (256 apart) keep separate RACK state: a packet on a
// slow path is not declared lost because a later packet on a fast path,
// sharing its slot, was delivered.
func TestRACKPathSlotsShared(t *testing.T) {
	s := mustNew(t, Config{}, 0)
	const fast, slow = 49152, 49152 + 256
	// Both paths deliver once: the fast one in 100µs, the slow one in 1ms.
	pf := sendOn(t, s, 0, fast)
	ps := sendOn(t, s, 0, slow)
	s.OnAck(100*us, sackOf(pf, pf, pf), nil)
	s.OnAck(1000*us, Ack{Cum: ps.Next(), Acked: ps, HasAcked: true}, nil)
	// A packet on the slow path, then one on the fast path that is
	// delivered first.
	slow2 := sendOn(t, s, 1000*us, slow)
	fast2 := sendOn(t, s, 1001*us, fast)
	ev, _ := s.OnAck(1101*us, sackOf(slow2, fast2, fast2), nil)
	if _, lost := split(ev); len(lost) != 0 {
		t.Fatalf("lost %v at once", lost)
	}
	// Well before the slow path's RTT has passed twice, nothing is lost
	// whatever the timers do.
	for now := clock.Time(1101) * us; now < 1900*us; now += 10 * us {
		if at := s.NextTimeout(); at <= now {
			if ev, _, _ := s.OnTimeout(now, nil); len(ev) > 0 {
				if _, lost := split(ev); len(lost) > 0 {
					t.Fatalf("slow path's packet declared lost at %v, %v after it was sent (its path's RTT is 1ms)", now, now-1000*us)
				}
			}
		}
	}
	ev, _ = s.OnAck(2000*us, Ack{Cum: fast2.Next(), Acked: slow2, HasAcked: true}, nil)
	if _, lost := split(ev); len(lost) != 0 {
		t.Fatalf("lost %v", lost)
	}
}

// TestRTOSilentPeerResendsOldest: a first timeout with no packet after
// the oldest acknowledged (a peer whose engine was kept from running
// looks so, as a dead link does) resends the oldest packet alone, as
// under a queue, and a second timeout in a row resends them all. (A
// later packet acknowledged arms RACK's timer, which declares the earlier
// ones lost before the retransmission timer comes due.)
func TestRTOSilentPeerResendsOldest(t *testing.T) {
	s := mustNew(t, Config{NoTLP: true}, 0)
	first := s.Next()
	for i := range 4 {
		sendOn(t, s, clock.Time(i)*10*us, 1)
	}
	now := s.NextTimeout()
	if _, kind, err := s.OnTimeout(now, nil); kind != RTO || err != nil {
		t.Fatalf("kind %v err %v", kind, err)
	}
	if got := resendLost(t, s, now); !samePSNs(got, psns(first, 0)) {
		t.Fatalf("first timeout resent %v, want the oldest", got)
	}
	mustCheck(t, s)
	now = s.NextTimeout()
	if _, kind, err := s.OnTimeout(now, nil); kind != RTO || err != nil {
		t.Fatalf("second timeout: kind %v err %v", kind, err)
	}
	if got := resendLost(t, s, now); !samePSNs(got, psns(first, 0, 1, 2, 3)) {
		t.Fatalf("second timeout resent %v, want all four", got)
	}
	mustCheck(t, s)
}
