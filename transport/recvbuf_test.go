package transport

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// recvFabric drops, duplicates and reorders.
func recvFabric(seed uint64) mem.Config {
	return mem.Config{
		Seed: seed, Loss: 0.02, Dup: 0.02, Reorder: 0.3, ReorderDelay: 50 * time.Microsecond,
		Delay: 5 * time.Microsecond, Jitter: 5 * time.Microsecond,
	}
}

// recvBufID is the ID of the posted buffer for receive i.
func recvBufID(i int) uint64 { return 1000 + uint64(i) }

// TestPostedRecvTransfer sends SENDs, SENDs with immediate, WRITEs and
// WRITEs with immediate, interleaved, into a QP with posted receive buffers,
// under loss, duplication and reordering, in both profiles. The receiver
// keeps only a few buffers posted and posts the next one as each completes,
// so that messages also arrive before their buffer is posted. Every SEND
// must complete in order in its own buffer (same memory, buffer ID in the
// completion), byte-exact.
func TestPostedRecvTransfer(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			s := newSimPair(t, recvFabric(seed),
				Config{Profile: prof, Entropies: 8, Seed: seed, MTU: 4096, MinRTO: time.Millisecond, LocalAckTimeout: 8})
			region := make([]byte, 1<<20)
			mr := s.eb.Register(region, AccessRemoteWrite)
			msgs := randomMessages(rng, msgCount()*3/10, 64<<10)
			const posted = 4 // buffers kept posted
			var bufs [][]byte
			sends := 0
			post := func() {
				i := len(bufs)
				if i >= sends {
					return
				}
				b := make([]byte, 64<<10+rng.IntN(64))
				bufs = append(bufs, b)
				if err := s.qb.PostRecv(recvBufID(i), b); err != nil {
					t.Fatalf("post recv %d: %v", i, err)
				}
			}
			type want struct {
				op   Op
				data []byte
				imm  uint32
			}
			var wants []want // receive completions, in order
			var wrs []WorkRequest
			for i, m := range msgs {
				wr := WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}
				switch rng.IntN(6) {
				case 0:
					wr.Op, wr.Imm = OpSendImm, rng.Uint32()
				case 1:
					wr.Op, wr.Remote = OpWrite, mr.Remote(0)
				case 2:
					wr.Op, wr.Remote, wr.Imm = OpWriteImm, mr.Remote(0), rng.Uint32()
				}
				switch wr.Op {
				case OpSend:
					wants = append(wants, want{op: OpRecv, data: m})
					sends++
				case OpSendImm:
					wants = append(wants, want{op: OpRecvImm, data: m, imm: wr.Imm})
					sends++
				case OpWriteImm:
					wants = append(wants, want{op: OpRecvImm, imm: wr.Imm})
				}
				wrs = append(wrs, wr)
			}
			for range posted {
				post()
			}
			for _, wr := range wrs {
				if err := s.qa.Post(wr); err != nil {
					t.Fatalf("post %d: %v", wr.ID, err)
				}
			}
			filled := 0
			err := s.run(clock.Time(10*time.Minute), func() bool {
				for ; filled < len(s.cb); filled++ {
					if s.cb[filled].ID != 0 {
						post()
					}
				}
				return len(s.cb) >= len(wants) && len(s.ca) >= len(wrs)
			})
			if err != nil {
				t.Fatalf("%v (received %d/%d)", err, len(s.cb), len(wants))
			}
			for _, c := range s.ca {
				if c.Err != nil {
					t.Fatalf("send %d: %v", c.ID, c.Err)
				}
			}
			if len(s.cb) != len(wants) {
				t.Fatalf("%d receive completions, want %d", len(s.cb), len(wants))
			}
			buf := 0
			for i, c := range s.cb {
				w := wants[i]
				if c.Err != nil || c.Op != w.op || c.Imm != w.imm {
					t.Fatalf("receive %d: %+v, want op %v imm %#x", i, c, w.op, w.imm)
				}
				if w.data == nil { // WRITE with immediate: no buffer
					if c.ID != 0 || c.Data != nil {
						t.Fatalf("receive %d (write-imm) took buffer %d", i, c.ID)
					}
					continue
				}
				if c.ID != recvBufID(buf) {
					t.Fatalf("receive %d in buffer %d, want %d", i, c.ID, recvBufID(buf))
				}
				b := bufs[buf]
				buf++
				if c.Len != len(w.data) || hash(c.Data) != hash(w.data) {
					t.Fatalf("receive %d: %d bytes, want %d; hash match %v", i, c.Len, len(w.data), hash(c.Data) == hash(w.data))
				}
				if len(c.Data) > 0 && &c.Data[0] != &b[0] {
					t.Fatalf("receive %d not in its posted buffer", i)
				}
			}
			st := s.qb.Stats()
			t.Logf("%d sends, %d buffers; receiver: %d dups, %d no-buffer drops; sender: %d retransmits",
				sends, len(bufs), st.Duplicates, st.NoBuffer, s.qa.Stats().Retransmits)
			if s.qa.Stats().Retransmits == 0 || st.Duplicates == 0 {
				t.Fatal("the fabric lost and duplicated nothing")
			}
			// Spray: some messages overtook earlier ones and waited in a
			// pooled buffer, others went straight into theirs.
			if prof == Spray && (st.RecvCopied == 0 || st.RecvCopied >= uint64(sends)) {
				t.Fatalf("%d of %d messages copied into their buffer: want some, not all", st.RecvCopied, sends)
			}
		})
	}
}

// TestPostedRecvLate starts messages with no buffer posted for them and
// posts the buffers later: the Spray receiver holds them (in pooled buffers)
// until then, the RoCE receiver drops them and the sender's retransmission
// brings them again. Both deliver every message, byte-exact, in its buffer.
func TestPostedRecvLate(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			s := newSimPair(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond, Reorder: 0.3, ReorderDelay: 20 * time.Microsecond},
				Config{Profile: prof, Seed: seed, MTU: 4096, MinRTO: time.Millisecond, LocalAckTimeout: 8})
			msgs := randomMessages(rand.New(rand.NewPCG(seed, 8)), 6, 20<<10)
			bufs := make([][]byte, len(msgs))
			for i := range bufs {
				bufs[i] = make([]byte, 20<<10)
			}
			if err := s.qb.PostRecv(1, bufs[0]); err != nil {
				t.Fatal(err)
			}
			for i, m := range msgs {
				if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
					t.Fatal(err)
				}
			}
			// Let the messages arrive: only the first has a buffer.
			err := s.run(clock.Time(500*time.Microsecond), func() bool { return false })
			if err == nil || len(s.cb) != 1 {
				t.Fatalf("before the buffers: %d messages received (%v), want 1", len(s.cb), err)
			}
			if prof == Spray && s.qb.rcv.(*sprayReceiver).asm.Outstanding() != len(msgs)-1 {
				t.Fatal("the Spray receiver did not hold the messages that wait for a buffer")
			}
			for i := 1; i < len(bufs); i++ {
				if err := s.qb.PostRecv(uint64(i+1), bufs[i]); err != nil {
					t.Fatal(err)
				}
			}
			s.cb = s.eb.Completions(s.cb)
			if err := s.run(clock.Time(time.Minute), func() bool { return len(s.cb) == len(msgs) && len(s.ca) == len(msgs) }); err != nil {
				t.Fatalf("%v (received %d, sent %d: %+v)", err, len(s.cb), len(s.ca), s.ca)
			}
			for i, c := range s.cb {
				if c.Err != nil || c.ID != uint64(i+1) || hash(c.Data) != hash(msgs[i]) || (len(c.Data) > 0 && &c.Data[0] != &bufs[i][0]) {
					t.Fatalf("message %d: id %d err %v, hash match %v", i, c.ID, c.Err, hash(c.Data) == hash(msgs[i]))
				}
			}
			switch st := s.qb.Stats(); {
			case prof == RoCE && st.NoBuffer == 0:
				t.Fatal("the RoCE receiver counted no drop for lack of a posted buffer")
			case prof == Spray && st.RecvCopied != uint64(len(msgs)-1):
				t.Fatalf("%d messages copied into their buffer, want the %d that waited", st.RecvCopied, len(msgs)-1)
			}
		})
	}
}

// TestPostedRecvTooSmall sends a message longer than its posted buffer:
// the buffer completes with ErrLocalLength and nothing is written past it,
// later buffers are flushed, PostRecv then fails, and the sender's QP fails
// with ErrInvalidRequest: with the request itself when the receiver knew
// the message's buffer as it arrived (Spray: checked when the message
// starts; RoCE: packet by packet), at its next request when the buffer was
// posted after the message arrived (Spray: checked when it is delivered).
func TestPostedRecvTooSmall(t *testing.T) {
	for _, tc := range []struct {
		name string
		prof Profile
		late bool
	}{{"spray", Spray, false}, {"spray-late", Spray, true}, {"roce", RoCE, false}} {
		t.Run(tc.name, func(t *testing.T) {
			seed := testutil.Seed(t)
			s := newSimPair(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond, Reorder: 0.3, ReorderDelay: 20 * time.Microsecond},
				Config{Profile: tc.prof, Seed: seed, MTU: 4096, MinRTO: time.Millisecond, LocalAckTimeout: 8})
			msgs := randomMessages(rand.New(rand.NewPCG(seed, 9)), 3, 30<<10)
			msgs[1] = msgs[1][:20<<10]
			backing := make([]byte, 64<<10)
			for i := range backing {
				backing[i] = 0xAA
			}
			small := backing[:10<<10] // capacity beyond its length, which must stay untouched
			first := make([]byte, 30<<10)
			if err := s.qb.PostRecv(1, first); err != nil {
				t.Fatal(err)
			}
			if !tc.late {
				if err := s.qb.PostRecv(2, small); err != nil {
					t.Fatal(err)
				}
				if err := s.qb.PostRecv(3, make([]byte, 30<<10)); err != nil {
					t.Fatal(err)
				}
			}
			for i, m := range msgs {
				if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
					t.Fatal(err)
				}
				if i == 0 && !tc.late { // the second message starts once the first is delivered
					if err := s.run(clock.Time(time.Minute), func() bool { return len(s.cb) == 1 }); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.late {
				if err := s.run(clock.Time(time.Millisecond), func() bool { return false }); err == nil {
					t.Fatal("run ended")
				}
				if err := s.qb.PostRecv(2, small); err != nil {
					t.Fatal(err)
				}
				// The second message is checked as the buffer comes.
				if err := s.qb.PostRecv(3, make([]byte, 30<<10)); !errors.Is(err, ErrLocalLength) {
					t.Fatalf("PostRecv after the length error: %v", err)
				}
				s.cb = s.eb.Completions(s.cb)
				// The sender completed its requests before the check: its
				// next one meets the NAK.
				if err := s.qa.Post(WorkRequest{ID: 4, Op: OpSend, Data: msgs[0]}); err != nil {
					t.Fatal(err)
				}
			}
			want, sends, failed := 3, 3, 1 // receive completions, send completions, the send that fails
			if tc.late {
				want, sends, failed = 2, 4, 3
			}
			err := s.run(clock.Time(time.Minute), func() bool { return len(s.cb) >= want && len(s.ca) == sends && s.qa.Err() != nil })
			if err != nil {
				t.Fatalf("%v (receiver %d completions, sender %+v %+v)", err, len(s.cb), s.ca, s.qa.Stats())
			}
			if c := s.cb[0]; c.Err != nil || c.ID != 1 || hash(c.Data) != hash(msgs[0]) {
				t.Fatalf("first message: id %d err %v", c.ID, c.Err)
			}
			if c := s.cb[1]; c.ID != 2 || !errors.Is(c.Err, ErrLocalLength) {
				t.Fatalf("second buffer: id %d err %v, want ErrLocalLength", c.ID, c.Err)
			}
			if c := s.cb[want-1]; !tc.late && (c.ID != 3 || !errors.Is(c.Err, ErrFlushed)) {
				t.Fatalf("third buffer: id %d err %v, want ErrFlushed", c.ID, c.Err)
			}
			if len(s.cb) != want {
				t.Fatalf("%d receive completions, want %d", len(s.cb), want)
			}
			for i, b := range backing[len(small):] {
				if b != 0xAA {
					t.Fatalf("byte %d past the buffer was written", len(small)+i)
				}
			}
			if s.ca[0].Err != nil || !errors.Is(s.qa.Err(), ErrInvalidRequest) || !errors.Is(s.ca[failed].Err, ErrInvalidRequest) {
				t.Fatalf("sender: %+v; want nil, ErrInvalidRequest; receiver %+v %+v sender %+v", s.ca, s.cb, s.qb.Stats(), s.qa.Stats())
			}
			if err := s.qb.PostRecv(4, make([]byte, 100)); !errors.Is(err, ErrQPFailed) || !errors.Is(err, ErrLocalLength) {
				t.Fatalf("PostRecv after the length error: %v", err)
			}
		})
	}
}

// TestPostRecvQueueFull: MaxMessages buffers at most.
func TestPostRecvQueueFull(t *testing.T) {
	s := newSimPair(t, mem.Config{Seed: 1}, Config{Seed: 1, MaxMessages: 2})
	for i := range 2 {
		if err := s.qb.PostRecv(uint64(i), make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.qb.PostRecv(3, make([]byte, 10)); !errors.Is(err, ErrRecvQueueFull) {
		t.Fatalf("third buffer: %v, want ErrRecvQueueFull", err)
	}
}

// steadyLoop is one round of a steady SEND/receive loop over a sim pair:
// the receiver posts buf (when post), the sender sends msg, and both run
// until the send and the receive completed. It reuses the pair's
// completion slices.
func steadyLoop(s *simPair, msg, buf []byte, post bool) (Completion, error) {
	if post {
		if err := s.qb.PostRecv(7, buf); err != nil {
			return Completion{}, err
		}
	}
	if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
		return Completion{}, err
	}
	s.ca, s.cb = s.ca[:0], s.cb[:0]
	if err := s.run(clock.Never-1, func() bool { return len(s.ca) == 1 && len(s.cb) == 1 }); err != nil {
		return Completion{}, err
	}
	return s.cb[0], nil
}

func steadyPair(t testing.TB, prof Profile) *simPair {
	s := newSimPair(t, mem.Config{Seed: 1, Delay: time.Microsecond, Bandwidth: 100e9},
		Config{Profile: prof, Seed: 1, MTU: 9014})
	s.ca, s.cb = make([]Completion, 0, 4), make([]Completion, 0, 4)
	return s
}

// TestPostedRecvNoAllocs guards the allocation-free receive path: a steady
// loop of 64 KiB SENDs into a posted buffer allocates nothing per message,
// sender, fabric and receiver together, in both profiles; so does the
// allocating path when each message's buffer goes back to the pool
// (Message.Release).
func TestPostedRecvNoAllocs(t *testing.T) {
	testutil.SkipIfInstrumented(t)
	for _, prof := range []Profile{Spray, RoCE} {
		for _, posted := range []bool{true, false} {
			name := prof.String() + "/posted"
			if !posted {
				name = prof.String() + "/pooled"
			}
			t.Run(name, func(t *testing.T) {
				s := steadyPair(t, prof)
				msg := randomMessages(testutil.Rand(t), 3, 64<<10)[1]
				buf := make([]byte, len(msg))
				var err error
				round := func() {
					var c Completion
					if c, err = steadyLoop(s, msg, buf, posted); err != nil {
						return
					}
					if c.Err != nil || hash(c.Data) != hash(msg) {
						t.Fatalf("message: %v, hash match %v", c.Err, hash(c.Data) == hash(msg))
					}
					if !posted {
						m := message(c)
						m.Release()
					}
				}
				// Warm up the pool, the rings and link/mem's buffers, which
				// grow to their high-water marks.
				for range 100 {
					round()
				}
				// Runs of 100 messages, so that a single allocation in any
				// of them shows (AllocsPerRun rounds its average down). The
				// count is the process's: the least of a few runs leaves
				// out another test's goroutines winding down.
				least := math.Inf(1)
				for range 3 {
					least = min(least, testing.AllocsPerRun(1, func() {
						for range 100 {
							round()
						}
					}))
				}
				if least != 0 || err != nil {
					t.Fatalf("%v allocations in 100 messages (%v), want 0", least, err)
				}
			})
		}
	}
}

// BenchmarkPostedRecv is the steady SEND/receive loop of
// TestPostedRecvNoAllocs: a 64 KiB message per op, into a posted buffer or
// into a pooled buffer given back after each message.
func BenchmarkPostedRecv(b *testing.B) {
	for _, prof := range []Profile{Spray, RoCE} {
		for _, posted := range []bool{true, false} {
			name := prof.String() + "/posted"
			if !posted {
				name = prof.String() + "/pooled"
			}
			b.Run(name, func(b *testing.B) {
				s := steadyPair(b, prof)
				msg := make([]byte, 64<<10)
				buf := make([]byte, len(msg))
				for range 10 { // warm up the pool, the rings and the fabric's buffers
					if _, err := steadyLoop(s, msg, buf, posted); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(msg)))
				for b.Loop() {
					c, err := steadyLoop(s, msg, buf, posted)
					if err != nil || c.Len != len(msg) {
						b.Fatal(err, c.Err)
					}
					if !posted {
						m := message(c)
						m.Release()
					}
				}
			})
		}
	}
}
