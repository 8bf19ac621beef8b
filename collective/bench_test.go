package collective_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"
)

// benchWorld builds a world of n ranks for a benchmark.
func benchWorld(b *testing.B, kind string, n int) []Comm {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cs []Comm
	switch kind {
	case "tcp":
		ts, err := collectivetest.TCP(ctx, n, TCPConfig{})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range ts {
			cs = append(cs, c)
			b.Cleanup(func() { c.Close() })
		}
	case "spray":
		w, err := collectivetest.Spray(ctx, n, collectivetest.SprayConfig{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { w.Close() })
		for _, c := range w.Comms {
			cs = append(cs, c)
		}
	}
	return cs
}

// benchColl runs fn on every rank once per iteration; rank 0 drives the
// loop and the others follow (they stop at a zero-length round).
func benchColl(b *testing.B, cs []Comm, fn func(ctx context.Context, r int, c Comm) error) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for r := 1; r < len(cs); r++ {
		wg.Go(func() {
			var go1 [1]int32
			for {
				if errs[r] = Broadcast(ctx, cs[r], go1[:], 0, nil); errs[r] != nil || go1[0] == 0 {
					return
				}
				if errs[r] = fn(ctx, r, cs[r]); errs[r] != nil {
					return
				}
			}
		})
	}
	for b.Loop() {
		if err := Broadcast(ctx, cs[0], []int32{1}, 0, nil); err != nil {
			b.Fatal(err)
		}
		if err := fn(ctx, 0, cs[0]); err != nil {
			b.Fatal(err)
		}
	}
	if err := Broadcast(ctx, cs[0], []int32{0}, 0, nil); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
}

// BenchmarkAllReduce reports nccl-tests' bus bandwidth (algorithm
// bandwidth times 2(p-1)/p) of a float32 sum over 4 ranks in one process.
func BenchmarkAllReduce(b *testing.B) {
	const p = 4
	for _, kind := range []string{"tcp", "spray"} {
		for _, size := range []int{4 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", kind, size>>10), func(b *testing.B) {
				cs := benchWorld(b, kind, p)
				bufs := make([][]float32, p)
				for r := range bufs {
					bufs[r] = make([]float32, size/4)
				}
				b.SetBytes(int64(size))
				benchColl(b, cs, func(ctx context.Context, r int, c Comm) error {
					return AllReduce(ctx, c, bufs[r], bufs[r], Sum, nil)
				})
				algbw := float64(size) * float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(algbw*2*(p-1)/p/1e9, "busGB/s")
			})
		}
	}
}

// BenchmarkAllToAll reports the bus bandwidth (algorithm bandwidth times
// (p-1)/p) of an all-to-all of 4 MiB per rank over 4 ranks.
func BenchmarkAllToAll(b *testing.B) {
	const p, size = 4, 4 << 20
	for _, kind := range []string{"tcp", "spray"} {
		b.Run(kind, func(b *testing.B) {
			cs := benchWorld(b, kind, p)
			send, recv := make([][]float32, p), make([][]float32, p)
			for r := range send {
				send[r], recv[r] = make([]float32, size/4), make([]float32, size/4)
			}
			b.SetBytes(size)
			benchColl(b, cs, func(ctx context.Context, r int, c Comm) error {
				return AllToAll(ctx, c, send[r], recv[r], nil)
			})
			algbw := float64(size) * float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(algbw*(p-1)/p/1e9, "busGB/s")
		})
	}
}
