package transport

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/udp"
)

// scaleConfig is the configuration of both endpoints in the scale
// benchmarks: the defaults, with a fixed seed. An idle QP gives back its
// rings (TestIdleQPMemory), so ten thousand idle pairs take some tens of
// MB.
func scaleConfig(seed uint64) Config {
	return Config{Seed: seed}
}

// scaleLinks returns two connected links: over link/mem on the system
// clock, or over link/udp on loopback.
func scaleLinks(b *testing.B, kind string) (link.Link, link.Link) {
	b.Helper()
	switch kind {
	case "mem":
		fab := mem.NewFabric(mem.Config{Seed: 1}, clock.NewSystem())
		b.Cleanup(func() { fab.Close() })
		pa, err := fab.NewPort(macA, ipA)
		if err != nil {
			b.Fatal(err)
		}
		pb, err := fab.NewPort(macB, ipB)
		if err != nil {
			b.Fatal(err)
		}
		return pa, pb
	case "udp":
		x, y := testutil.LoopbackNet(testutil.Rand(b))
		a, err := udp.Open(udp.Config{Local: netip.AddrFrom4([4]byte{127, x, y, 1})})
		testutil.SkipIfNotSupported(b, err, udp.ErrNotSupported)
		c, err := udp.Open(udp.Config{Local: netip.AddrFrom4([4]byte{127, x, y, 2})})
		if err != nil {
			a.Close()
		}
		testutil.SkipIfNotSupported(b, err, udp.ErrNotSupported)
		return a, c
	}
	b.Fatalf("unknown link %q", kind)
	return nil, nil
}

// scaleEndpoints returns two endpoints over links of kind with n connected
// QP pairs between them.
func scaleEndpoints(b *testing.B, kind string, n int) (ea, eb *Endpoint, ca, cb []*Conn) {
	b.Helper()
	la, lb := scaleLinks(b, kind)
	ea, err := NewEndpoint(la, scaleConfig(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ea.Close() })
	eb, err = NewEndpoint(lb, scaleConfig(2))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eb.Close() })
	ctx := context.Background()
	for range n {
		a, err := ea.CreateQP(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c, err := eb.CreateQP(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Connect(ctx, c.Info()); err != nil {
			b.Fatal(err)
		}
		if err := c.Connect(ctx, a.Info()); err != nil {
			b.Fatal(err)
		}
		ca, cb = append(ca, a), append(cb, c)
	}
	return ea, eb, ca, cb
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScaleStream measures one QP streaming 64 KiB messages (8 in
// flight, posted on the CQ) from one endpoint to another beside idle
// connected QP pairs between the same endpoints: MB/s, and the CPU time of
// the whole process (both endpoints) per MB moved, cpu-µs/MB. An engine's
// step costs what moves, not the QPs it holds, so both stay flat from 1 to
// 10,000 idle QPs.
func BenchmarkScaleStream(b *testing.B) {
	for _, kind := range []string{"mem", "udp"} {
		for _, idle := range []int{1, 1024, 10000} {
			b.Run(fmt.Sprintf("%s/idle=%d", kind, idle), func(b *testing.B) {
				benchStream(b, kind, idle)
			})
		}
	}
}

func benchStream(b *testing.B, kind string, idle int) {
	ea, _, ca, cb := scaleEndpoints(b, kind, idle+1)
	src, dst := ca[idle], cb[idle]
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
	for range 64 { // warm up: the controller finds its rate
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
	select {
	case err := <-recvErr:
		b.Fatalf("Recv: %v", err)
	default:
	}
}

// BenchmarkScaleAllToAll measures one all-to-all round between two
// endpoints over link/mem with n QP pairs: every QP on either side sends
// 16 KiB to its peer, and the round ends when every message has arrived
// and every send completed. It reports the CPU time of the whole process
// per round (cpu-ms/round) and per QP of a round (cpu-µs/QP), which stays
// flat when a round costs O(n).
func BenchmarkScaleAllToAll(b *testing.B) {
	for _, n := range []int{16, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) {
			ea, eb, ca, cb := scaleEndpoints(b, "mem", n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			msg := make([]byte, 16<<10)
			comps := make([]Completion, 256)
			round := func() {
				for i := range n {
					if err := ca[i].Post(ctx, WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: msg}); err != nil {
						b.Fatal(err)
					}
					if err := cb[i].Post(ctx, WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: msg}); err != nil {
						b.Fatal(err)
					}
				}
				for i := range n {
					for _, c := range []*Conn{ca[i], cb[i]} {
						m, err := c.Recv(ctx)
						if err != nil {
							b.Fatal(err)
						}
						if m.Len != len(msg) {
							b.Fatalf("received %d bytes, want %d", m.Len, len(msg))
						}
						m.Release()
					}
				}
				for _, ep := range []*Endpoint{ea, eb} {
					for got := 0; got < n; {
						if err := ep.CQ().Wait(ctx); err != nil {
							b.Fatal(err)
						}
						k := ep.CQ().Poll(comps)
						for _, c := range comps[:k] {
							if c.Err != nil {
								b.Fatal(c.Err)
							}
						}
						got += k
					}
				}
			}
			round()
			runtime.GC()
			var cpu0 time.Duration
			rounds := 0
			for b.Loop() {
				if rounds == 0 {
					cpu0 = cpuTime()
				}
				round()
				rounds++
			}
			cpu := cpuTime() - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(rounds), "cpu-ms/round")
			b.ReportMetric(float64(cpu.Microseconds())/float64(rounds*n), "cpu-µs/QP")
		})
	}
}
