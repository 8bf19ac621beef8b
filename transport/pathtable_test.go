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

// TestPathCountersWideValues: path counters stay exact when a value
// outgrows 32 bits (bytes past 4 GiB, a queue delay of seconds), for the
// path that outgrew them and the others, and for paths that take room
// after; a negative delay is kept as it came.
func TestPathCountersWideValues(t *testing.T) {
	var p pathTable
	p.init([]uint16{10, 20, 30})
	p.onSend(10, 1000, false)
	p.onSend(20, 500, true)
	if p.wide != nil {
		t.Fatal("small counters widened the table")
	}
	for range 5 {
		p.onSend(20, 1<<30, false)
	}
	if p.wide == nil {
		t.Fatal("5 GiB on a path did not widen the table")
	}
	p.onSend(30, 7, false)
	k := p.entry(p.index(30))
	p.setDelay(k, pcINTQueueDelay, 6*time.Second)
	p.setDelay(k, pcMaxINTQueueDelay, -time.Microsecond)
	want := []PathCounters{
		{TxPackets: 1, TxBytes: 1000},
		{TxPackets: 6, TxBytes: 500 + 5<<30, Retransmits: 1},
		{TxPackets: 1, TxBytes: 7, INTQueueDelay: 6 * time.Second, MaxINTQueueDelay: -time.Microsecond},
	}
	for i, w := range want {
		if got := p.counters(i); got != w {
			t.Fatalf("path %d: %+v, want %+v", i, got, w)
		}
	}
}

// TestPathTableNewSmallerSet: a QP whose paths go from more than 16
// entropies (searched in a sorted index) to 16 or fewer (scanned) counts
// its packets on the new set, from zero, and does not index the old one.
func TestPathTableNewSmallerSet(t *testing.T) {
	var tb pathTable
	big := make([]uint16, 20)
	for i := range big {
		big[i] = uint16(100 + i)
	}
	tb.init(big)
	tb.onSend(119, 1000, false)
	tb.onSend(105, 1000, false)
	tb.init([]uint16{119, 7, 8, 9})
	tb.onSend(119, 500, true)
	tb.onSend(7, 200, false)
	if got := tb.counters(0); got.TxPackets != 1 || got.TxBytes != 500 || got.Retransmits != 1 {
		t.Fatalf("entropy 119 on the new set: %+v, want 1 packet, 500 bytes, 1 retransmit", got)
	}
	if got := tb.counters(1); got.TxPackets != 1 || got.TxBytes != 200 {
		t.Fatalf("entropy 7 on the new set: %+v, want 1 packet, 200 bytes", got)
	}
	if i := tb.index(105); i != -1 {
		t.Fatalf("entropy 105 of the old set found at %d in the new one", i)
	}
}
