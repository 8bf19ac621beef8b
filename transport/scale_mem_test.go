package transport

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// maxIdleQPBytes is the most heap an idle, connected QP may hold, its
// Conn included.
const maxIdleQPBytes = 4096

// TestIdleQPMemory: 256 connected, idle QP pairs on two link/mem endpoints
// with the default Config take less than maxIdleQPBytes of heap per QP
// (heap after GC, before and after creating them), in both profiles.
func TestIdleQPMemory(t *testing.T) {
	testutil.SkipIfShort(t, "measures the heap of 512 QPs")
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			b := idleQPBytes(t, Config{Profile: prof, Seed: 1}, 256)
			t.Logf("%.0f B per idle QP", b)
			if b > maxIdleQPBytes {
				t.Fatalf("an idle QP holds %.0f B, want at most %d", b, maxIdleQPBytes)
			}
		})
	}
}

// TestIdleQPTrims: after a transfer, both QPs of a pair give back their
// rings and slot arrays once idle for trimAfter (the scoreboard's ring,
// the send and receive rings, the window's bitmap, the assembler's
// slots), and a transfer after that grows them again and arrives intact.
func TestIdleQPTrims(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			s := newSimPair(t, mem.Config{Seed: testutil.Seed(t), Reorder: 0.2, ReorderDelay: 20 * time.Microsecond, Loss: 0.01}, Config{Profile: prof})
			rng := testutil.Rand(t)
			for round := range 2 {
				msgs := make([][]byte, 20)
				for i := range msgs {
					msgs[i] = make([]byte, 1+rng.IntN(200_000))
					for j := range msgs[i] {
						msgs[i][j] = byte(rng.Uint32())
					}
					if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: msgs[i]}); err != nil {
						t.Fatal(err)
					}
				}
				if len(s.qa.msgs) == 0 || len(s.qa.msgs) > 32 {
					t.Fatalf("send ring of %d for 20 messages", len(s.qa.msgs))
				}
				s.ca, s.cb = nil, nil
				if err := s.run(clock.Time(10*time.Second)+s.clk.Now(), func() bool { return len(s.cb) == len(msgs) && len(s.ca) == len(msgs) }); err != nil {
					t.Fatal(err)
				}
				for i, c := range s.cb {
					if c.Err != nil || !bytes.Equal(c.Data, msgs[i]) {
						t.Fatalf("round %d message %d: %v, %d bytes, want %d intact", round, i, c.Err, len(c.Data), len(msgs[i]))
					}
				}
				idle(t, s)
				if held := heldBy(s.qa) + heldBy(s.qb); held != "" {
					t.Fatalf("round %d: idle QPs still hold %s", round, held)
				}
			}
		})
	}
}

// idle runs s's engines until neither has a timer armed, and fails if that
// takes more than trimAfter and a second.
func idle(t testing.TB, s *simPair) {
	t.Helper()
	limit := s.clk.Now().Add(trimAfter + time.Second)
	for {
		now := s.clk.Now()
		for _, e := range []*Engine{s.ea, s.eb} {
			if _, err := e.Step(now); err != nil {
				t.Fatal(err)
			}
		}
		s.ca = s.ea.Completions(s.ca)
		s.cb = s.eb.Completions(s.cb)
		next := clock.Min(clock.Min(s.ea.NextDeadline(), s.eb.NextDeadline()), s.fab.NextDelivery())
		switch {
		case next == clock.Never:
			return
		case next > limit:
			t.Fatalf("timers still armed at %v", now)
		}
		s.clk.Set(max(next, now+1))
	}
}

// heldBy names the rings and slot arrays q holds.
func heldBy(q *QP) string {
	out := ""
	add := func(what string, held bool) {
		if held {
			out += " " + what
		}
	}
	add("send", q.msgs != nil)
	add("recv", q.recvq != nil)
	add("posted", q.rq != nil && q.rq.bufs != nil)
	add("scoreboard", q.sb.Outstanding() == 0 && q.sb.Trimmable())
	if r, ok := q.rcv.(*sprayReceiver); ok {
		add("window", r.win.Trimmable())
		add("assembler", r.asm.Trimmable())
		add("reads", r.reads != nil)
	}
	return out
}

// BenchmarkIdleQPMemoryAfterUse reports the heap a QP holds once idle for
// trimAfter after a 1 MiB message each way (B/idle-QP-after-use): a fresh
// QP's, its congestion controller's, its path policy's per-path state and
// its per-path counters. A first pair warms the engines' links up.
func BenchmarkIdleQPMemoryAfterUse(b *testing.B) {
	for _, prof := range []Profile{Spray, RoCE} {
		b.Run("profile="+prof.String(), func(b *testing.B) {
			for b.Loop() {
				s := newSimPair(b, mem.Config{}, Config{Profile: prof, Seed: 1})
				exchange(b, s, s.qa, s.qb)
				before := heapAfterGC()
				qa, err := s.ea.CreateQP()
				if err != nil {
					b.Fatal(err)
				}
				qb, err := s.eb.CreateQP()
				if err != nil {
					b.Fatal(err)
				}
				if err := qa.Connect(qb.Info()); err != nil {
					b.Fatal(err)
				}
				if err := qb.Connect(qa.Info()); err != nil {
					b.Fatal(err)
				}
				exchange(b, s, qa, qb)
				after := heapAfterGC()
				runtime.KeepAlive(s)
				b.ReportMetric(float64(int64(after)-int64(before))/2, "B/idle-QP-after-use")
			}
		})
	}
}

// exchange sends a 1 MiB message each way between qa and qb, drops the
// completions and runs s until idle.
func exchange(b testing.TB, s *simPair, qa, qb *QP) {
	msg := make([]byte, 1<<20)
	for _, q := range []*QP{qa, qb} {
		if err := q.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.run(s.clk.Now().Add(10*time.Second), func() bool { return len(s.ca) == 2 && len(s.cb) == 2 }); err != nil {
		b.Fatal(err)
	}
	idle(b, s)
	clear(s.ca)
	clear(s.cb)
	s.ca, s.cb = s.ca[:0], s.cb[:0]
}
