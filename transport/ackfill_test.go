package transport

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestSprayAckFillsHole: a receiver that acknowledges every 8 packets and
// holds an acknowledgement for up to 2 ms, a sender with a window of 4
// packets, sprayed over paths that reorder. A packet that arrives after
// one sent later (it fills a hole) is acknowledged at once when an ACK
// already reported the later one (else with it), and the sender's
// tail loss probe allows for the receiver's delay while fewer than 8
// packets are in flight, so the sender resends next to nothing on this
// lossless fabric, and the bytes arrive intact. With reordered packets held
// for the delayed-ACK timer and the probe waiting 2 SRTTs, 5 transfers of
// 60 messages resent 10-21 packets that had arrived (10 runs).
func TestSprayAckFillsHole(t *testing.T) {
	seed := testutil.Seed(t)
	var retx, spurious, packets uint64
	for i := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed+i, 9))
		cfg := Config{Profile: Spray, Seed: seed + i, MTU: 9014, Entropies: 8, AckEvery: 8, AckDelay: 2 * time.Millisecond}
		seg := payloadSize(&cfg, false)
		w := 4 * (seg + 200)
		cfg.CC = func() cc.Controller { return cc.Fixed{WindowBytes: w} }
		s := newSimPair(t, mem.Config{
			Seed: seed + i, Delay: 20 * time.Microsecond, Bandwidth: 1e9,
			Reorder: 0.2, ReorderDelay: 50 * time.Microsecond,
		}, cfg)
		transfer(t, s, randomMessages(rng, 60, 2<<20))
		tx, rs := s.qa.Stats(), s.qa.RetransmitStats()
		t.Logf("%d data packets, %d retransmits (%d spurious, %d probes), %d acknowledgements",
			tx.TxPackets, tx.Retransmits, rs.SpuriousRetransmits, rs.TLPs, s.qb.Stats().AcksSent)
		retx, spurious, packets = retx+tx.Retransmits, spurious+rs.SpuriousRetransmits, packets+tx.TxPackets
	}
	if retx > 5 {
		t.Fatalf("%d retransmits (%d found spurious) of %d packets on a lossless fabric: reordered packets waited for the delayed-ACK timer", retx, spurious, packets)
	}
}
