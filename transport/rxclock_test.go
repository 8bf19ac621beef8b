package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// stampLink stamps every frame it receives as a link with arrival stamps
// does: RxTime is the kernel time wait before the Step that reads it, in
// a kernel clock that runs base ns ahead of the simulated one.
type stampLink struct {
	link.Link
	clk  *clock.Sim
	wait time.Duration
	acks []uint32 // HoldNs of the ACKs received
}

const stampBase = 1 << 40

func (l *stampLink) Recv(fs []link.Frame) (int, error) {
	n, err := l.Link.Recv(fs)
	var pk wire.Packet
	for i := range fs[:n] {
		if l.wait > 0 {
			fs[i].RxTime = int64(l.clk.Now()) - int64(l.wait) + stampBase
		}
		if wire.Decode(fs[i].Buf, &pk) == nil && pk.BTH.Opcode == wire.OpSprayAck {
			l.acks = append(l.acks, pk.Ack.HoldNs)
		}
	}
	return n, err
}

// sampleRecorder is a controller with an unlimited window that keeps the
// ACK samples it is given.
type sampleRecorder struct {
	cc.Fixed
	samples *[]cc.Sample
}

func (r sampleRecorder) OnAck(s cc.Sample) { *r.samples = append(*r.samples, s) }

// A receiver whose link stamps arrivals counts a packet's hold from the
// stamp, so the time the frame waited in the link's ring for the engine
// is in the hold its ACK reports, flagged HoldFromArrival; a sender whose
// link stamps the ACK adds the ACK's own wait, and its controller sees
// both as endpoint delay (Sample.HoldTime, HostHold). Without stamps the
// holds are the engines' own and carry no flag.
func TestHoldCountsRingWait(t *testing.T) {
	const waitB, waitA = 300 * time.Microsecond, 200 * time.Microsecond
	for _, stamped := range []bool{true, false} {
		clk := &clock.Sim{}
		fab := mem.NewFabric(mem.Config{Seed: testutil.Seed(t), Delay: 10 * time.Microsecond}, clk)
		pa, _ := fab.NewPort(macA, ipA)
		pb, _ := fab.NewPort(macB, ipB)
		la, lb := &stampLink{Link: pa, clk: clk}, &stampLink{Link: pb, clk: clk}
		if stamped {
			la.wait, lb.wait = waitA, waitB
		}
		var samples []cc.Sample
		cfg := Config{Seed: testutil.Seed(t), CC: func() cc.Controller { return sampleRecorder{samples: &samples} }}
		ea, err := NewEngine(la, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Seed++
		eb, err := NewEngine(lb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		toSim := func(ns int64) clock.Time { return clock.Time(ns - stampBase) }
		ea.SetRxClock(toSim)
		eb.SetRxClock(toSim)
		qa, _ := ea.CreateQP()
		qb, _ := eb.CreateQP()
		if err := qa.Connect(qb.Info()); err != nil {
			t.Fatal(err)
		}
		if err := qb.Connect(qa.Info()); err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, 64<<10)
		if err := qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
		var comps []Completion
		for step := 0; len(comps) == 0; step++ {
			if step > 100000 {
				t.Fatal("the message did not complete")
			}
			now := clk.Now()
			if _, err := ea.Step(now); err != nil {
				t.Fatal(err)
			}
			if _, err := eb.Step(now); err != nil {
				t.Fatal(err)
			}
			comps = ea.Completions(comps)
			// The frames wait in the rings for the wait before each Step
			// reads them: the clock moves in steps of the longer wait.
			clk.Advance(waitB)
		}
		if comps[0].Err != nil {
			t.Fatal(comps[0].Err)
		}
		if len(la.acks) == 0 || len(samples) == 0 {
			t.Fatalf("stamped %v: %d ACKs, %d samples", stamped, len(la.acks), len(samples))
		}
		for _, h := range la.acks {
			flag, hold := h&wire.HoldFromArrival != 0, time.Duration(h&wire.HoldMask)
			if flag != stamped || stamped && hold < waitB || !stamped && hold >= waitB {
				t.Fatalf("stamped %v: an ACK reports a hold of %v, flag %v (ring wait %v)", stamped, hold, flag, waitB)
			}
		}
		for _, s := range samples {
			if s.RTT == 0 {
				continue
			}
			if s.HostHold != stamped || stamped && s.HoldTime < waitA+waitB || s.HoldTime > s.RTT {
				t.Fatalf("stamped %v: sample hold %v of RTT %v, HostHold %v", stamped, s.HoldTime, s.RTT, s.HostHold)
			}
		}
		t.Logf("stamped %v: %d ACKs, first hold %v, sample hold %v of RTT %v", stamped, len(la.acks),
			time.Duration(la.acks[0]&wire.HoldMask), samples[len(samples)-1].HoldTime, samples[len(samples)-1].RTT)
	}
}
