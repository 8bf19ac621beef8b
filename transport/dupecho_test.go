package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// A receiver that reads a packet and its tail probe in one step (its
// engine did not run while the probe's timer ran out) acknowledges the
// first copy: the sender sees that the original arrived and counts the
// probe spurious (retransmit.Stats.SpuriousTLPs), which lengthens its next
// probes. Echoing the probe's send time made it a delivery of the probe,
// and every such probe repeated for the next message.
func TestDupKeepsFirstEcho(t *testing.T) {
	const delay = 5 * time.Microsecond
	clk := &clock.Sim{}
	clk.Advance(time.Millisecond) // a send time of 0 is no timestamp
	ea, eb, qa, qb := simQPPair(t, clk, delay)
	if err := qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: make([]byte, 64)}); err != nil {
		t.Fatal(err)
	}
	// The receiver's engine does not run while the sender's probe fires.
	for i := 0; qa.RetransmitStats().TLPs == 0; i++ {
		if i > 1000 {
			t.Fatal("no tail probe")
		}
		if _, err := ea.Step(clk.Now()); err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Microsecond)
	}
	if _, err := ea.Step(clk.Now()); err != nil { // the probe leaves
		t.Fatal(err)
	}
	var comps []Completion
	for i := 0; len(comps) == 0; i++ {
		if i > 1000 {
			t.Fatal("the message did not complete")
		}
		clk.Advance(delay)
		if _, err := eb.Step(clk.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := ea.Step(clk.Now()); err != nil {
			t.Fatal(err)
		}
		comps = ea.Completions(comps)
	}
	rs, st := qa.RetransmitStats(), qb.Stats()
	if st.Duplicates != 1 || rs.TLPs != 1 {
		t.Fatalf("%d duplicates received, %d probes sent; want 1 and 1", st.Duplicates, rs.TLPs)
	}
	if rs.SpuriousTLPs != 1 {
		t.Errorf("SpuriousTLPs %d, want 1: the ACK did not show the original arrived", rs.SpuriousTLPs)
	}
}
