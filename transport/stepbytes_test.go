package transport

import (
	"testing"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/link/mem"
)

// One Step transmits at most maxStepBytes (the link batch that crosses it
// goes whole), so that the packets it stamps with its time leave within
// about a TSO segment's time of it; it reports work, the driver steps
// again, and the rest leaves over the following Steps, intact.
func TestStepBoundsOutput(t *testing.T) {
	s := newSimPair(t, mem.Config{}, Config{CC: func() cc.Controller { return &cc.Fixed{} }})
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	frame := s.ea.info.FrameSize
	steps := 0
	for prev := uint64(0); ; steps++ {
		work, err := s.ea.Step(s.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		sent := s.ea.stats.TxBytes - prev
		prev = s.ea.stats.TxBytes
		if limit := uint64(maxStepBytes + mem.BatchSize*frame); sent > limit {
			t.Fatalf("step %d sent %d bytes, more than %d", steps, sent, limit)
		}
		if !work {
			break
		}
	}
	if min := len(msg) / (maxStepBytes + mem.BatchSize*frame); steps < min {
		t.Fatalf("1 MiB left in %d Steps, want at least %d", steps, min)
	}
	if err := s.run(1e9, func() bool { return len(s.ca) > 0 && len(s.cb) > 0 }); err != nil {
		t.Fatal(err)
	}
	if c := s.cb[0]; c.Op != OpRecv || hash(c.Data) != hash(msg) || s.ca[0].Err != nil {
		t.Fatalf("message not delivered intact: %v of %d bytes, sender's completion %v", c.Op, len(c.Data), s.ca[0].Err)
	}
	t.Logf("1 MiB left in %d Steps of at most %d bytes", steps, maxStepBytes)
}
