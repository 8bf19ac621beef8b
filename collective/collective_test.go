package collective_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"

	"github.com/sprayfabric/spray/internal/testutil"
)

// world is a set of ranks built in this process.
type world struct {
	name  string
	comms []Comm
	// broken is set by a failed run: the ranks' streams are out of step
	// after it, so later runs on the world fail at once, naming the cause.
	broken *string
}

func tcpWorld(t *testing.T, n int) world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := collectivetest.TCP(ctx, n, TCPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w := world{name: "tcp", broken: new(string)}
	for _, c := range cs {
		w.comms = append(w.comms, c)
		t.Cleanup(func() { c.Close() })
	}
	return w
}

func sprayWorld(t *testing.T, n int, cfg collectivetest.SprayConfig) world {
	t.Helper()
	if cfg.Transport.Seed == 0 {
		cfg.Transport.Seed = testutil.Seed(t)
	}
	if cfg.Fabric.Seed == 0 {
		cfg.Fabric.Seed = testutil.Seed(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lw, err := collectivetest.Spray(ctx, n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lw.Close()
		if m := lw.Fabric.Stats().Misuse; m != 0 {
			t.Errorf("link/mem misuse count %d", m)
		}
	})
	w := world{name: "spray", broken: new(string)}
	for _, c := range lw.Comms {
		w.comms = append(w.comms, c)
	}
	return w
}

// run calls fn for every rank at once and fails the test with the errors.
// The first error cancels the other ranks.
func (w world) run(t *testing.T, fn func(ctx context.Context, r int, c Comm) error) {
	t.Helper()
	if w.broken != nil && *w.broken != "" {
		t.Fatalf("not run: the world failed in %s", *w.broken)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, len(w.comms))
	var wg sync.WaitGroup
	for r, c := range w.comms {
		wg.Go(func() {
			if errs[r] = fn(ctx, r, c); errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// The first rank to fail cancels the others: report its error, not
	// theirs.
	for _, canceled := range []bool{false, true} {
		for r, err := range errs {
			if err != nil && (canceled || !errors.Is(err, context.Canceled)) {
				if w.broken != nil {
					*w.broken = fmt.Sprintf("%s: rank %d: %v", t.Name(), r, err)
				}
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	}
}

// values returns n integer-valued elements in [-1000, 1000], so that sums
// over a few ranks are exact in any order, even in float32.
func values[T Element](rng *rand.Rand, n int) []T {
	x := make([]T, n)
	for i := range x {
		x[i] = T(rng.IntN(2001) - 1000)
	}
	return x
}

func refReduce[T Element](in [][]T, op Op) []T {
	out := slices.Clone(in[0])
	for _, x := range in[1:] {
		for i, v := range x {
			switch op {
			case Sum:
				out[i] += v
			case Min:
				out[i] = min(out[i], v)
			case Max:
				out[i] = max(out[i], v)
			}
		}
	}
	return out
}

func equal[T Element](t *testing.T, what string, got, want []T) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: element %d of %d is %v, want %v", what, i, len(got), got[i], want[i])
		}
	}
}

// checkAllReduce runs AllReduce of n elements (in place on odd ranks) and
// compares every rank's result with the serial reference.
func checkAllReduce[T Element](t *testing.T, w world, rng *rand.Rand, n int, op Op, opt *Options) {
	t.Helper()
	p := len(w.comms)
	in := make([][]T, p)
	for r := range in {
		in[r] = values[T](rng, n)
	}
	want := refReduce(in, op)
	out := make([][]T, p)
	w.run(t, func(ctx context.Context, r int, c Comm) error {
		send := slices.Clone(in[r])
		recv := send
		if r%2 == 0 {
			recv = make([]T, n)
		}
		err := AllReduce(ctx, c, send, recv, op, opt)
		if r%2 == 0 && err == nil && !slices.Equal(send, in[r]) {
			return fmt.Errorf("send buffer modified")
		}
		out[r] = recv
		return err
	})
	for r := range out {
		equal(t, fmt.Sprintf("rank %d", r), out[r], want)
	}
}

func checkReduceScatter[T Element](t *testing.T, w world, rng *rand.Rand, m int, op Op, opt *Options) {
	t.Helper()
	p := len(w.comms)
	in := make([][]T, p)
	for r := range in {
		in[r] = values[T](rng, p*m)
	}
	want := refReduce(in, op)
	out := make([][]T, p)
	w.run(t, func(ctx context.Context, r int, c Comm) error {
		send := slices.Clone(in[r])
		out[r] = make([]T, m)
		err := ReduceScatter(ctx, c, send, out[r], op, opt)
		if err == nil && !slices.Equal(send, in[r]) {
			return fmt.Errorf("send buffer modified")
		}
		return err
	})
	for r := range out {
		equal(t, fmt.Sprintf("rank %d", r), out[r], want[r*m:(r+1)*m])
	}
}

func checkAllGather[T Element](t *testing.T, w world, rng *rand.Rand, m int, opt *Options) {
	t.Helper()
	p := len(w.comms)
	var want []T
	in := make([][]T, p)
	for r := range in {
		in[r] = values[T](rng, m)
		want = append(want, in[r]...)
	}
	out := make([][]T, p)
	w.run(t, func(ctx context.Context, r int, c Comm) error {
		out[r] = make([]T, p*m)
		send := slices.Clone(in[r])
		if r%2 == 1 { // in place
			copy(out[r][r*m:], send)
			send = out[r][r*m : (r+1)*m]
		}
		return AllGather(ctx, c, send, out[r], opt)
	})
	for r := range out {
		equal(t, fmt.Sprintf("rank %d", r), out[r], want)
	}
}

func checkAllToAll[T Element](t *testing.T, w world, rng *rand.Rand, m int, opt *Options) {
	t.Helper()
	p := len(w.comms)
	in := make([][]T, p)
	for r := range in {
		in[r] = values[T](rng, p*m)
	}
	out := make([][]T, p)
	w.run(t, func(ctx context.Context, r int, c Comm) error {
		out[r] = make([]T, p*m)
		return AllToAll(ctx, c, slices.Clone(in[r]), out[r], opt)
	})
	for r := range out {
		var want []T
		for k := range p {
			want = append(want, in[k][r*m:(r+1)*m]...)
		}
		equal(t, fmt.Sprintf("rank %d", r), out[r], want)
	}
}

func checkBroadcast[T Element](t *testing.T, w world, rng *rand.Rand, n, root int, opt *Options) {
	t.Helper()
	p := len(w.comms)
	want := values[T](rng, n)
	out := make([][]T, p)
	w.run(t, func(ctx context.Context, r int, c Comm) error {
		out[r] = make([]T, n)
		if r == root {
			copy(out[r], want)
		}
		return Broadcast(ctx, c, out[r], root, opt)
	})
	for r := range out {
		equal(t, fmt.Sprintf("rank %d", r), out[r], want)
	}
}

// checkType runs every collective on element type T at each size (in
// elements per rank or per block).
func checkType[T Element](t *testing.T, w world, rng *rand.Rand, sizes []int, opt *Options) {
	for _, n := range sizes {
		for _, op := range []Op{Sum, Min, Max} {
			t.Run(fmt.Sprintf("AllReduce/%v/%d", op, n), func(t *testing.T) { checkAllReduce[T](t, w, rng, n, op, opt) })
		}
		op := Op(rng.IntN(3))
		t.Run(fmt.Sprintf("ReduceScatter/%v/%d", op, n), func(t *testing.T) { checkReduceScatter[T](t, w, rng, n, op, opt) })
		t.Run(fmt.Sprintf("AllGather/%d", n), func(t *testing.T) { checkAllGather[T](t, w, rng, n, opt) })
		t.Run(fmt.Sprintf("AllToAll/%d", n), func(t *testing.T) { checkAllToAll[T](t, w, rng, n, opt) })
		conc := Options{AllToAllConcurrent: true}
		if opt != nil {
			conc.ChunkBytes, conc.SmallBytes = opt.ChunkBytes, opt.SmallBytes
		}
		t.Run(fmt.Sprintf("AllToAllConcurrent/%d", n), func(t *testing.T) { checkAllToAll[T](t, w, rng, n, &conc) })
		root := rng.IntN(len(w.comms))
		t.Run(fmt.Sprintf("Broadcast/root%d/%d", root, n), func(t *testing.T) { checkBroadcast[T](t, w, rng, n, root, opt) })
	}
}

var worldSizes = []int{1, 2, 3, 4, 8}

// TestCollectives runs every collective, element type and operator on
// every world size over both Comms, at sizes from nothing to past the
// recursive-doubling threshold, with small chunks so that messages are cut
// up, and compares each rank's result with a serial reference.
func TestCollectives(t *testing.T) {
	rng := testutil.Rand(t)
	opt := &Options{ChunkBytes: 1000} // not a multiple of 8: partial chunks
	for _, p := range worldSizes {
		for _, mk := range []func(*testing.T, int) world{tcpWorld, func(t *testing.T, n int) world { return sprayWorld(t, n, collectivetest.SprayConfig{}) }} {
			w := mk(t, p)
			t.Run(fmt.Sprintf("%s/%d", w.name, p), func(t *testing.T) {
				sizes := []int{0, 1, 2, 5, 257, 3000}
				if testing.Short() { // the race detector slows 8 ranks of spray down
					sizes = sizes[:5]
				}
				t.Run("float32", func(t *testing.T) { checkType[float32](t, w, rng, sizes, opt) })
				t.Run("float64", func(t *testing.T) { checkType[float64](t, w, rng, sizes, opt) })
				t.Run("int32", func(t *testing.T) { checkType[int32](t, w, rng, sizes, opt) })
			})
		}
	}
}

func isInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// TestRingOnPowerOfTwo forces the ring where recursive doubling would run.
func TestRingOnPowerOfTwo(t *testing.T) {
	rng := testutil.Rand(t)
	w := tcpWorld(t, 4)
	checkAllReduce[int32](t, w, rng, 7, Sum, &Options{SmallBytes: -1})
	checkAllReduce[float32](t, w, rng, 1000, Min, &Options{SmallBytes: -1, ChunkBytes: 1})
}
