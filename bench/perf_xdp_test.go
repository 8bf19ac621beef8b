package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// stepper is an Engine or Shards, stepped by the caller.
type stepper interface {
	Step(clock.Time) (bool, error)
	CreateQP() (*transport.QP, error)
	Register([]byte, transport.Access) *transport.MR
}

// xdpEngines opens AF_XDP links on both ends of p and an engine (queues
// 1) or one per queue on each, stepped by the caller.
func xdpEngines(b *testing.B, p *testbed.Pair, queues int) (sa, sb stepper, engs []*transport.Engine, links []*XDPLink) {
	b.Helper()
	for i, h := range []*testbed.Host{p.A, p.B} {
		var l link.Link
		if err := h.Do(func() (err error) {
			l, err = OpenLink(LinkSpec{Kind: KindXDP, Ifindex: h.Ifindex, MAC: h.MAC, IP: h.IP, FrameSize: h.MTU + 14})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		links = append(links, l.(*XDPLink))
		cfg := transport.Config{Seed: uint64(i + 1), MTU: h.MTU + 14}
		var s stepper
		if queues > 1 {
			sh, err := transport.NewShards(l.(link.Multi), cfg)
			if err != nil {
				b.Fatal(err)
			}
			s, engs = sh, append(engs, sh.Engines()...)
		} else {
			e, err := transport.NewEngine(l, cfg)
			if err != nil {
				b.Fatal(err)
			}
			s, engs = e, append(engs, e)
		}
		if i == 0 {
			sa = s
		} else {
			sb = s
		}
	}
	return sa, sb, engs, links
}

// BenchmarkXDPTransfer moves 1 MiB RDMA WRITEs from one namespace to the
// other over AF_XDP links on a veth pair with 9000-byte frames, both
// engines (or both sets of one per queue) stepped on the benchmark's
// goroutine with the real clock: the steady data path of engine and link,
// without the Endpoint's goroutines. It reports allocations per op (zero
// is the rule: nothing on that path allocates) and, with two queues, the
// frames handed over between engines per op (every frame, both ways: the
// QPs sit on different queues), and the share of the receiver's
// multi-buffer frames that its link copied rather than handing them out
// in place. Root only.
func BenchmarkXDPTransfer(b *testing.B) {
	testutil.SkipIfNotRoot(b)
	for _, queues := range []int{1, 2} {
		b.Run(fmt.Sprintf("queues=%d", queues), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := testbed.NewPair(ctx, testbed.PairConfig{MTU: 9000, Queues: queues})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close() })
			sa, sb, engs, links := xdpEngines(b, p, queues)
			x, err := sa.CreateQP()
			if err != nil {
				b.Fatal(err)
			}
			if queues > 1 {
				// The receiver's QP on its second engine: the data arrives
				// on queue 0, as the sender sends from its first engine's
				// queue, and goes over a hand-over ring; so do the acks.
				if _, err := sb.CreateQP(); err != nil {
					b.Fatal(err)
				}
			}
			y, err := sb.CreateQP()
			if err != nil {
				b.Fatal(err)
			}
			ix, iy := x.Info(), y.Info()
			ix.MAC, iy.MAC = p.A.MAC, p.B.MAC
			if err := x.Connect(iy); err != nil {
				b.Fatal(err)
			}
			if err := y.Connect(ix); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 1<<20)
			mr := sb.Register(buf, transport.AccessRemoteWrite)
			msg := make([]byte, len(buf))
			for i := range msg {
				msg[i] = byte(i * 7)
			}
			clk := clock.NewSystem()
			deadline := time.Now().Add(5 * time.Minute)
			write := func(id uint64) {
				if err := x.Post(transport.WorkRequest{ID: id, Op: transport.OpWrite, Data: msg, Remote: mr.Remote(0)}); err != nil {
					b.Fatal(err)
				}
				for {
					now := clk.Now()
					if _, err := sa.Step(now); err != nil {
						b.Fatal(err)
					}
					if _, err := sb.Step(now); err != nil {
						b.Fatal(err)
					}
					if c, ok := x.PollCompletion(); ok {
						if c.Err != nil || c.ID != id {
							b.Fatalf("completion %+v, want ID %d without error", c, id)
						}
						return
					}
					if time.Now().After(deadline) {
						b.Fatal("no completion in 5 minutes")
					}
				}
			}
			write(1) // warm: pools, rings and the QP's state sized once
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			id := uint64(1)
			for b.Loop() {
				id++
				write(id)
			}
			b.StopTimer()
			if string(buf) != string(msg) {
				b.Fatal("the written region differs from the message")
			}
			var st transport.EngineStats
			for _, e := range engs {
				s := e.Stats()
				st.HandedOver += s.HandedOver
			}
			b.ReportMetric(float64(st.HandedOver)/float64(b.N), "handovers/op")
			var multi, copied uint64
			for _, q := range links[1].QueueStats() {
				multi += q.RxMultiBuffer
				copied += q.RxReassembled
			}
			b.ReportMetric(float64(copied)/float64(max(multi, 1)), "copied/jumbo")
		})
	}
}
