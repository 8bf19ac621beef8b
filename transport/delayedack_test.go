package transport

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestSprayDelayedAckNoResends: a receiver that acknowledges every 8
// packets and holds an acknowledgement for up to 2 ms, a sender with a
// window of 4 packets, sprayed over lossless paths that reorder (20 µs,
// 1 in 5 frames up to 50 µs later); 20 transfers of 60 messages. The bytes
// arrive intact, and the sender resends next to nothing: most transfers
// resend none, and all 20 together at most 40 of about 25,000 packets.
// What keeps it so: a window below 2*AckEvery packets asks for an ACK on
// nearly every packet (windowFull), and the sender's loss timers allow for
// the receiver's AckDelay (retransmit's MaxAckDelay).
//
// It does not test the receiver's rule for overtaken packets (an ACK at
// once when an ACK already reported the overtaker): with nearly every
// packet asking for an ACK it passes without that rule;
// TestSprayAckOvertaken tests it. The bounds lie above what random seeds
// give with both rules and below what MaxAckDelay 0 gives.
func TestSprayDelayedAckNoResends(t *testing.T) {
	const transfers = 20
	seed := testutil.Seed(t)
	var retx, spurious, packets, resent uint64
	for i := range uint64(transfers) {
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
		if tx.Retransmits > 0 {
			resent++
		}
	}
	t.Logf("%d of %d transfers resent packets: %d retransmits (%d found spurious) of %d packets", resent, transfers, retx, spurious, packets)
	// Above what the rules give, below what MaxAckDelay 0 gives.
	if resent > 14 {
		t.Errorf("%d of %d transfers resent packets on a lossless fabric (%d retransmits), want at most 14: the sender's timers did not allow for the receiver's delayed ACKs", resent, transfers, retx)
	}
	if retx > 40 {
		t.Errorf("%d retransmits (%d found spurious) of %d packets on a lossless fabric, want at most 40", retx, spurious, packets)
	}
}
