package transport

import (
	"context"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
)

// plainLink hides a link's WaitSplitter: Send then leaves posting to the
// engine goroutine, whose wake-up is what a lost one would stall.
type plainLink struct{ link.Link }

// TestPostWakesSleepingEngine: a Send wakes its engine only when the
// engine goroutine sleeps or is about to (epShard.wake), and no Send is
// lost to the race between the two: an idle engine sleeps without a
// deadline, so a missed wake-up would leave a message unsent for good.
// Each round trip starts from a sleeping engine (the flag polled) or
// races it (no wait), over links without WaitSplitter.
func TestPostWakesSleepingEngine(t *testing.T) {
	seed := testutil.Seed(t)
	_, pa, pb := memPorts(t, mem.Config{Seed: seed})
	cfg := Config{Seed: seed}
	ea, err := NewEndpoint(plainLink{pa}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Seed++
	eb, err := NewEndpoint(plainLink{pb}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca, cb := connectQPs(ctx, t, ea, eb)
	go func() {
		for {
			m, err := cb.Recv(ctx)
			if err != nil {
				return
			}
			if err := cb.Send(ctx, m.Data); err != nil {
				return
			}
		}
	}()
	sleeping := func(ep *Endpoint) bool { return ep.shards[0].eng.sleeping.Load() }
	msg := make([]byte, 64)
	for i := range 2000 {
		if i%2 == 0 {
			// Both engines idle and asleep: the Send alone must wake them.
			for !sleeping(ea) || !sleeping(eb) {
				if ctx.Err() != nil {
					t.Fatalf("round %d: engines never slept", i)
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		msg[0], msg[1] = byte(i), byte(i>>8)
		if err := ca.Send(ctx, msg); err != nil {
			t.Fatalf("round %d: send: %v", i, err)
		}
		m, err := ca.Recv(ctx)
		if err != nil {
			t.Fatalf("round %d: recv: %v (a wake-up lost)", i, err)
		}
		if m.Data[0] != byte(i) || m.Data[1] != byte(i>>8) {
			t.Fatalf("round %d: echo %x, want %x", i, m.Data[:2], msg[:2])
		}
	}
}
