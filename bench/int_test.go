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
// when the same paths carry only ping-pongs. The loaded bound is on the
// largest delay reported, at least one full frame's time at the link's
// rate: the smoothed one follows how well the controller keeps the queue
// short, which it does best on a quiet machine.
func TestINTQueueDelay(t *testing.T) {
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fab, _ := newFabric(t, ctx, testbed.LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 2, Rate: "200mbit"})
	a, b := fab.Host(0, 0), fab.Host(1, 0)
	run := func(total int64, pings int) (smoothed, largest time.Duration) {
		res, err := RunHosts(ctx, a, b, PairRun{
			Kind:      KindXDP,
			Transport: transport.Config{Seed: seed, MTU: a.MTU + 14, INTHops: 4, Paths: transport.PathsAdaptive},
			Perf:      PerfConfig{Total: total, MsgSize: 1 << 20, Pings: pings, PingSize: 64, Seed: seed},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.ClientPaths {
			smoothed = max(smoothed, p.QueueDelay)
		}
		return smoothed, res.ClientQP.MaxINTQueueDelay
	}
	loaded, loadedMax := run(8<<20, -1)
	idle, idleMax := run(4096, 300)
	t.Logf("INT queue delay: loaded %v (worst path, smoothed), %v (largest); idle %v, %v", loaded, loadedMax, idle, idleMax)
	frame := time.Duration(float64(a.MTU+14) * 8 / 200e6 * float64(time.Second))
	if loadedMax < frame {
		t.Errorf("loaded: INT shows at most %v of queueing on a saturated 200 Mbit/s link, less than one frame (%v)", loadedMax, frame)
	}
	if idle > loaded/3 {
		t.Errorf("idle: INT shows %v of queueing, loaded %v", idle, loaded)
	}
}
