package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// An engine given a time read before its driver was kept from running
// (the Step's time, then a wait for the scheduler, then the link's Recv)
// reads the clock again once frames came: the ACK it then reads times a
// round trip no shorter than the path's, in the scoreboard's samples
// that arm the loss timers and in the fabric part of QPStats. Handled at
// the stale time, the sample was the time from the send to that read,
// shorter than one way through the fabric.
func TestStaleStepTimesNoShortRTT(t *testing.T) {
	const delay = 10 * time.Microsecond // each way
	clk := &clock.Sim{}
	ea, eb, qa, qb := simQPPair(t, clk, delay)
	ea.setClock(clk)
	eb.setClock(clk)
	if err := qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: make([]byte, 64)}); err != nil {
		t.Fatal(err)
	}
	sent := clk.Now()
	if _, err := ea.Step(sent); err != nil {
		t.Fatal(err)
	}
	// The receiver takes the packet and acknowledges it, in its own time.
	for i := 0; qb.Stats().AcksSent == 0; i++ {
		if i > 10000 {
			t.Fatal("the receiver sent no ACK")
		}
		clk.Advance(time.Microsecond)
		if _, err := eb.Step(clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(delay + time.Microsecond) // the ACK is at the sender
	// The sender's driver read the clock a microsecond after the send and
	// only then got to read its link.
	if _, err := ea.Step(sent.Add(time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	st := qa.Stats()
	if st.AcksReceived == 0 || st.RTTSamples == 0 {
		t.Fatalf("%d ACKs received, %d RTT samples", st.AcksReceived, st.RTTSamples)
	}
	if srtt := qa.sb.SRTT(); srtt < 2*delay {
		t.Errorf("scoreboard SRTT %v, below the path's round trip %v", srtt, 2*delay)
	}
	if st.MinRTT < 2*delay {
		t.Errorf("MinRTT %v (fabric part), below the path's round trip %v", st.MinRTT, 2*delay)
	}
}

// simQPPair connects a QP on each of two engines over a link/mem fabric
// of the given one-way delay, timed by clk: tests that step the engines
// by hand.
func simQPPair(t *testing.T, clk *clock.Sim, delay time.Duration) (ea, eb *Engine, qa, qb *QP) {
	t.Helper()
	fab := mem.NewFabric(mem.Config{Seed: testutil.Seed(t), Delay: delay}, clk)
	pa, err := fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Seed: testutil.Seed(t)}
	if ea, err = NewEngine(pa, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Seed++
	if eb, err = NewEngine(pb, cfg); err != nil {
		t.Fatal(err)
	}
	qa, _ = ea.CreateQP()
	qb, _ = eb.CreateQP()
	if err := qa.Connect(qb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(qa.Info()); err != nil {
		t.Fatal(err)
	}
	return ea, eb, qa, qb
}
