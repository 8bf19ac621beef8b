package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
)

// TestStalledEngineNoResends: both engines of a lossless pair are kept
// from running for 5 ms (descheduled on a loaded host) while the sender
// has packets in flight that the receiver has not read. The sender's
// loss timers came due in that time; they restart from when its engine
// runs again (EngineStats.TimersRestarted) instead of resending, the
// receiver's ACKs arrive meanwhile, and nothing is sent twice; the stall
// lengthens its timers for a while (Engine.hostDelay). Every message
// arrives intact.
func TestStalledEngineNoResends(t *testing.T) {
	const n, size = 40, 4000
	s := newSimPair(t, mem.Config{Delay: 5 * time.Microsecond}, Config{Profile: Spray})
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = make([]byte, size)
		for j := range msgs[i] {
			msgs[i][j] = byte(i*13 + j)
		}
	}
	posted, stalled := 0, false
	var got [][]byte
	for len(got) < n {
		for posted < n && s.qa.Post(WorkRequest{ID: uint64(posted + 1), Op: OpSend, Data: msgs[posted]}) == nil {
			posted++
		}
		now := s.clk.Now()
		wa, err := s.ea.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		if !stalled && s.qa.Stats().TxPackets >= 30 {
			// B has not read what A just sent: both stall.
			stalled = true
			s.clk.Set(now.Add(5 * time.Millisecond))
			continue
		}
		wb, err := s.eb.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.ea.Completions(nil) {
			if c.Err != nil {
				t.Fatal(c.Err)
			}
		}
		for {
			c, ok := s.qb.PollCompletion()
			if !ok {
				break
			}
			got = append(got, c.Data[:c.Len])
		}
		if wa || wb {
			continue
		}
		next := clock.Min(clock.Min(s.ea.NextDeadline(), s.eb.NextDeadline()), s.fab.NextDelivery())
		switch {
		case next == clock.Never && len(got) < n:
			t.Fatalf("deadlock after %d of %d messages", len(got), n)
		case next > clock.Time(0).Add(10*time.Second):
			t.Fatalf("%d of %d messages after 10 s of simulated time", len(got), n)
		case next <= now:
			next = now + 1
		}
		s.clk.Set(next)
	}
	for i, m := range got {
		if hash(m) != hash(msgs[i]) {
			t.Fatalf("message %d differs", i)
		}
	}
	if !stalled {
		t.Fatal("the transfer ended before the stall")
	}
	st := s.qa.Stats()
	if st.Retransmits != 0 || s.qb.Stats().Duplicates != 0 {
		t.Fatalf("sender resent %d packets (%d timeouts), receiver saw %d twice; want none", st.Retransmits, st.Timeouts, s.qb.Stats().Duplicates)
	}
	if s.ea.Stats().TimersRestarted == 0 {
		t.Fatal("no timer restarted: the stall found none due")
	}
	// The stall lengthens the sender's timers for a while after it.
	if rto := s.qa.sb.RTO(); rto < 5*time.Millisecond {
		t.Fatalf("RTO %v after a 5 ms stall, want at least 5 ms", rto)
	}
}

// TestPeerStallLengthensTimers: an ACK whose hold says the peer's engine
// was kept from running for 5 ms lengthens the QP's retransmission
// timeout by as much; a hold of microseconds (a delayed ACK) changes
// nothing, and the peer's stall is forgotten by halves, every 256 ACKs.
func TestPeerStallLengthensTimers(t *testing.T) {
	s := newSimPair(t, mem.Config{Delay: 5 * time.Microsecond}, Config{Profile: Spray})
	q := s.qa
	q.noteHostDelay()
	base := q.sb.RTO()
	q.notePeerHold(50 * time.Microsecond)
	q.noteHostDelay()
	if rto := q.sb.RTO(); rto != base {
		t.Fatalf("RTO %v after a 50 µs hold, want %v", rto, base)
	}
	q.notePeerHold(5 * time.Millisecond)
	q.noteHostDelay()
	if rto := q.sb.RTO(); rto != base+5*time.Millisecond {
		t.Fatalf("RTO %v after the peer stalled 5 ms, want %v", rto, base+5*time.Millisecond)
	}
	for range 256 {
		q.notePeerHold(0)
	}
	q.noteHostDelay()
	if rto := q.sb.RTO(); rto != base+2500*time.Microsecond {
		t.Fatalf("RTO %v 256 ACKs later, want %v", rto, base+2500*time.Microsecond)
	}
}
