package collective_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	. "github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// TestCollectivesLarge moves MiBs with the default Options: AllReduce past
// the recursive-doubling threshold (the ring, 256 KiB chunks) and the other
// collectives with blocks of hundreds of KiB. -short trims the sizes.
func TestCollectivesLarge(t *testing.T) {
	rng := testutil.Rand(t)
	big, blk := 1<<20, 64<<10 // elements: 4 MiB of float32 to reduce, 256 KiB blocks
	if testing.Short() {
		big, blk = 64<<10, 8<<10
	}
	for _, p := range []int{2, 3, 8} {
		for _, mk := range []func(*testing.T, int) world{tcpWorld, func(t *testing.T, n int) world { return sprayWorld(t, n, collectivetest.SprayConfig{}) }} {
			w := mk(t, p)
			t.Run(fmt.Sprintf("%s/%d", w.name, p), func(t *testing.T) {
				start := time.Now()
				checkAllReduce[float32](t, w, rng, big, Sum, nil)
				t.Logf("AllReduce of %d MiB: %v", big*4>>20, time.Since(start))
				checkAllReduce[float64](t, w, rng, 20000, Max, nil) // 160 KB: ring on any size
				checkReduceScatter[int32](t, w, rng, blk, Sum, nil)
				checkAllGather[float64](t, w, rng, blk/2, nil)
				checkAllToAll[float32](t, w, rng, blk, nil)
				checkBroadcast[int32](t, w, rng, big, p-1, nil)
			})
		}
	}
}

// TestAllReduceRealFloats sums random real numbers, so that the order of
// the additions matters: every rank must get the same bits, within a
// rounding tolerance of the serial float64 sum, by both algorithms.
func TestAllReduceRealFloats(t *testing.T) {
	rng := testutil.Rand(t)
	for _, p := range []int{3, 4, 8} {
		w := tcpWorld(t, p)
		for _, n := range []int{100, 50000} { // recursive doubling on 4 and 8, then the ring
			in := make([][]float32, p)
			for r := range in {
				in[r] = make([]float32, n)
				for i := range in[r] {
					in[r][i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
				}
			}
			out := make([][]float32, p)
			w.run(t, func(ctx context.Context, r int, c Comm) error {
				out[r] = make([]float32, n)
				return AllReduce(ctx, c, in[r], out[r], Sum, nil)
			})
			for i := range n {
				var exact, mag float64
				for r := range p {
					exact += float64(in[r][i])
					mag += math.Abs(float64(in[r][i]))
				}
				if d := math.Abs(float64(out[0][i]) - exact); d > mag*float64(p)*1.2e-7 {
					t.Fatalf("p=%d n=%d element %d: %v, exact sum %v", p, n, i, out[0][i], exact)
				}
				for r := 1; r < p; r++ {
					if math.Float32bits(out[r][i]) != math.Float32bits(out[0][i]) {
						t.Fatalf("p=%d n=%d element %d: rank %d has %v, rank 0 %v", p, n, i, r, out[r][i], out[0][i])
					}
				}
			}
		}
	}
}

// TestCollectivesLossySpray runs the collectives over a fabric that loses,
// duplicates and reorders frames: the transport repairs it and the results
// are exact.
func TestCollectivesLossySpray(t *testing.T) {
	seed := testutil.Seed(t)
	rng := testutil.Rand(t)
	w := sprayWorld(t, 4, collectivetest.SprayConfig{
		Fabric:    mem.Config{Seed: seed, Loss: 0.01, Dup: 0.01, Reorder: 0.2, ReorderDelay: 20 * time.Microsecond},
		Transport: transport.Config{Seed: seed, MinRTO: time.Millisecond},
	})
	n := 200 << 10
	if testing.Short() {
		n = 20 << 10
	}
	checkAllReduce[float32](t, w, rng, n, Sum, nil)
	checkAllToAll[int32](t, w, rng, n/4, nil)
	checkBroadcast[float64](t, w, rng, n/2, 2, nil)
	for r, c := range w.comms {
		st, err := c.(*SprayComm).Conn((r + 1) % 4).Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rank %d QP to rank %d: %+v", r, (r+1)%4, st)
	}
}

func TestAliasing(t *testing.T) {
	w := tcpWorld(t, 2)
	w.run(t, func(ctx context.Context, r int, c Comm) error {
		x := make([]int32, 8)
		if err := AllReduce(ctx, c, x[:4], x[2:6], Sum, nil); !isInvalid(err) {
			return fmt.Errorf("overlapping AllReduce: %v", err)
		}
		if err := AllToAll(ctx, c, x[:4], x[:4], nil); !isInvalid(err) {
			return fmt.Errorf("in-place AllToAll: %v", err)
		}
		if err := ReduceScatter(ctx, c, x[:4], x[:2], Sum, nil); !isInvalid(err) {
			return fmt.Errorf("overlapping ReduceScatter: %v", err)
		}
		if err := AllGather(ctx, c, x[:2], x[:4], nil); r == 0 && err != nil {
			return fmt.Errorf("in-place AllGather at block 0: %v", err)
		} else if r == 1 && !isInvalid(err) {
			return fmt.Errorf("AllGather with send at block 0 of rank 1: %v", err)
		}
		if r == 1 { // rank 0 did a real AllGather: give it its partner
			if err := AllGather(ctx, c, x[2:4], x[:4], nil); err != nil {
				return err
			}
		}
		if !slices.Equal(x[:4], make([]int32, 4)) {
			return fmt.Errorf("buffers touched: %v", x)
		}
		return nil
	})
}
