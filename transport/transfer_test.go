package transport

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/psn"
)

// randomMessages returns n messages with sizes log-uniform in [0, max],
// with the extremes 0 and max among them, filled with random bytes.
func randomMessages(rng *rand.Rand, n, maxSize int) [][]byte {
	msgs := make([][]byte, n)
	for i := range msgs {
		var size int
		switch i {
		case 0:
			size = 0
		case n / 2:
			size = maxSize
		default:
			size = int(math.Exp(rng.Float64()*math.Log(float64(maxSize)))) - 1
		}
		b := make([]byte, size)
		for j := 0; j < size; j += 8 {
			v := rng.Uint64()
			for k := 0; k < 8 && j+k < size; k++ {
				b[j+k] = byte(v >> (8 * k))
			}
		}
		msgs[i] = b
	}
	return msgs
}

// transfer sends msgs from A to B over a sim pair and checks that every one
// arrives exactly once, in order, byte-exact.
func transfer(t *testing.T, s *simPair, msgs [][]byte) {
	t.Helper()
	for i, m := range msgs {
		if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	err := s.run(clock.Time(10*time.Minute), func() bool {
		return len(s.cb) >= len(msgs) && len(s.ca) >= len(msgs)
	})
	if err != nil {
		t.Fatalf("%v (received %d/%d, sender completions %d)", err, len(s.cb), len(msgs), len(s.ca))
	}
	for i, c := range s.ca {
		if c.Err != nil || c.ID != uint64(i+1) {
			t.Fatalf("send completion %d: id %d err %v", i, c.ID, c.Err)
		}
	}
	if len(s.cb) != len(msgs) {
		t.Fatalf("received %d messages, sent %d", len(s.cb), len(msgs))
	}
	for i, c := range s.cb {
		if c.Op != OpRecv || hash(c.Data) != hash(msgs[i]) || c.Len != len(msgs[i]) {
			t.Fatalf("message %d: op %v, %d bytes, want %d bytes; hash match %v", i, c.Op, len(c.Data), len(msgs[i]), hash(c.Data) == hash(msgs[i]))
		}
	}
}

func TestTransferSpray(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.05} {
		t.Run(lossName(loss), func(t *testing.T) {
			seed := testutil.Seed(t)
			rng := rand.New(rand.NewPCG(seed, 1))
			s := newSimPair(t, mem.Config{
				Seed: seed, Loss: loss, Dup: 0.01, Reorder: 0.3, ReorderDelay: 50 * time.Microsecond,
				Delay: 5 * time.Microsecond, Jitter: 5 * time.Microsecond,
			}, Config{Profile: Spray, Entropies: 8, Seed: seed, MTU: 9014, MinRTO: time.Millisecond})
			msgs := randomMessages(rng, msgCount(), 4<<20)
			transfer(t, s, msgs)
			st := s.qb.Stats()
			rs := s.qa.RetransmitStats()
			t.Logf("receiver: %d pkts, %d dups; sender: %d pkts, %d retransmits, %d RTOs; fabric %+v",
				st.RxPackets, st.Duplicates, s.qa.Stats().TxPackets, s.qa.Stats().Retransmits, rs.RTOs, s.fab.Stats())
			if loss > 0 && s.qa.Stats().Retransmits == 0 {
				t.Fatal("loss configured but nothing was retransmitted")
			}
			if st.Duplicates == 0 {
				t.Fatal("1% duplication configured but the receiver saw no duplicate")
			}
			// Spraying: every entropy carried traffic.
			for _, p := range s.qa.paths.Stats() {
				if p.Packets == 0 {
					t.Fatalf("entropy %d carried no packet", p.Entropy)
				}
			}
		})
	}
}

func TestTransferRoCE(t *testing.T) {
	for _, loss := range []float64{0, 0.01} {
		t.Run(lossName(loss), func(t *testing.T) {
			seed := testutil.Seed(t)
			rng := rand.New(rand.NewPCG(seed, 2))
			s := newSimPair(t, mem.Config{
				Seed: seed, Loss: loss, Dup: 0.01, Reorder: 0.3, ReorderDelay: 50 * time.Microsecond,
				Delay: 5 * time.Microsecond, Jitter: 5 * time.Microsecond,
			}, Config{Profile: RoCE, Seed: seed, Window: 128, MTU: 9014, MinRTO: time.Millisecond})
			msgs := randomMessages(rng, msgCount(), 4<<20)
			transfer(t, s, msgs)
			st := s.qb.Stats()
			t.Logf("receiver: %d pkts, %d dups, %d out-of-order drops; sender: %d pkts, %d retransmits",
				st.RxPackets, st.Duplicates, st.OutOfOrderDrops, s.qa.Stats().TxPackets, s.qa.Stats().Retransmits)
			if loss > 0 && s.qa.Stats().Retransmits == 0 {
				t.Fatal("loss configured but nothing was retransmitted")
			}
		})
	}
}

// msgCount is 1000 messages, or 100 in -short mode (the race detector run).
func msgCount() int {
	if testing.Short() {
		return 100
	}
	return 1000
}

func lossName(p float64) string { return fmt.Sprintf("loss=%g%%", p*100) }

// TestPSNWrap starts both directions 100 PSNs below the 24-bit wrap and
// sends across it.
func TestPSNWrap(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			s := newSimPair(t, mem.Config{Seed: seed, Delay: time.Microsecond, Bandwidth: 10e9},
				Config{Profile: prof, Seed: seed, StartPSN: func(uint32) uint32 { return psn.Mask + 1 - 100 }})
			rng := rand.New(rand.NewPCG(seed, 3))
			msgs := randomMessages(rng, 40, 256<<10)
			transfer(t, s, msgs)
			if next := s.qa.sb.Next(); next.Diff(psn.PSN(psn.Mask-99)) <= 100 {
				t.Fatalf("sender only reached PSN %d: the wrap was not crossed", next)
			}
			st := s.qb.Stats()
			if st.Duplicates != 0 || s.qa.Stats().Retransmits != 0 {
				t.Fatalf("lossless wrap: %d duplicates, %d retransmits", st.Duplicates, s.qa.Stats().Retransmits)
			}
		})
	}
}

// TestRemoteWrite checks WRITE and WRITE-with-immediate into a registered
// region, and that a write outside it, with a wrong key or without write
// access writes nothing and fails at the writer with ErrRemoteAccess (and,
// as in IBA, moves the QP to the error state).
func TestRemoteWrite(t *testing.T) {
	type badWrite struct {
		name   string
		remote func(mr, ro *MR) Remote
		size   int
	}
	bad := []badWrite{
		{"past-end", func(mr, _ *MR) Remote { return mr.Remote(1<<20 - 100) }, 200 << 10},
		{"wrong-key", func(mr, _ *MR) Remote { return Remote{Addr: mr.Addr, RKey: mr.RKey + 1} }, 100},
		{"before-start", func(mr, _ *MR) Remote { return Remote{Addr: mr.Addr - 8, RKey: mr.RKey} }, 100},
		{"read-only", func(_, ro *MR) Remote { return ro.Remote(0) }, 100},
	}
	for _, prof := range []Profile{Spray, RoCE} {
		for _, bw := range bad {
			t.Run(prof.String()+"/"+bw.name, func(t *testing.T) {
				seed := testutil.Seed(t)
				s := newSimPair(t, mem.Config{Seed: seed, Delay: time.Microsecond, Reorder: 0.2, ReorderDelay: 10 * time.Microsecond},
					Config{Profile: prof, Seed: seed})
				region := make([]byte, 1<<20)
				mr := s.eb.Register(region, AccessRemoteWrite)
				ro := s.eb.Register(make([]byte, 4096), 0)
				good := randomMessages(rand.New(rand.NewPCG(seed, 4)), 3, 200<<10)[1]
				wrs := []WorkRequest{
					{ID: 1, Op: OpWrite, Data: good, Remote: mr.Remote(4096)},
					{ID: 2, Op: OpWriteImm, Data: good[:5000], Remote: mr.Remote(600 << 10), Imm: 0xfeed},
				}
				for _, wr := range wrs {
					if err := s.qa.Post(wr); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.run(clock.Time(time.Minute), func() bool { return len(s.ca) == 2 && len(s.cb) == 1 }); err != nil {
					t.Fatal(err)
				}
				for _, c := range s.ca {
					if c.Err != nil {
						t.Fatalf("good write %d: %v", c.ID, c.Err)
					}
				}
				if hash(region[4096:4096+len(good)]) != hash(good) {
					t.Fatal("write did not land byte-exact")
				}
				if hash(region[600<<10:600<<10+5000]) != hash(good[:5000]) {
					t.Fatal("write-with-immediate did not land byte-exact")
				}
				if c := s.cb[0]; c.Op != OpRecvImm || c.Imm != 0xfeed || c.Len != 5000 {
					t.Fatalf("receiver completion %+v, want recv-imm 0xfeed of 5000 bytes", c)
				}
				before := hash(region)
				roBefore := hash(ro.Buf)
				if err := s.qa.Post(WorkRequest{ID: 3, Op: OpWrite, Data: good[:bw.size], Remote: bw.remote(mr, ro)}); err != nil {
					t.Fatal(err)
				}
				if err := s.run(clock.Time(time.Minute), func() bool { return len(s.ca) == 3 }); err != nil {
					t.Fatal(err)
				}
				if err := s.ca[2].Err; !errors.Is(err, ErrRemoteAccess) {
					t.Fatalf("bad write: %v, want ErrRemoteAccess", err)
				}
				t.Logf("bad write failed with: %v", s.ca[2].Err)
				if hash(region) != before || hash(ro.Buf) != roBefore {
					t.Fatal("a refused write changed memory")
				}
				if s.qb.Stats().RemoteAccessErrors == 0 {
					t.Fatal("receiver did not count the remote access error")
				}
				if err := s.qa.Post(WorkRequest{ID: 4, Op: OpSend}); !errors.Is(err, ErrQPFailed) {
					t.Fatalf("post after a fatal NAK: %v, want ErrQPFailed", err)
				}
			})
		}
	}
}

// TestLargeMessage sends one 64 MiB message each way, in both profiles,
// with loss and reordering.
func TestLargeMessage(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			s := newSimPair(t, mem.Config{Seed: seed, Loss: 0.001, Reorder: 0.05, ReorderDelay: 5 * time.Microsecond, Delay: 5 * time.Microsecond},
				Config{Profile: prof, Seed: seed, MTU: 9014, Window: 512})
			big := randomMessages(rand.New(rand.NewPCG(seed, 5)), 2, 64<<20)[1]
			if len(big) != 64<<20 {
				t.Fatalf("message of %d bytes", len(big))
			}
			if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: big}); err != nil {
				t.Fatal(err)
			}
			if err := s.qb.Post(WorkRequest{ID: 2, Op: OpSend, Data: big}); err != nil {
				t.Fatal(err)
			}
			if err := s.run(clock.Time(10*time.Minute), func() bool { return len(s.ca) == 2 && len(s.cb) == 2 }); err != nil {
				t.Fatal(err)
			}
			for _, cs := range [][]Completion{s.ca, s.cb} {
				for _, c := range cs {
					if c.Err != nil {
						t.Fatal(c.Err)
					}
					if c.Op == OpRecv && (c.Len != len(big) || hash(c.Data) != hash(big)) {
						t.Fatalf("64 MiB message: %d bytes, hash match %v", c.Len, hash(c.Data) == hash(big))
					}
				}
			}
		})
	}
}

// TestSendRingGrowsFromOne: a QP's send ring and its peer's reassembly
// ring hold one message until more are outstanding (every busy QP of a
// collective holds them); several messages posted at once grow both, and
// every message arrives whole, in order, with its completion.
func TestSendRingGrowsFromOne(t *testing.T) {
	for _, loss := range []float64{0, 0.02} {
		t.Run(lossName(loss), func(t *testing.T) {
			seed := testutil.Seed(t)
			s := newSimPair(t, mem.Config{Seed: seed, Loss: loss, Reorder: 0.3, ReorderDelay: 20 * time.Microsecond, Delay: 5 * time.Microsecond}, Config{Profile: Spray, Seed: seed})
			rng := rand.New(rand.NewPCG(seed, 2))
			one := make([]byte, 3000)
			for i := range one {
				one[i] = byte(rng.Uint32())
			}
			transfer(t, s, [][]byte{one})
			if len(s.qa.msgs) != 1 {
				t.Fatalf("send ring of %d slots after one message, want 1", len(s.qa.msgs))
			}
			s.ca, s.cb = nil, nil
			msgs := make([][]byte, 9)
			for i := range msgs {
				msgs[i] = make([]byte, 1+rng.IntN(20000))
				for j := range msgs[i] {
					msgs[i][j] = byte(rng.Uint32())
				}
			}
			transfer(t, s, msgs)
			if len(s.qa.msgs) < len(msgs) {
				t.Fatalf("send ring of %d slots held %d messages", len(s.qa.msgs), len(msgs))
			}
		})
	}
}
