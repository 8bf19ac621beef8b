package transport

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
)

// roundTrip posts one small SEND on s.qa and steps both engines until
// the sender's completion and the receiver's message are out, then gives
// the message's buffer back, as Message.Release does.
func roundTrip(t testing.TB, s *simPair, msg []byte, id uint64) {
	if err := s.qa.Post(WorkRequest{ID: id, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	sent, got := false, false
	for i := 0; !sent || !got; i++ {
		if i > 100 {
			t.Fatalf("message %d not through after 100 rounds", id)
		}
		now := s.clk.Now()
		if _, err := s.ea.Step(now); err != nil {
			t.Fatal(err)
		}
		if _, err := s.eb.Step(now); err != nil {
			t.Fatal(err)
		}
		if c, ok := s.qa.PollCompletion(); ok {
			if c.Err != nil || c.ID != id {
				t.Fatalf("completion %+v, want ID %d", c, id)
			}
			sent = true
		}
		if c, ok := s.qb.PollCompletion(); ok {
			if c.Len != len(msg) || string(c.Data[:c.Len]) != string(msg) {
				t.Fatalf("received %q, want %q", c.Data[:c.Len], msg)
			}
			if c.pooled {
				recvPool.put(c.Data)
			}
			got = true
		}
		// To the next frame's delivery; a QP's timers (trimming an idle
		// QP's rings among them) never come due in a round trip.
		if next := s.fab.NextDelivery(); next > now && next != clock.Never {
			s.clk.Set(next)
		}
	}
}

// TestSmallMessageAllocs: a small SEND, from its post to both sides'
// completions (the frames through link/mem, the ACK, the receive buffer
// given back), allocates nothing once the QPs are warm: the data path
// reuses its buffers (BenchmarkSmallMessage reports the time).
func TestSmallMessageAllocs(t *testing.T) {
	s := newSimPair(t, mem.Config{Delay: time.Microsecond}, Config{Profile: Spray})
	msg := []byte("64 bytes of a small message, inline in its work request........")
	id := uint64(0)
	for range 64 { // warm: rings, pools, the receive queue
		id++
		roundTrip(t, s, msg, id)
	}
	allocs := testing.AllocsPerRun(200, func() {
		id++
		roundTrip(t, s, msg, id)
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per small message, want 0", allocs)
	}
}

// BenchmarkSmallMessage: one 64-byte SEND from post to both sides'
// completions over link/mem, stepping both engines on one goroutine: the
// engine's own cost per message, with no scheduler in it.
// It fails if a message allocates once the QPs are warm (allocs/op as
// -benchmem counts them, the total over the run divided by b.N).
func BenchmarkSmallMessage(b *testing.B) {
	s := newSimPair(b, mem.Config{}, Config{Profile: Spray, Seed: 1})
	msg := make([]byte, MaxInline) // inline: copied at Post
	id := uint64(0)
	for range 64 { // warm: rings, pools, the receive queue
		id++
		roundTrip(b, s, msg, id)
	}
	b.ReportAllocs()
	before := mallocs()
	for b.Loop() {
		id++
		roundTrip(b, s, msg, id)
	}
	noAllocs(b, before)
}

// mallocs returns the heap allocations the program has made so far.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// noAllocs fails b if its loop allocated once per iteration or more since
// before (mallocs before b.Loop), as -benchmem would report it.
func noAllocs(b *testing.B, before uint64) {
	b.Helper()
	if n := mallocs() - before; n/uint64(b.N) > 0 {
		b.Fatalf("%d allocations in %d messages, want 0 per message", n, b.N)
	}
}

// BenchmarkSmallBurst: 64-byte SENDs posted 32 at a time, both engines
// stepped on one goroutine over link/mem until every one completed on
// both sides: the engines' cost per message of a stream, with no
// scheduler in it (BenchmarkSmallStream adds the Endpoint's goroutines).
// In "stepped", the sending engine steps after each post, as Conn.Post
// has it do on the caller's goroutine.
func BenchmarkSmallBurst(b *testing.B) {
	for _, stepped := range []bool{false, true} {
		name := "batched"
		if stepped {
			name = "stepped"
		}
		b.Run(name, func(b *testing.B) {
			const depth = 32
			s := newSimPair(b, mem.Config{}, Config{Profile: Spray, Seed: 1})
			msg := make([]byte, MaxInline)
			id := uint64(0)
			for range 4 { // warm
				burst(b, s, msg, id, depth, stepped)
				id += depth
			}
			b.ReportAllocs()
			before := mallocs()
			for b.Loop() {
				if id%depth == 0 {
					burst(b, s, msg, id, depth, stepped)
				}
				id++ // counted here, posted by the burst before
			}
			noAllocs(b, before)
		})
	}
}

// burst posts n small SENDs on s.qa from id+1 (stepping s.ea after each
// when stepped) and steps both engines until all of them completed on
// both sides.
func burst(t testing.TB, s *simPair, msg []byte, id uint64, n int, stepped bool) {
	for i := range n {
		if err := s.qa.Post(WorkRequest{ID: id + uint64(i) + 1, Op: OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
		if stepped {
			if _, err := s.ea.Step(s.clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	sent, got := 0, 0
	for round := 0; sent < n || got < n; round++ {
		if round > 100*n {
			t.Fatalf("%d of %d sent, %d received after %d rounds", sent, n, got, round)
		}
		now := s.clk.Now()
		if _, err := s.ea.Step(now); err != nil {
			t.Fatal(err)
		}
		if _, err := s.eb.Step(now); err != nil {
			t.Fatal(err)
		}
		for {
			c, ok := s.qa.PollCompletion()
			if !ok {
				break
			}
			if c.Err != nil {
				t.Fatalf("completion %+v", c)
			}
			sent++
		}
		for {
			c, ok := s.qb.PollCompletion()
			if !ok {
				break
			}
			if c.Len != len(msg) {
				t.Fatalf("received %d bytes, want %d", c.Len, len(msg))
			}
			if c.pooled {
				recvPool.put(c.Data)
			}
			got++
		}
		next := clock.Min(clock.Min(s.ea.NextDeadline(), s.eb.NextDeadline()), s.fab.NextDelivery())
		if next > now && next != clock.Never {
			s.clk.Set(next)
		} else {
			s.clk.Advance(time.Microsecond)
		}
	}
}

// TestInlineSmallSend: the bytes of a SEND of at most MaxInline bytes are
// the QP's once Post returns: the caller overwrites its buffer at once,
// and the peer still receives what was posted, also while the send ring
// grows under messages not yet sent (40 posted at once from a ring of
// one) and across a resend (a lossy fabric). A larger message is not
// copied: the QP reads the caller's buffer until it completes.
func TestInlineSmallSend(t *testing.T) {
	s := newSimPair(t, mem.Config{Seed: 3, Loss: 0.1, Delay: time.Microsecond}, Config{Profile: Spray})
	const n = 40
	buf := make([]byte, MaxInline)
	var want [][]byte
	for i := range n {
		size := 1 + i%MaxInline
		for j := range size {
			buf[j] = byte(i*31 + j)
		}
		want = append(want, bytes.Clone(buf[:size]))
		if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: buf[:size]}); err != nil {
			t.Fatal(err)
		}
		clear(buf) // the caller reuses its buffer
	}
	if err := s.run(clock.Time(time.Second), func() bool { return len(s.cb) >= n && len(s.ca) >= n }); err != nil {
		t.Fatal(err)
	}
	for i, c := range s.cb[:n] {
		if got := c.Data[:c.Len]; !bytes.Equal(got, want[i]) {
			t.Fatalf("message %d: received %x, want %x", i, got, want[i])
		}
	}
	if r := s.qa.Stats().Retransmits; r == 0 {
		t.Errorf("no resend on a fabric losing 1 in 10: the resend path went untested")
	}
	big := make([]byte, MaxInline+1)
	if err := s.qa.Post(WorkRequest{ID: n + 1, Op: OpSend, Data: big}); err != nil {
		t.Fatal(err)
	}
	if m := s.qa.msg(s.qa.tail - 1); m.inline || &m.wr.Data[0] != &big[0] {
		t.Errorf("a message of %d bytes was copied, want it read from the caller's buffer", len(big))
	}
}
