package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
)

// TestSlowReaderResumes: a reader that stops polling fills its QP's
// receive queue, then the messages the receiver finishes behind it fill
// every message slot, and later packets are refused (NoBuffer: Spray's
// persist probes past the message limit, msgwin.go). Once the
// reader polls again, those finished messages must reach the queue and the
// refused packets' resends be taken: every message arrives, byte-exact and
// in order, and the sender does not give up as if its peer were gone. With
// just enough messages to fill the queue and the slots, nothing is refused
// and the sender is done: the last ones must still reach the reader.
func TestSlowReaderResumes(t *testing.T) {
	testSlowReader(t, 5*time.Millisecond, []Profile{Spray, RoCE})
}

// TestSlowReaderOutlastsRetries: a reader asleep for a second, far past the
// sender's budget of MaxRetries timeouts (about 15 ms here), fails nothing:
// the receiver answers each refused packet with an RNR NAK, which tells
// the sender its peer is alive, and every message arrives once the reader
// wakes.
func TestSlowReaderOutlastsRetries(t *testing.T) {
	testSlowReader(t, time.Second, []Profile{Spray, RoCE})
}

func testSlowReader(t *testing.T, sleep time.Duration, profiles []Profile) {
	const maxMsgs, size = 4, 3000
	type tcase struct {
		prof Profile
		n    int
	}
	var cases []tcase
	for _, prof := range profiles {
		cases = append(cases, tcase{prof, 40})
		if prof == Spray {
			cases = append(cases, tcase{prof, 2 * maxMsgs})
		}
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v/%d", tc.prof, tc.n), func(t *testing.T) {
			prof, n := tc.prof, tc.n
			cfg := Config{Profile: prof, MaxMessages: maxMsgs, MaxRetries: 3}
			s := newSimPair(t, mem.Config{Delay: 5 * time.Microsecond}, cfg)
			msgs := make([][]byte, n)
			for i := range msgs {
				msgs[i] = make([]byte, size)
				for j := range msgs[i] {
					msgs[i][j] = byte(i*7 + j)
				}
			}
			posted := 0
			var got [][]byte
			// The reader sleeps through the sender's first timeouts.
			wake := clock.Time(0).Add(sleep)
			var sendErr error
			for len(got) < n && sendErr == nil {
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
						sendErr = c.Err
					}
				}
				if sendErr != nil {
					break
				}
				if now >= wake {
					for {
						c, ok := s.qb.PollCompletion()
						if !ok {
							break
						}
						got = append(got, c.Data[:c.Len])
					}
					if len(got) == n {
						break
					}
				}
				if wa || wb {
					continue
				}
				next := clock.Min(clock.Min(s.ea.NextDeadline(), s.eb.NextDeadline()), s.fab.NextDelivery())
				if now < wake {
					next = clock.Min(next, wake)
				}
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
			st := s.qb.Stats()
			if sendErr != nil {
				t.Fatalf("sender failed after %d of %d messages (receiver NoBuffer %d, RNR NAKs %d sent, %d received, NAKs rejected %d): %v", len(got), n, st.NoBuffer, st.RNRNaksSent, s.qa.Stats().RNRNaksReceived, s.qa.Stats().RejectedNaks, sendErr)
			}
			if n > 2*maxMsgs && st.NoBuffer == 0 {
				t.Fatalf("the receiver refused nothing: the reader did not fill its QP")
			}
			if n > 2*maxMsgs && (st.RNRNaksSent == 0 || s.qa.Stats().RNRNaksReceived == 0) {
				t.Fatalf("RNR NAKs: %d sent, %d received, want both > 0", st.RNRNaksSent, s.qa.Stats().RNRNaksReceived)
			}
			for i, m := range got {
				if hash(m) != hash(msgs[i]) {
					t.Fatalf("message %d differs", i)
				}
			}
		})
	}
}
