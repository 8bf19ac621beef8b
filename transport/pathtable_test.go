package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestPathTableGrows: a spraying QP with 32 entropies that sends an 8 KiB
// message (6 packets) holds counters for the paths it used only, while
// PathCounters still lists every path, in the policy's order, and adds up
// to the packets sent; the message arrives intact.
func TestPathTableGrows(t *testing.T) {
	seed := testutil.Seed(t)
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 2 * time.Microsecond}, Config{Profile: Spray, Seed: seed, Entropies: 32})
	msg := make([]byte, 8<<10)
	r := testutil.Rand(t)
	for i := range msg {
		msg[i] = byte(r.Uint32())
	}
	transfer(t, s, [][]byte{msg})
	pc := s.qa.PathCounters()
	if len(pc) != 32 || len(s.qa.paths.Paths()) != 32 {
		t.Fatalf("%d path counters for %d paths, want 32", len(pc), len(s.qa.paths.Paths()))
	}
	used := 0
	var sent uint64
	for _, c := range pc {
		if c.TxPackets > 0 {
			used++
		}
		sent += c.TxPackets
	}
	if tx := s.qa.Stats().TxPackets; sent == 0 || sent > tx {
		t.Fatalf("%d data packets counted on paths, %d sent", sent, tx)
	}
	t.Logf("%d data packets on %d of 32 paths; %d sent", sent, used, s.qa.Stats().TxPackets)
	if len(s.qa.pstats.c) != used || used > 8 {
		t.Fatalf("counters held for %d paths, %d used by a %d-packet transfer", len(s.qa.pstats.c), used, sent)
	}
}
