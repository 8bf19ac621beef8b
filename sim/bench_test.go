package sim

import (
	"fmt"
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

// BenchmarkMoEStep runs one MoE training step of EP groups of 32 on a
// 128-host fat-tree (spray, lossless) and reports events per second of
// the run and the heap per host: the fabric at the scale of the large
// runs, per event.
func BenchmarkMoEStep(b *testing.B) {
	tp, err := ParseTopo("fattree:8,rate=100gbit")
	if err != nil {
		b.Fatal(err)
	}
	w, err := ParseWorkloadOn("moe:ep=32,tokens=16,place=spread,grad=128k,iters=1,compute=50us", tp, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var events uint64
	var ms runtime.MemStats
	var heap uint64
	for b.Loop() {
		res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Profiles: []string{ProfileSpray}, Scenarios: []string{ScenarioLossless}})
		if err != nil {
			b.Fatal(err)
		}
		if r := res.Rows[0]; r.Done != r.Flows {
			b.Fatalf("%d of %d flows done", r.Done, r.Flows)
		}
		events += res.Rows[0].Events
		runtime.ReadMemStats(&ms)
		heap = max(heap, ms.HeapInuse)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(heap)/float64(tp.Hosts()), "heapB/host")
}

// BenchmarkCompareParallel runs a comparison of two profiles under three
// scenarios (six runs) one at a time and two at once, and reports the
// events per second of wall time: what Config.Parallel gains on a
// machine with two idle cores.
func BenchmarkCompareParallel(b *testing.B) {
	tp, err := ParseTopo("leafspine:8x4x4,rate=100gbit")
	if err != nil {
		b.Fatal(err)
	}
	w, err := ParseWorkload("alltoall:128k", tp.Hosts(), 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, par := range []int{1, 2} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			var events uint64
			for b.Loop() {
				res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Parallel: par,
					Scenarios: []string{ScenarioLossless, ScenarioLoss01, ScenarioLinkFail}})
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res.Rows {
					events += r.Events
				}
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
