package collective

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBootstrapRankDies: when a rank dies (its connections close) between
// rounds, the next round fails on every surviving rank at once with
// ErrBootstrap, rank 0's naming the dead rank, instead of hanging until
// the callers' contexts end (a minute here).
func TestBootstrapRankDies(t *testing.T) {
	for _, dead := range []int{0, 1, 2} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		const n = 3
		boots := make([]*Bootstrap, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				cfg := BootstrapConfig{Rank: r, Size: n, Addr: ln.Addr().String()}
				if r == 0 {
					cfg.Listener = ln
				}
				boots[r], errs[r] = NewBootstrap(ctx, cfg)
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		boots[dead].Close()
		start := time.Now()
		for r := range n {
			if r == dead {
				continue
			}
			wg.Go(func() { errs[r] = boots[r].Barrier(ctx) })
		}
		wg.Wait()
		took := time.Since(start)
		for r := range n {
			if r == dead {
				continue
			}
			if !errors.Is(errs[r], ErrBootstrap) {
				t.Errorf("rank %d dead: rank %d's barrier: %v, want ErrBootstrap", dead, r, errs[r])
			}
			if r == 0 && !strings.Contains(errs[r].Error(), "rank 2") && dead == 2 {
				t.Errorf("rank 0's error %q does not name rank 2", errs[r])
			}
			boots[r].Close()
		}
		t.Logf("rank %d dead: the others failed in %v: %v", dead, took, errs)
		if took > 10*time.Second {
			t.Errorf("rank %d dead: the round took %v to fail", dead, took)
		}
		cancel()
	}
}
