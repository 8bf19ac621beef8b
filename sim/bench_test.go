package sim

import (
	"runtime"
	"testing"
)

// BenchmarkPermutation runs a 256 KiB permutation on 64 hosts for each
// profile and reports events per second, and the heap per host and per
// packet buffer the run allocated.
func BenchmarkPermutation(b *testing.B) {
	for _, prof := range []string{ProfileRoCE, ProfileSpray} {
		b.Run(prof, func(b *testing.B) {
			tp, err := ParseTopo("leafspine:8x8x8,rate=100gbit")
			if err != nil {
				b.Fatal(err)
			}
			w, err := ParseWorkload("permutation:256k", tp.Hosts(), 1)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var events uint64
			var ms runtime.MemStats
			var heap uint64
			var pk int
			for b.Loop() {
				res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Profiles: []string{prof}, Scenarios: []string{ScenarioLossless}})
				if err != nil {
					b.Fatal(err)
				}
				r := res.Rows[0]
				if r.Done != r.Flows {
					b.Fatalf("%d of %d flows done", r.Done, r.Flows)
				}
				events += r.Events
				pk = r.PacketBuffers
				runtime.ReadMemStats(&ms)
				heap = max(heap, ms.HeapInuse)
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(heap)/float64(tp.Hosts()), "heapB/host")
			b.ReportMetric(float64(pk), "pktbufs")
		})
	}
}
