package sim

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestHeadlineAllToAll asserts the simulator's headline claims with margins
// (the figures themselves are spray sim's report): an all-to-all over a
// 16-host leaf-spine runs lossless at no less than 80% of the line-rate
// bound and about as fast as roce; when a spine link fails, spray completes
// every flow and its tail is under a tenth of roce's, which waits out its
// Local ACK Timeout. (Loss shows in so few tails at this scale that roce's
// NAKs recover them as fast: cmd/spray's TestCompareSimHeadline asserts the
// ratios under loss on the testbed's configuration.)
func TestHeadlineAllToAll(t *testing.T) {
	const (
		hosts    = 16
		perHost  = 1 << 20 // alltoall:1m: SIZE/hosts to every other host
		rateBits = 100_000_000_000
	)
	tp := mustTopo(t, "leafspine:4x4x4,rate=100gbit")
	res, err := Run(Config{Topo: tp, Workload: mustWork(t, "alltoall:1m", tp.Hosts()), Seed: testutil.Seed(t),
		Scenarios: []string{ScenarioLossless, ScenarioLinkFail}})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, r := range res.Rows {
		t.Logf("%-9s %-6s mean %9v p99 %9v p99.9 %9v makespan %9v retx %d timeouts %d", r.Scenario, r.Profile, r.Mean, r.P99, r.P999, r.Makespan, r.Retransmits, r.Timeouts)
		rows[r.Scenario+"/"+r.Profile] = r
		if r.Err != "" || r.Done != r.Flows || r.Flows != hosts*(hosts-1) {
			t.Errorf("%s/%s: %d of %d flows done: %s", r.Scenario, r.Profile, r.Done, r.Flows, r.Err)
		}
	}
	// Each host sends (hosts-1)/hosts of its buffer through its one link:
	// the bound, from the workload alone, with no header counted.
	bound := time.Duration(perHost * (hosts - 1) / hosts * 8 * int64(time.Second) / rateBits)
	spray, roce := rows[ScenarioLossless+"/"+ProfileSpray], rows[ScenarioLossless+"/"+ProfileRoCE]
	if share := float64(bound) / float64(spray.Makespan); share < 0.8 {
		t.Errorf("lossless: spray's all-to-all took %v, %.2f of the line-rate bound %v; want at least 0.80", spray.Makespan, share, bound)
	}
	if ratio := float64(spray.Mean) / float64(roce.Mean); ratio > 1.1 {
		t.Errorf("lossless: spray's mean %v is %.2fx roce's %v; want at most 1.10x", spray.Mean, ratio, roce.Mean)
	}
	spray, roce = rows[ScenarioLinkFail+"/"+ProfileSpray], rows[ScenarioLinkFail+"/"+ProfileRoCE]
	if ratio := float64(spray.P999) / float64(roce.P999); ratio > 0.1 {
		t.Errorf("%s: spray's p99.9 %v is %.3fx roce's %v; want at most 0.1x", ScenarioLinkFail, spray.P999, ratio, roce.P999)
	}
	if ratio := float64(spray.Mean) / float64(roce.Mean); ratio > 0.5 {
		t.Errorf("%s: spray's mean %v is %.2fx roce's %v; want at most 0.5x", ScenarioLinkFail, spray.Mean, ratio, roce.Mean)
	}
}
