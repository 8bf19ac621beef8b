package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// TestINTQueueDelay: the INT records that ACKs echo show queueing delay
// when a shaped spine link is loaded by a bulk transfer, and next to none
// when the same paths carry only ping-pongs.
func TestINTQueueDelay(t *testing.T) {
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fab, _ := newFabric(t, ctx, testbed.LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 2, Rate: "200mbit"})
	a, b := fab.Host(0, 0), fab.Host(1, 0)
	run := func(total int64, pings int) time.Duration {
		res, err := RunHosts(ctx, a, b, PairRun{
			Kind:      KindXDP,
			Transport: transport.Config{Seed: seed, MTU: a.MTU + 14, INTHops: 4, Paths: transport.PathsAdaptive},
			Perf:      PerfConfig{Total: total, MsgSize: 1 << 20, Pings: pings, PingSize: 64, Seed: seed},
		})
		if err != nil {
			t.Fatal(err)
		}
		var worst time.Duration
		for _, p := range res.ClientPaths {
			worst = max(worst, p.QueueDelay)
		}
		return worst
	}
	loaded := run(8<<20, -1)
	idle := run(4096, 300)
	t.Logf("INT queue delay (worst path, smoothed): loaded %v, idle %v", loaded, idle)
	if loaded < 40*time.Microsecond {
		t.Errorf("loaded: INT shows %v of queueing on a saturated 200 Mbit/s link", loaded)
	}
	if idle > loaded/3 {
		t.Errorf("idle: INT shows %v of queueing, loaded %v", idle, loaded)
	}
}
