package transporttest_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/transporttest"
)

// TestPairTransfer sends messages from A to B over a lossy, reordering
// fabric: every one arrives intact and completes on both sides.
func TestPairTransfer(t *testing.T) {
	r := testutil.Rand(t)
	seed := r.Uint64()
	p := transporttest.NewPair(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond, Loss: 0.02, Reorder: 0.1, ReorderDelay: 20 * time.Microsecond},
		transport.Config{Seed: seed, MinRTO: time.Millisecond})
	msgs := make([][]byte, 8)
	for i := range msgs {
		msgs[i] = make([]byte, r.IntN(20000))
		for j := range msgs[i] {
			msgs[i][j] = byte(r.Uint32())
		}
		if err := p.QA.Post(transport.WorkRequest{ID: uint64(i + 1), Op: transport.OpSend, Data: msgs[i]}); err != nil {
			t.Fatal(err)
		}
	}
	err := p.Run(clock.Time(10*time.Second), func() bool { return len(p.CA) == len(msgs) && len(p.CB) == len(msgs) })
	if err != nil {
		t.Fatalf("%v: %d/%d sender, %d/%d receiver completions", err, len(p.CA), len(msgs), len(p.CB), len(msgs))
	}
	for i, c := range p.CA {
		if c.Err != nil || c.ID != uint64(i+1) {
			t.Fatalf("sender completion %d: ID %d, err %v", i, c.ID, c.Err)
		}
	}
	for i, c := range p.CB {
		if c.Err != nil || !bytes.Equal(c.Data, msgs[i]) {
			t.Fatalf("message %d: err %v, %d bytes, want %d intact", i, c.Err, len(c.Data), len(msgs[i]))
		}
	}
	if p.Clock.Now() == 0 {
		t.Fatal("the clock did not move")
	}
	if p.Fabric.Stats().Delivered == 0 {
		t.Fatal("the fabric delivered nothing")
	}
}

// TestPairRunErrors: an idle pair deadlocks, and a transfer that cannot
// finish before the limit stops there.
func TestPairRunErrors(t *testing.T) {
	seed := testutil.Seed(t)
	never := func() bool { return false }
	p := transporttest.NewPair(t, mem.Config{Seed: seed}, transport.Config{Seed: seed})
	if err := p.Run(clock.Time(time.Second), never); !errors.Is(err, transporttest.ErrDeadlock) {
		t.Fatalf("idle pair: %v, want ErrDeadlock", err)
	}

	p = transporttest.NewPair(t, mem.Config{Seed: seed, Delay: time.Millisecond}, transport.Config{Seed: seed})
	if err := p.QA.Post(transport.WorkRequest{ID: 1, Op: transport.OpSend, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	limit := clock.Time(100 * time.Microsecond)
	if err := p.Run(limit, func() bool { return len(p.CB) == 1 }); !errors.Is(err, transporttest.ErrLimit) {
		t.Fatalf("1 ms link, 100 µs limit: %v, want ErrLimit", err)
	}
	if now := p.Clock.Now(); now > limit || len(p.CB) != 0 {
		t.Fatalf("stopped at %v with %d completions, limit %v", now, len(p.CB), limit)
	}
	// The same pair finishes given time.
	if err := p.Run(clock.Time(time.Second), func() bool { return len(p.CB) == 1 }); err != nil {
		t.Fatal(err)
	}
}

// countingLink counts the frames an engine sends and whether it was closed.
type countingLink struct {
	link.Link
	sent   *int
	closed *bool
}

func (c countingLink) Send(fs []link.Frame) (int, error) {
	*c.sent += len(fs)
	return c.Link.Send(fs)
}

func (c countingLink) Close() error {
	*c.closed = true
	return c.Link.Close()
}

// TestPairWith: the wrappers carry the engines' traffic and are closed at
// cleanup, and ConfigB sees B's config with its own seed.
func TestPairWith(t *testing.T) {
	seed := testutil.Seed(t)
	var sentA, sentB int
	var closedA, closedB bool
	var seedB uint64
	t.Run("pair", func(t *testing.T) {
		p := transporttest.NewPairWith(t, mem.Config{Seed: seed}, transport.Config{Seed: seed}, transporttest.Options{
			WrapA:   func(l link.Link) link.Link { return countingLink{l, &sentA, &closedA} },
			WrapB:   func(l link.Link) link.Link { return countingLink{l, &sentB, &closedB} },
			ConfigB: func(c *transport.Config) { seedB = c.Seed; c.Window = 64 },
		})
		if err := p.QA.Post(transport.WorkRequest{ID: 1, Op: transport.OpSend, Data: make([]byte, 10000)}); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(clock.Time(time.Second), func() bool { return len(p.CA) == 1 && len(p.CB) == 1 }); err != nil {
			t.Fatal(err)
		}
		if w := p.B.Config().Window; w != 64 {
			t.Fatalf("B's window %d, ConfigB set 64", w)
		}
		if w := p.A.Config().Window; w == 64 {
			t.Fatal("ConfigB changed A's window")
		}
		if closedA || closedB {
			t.Fatal("links closed before the test's cleanup")
		}
	})
	if seedB != seed+1 {
		t.Fatalf("ConfigB saw seed %d, want %d", seedB, seed+1)
	}
	if sentA == 0 || sentB == 0 {
		t.Fatalf("wrapped links sent %d (A) and %d (B) frames", sentA, sentB)
	}
	if !closedA || !closedB {
		t.Fatalf("links closed at cleanup: A %v, B %v", closedA, closedB)
	}
}
