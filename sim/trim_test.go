package sim

import (
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestTrimSmallBuffer: an incast into switches with a small buffer drops
// data frames for full queues; with trim the same frames are cut to their
// headers instead, none is dropped, the receiver asks for each again at
// once, and every flow completes byte-exact with no more retransmission
// timeouts and no storm of resends trimmed again.
func TestTrimSmallBuffer(t *testing.T) {
	rows := map[bool]Row{}
	for _, trim := range []bool{false, true} {
		s := "leafspine:4x2x2,rate=100gbit,buffer=40k"
		if trim {
			s += ",trim"
		}
		tp := mustTopo(t, s)
		if tp.Trim != trim || trim && tp.String() != "leafspine:4x2x2,rate=100gbit,buffer=40960,trim" {
			t.Fatalf("topology %q parsed as %q (Trim %v)", s, tp.String(), tp.Trim)
		}
		res, err := Run(Config{Topo: tp, Workload: mustWork(t, "incast:256k,senders=7", tp.Hosts()), Seed: testutil.Seed(t), Verify: true,
			Profiles: []string{ProfileSpray}, Scenarios: []string{ScenarioLossless}})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Rows[0]
		t.Logf("trim %v: mean %v, retransmits %d, timeouts %d, queue drops %d, trimmed %d", trim, r.Mean, r.Retransmits, r.Timeouts, r.Drops.Queue, r.Trimmed)
		if r.Err != "" || r.Done != r.Flows {
			t.Fatalf("trim %v: %d of %d flows done: %s", trim, r.Done, r.Flows, r.Err)
		}
		rows[trim] = r
	}
	off, on := rows[false], rows[true]
	if off.Drops.Queue == 0 || off.Trimmed != 0 {
		t.Fatalf("without trim: %d queue drops, %d trimmed: want drops, no trims", off.Drops.Queue, off.Trimmed)
	}
	if on.Drops.Queue != 0 || on.Trimmed == 0 || on.Timeouts > off.Timeouts {
		t.Fatalf("with trim: %d queue drops, %d trimmed, %d timeouts (%d without): want no drops, trims, no more timeouts", on.Drops.Queue, on.Trimmed, on.Timeouts, off.Timeouts)
	}
	// The trimmed headers count in the port's INT TxBytes, so the
	// senders see the link they fill and slow down: without, resends met
	// the same full queue again and again (20 trims per drop).
	if on.Trimmed > 4*off.Drops.Queue {
		t.Fatalf("with trim: %d trimmed for %d drops without: a trim storm (want at most 4 per drop)", on.Trimmed, off.Drops.Queue)
	}
}

// TestTrimShortQueue: switches that trim at a short queue (alpha=1/32)
// hold a 7-to-1 incast's buffer to a few percent where the default
// threshold lets it grow, without a trim storm: the NAKs for trimmed
// packets carry the INT records that slow the senders, so fewer packets
// are trimmed than the incast sends. In an all-to-all the ACKs cross
// queues that trim, and go at priority with the trimmed headers: none is
// dropped. Every flow completes byte-exact.
func TestTrimShortQueue(t *testing.T) {
	run := func(topo, work string) Row {
		t.Helper()
		tp := mustTopo(t, topo)
		res, err := Run(Config{Topo: tp, Workload: mustWork(t, work, tp.Hosts()), Seed: testutil.Seed(t), Verify: true,
			Profiles: []string{ProfileSpray}, Scenarios: []string{ScenarioLossless}})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Rows[0]
		t.Logf("%s %s: mean %v, buffer max %.3f, trimmed %d, queue drops %d, retransmits %d", topo, work, r.Mean, r.BufferMax, r.Trimmed, r.Drops.Queue, r.Retransmits)
		if r.Err != "" || r.Done != r.Flows {
			t.Fatalf("%s %s: %d of %d flows done: %s", topo, work, r.Done, r.Flows, r.Err)
		}
		return r
	}
	const short = "leafspine:4x2x2,rate=100gbit,alpha=0.03125,trim"
	if tp := mustTopo(t, short); tp.Alpha != 1.0/32 || tp.String() != short {
		t.Fatalf("topology %q parsed as %q (Alpha %v)", short, tp.String(), tp.Alpha)
	}
	const incast, packets = "incast:1M,senders=7", 7 << 20 / 1400
	deep, cut := run("leafspine:4x2x2,rate=100gbit,trim", incast), run(short, incast)
	if deep.BufferMax <= 2.0/32 || cut.BufferMax > 2.0/32 {
		t.Fatalf("buffer max %.3f with the default threshold, %.3f at alpha 1/32: want above and at most 2/32", deep.BufferMax, cut.BufferMax)
	}
	if cut.Trimmed == 0 || cut.Trimmed > packets/2 || cut.Drops.Queue != 0 {
		t.Fatalf("alpha 1/32: %d trimmed, %d queue drops: want some trims, fewer than half the incast's %d packets, no drop", cut.Trimmed, cut.Drops.Queue, packets)
	}
	a2a := run("leafspine:4x2x2,rate=100gbit,alpha=0.02,trim", "alltoall:1M")
	if a2a.Trimmed == 0 || a2a.Drops.Queue != 0 {
		t.Fatalf("all-to-all at alpha 0.02: %d trimmed, %d queue drops: want trims and no drop", a2a.Trimmed, a2a.Drops.Queue)
	}
}
