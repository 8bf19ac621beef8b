package transport

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/udp"
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

// BenchmarkSecureStream streams 64 KiB SENDs (8 in flight) from one
// Endpoint to another, each engine in its own goroutine on the system
// clock, over link/mem and over link/udp on loopback, jumbo frames (9014
// bytes), clear, encrypted and integrity only: MB/s is goodput, cpu-µs/MB
// the CPU time of the whole process (both endpoints) per MB moved.
func BenchmarkSecureStream(b *testing.B) {
	for _, kind := range []string{"mem", "udp"} {
		for _, mode := range []string{"clear", "encrypted", "integrity"} {
			b.Run(kind+"/"+mode, func(b *testing.B) {
				var la, lb link.Link
				if kind == "udp" {
					x, y := testutil.LoopbackNet(testutil.Rand(b))
					a, err := udp.Open(udp.Config{Local: netip.AddrFrom4([4]byte{127, x, y, 1}), FrameSize: 9014})
					testutil.SkipIfNotSupported(b, err, udp.ErrNotSupported)
					c, err := udp.Open(udp.Config{Local: netip.AddrFrom4([4]byte{127, x, y, 2}), FrameSize: 9014})
					if err != nil {
						a.Close()
					}
					testutil.SkipIfNotSupported(b, err, udp.ErrNotSupported)
					la, lb = a, c
				} else {
					la, lb = scaleLinks(b, "mem")
				}
				cfg := Config{Seed: 1, MTU: 9014}
				ea, err := NewEndpoint(la, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { ea.Close() })
				cfg.Seed = 2
				eb, err := NewEndpoint(lb, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { eb.Close() })
				ctx := context.Background()
				src, err := ea.CreateQP(ctx)
				if err != nil {
					b.Fatal(err)
				}
				dst, err := eb.CreateQP(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if mode != "clear" {
					if err := src.Secure(ctx, secA(mode == "integrity")); err != nil {
						b.Fatal(err)
					}
					if err := dst.Secure(ctx, secB(mode == "integrity")); err != nil {
						b.Fatal(err)
					}
				}
				if err := src.Connect(ctx, dst.Info()); err != nil {
					b.Fatal(err)
				}
				if err := dst.Connect(ctx, src.Info()); err != nil {
					b.Fatal(err)
				}
				streamBench(b, ea, src, dst)
			})
		}
	}
}

// streamBench is benchStream's loop for one pair of connections.
func streamBench(b *testing.B, ea *Endpoint, src, dst *Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := dst.Recv(ctx)
			if err != nil {
				recvErr <- err
				return
			}
			m.Release()
		}
	}()
	const depth, size = 8, 64 << 10
	msg := make([]byte, size)
	comps := make([]Completion, depth)
	out, id := 0, uint64(0)
	cq := ea.CQ()
	send := func() {
		for out < depth {
			id++
			if err := src.Post(ctx, WorkRequest{ID: id, Op: OpSend, Data: msg}); err != nil {
				b.Fatal(err)
			}
			out++
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if err := cq.Wait(wctx); err != nil {
			b.Fatalf("waiting for a completion: %v", err)
		}
		n := cq.Poll(comps)
		for _, c := range comps[:n] {
			if c.Err != nil {
				b.Fatal(c.Err)
			}
		}
		out -= n
	}
	for range 64 {
		send()
	}
	runtime.GC()
	b.SetBytes(size)
	var cpu0 time.Duration
	ops := 0
	for b.Loop() {
		if ops == 0 {
			cpu0 = cpuTime()
		}
		send()
		ops++
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/(float64(ops)*size/1e6), "cpu-µs/MB")
	st, err := src.Stats(ctx)
	if err == nil {
		b.ReportMetric(float64(st.Retransmits)/float64(max(st.TxPackets, 1))*100, "%resent")
	}
	select {
	case err := <-recvErr:
		b.Fatalf("Recv: %v", err)
	default:
	}
}
