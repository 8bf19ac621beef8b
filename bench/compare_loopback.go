package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync/atomic"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/transport"
)

// DefaultLoopbackRanks is the world size of a loopback compare whose
// config gives no testbed.
const DefaultLoopbackRanks = 4

// lossyLink spoils a random share of the frames it sends (it flips their
// ICRC's last byte, so the receiver drops them as corrupt): loss injected
// by the sender, for loopback runs that have no fabric to drop frames.
type lossyLink struct {
	link.Link
	p       float64
	rng     *rand.Rand // used by Send only, which the engine calls from one goroutine
	dropped *atomic.Uint64
}

func (l *lossyLink) Send(fs []link.Frame) (int, error) {
	for i := range fs {
		if b := fs[i].Buf; len(b) > 0 && l.rng.Float64() < l.p {
			b[len(b)-1] ^= 0xff
			l.dropped.Add(1)
		}
	}
	return l.Link.Send(fs)
}

func compareLoopback(ctx context.Context, cfg CompareConfig) (CompareResult, error) {
	n := DefaultLoopbackRanks
	if cfg.Testbed.Hosts > 0 {
		n = cfg.Testbed.Hosts * max(cfg.Testbed.Leaves, 1)
	}
	res := CompareResult{Mode: "loopback", Link: KindUDP, RoCEAckTimeout: cfg.RoCEAckTimeout, Iterations: cfg.Iters,
		Protection: cfg.protection()}

	res.AllToAll = "concurrent"
	if cfg.Pairwise {
		res.AllToAll = "pairwise"
	}
	cfg.Logf("loopback: %d ranks in this process, spray and roce over link/udp on 127.x addresses, tcp over loopback TCP; no fabric: no ECN, queues or spines", n)
	for _, sc := range cfg.Scenarios {
		if sc == ScenarioCollision || sc == ScenarioSpineFail {
			cfg.Logf("%s: skipped, it needs the leaf-spine testbed (run as root)", sc)
			continue
		}
		for _, prof := range cfg.Profiles {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			row, err := loopbackRun(ctx, cfg, n, prof, sc)
			if err != nil {
				return res, err
			}
			cfg.Logf("%-9s %-6s %s", sc, prof, cmpRowSummary(row))
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// loopbackBase picks 127.B.C.0 for this process's ranks, so that runs in
// other processes at the same time do not bind the same addresses.
func loopbackBase() [4]byte {
	pid := os.Getpid()
	return [4]byte{127, byte(64 + pid%128), byte(pid >> 7), 0}
}

func loopbackRun(ctx context.Context, cfg CompareConfig, n int, prof, sc string) (CompareRow, error) {
	block := int(cfg.Size / 4 / int64(n))
	row := CompareRow{Profile: prof, Scenario: sc, Ranks: n, Bytes: int64(block * n * 4)}
	loss := 0.0
	switch sc {
	case ScenarioLoss001:
		loss = 1e-4
	case ScenarioLoss01:
		loss = 1e-3
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.RunTimeout)
	defer cancel()
	var comms []collective.Comm
	var dropped atomic.Uint64
	var closeAll func()
	if prof == ProfileTCP {
		tcs, err := collectivetest.TCP(rctx, n, collective.TCPConfig{})
		if err != nil {
			return row, fmt.Errorf("bench: loopback TCP world: %w", err)
		}
		for _, c := range tcs {
			comms = append(comms, c)
		}
		closeAll = func() {
			for _, c := range tcs {
				c.Close()
			}
		}
		if loss > 0 {
			row.Note = "kernel TCP on loopback: no loss injected"
		}
	} else {
		var err error
		comms, closeAll, err = loopbackSpray(rctx, cfg, n, prof, sc, loss, &dropped)
		if err != nil {
			return row, fmt.Errorf("bench: loopback %s world: %w", prof, err)
		}
	}
	defer closeAll()
	var qBefore qpSums
	var dBefore uint64
	hooks := a2aHooks{before: func(it int) error {
		if it != cfg.Warmup {
			return nil
		}
		dBefore = dropped.Load()
		var err error
		qBefore, err = qpCounters(rctx, comms)
		return err
	}}
	samples, wrong, runErr := runAllToAll(rctx, comms, block, cfg.Warmup, cfg.Iters, cfg.Pairwise, hooks)
	row.Samples, row.Wrong = samples, wrong
	row.summarize()
	if runErr != nil {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		row.Err = runErr.Error()
	}
	row.Drops.Loss = dropped.Load() - dBefore
	row.addQPCounters(ctx, comms, qBefore)
	return row, nil
}

// loopbackSpray builds n ranks over link/udp on loopback addresses, with a
// QP between every two.
func loopbackSpray(ctx context.Context, cfg CompareConfig, n int, prof, sc string, loss float64, dropped *atomic.Uint64) ([]collective.Comm, func(), error) {
	tc := transport.Config{Seed: cfg.Seed, MTU: 9014, Window: cfg.Window, Entropies: min(cfg.Entropies, 8)}
	if prof == ProfileRoCE {
		tc.Profile, tc.Paths, tc.LocalAckTimeout = transport.RoCE, transport.PathsECMP, cfg.RoCEAckTimeout
	}
	base := loopbackBase()
	eps := make([]*transport.Endpoint, n)
	closeAll := func() {
		for _, ep := range eps {
			if ep != nil {
				ep.Close()
			}
		}
	}
	fail := func(err error) ([]collective.Comm, func(), error) {
		closeAll()
		return nil, nil, err
	}
	for r := range n {
		a := base
		a[3] = byte(r + 1)
		ports := multipath.Entropies(cfg.Seed+uint64(r), tc.Entropies)
		ul, _, _, err := spray.OpenLink(spray.LinkConfig{Kind: spray.LinkUDP, Interface: spray.Interface{IP: netip.AddrFrom4(a), Loopback: true},
			Entropies: ports, FrameSize: tc.MTU})
		if err != nil {
			return fail(err)
		}
		l := ul
		if loss > 0 {
			l = &lossyLink{Link: ul, p: loss, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(r))), dropped: dropped}
		}
		c := tc
		c.Seed += uint64(r) * 0x9E3779B97F4A7C15
		c.OnEndpoint = cfg.endpointHook(prof, sc, r)
		if eps[r], err = transport.NewEndpoint(l, c); err != nil {
			l.Close()
			return fail(err)
		}
	}
	conns := make([][]*transport.Conn, n)
	for r := range conns {
		conns[r] = make([]*transport.Conn, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			a, err := eps[i].CreateQP(ctx)
			if err != nil {
				return fail(err)
			}
			b, err := eps[j].CreateQP(ctx)
			if err != nil {
				return fail(err)
			}
			if err := cfg.secure(ctx, a, b); err != nil {
				return fail(err)
			}
			if err := a.Connect(ctx, b.Info()); err != nil {
				return fail(err)
			}
			if err := b.Connect(ctx, a.Info()); err != nil {
				return fail(err)
			}
			conns[i][j], conns[j][i] = a, b
		}
	}
	comms := make([]collective.Comm, n)
	for r := range n {
		comms[r] = &qpComm{rank: r, conns: conns[r]}
	}
	return comms, closeAll, nil
}
