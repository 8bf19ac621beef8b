package retransmit

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// TestRestart: timers that came due while the host did not run restart
// from now: nothing is declared lost, no timeout counts, and the timer
// fires only if the ACK does not come by its restarted expiry. One that
// has not come due is left as it is.
func TestRestart(t *testing.T) {
	s := mustNew(t, Config{Mode: SelectiveRepeat}, 0)
	for p := range 4 {
		if err := s.OnSend(0, s.Next(), 1000, uint64(p), 7); err != nil {
			t.Fatal(err)
		}
	}
	due := s.NextTimeout()
	if due == clock.Never {
		t.Fatal("no timer armed after sending")
	}
	if s.Restart(due - 1) {
		t.Fatal("Restart moved a timer not yet due")
	}
	now := due.Add(5 * time.Millisecond) // the host ran again 5 ms late
	if !s.Restart(now) {
		t.Fatal("Restart moved no timer that came due")
	}
	if next := s.NextTimeout(); next <= now {
		t.Fatalf("next timeout %v, not after now %v", next, now)
	}
	if st := s.Stats(); st.RTOs != 0 || st.TLPs != 0 || st.Lost != 0 || s.HasLost() {
		t.Fatalf("after Restart: %+v, lost queued %v; want nothing", st, s.HasLost())
	}
	// The ACK that the stall delayed arrives: nothing was resent.
	_, res := s.OnAck(now, Ack{Cum: s.Next()}, nil)
	if res.AckedPkts != 4 || s.Stats().Retransmitted != 0 {
		t.Fatalf("acked %d, resent %d; want 4 and 0", res.AckedPkts, s.Stats().Retransmitted)
	}
}

// TestHostDelayLengthensTimers: the host's recent stalls lengthen the
// retransmission timeout and the probe timer by as much, so that a host
// that lately could not run for 5 ms does not call a packet lost 1 ms
// after sending it.
func TestHostDelayLengthensTimers(t *testing.T) {
	send := func(d time.Duration) (rto time.Duration, next clock.Time) {
		s := mustNew(t, Config{Mode: SelectiveRepeat}, 0)
		s.NoteHostDelay(d)
		if err := s.OnSend(0, s.Next(), 1000, 0, 7); err != nil {
			t.Fatal(err)
		}
		return s.RTO(), s.NextTimeout()
	}
	rto0, next0 := send(0)
	rto5, next5 := send(5 * time.Millisecond)
	if rto5 != rto0+5*time.Millisecond {
		t.Errorf("RTO %v with 5 ms of host delay, want %v", rto5, rto0+5*time.Millisecond)
	}
	if next5.Sub(next0) < 5*time.Millisecond {
		t.Errorf("first timer at %v with 5 ms of host delay, %v without: want 5 ms later", next5, next0)
	}
}
