package transport

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// Traffic secrets of the tests: A's Send is B's Recv and the other way.
var (
	secretAB = [32]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	secretBA = [32]byte{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
)

func secA(integrity bool) Security {
	return Security{Send: secretAB, Recv: secretBA, IntegrityOnly: integrity}
}

func secB(integrity bool) Security {
	return Security{Send: secretBA, Recv: secretAB, IntegrityOnly: integrity}
}

// newSecPair is newSimPair with both QPs secured before Connect
// (integrity only if integrity), each sending at most epoch packets per
// key epoch (0: the default).
func newSecPair(t testing.TB, mc mem.Config, cfg Config, integrity bool, epoch uint64) *simPair {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = testutil.Seed(t)
	}
	cfg.secEpochPackets = epoch
	s := &simPair{t: t, clk: &clock.Sim{}}
	s.fab = mem.NewFabric(mc, s.clk)
	pa, err := s.fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := s.fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close(); pb.Close() })
	if s.ea, err = NewEngine(pa, cfg); err != nil {
		t.Fatal(err)
	}
	cfgB := cfg
	cfgB.Seed = cfg.Seed + 1
	if s.eb, err = NewEngine(pb, cfgB); err != nil {
		t.Fatal(err)
	}
	if s.qa, err = s.ea.CreateQP(); err != nil {
		t.Fatal(err)
	}
	if s.qb, err = s.eb.CreateQP(); err != nil {
		t.Fatal(err)
	}
	if err := s.qa.Secure(secA(integrity)); err != nil {
		t.Fatal(err)
	}
	if err := s.qb.Secure(secB(integrity)); err != nil {
		t.Fatal(err)
	}
	if err := s.qa.Connect(s.qb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := s.qb.Connect(s.qa.Info()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSecureTransfer: two secured QPs move SENDs byte-exact over a fabric
// that loses, duplicates and reorders, in both profiles, encrypted and
// integrity only, with keys rotating every 256 packets (more than the fabric reorders); no legitimate
// packet is dropped for a security reason except duplicates the fabric
// made (Replayed), and both sides rotated.
func TestSecureTransfer(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		for _, integrity := range []bool{false, true} {
			name := prof.String() + "/encrypted"
			if integrity {
				name = prof.String() + "/integrity"
			}
			t.Run(name, func(t *testing.T) {
				seed := testutil.Seed(t)
				rng := rand.New(rand.NewPCG(seed, 1))
				cfg := Config{Profile: prof, Seed: seed, MTU: 9014, MinRTO: time.Millisecond}
				if prof == RoCE {
					cfg.Window = 128
				}
				s := newSecPair(t, mem.Config{
					Seed: seed, Loss: 0.01, Dup: 0.01, Reorder: 0.3, ReorderDelay: 50 * time.Microsecond,
					Delay: 5 * time.Microsecond, Jitter: 5 * time.Microsecond,
				}, cfg, integrity, 256)
				msgs := randomMessages(rng, msgCount()/4, 1<<20)
				transfer(t, s, msgs)
				sa, sb := s.qa.Stats().Security, s.qb.Stats().Security
				t.Logf("A %+v\nB %+v", sa, sb)
				if s.qa.Stats().Retransmits == 0 {
					t.Fatal("1% loss configured but nothing was retransmitted")
				}
				for _, st := range []SecurityStats{sa, sb} {
					if st.BadTag+st.BadEpoch+st.Unsecured+st.TooOld != 0 {
						t.Fatalf("legitimate packets dropped: %+v", st)
					}
				}
				if sa.TxRotations == 0 || sb.RxRotations == 0 || sb.RxRotations != sa.TxRotations {
					t.Fatalf("A rotated %d send keys, B advanced %d receive epochs", sa.TxRotations, sb.RxRotations)
				}
			})
		}
	}
}

// TestSecureNoPlaintext: a tap on the fabric finds no message's bytes in
// any frame of an encrypted QP, and finds them in an integrity-only one.
func TestSecureNoPlaintext(t *testing.T) {
	for _, integrity := range []bool{false, true} {
		var frames [][]byte
		tap := func(f []byte) bool { frames = append(frames, bytes.Clone(f)); return true }
		s := newSecPair(t, mem.Config{Seed: 3, Delay: 5 * time.Microsecond, Filter: tap},
			Config{Profile: Spray, Seed: 4, MinRTO: time.Millisecond}, integrity, 0)
		rng := rand.New(rand.NewPCG(5, 6))
		msgs := randomMessages(rng, 8, 32<<10)
		transfer(t, s, msgs)
		found := 0
		for _, m := range msgs {
			if len(m) < 16 {
				continue
			}
			probe := m[len(m)/2 : len(m)/2+16]
			for _, f := range frames {
				if bytes.Contains(f, probe) {
					found++
					break
				}
			}
		}
		secured := 0
		var pk wire.Packet
		for _, f := range frames {
			if wire.Decode(f, &pk) == nil && pk.BTH.Secured {
				secured++
			}
		}
		if secured != len(frames) {
			t.Fatalf("integrity %v: %d of %d frames secured", integrity, secured, len(frames))
		}
		if !integrity && found != 0 {
			t.Fatalf("encrypted: the tap found %d messages in clear", found)
		}
		if integrity && found == 0 {
			t.Fatal("integrity only: the tap found no message in clear")
		}
	}
}
