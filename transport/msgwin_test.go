package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// slowReaderRun sends n messages of size bytes from A to B over a lossless
// link while B's reader takes one message per every of simulated time,
// and sleeps from stall to stall+sleep; drop, when set, sees every frame
// B sends and drops it when it returns true. It returns the messages in
// the order B's reader took them.
func slowReaderRun(t *testing.T, s *simPair, n, size int, every time.Duration, stall clock.Time, sleep time.Duration) [][]byte {
	t.Helper()
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = make([]byte, size)
		for j := range msgs[i] {
			msgs[i][j] = byte(i*7 + j)
		}
	}
	posted := 0
	var got [][]byte
	var nextRead clock.Time
	for len(got) < n {
		for posted < n && s.qa.Post(WorkRequest{ID: uint64(posted + 1), Op: OpSend, Data: msgs[posted]}) == nil {
			posted++
		}
		now := s.clk.Now()
		wa, err := s.ea.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		wb, err := s.eb.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range s.ea.Completions(nil) {
			if c.Err != nil {
				t.Fatalf("send failed: %v", c.Err)
			}
		}
		// The reader wakes at nextRead, or at the end of its sleep.
		wake := nextRead
		if asleep := now >= stall && now < stall.Add(sleep); asleep {
			wake = stall.Add(sleep)
		} else if now >= nextRead {
			if c, ok := s.qb.PollCompletion(); ok {
				got = append(got, c.Data[:c.Len])
				nextRead = now.Add(every)
				continue
			}
			wake = clock.Never // until a message comes
		}
		if wa || wb {
			continue
		}
		next := clock.Min(clock.Min(s.ea.NextDeadline(), s.eb.NextDeadline()), s.fab.NextDelivery())
		next = clock.Min(next, wake)
		switch {
		case next == clock.Never:
			t.Fatalf("deadlock at %v after %d of %d messages", now, len(got), n)
		case next > clock.Time(0).Add(10*time.Second):
			t.Fatalf("%d of %d messages after 10 s of simulated time", len(got), n)
		case next <= now:
			next = now + 1
		}
		s.clk.Set(next)
	}
	for i, m := range got {
		if hash(m) != hash(msgs[i]) {
			t.Fatalf("message %d differs", i)
		}
	}
	return got
}

// TestSlowReaderNoResends: a reader slower than its sender, on a lossless
// link, costs no resend: the receiver's ACKs carry its message limit and
// the sender starts no message beyond it, so no packet is refused for lack
// of room (NoBuffer) and none is sent twice; every message arrives
// intact, in order. Without the limit the sender fills the receiver's
// message slots and every packet past them is refused and resent.
func TestSlowReaderNoResends(t *testing.T) {
	const maxMsgs, n, size = 8, 300, 64
	s := newSimPair(t, mem.Config{Delay: 5 * time.Microsecond}, Config{Profile: Spray, MaxMessages: maxMsgs})
	slowReaderRun(t, s, n, size, 20*time.Microsecond, clock.Never, 0)
	a, b := s.qa.Stats(), s.qb.Stats()
	if b.NoBuffer != 0 || a.Retransmits != 0 || a.Timeouts != 0 {
		t.Fatalf("receiver refused %d packets; sender resent %d, %d timeouts; want none", b.NoBuffer, a.Retransmits, a.Timeouts)
	}
	if b.MessagesReceived != n {
		t.Fatalf("%d messages received, want %d", b.MessagesReceived, n)
	}
}

// TestMsgWinUpdateLost: the window updates a reader's room owes its held
// sender are lost; the sender, with nothing in flight, sends past the limit
// once a retransmission timeout has passed since it last heard from its
// peer (persist), and every message arrives.
func TestMsgWinUpdateLost(t *testing.T) {
	const maxMsgs, n, size = 4, 40, 64
	s := newSimPair(t, mem.Config{Delay: 5 * time.Microsecond}, Config{Profile: Spray, MaxMessages: maxMsgs})
	// The reader sleeps for the first 3 ms; the ACKs B sends in the
	// 100 µs after it wakes, while it empties its queue, window updates
	// all, are lost.
	stall, sleep := clock.Time(0), 3*time.Millisecond
	dropped := 0
	s.fab.SetFilter(func(frame []byte) bool {
		var pk wire.Packet
		if wire.Decode(frame, &pk) != nil || pk.BTH.Opcode != wire.OpSprayAck || pk.IP.Src != ipB {
			return true
		}
		if now := s.clk.Now(); now >= stall.Add(sleep) && now < stall.Add(sleep+100*time.Microsecond) {
			dropped++
			return false
		}
		return true
	})
	slowReaderRun(t, s, n, size, time.Microsecond, stall, sleep)
	if dropped == 0 {
		t.Fatal("no window update was dropped: the test did not stall the sender")
	}
	if got := s.qb.Stats().MessagesReceived; got != n {
		t.Fatalf("%d messages received, want %d", got, n)
	}
}
