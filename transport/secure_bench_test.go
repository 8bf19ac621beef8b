package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
)

// BenchmarkSecure streams 1 MiB SENDs between two QPs over link/mem
// (jumbo frames, no loss, both engines stepped in the benchmark's
// goroutine under a simulated clock, so that the time measured is the
// CPU both sides spend): clear, encrypted and integrity only, in both
// profiles. MB/s is goodput; cpu-µs/MB the process's CPU time per MB.
// docs/results.md has the figures.
func BenchmarkSecure(b *testing.B) {
	const size = 1 << 20
	for _, prof := range []Profile{Spray, RoCE} {
		for _, mode := range []string{"clear", "encrypted", "integrity"} {
			b.Run(fmt.Sprintf("%v/%s", prof, mode), func(b *testing.B) {
				cfg := Config{Profile: prof, Seed: 7, MTU: 9014, MinRTO: time.Millisecond}
				mc := mem.Config{Seed: 7}
				var s *simPair
				if mode == "clear" {
					s = newSimPair(b, mc, cfg)
				} else {
					s = newSecPair(b, mc, cfg, mode == "integrity", 0)
				}
				msg := make([]byte, size)
				for i := range msg {
					msg[i] = byte(i * 7)
				}
				b.SetBytes(size)
				b.ReportAllocs()
				cpu0 := cpuTime()
				ops := 0
				for b.Loop() {
					if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
						b.Fatal(err)
					}
					want := len(s.cb) + 1
					if err := s.run(clock.Time(1<<62), func() bool { return len(s.cb) >= want }); err != nil {
						b.Fatal(err)
					}
					s.ca, s.cb = s.ca[:0], s.cb[:0]
					ops++
				}
				cpu := cpuTime() - cpu0
				b.ReportMetric(float64(cpu.Microseconds())/(float64(ops)*size/1e6), "cpu-µs/MB")
			})
		}
	}
}
