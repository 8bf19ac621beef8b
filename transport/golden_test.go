package transport

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	gohash "hash"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// goldenCase is one deterministic transfer whose every frame is hashed.
type goldenCase struct {
	name string
	mc   mem.Config
	cfg  Config
	// ce marks every ce-th data frame Congestion Experienced (0: none);
	// stamp writes an INT hop record into the INT region of data frames.
	ce    int
	stamp bool
	// reads is the number of RDMA READs A posts of B's memory after its
	// other requests.
	reads int
	// frames is the SHA-256 of the frames, state that of the final
	// counters and completions.
	frames, state string
	// check asserts that the run exercised what the case is for.
	check func(t *testing.T, s *simPair)
}

// TestGoldenCapture runs fixed-seed transfers in both directions (SEND,
// SEND with immediate, WRITE, WRITE with immediate) over link/mem under the
// simulated clock, with loss, loss bursts, duplication and reordering, and
// compares a SHA-256 of every frame either engine sent, in order, and one
// of the final counters and completions, with the digests recorded here.
// The protocol's behaviour is unchanged exactly when the frames digest is;
// a new counter moves only the state digest. A change that moves one needs
// its reason in its commit and a new digest here.
// The seeds are explicit, never drawn.
func TestGoldenCapture(t *testing.T) {
	lossy := mem.Config{
		Seed: 0x5eed, Loss: 0.02, BurstLoss: 0.002, BurstLen: 12, Dup: 0.01,
		Reorder: 0.1, ReorderDelay: 30 * time.Microsecond, Delay: 5 * time.Microsecond, Jitter: 2 * time.Microsecond,
	}
	cases := []goldenCase{{
		name:   "spray",
		mc:     lossy,
		cfg:    Config{Profile: Spray, Seed: 11, MinRTO: time.Millisecond, ECN: true, Paths: PathsSpray},
		ce:     17,
		frames: "e0d1aacc7e8ee0472e296a0daddf73133d6e765ddfeb4a63805f21f27479db47",
		state:  "80ccbb400017427eb7db55a06385b9a393ca94e3e5d376f64c794233dbf77e68",
		check: func(t *testing.T, s *simPair) {
			rs := s.qa.RetransmitStats()
			need(t, "SACK losses", rs.Lost)
			need(t, "TLPs", rs.TLPs)
			need(t, "RTOs", rs.RTOs)
			need(t, "duplicates", s.qb.Stats().Duplicates)
			need(t, "ECN marks", s.qb.Stats().ECNMarked)
		},
	}, {
		name:   "spray-int-ackevery4",
		mc:     lossy,
		cfg:    Config{Profile: Spray, Seed: 12, AckEvery: 4, INTHops: 2, MinRTO: time.Millisecond, Paths: PathsAdaptive},
		stamp:  true,
		frames: "621dbb239d9099fadc8a3f5ab9ac9ceaa5e14557b556a6e50b068b8ef37be4ae",
		state:  "8c828f944bf20fbe30d6b473d8d35d61e80bb2b2412965692bd8af507208009d",
		check: func(t *testing.T, s *simPair) {
			rs := s.qa.RetransmitStats()
			need(t, "losses", rs.Lost)
			need(t, "INT ACKs", s.qa.Stats().INTAcks)
		},
	}, {
		name:   "roce",
		mc:     lossy,
		cfg:    Config{Profile: RoCE, Seed: 13, Window: 256, LocalAckTimeout: 8},
		ce:     5,
		frames: "b514c220bc0d26433f07b0f4a0b2533e2743baf318f08f5a06010218ec3ede72",
		state:  "c713a31fb2e12331ff54b3e5ddcc3cb899d64dba4941aa8479095cfbaee909f8",
		check: func(t *testing.T, s *simPair) {
			need(t, "sequence NAKs", s.qa.Stats().NaksReceived)
			need(t, "out-of-order drops", s.qb.Stats().OutOfOrderDrops)
			need(t, "RTOs", s.qa.RetransmitStats().RTOs)
			need(t, "CNPs", s.qa.Stats().CNPsReceived)
		},
	}, {
		name:   "roce-adaptive-rto",
		mc:     lossy,
		cfg:    Config{Profile: RoCE, Seed: 14, LocalAckTimeout: -1, MinRTO: time.Millisecond, AckEvery: 4},
		ce:     9,
		frames: "8a0804f77736d33f41eb6f5d1b66a7111d7ecb100d5594078620ba56d235e73d",
		state:  "eb8c84c06bf1faffcf6e6214fe1076dc9921242a09bc7dd83652085cba241b74",
		check: func(t *testing.T, s *simPair) {
			need(t, "sequence NAKs", s.qa.Stats().NaksReceived)
			need(t, "RTOs", s.qa.RetransmitStats().RTOs)
			need(t, "CNPs", s.qa.Stats().CNPsReceived)
		},
	}, {
		name:   "spray-read",
		mc:     lossy,
		cfg:    Config{Profile: Spray, Seed: 15, MinRTO: time.Millisecond, Paths: PathsSpray},
		reads:  6,
		frames: "37e3354c695d865b0d221279aa7b9c1e772deb5336ea503ec33d9a349d4d39e2",
		state:  "9860ecb65f5cd60ca04a9da5c2e19b2330205bb7d914932c4043844dd10bef7f",
		check: func(t *testing.T, s *simPair) {
			need(t, "resent READ responses", s.qb.Stats().Retransmits)
		},
	}, {
		name:   "roce-read",
		mc:     lossy,
		cfg:    Config{Profile: RoCE, Seed: 16, Window: 256, LocalAckTimeout: 8},
		reads:  6,
		frames: "c90a76281d3ab4952c4b2a4be868fdedc5fb4528ea223466c0db32f7728f2130",
		state:  "778ca70377443afaf7e3616ffdd2d42cfd7c67397ea1543af3db6f9aee9f2908",
		check: func(t *testing.T, s *simPair) {
			need(t, "resent READ responses", s.qb.Stats().Retransmits)
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frames, state, s := goldenRun(t, c)
			c.check(t, s)
			if frames != c.frames {
				t.Errorf("frames digest %s, want %s: the protocol's behaviour changed", frames, c.frames)
			}
			if state != c.state {
				t.Errorf("state digest %s, want %s: the counters or completions changed", state, c.state)
			}
		})
	}
}

func need(t *testing.T, what string, n uint64) {
	t.Helper()
	if n == 0 {
		t.Errorf("no %s: the case no longer covers them", what)
	}
}

// goldenRun runs case c and returns the digests of its frames and of its
// final state.
func goldenRun(t *testing.T, c goldenCase) (string, string, *simPair) {
	t.Helper()
	h := sha256.New()
	data := 0
	mc := c.mc
	mc.Filter = func(f []byte) bool {
		var pk wire.Packet
		if err := wire.Decode(f, &pk); err == nil && (pk.BTH.Opcode == wire.OpSprayData || pk.BTH.Opcode <= wire.OpWriteOnlyImm) {
			data++
			if c.ce > 0 && data%c.ce == 0 {
				markCE(f)
			}
			if c.stamp {
				wire.StampHop(f, wire.Hop{Switch: 7, Port: uint16(pk.UDP.Src % 4), RateMbps: 100000, QLen: uint32(data%50) * 1500})
			}
		}
		hashFrame(h, f)
		return true
	}
	s := newSimPair(t, mc, c.cfg)
	mr := s.eb.Register(make([]byte, 1<<20), AccessRemoteWrite)
	rng := rand.New(rand.NewPCG(uint64(c.cfg.Seed), 7))
	ab := randomMessages(rng, 40, 96<<10)
	ba := randomMessages(rng, 10, 16<<10)
	ops := [...]Op{OpSend, OpSendImm, OpWrite, OpWriteImm}
	var off uint64
	for i, m := range ab {
		wr := WorkRequest{ID: uint64(i + 1), Op: ops[i%len(ops)], Data: m, Imm: uint32(i) * 0x01010101}
		if wr.Op == OpWrite || wr.Op == OpWriteImm {
			wr.Remote = mr.Remote(off)
			off = (off + uint64(len(m))) % (1<<20 - 96<<10)
		}
		if err := s.qa.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range ba {
		if err := s.qb.Post(WorkRequest{ID: uint64(i + 1), Op: ops[i%2], Data: m, Imm: uint32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var reads [][]byte
	var src []byte
	var roffs []int
	if c.reads > 0 {
		src = randomMessages(rng, 3, 256<<10)[1]
		rmr := s.eb.Register(src, AccessRemoteRead)
		for j := range c.reads {
			n := rng.IntN(len(src))
			off := rng.IntN(len(src) - n + 1)
			reads, roffs = append(reads, make([]byte, n)), append(roffs, off)
			if err := s.qa.Post(WorkRequest{ID: uint64(len(ab) + j + 1), Op: OpRead, Data: reads[j], Remote: rmr.Remote(uint64(off))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	recvB := 0 // receive completions B expects: SENDs and WRITEs with immediate
	for i := range ab {
		if ops[i%len(ops)] != OpWrite {
			recvB++
		}
	}
	var ca, cb int
	err := s.run(clock.Time(time.Minute), func() bool {
		ca, cb = 0, 0
		for _, x := range s.ca {
			if x.ID != 0 {
				ca++
			}
		}
		for _, x := range s.cb {
			if x.ID != 0 {
				cb++
			}
		}
		return ca == len(ab)+len(reads) && cb == len(ba) && len(s.cb)-cb == recvB && len(s.ca)-ca == len(ba)
	})
	if err != nil {
		t.Fatalf("%v (A: %d completions, B: %d)", err, len(s.ca), len(s.cb))
	}
	for _, q := range []*QP{s.qa, s.qb} {
		if q.Err() != nil {
			t.Fatalf("QP %#x failed: %v", q.QPN(), q.Err())
		}
	}
	// Every SEND arrived byte-exact: the digest covers its hash too.
	i := 0
	for _, x := range s.cb {
		if x.ID != 0 {
			continue
		}
		for ops[i%len(ops)] == OpWrite {
			i++
		}
		if op := ops[i%len(ops)]; op != OpWriteImm && hash(x.Data) != hash(ab[i]) {
			t.Fatalf("message %d (%v) arrived corrupted", i, op)
		}
		i++
	}
	for j, b := range reads {
		if hash(b) != hash(src[roffs[j]:roffs[j]+len(b)]) {
			t.Fatalf("READ %d (%d bytes) returned other bytes", j, len(b))
		}
	}
	frames := hex.EncodeToString(h.Sum(nil))
	h.Reset()
	fmt.Fprintf(h, "end %d\n", s.clk.Now())
	for _, q := range []*QP{s.qa, s.qb} {
		fmt.Fprintf(h, "%+v\n%+v\n", q.Stats(), q.RetransmitStats())
	}
	for _, cs := range [][]Completion{s.ca, s.cb} {
		for _, x := range cs {
			fmt.Fprintf(h, "%d %v %d %d %v %x\n", x.ID, x.Op, x.Len, x.Imm, x.Err, hash(x.Data))
		}
	}
	fmt.Fprintf(h, "%+v\n", s.fab.Stats())
	t.Logf("%d frames of data; A %+v; B %+v; A retransmit %+v", data, s.qa.Stats(), s.qb.Stats(), s.qa.RetransmitStats())
	return frames, hex.EncodeToString(h.Sum(nil)), s
}

func hashFrame(h gohash.Hash, f []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(f)))
	h.Write(n[:])
	h.Write(f)
}
