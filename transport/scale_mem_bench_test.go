package transport

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
)

// idlePairs opens two Endpoints with cfg over a link/mem fabric on the
// system clock; each of the returned functions creates n more QPs on each
// endpoint, connected pairwise, and closes everything.
func idlePairs(tb testing.TB, cfg Config) (add func(n int) []*Conn, closeAll func()) {
	tb.Helper()
	fab := mem.NewFabric(mem.Config{}, clock.NewSystem())
	pa, err := fab.NewPort(macA, ipA)
	if err != nil {
		tb.Fatal(err)
	}
	pb, err := fab.NewPort(macB, ipB)
	if err != nil {
		tb.Fatal(err)
	}
	ea, err := NewEndpoint(pa, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Seed++
	eb, err := NewEndpoint(pb, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	add = func(n int) []*Conn {
		cs := make([]*Conn, 0, 2*n)
		for range n {
			ca, err := ea.CreateQP(ctx)
			if err != nil {
				tb.Fatal(err)
			}
			cb, err := eb.CreateQP(ctx)
			if err != nil {
				tb.Fatal(err)
			}
			if err := ca.Connect(ctx, cb.Info()); err != nil {
				tb.Fatal(err)
			}
			if err := cb.Connect(ctx, ca.Info()); err != nil {
				tb.Fatal(err)
			}
			cs = append(cs, ca, cb)
		}
		return cs
	}
	return add, func() { ea.Close(); eb.Close() }
}

// heapAfterGC returns the bytes of live heap objects after a full
// collection.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// idleQPBytes returns the live heap that n connected, idle QP pairs add to
// two endpoints with cfg, per QP (2n QPs). The endpoints and a first pair
// exist before the first measurement: what an endpoint holds whatever its
// number of QPs (its link's buffers, taken with its first QP) does not
// count.
func idleQPBytes(tb testing.TB, cfg Config, n int) float64 {
	add, closeAll := idlePairs(tb, cfg)
	defer closeAll()
	add(1)
	before := heapAfterGC()
	cs := add(n)
	after := heapAfterGC()
	runtime.KeepAlive(cs)
	return float64(int64(after)-int64(before)) / float64(len(cs))
}

// BenchmarkIdleQPMemory reports the heap an idle, connected QP holds
// (B/idle-QP): n QPs on each of two link/mem endpoints with the default
// Config, connected pairwise, heap after GC, per QP.
func BenchmarkIdleQPMemory(b *testing.B) {
	for _, prof := range []Profile{Spray, RoCE} {
		for _, n := range []int{1, 1024, 10000} {
			b.Run(fmt.Sprintf("profile=%v/qps=%d", prof, n), func(b *testing.B) {
				var sum float64
				runs := 0
				for b.Loop() {
					sum += idleQPBytes(b, Config{Profile: prof, Seed: 1}, n)
					runs++
				}
				b.ReportMetric(sum/float64(runs), "B/idle-QP")
			})
		}
	}
}
