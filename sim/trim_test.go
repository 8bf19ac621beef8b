package sim

import "testing"

// TestTrimSmallBuffer: an incast into switches with a small buffer drops
// data frames for full queues; with trim the same frames are cut to their
// headers instead, none is dropped, the receiver asks for each again at
// once, and every flow completes byte-exact with no more retransmission
// timeouts.
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
		res, err := Run(Config{Topo: tp, Workload: mustWork(t, "incast:256k,senders=7", tp.Hosts()), Seed: 1, Verify: true,
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
}
