//go:build unix

package transport

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link/mem"
)

// BenchmarkSmallStream streams 64-byte SENDs with 32 outstanding between
// two Endpoints over link/mem on the real clock, as spray perf --link mem
// --size 64 does: the receiver Recvs and releases each message, the sender
// reaps its completions from the CQ. It reports the messages a second, the
// ACKs the receiver sent per message and the sender's retransmits (none
// on an idle machine: the link is lossless).
func BenchmarkSmallStream(b *testing.B) {
	const depth = 32
	t := &testing.T{}
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: 1}, Config{Profile: Spray, Seed: 1})
	defer ea.Close()
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := b.N
	done := make(chan error, 1)
	go func() {
		for range n {
			m, err := cb.Recv(ctx)
			if err != nil {
				done <- err
				return
			}
			m.Release()
		}
		done <- nil
	}()
	msg := make([]byte, 64)
	var comps [64]Completion
	inflight := 0
	cq := ea.CQ()
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	for i := range n {
		for inflight >= depth {
			if err := cq.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			inflight -= cq.Poll(comps[:])
		}
		if err := ca.Post(ctx, WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: msg}); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for inflight > 0 {
		if err := cq.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		inflight -= cq.Poll(comps[:])
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	el, cpu := time.Since(start), processCPU()-cpu0
	b.StopTimer()
	sa, _ := ca.Stats(ctx)
	sb, _ := cb.Stats(ctx)
	b.ReportMetric(float64(n)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(sb.AcksSent)/float64(n), "acks/msg")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/msg")
	b.ReportMetric(float64(sa.Retransmits), "retransmits")
	if testing.Verbose() {
		rs, _ := ca.RetransmitStats(ctx)
		es, _ := ea.Stats(ctx)
		b.Logf("%d ACKs for %d messages; sender's scoreboard %+v; engine %+v", sb.AcksSent, n, rs, es)
	}
}

// processCPU returns the CPU time the process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
