package sim

import (
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestAckAheadOfData: in a 32-host all-to-all at 10 Gb/s every host's
// engine sends to 31 peers at once while it receives from each, and its
// NIC queue holds 64 frames. Its urgent ACKs go ahead of its data: were
// they to wait for their QP's turn among the 31 senders (8 packets each,
// about 300 µs), the peers would take the wait for loss and resend what
// had arrived. The fabric drops nothing; every byte arrives intact
// (Verify), and fewer than 0.1% of the data packets arrive twice.
func TestAckAheadOfData(t *testing.T) {
	tp := mustTopo(t, "leafspine:8x4x4,rate=10gbit")
	res, err := Run(Config{Topo: tp, Workload: mustWork(t, "alltoall:4M", tp.Hosts()), Seed: testutil.Seed(t), Verify: true,
		Profiles: []string{ProfileSpray}, Scenarios: []string{ScenarioLossless}})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rows[0]
	t.Logf("mean %v, makespan %v; %d data packets, %d resent, %d duplicates, %d probes", r.Mean, r.Makespan, r.DataPackets, r.Retransmits, r.Duplicates, r.TLPs)
	if r.Err != "" || r.Done != r.Flows {
		t.Fatalf("%d of %d flows done: %s", r.Done, r.Flows, r.Err)
	}
	if d := r.Drops; d.Loss+d.Burst+d.Blackhole+d.Queue+d.Host != 0 {
		t.Fatalf("the fabric dropped frames: %+v", d)
	}
	if r.Duplicates*1000 > r.DataPackets {
		t.Errorf("%d of %d data packets arrived twice: ACKs waited behind data", r.Duplicates, r.DataPackets)
	}
}
