package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/route"
	"github.com/sprayfabric/spray/link/udp"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// PairRun describes one perf run between the two hosts of a pair testbed.
type PairRun struct {
	Kind      string           // KindXDP, KindRaw, KindUDP or KindTCP
	Transport transport.Config // for the spray kinds
	Perf      PerfConfig
	// Wrap, when set, wraps the client's link (a capture, say).
	Wrap func(link.Link) link.Link
	// During, when set, runs in its own goroutine while the workload runs,
	// with the two endpoints' links (nil for TCP); cancel its context to
	// stop it. RunPair waits for it before returning.
	During func(ctx context.Context, client, server link.Link)
}

// PairResult is a perf result with the endpoints' counters.
type PairResult struct {
	PerfResult
	Client, Server     transport.EngineStats
	ClientQP, ServerQP transport.QPStats
	// ClientPaths is the client QP's per-path view at the end of the run.
	ClientPaths []multipath.PathStats
}

// RunPair runs the perf workload from host A (client) to host B (server).
func RunPair(ctx context.Context, p *testbed.Pair, run PairRun) (PairResult, error) {
	return RunHosts(ctx, p.A, p.B, run)
}

// RunHosts runs the perf workload from one testbed host (client) to another
// (server), each end in its own namespace.
func RunHosts(ctx context.Context, a, b *testbed.Host, run PairRun) (PairResult, error) {
	if run.Kind == KindTCP {
		return runHostsTCP(ctx, a, b, run)
	}
	ports := multipath.Entropies(run.Transport.Seed^0x706f727473, max(run.Transport.Entropies, 8))
	open := func(h *testbed.Host) (link.Link, error) {
		var l link.Link
		err := h.Do(func() error {
			var err error
			l, err = OpenLink(LinkSpec{Kind: run.Kind, Ifindex: h.Ifindex, MAC: h.MAC, IP: h.IP, Ports: ports, FrameSize: h.MTU + 14,
				BusyPoll: run.Transport.BusyPoll > 0})
			return err
		})
		return l, err
	}
	la, err := open(a)
	if err != nil {
		return PairResult{}, fmt.Errorf("bench: opening %s link in %s: %w", run.Kind, a.Name, err)
	}
	lb, err := open(b)
	if err != nil {
		la.Close()
		return PairResult{}, fmt.Errorf("bench: opening %s link in %s: %w", run.Kind, b.Name, err)
	}
	clientLink := la
	if run.Wrap != nil {
		clientLink = run.Wrap(la)
	}
	cfg := run.Transport
	ea, err := transport.NewEndpoint(clientLink, cfg)
	if err != nil {
		la.Close()
		lb.Close()
		return PairResult{}, err
	}
	defer ea.Close()
	if cfg.Seed != 0 { // 0: both unpredictable
		cfg.Seed++
	}
	eb, err := transport.NewEndpoint(lb, cfg)
	if err != nil {
		lb.Close()
		return PairResult{}, err
	}
	defer eb.Close()
	// Frames go to the next hop's MAC: the peer's own on a pair, a leaf's
	// across a fabric.
	var hopAB, hopBA [6]byte
	if err := a.Do(func() error {
		p, err := route.Resolve(ctx, b.IP)
		hopAB = p.DstMAC
		return err
	}); err != nil {
		return PairResult{}, err
	}
	if err := b.Do(func() error {
		p, err := route.Resolve(ctx, a.IP)
		hopBA = p.DstMAC
		return err
	}); err != nil {
		return PairResult{}, err
	}
	res, err := runSpray(ctx, ea, eb, &hopAB, &hopBA, run.Perf, func(ctx context.Context) {
		if run.During != nil {
			run.During(ctx, la, lb)
		}
	})
	res.Link = run.Kind
	res.Profile = cfg.Profile.String()
	var segs, msgs uint64
	for _, l := range []link.Link{la, lb} {
		if r, ok := l.(link.StatsReader); ok {
			st := r.Stats()
			res.LinkDrops += st.RxDropped + st.TxDropped
		}
		if u, ok := l.(*udp.Link); ok {
			c := u.Counters()
			segs, msgs = segs+c.TxSegmented, msgs+c.TxSegmentMsgs
		}
	}
	if msgs > 0 {
		res.FramesPerGSO = float64(segs) / float64(msgs)
	}
	return res, err
}

// RunEndpoints connects a QP on each endpoint and runs the perf workload
// from a (client) to b (server).
func RunEndpoints(ctx context.Context, a, b *transport.Endpoint, pc PerfConfig) (PairResult, error) {
	return runSpray(ctx, a, b, nil, nil, pc, func(context.Context) {})
}

// runSpray connects a QP on each endpoint and runs the workload from a to b.
// hopAB and hopBA, when not nil, are the next-hop MACs from a towards b and
// back; nil means the peer's own MAC.
func runSpray(ctx context.Context, a, b *transport.Endpoint, hopAB, hopBA *[6]byte, pc PerfConfig, during func(context.Context)) (PairResult, error) {
	if pc.QPs > 1 {
		return runSprayQPs(ctx, a, b, hopAB, hopBA, pc, during)
	}
	ca, err := a.CreateQP(ctx)
	if err != nil {
		return PairResult{}, err
	}
	cb, err := b.CreateQP(ctx)
	if err != nil {
		return PairResult{}, err
	}
	ia, ib := ca.Info(), cb.Info()
	if hopAB != nil {
		ib.MAC = *hopAB
	}
	if hopBA != nil {
		ia.MAC = *hopBA
	}
	if err := pc.securePair(ctx, ca, cb); err != nil {
		return PairResult{}, err
	}
	if err := ca.Connect(ctx, ib); err != nil {
		return PairResult{}, err
	}
	if err := cb.Connect(ctx, ia); err != nil {
		return PairResult{}, err
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); during(dctx) }()
	// A failing server cancels the client, so that neither waits forever.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	srv := make(chan error, 1)
	go func() {
		err := PerfServer(wctx, &SprayConn{C: cb, CQ: b.CQ()})
		if err != nil {
			cancel(fmt.Errorf("bench: server: %w", err))
		}
		srv <- err
	}()
	pr, err := PerfClient(wctx, &SprayConn{C: ca, CQ: a.CQ()}, pc)
	stop()
	<-done
	res := PairResult{PerfResult: pr}
	res.Protection = pc.protection()
	if err != nil {
		if cause := context.Cause(wctx); cause != nil && cause != context.Canceled {
			return res, cause
		}
		return res, err
	}
	if err := <-srv; err != nil {
		return res, fmt.Errorf("bench: server: %w", err)
	}
	if res.ClientQP, err = ca.Stats(ctx); err != nil {
		return res, err
	}
	if res.ServerQP, err = cb.Stats(ctx); err != nil {
		return res, err
	}
	if res.ClientPaths, err = ca.PathStats(ctx); err != nil {
		return res, err
	}
	if res.Client, err = a.Stats(ctx); err != nil {
		return res, err
	}
	if res.Server, err = b.Stats(ctx); err != nil {
		return res, err
	}
	res.Retransmits = res.ClientQP.Retransmits
	res.Duplicates = res.ServerQP.Duplicates
	res.Timeouts = res.ClientQP.Timeouts
	return res, nil
}

func runHostsTCP(ctx context.Context, a, b *testbed.Host, run PairRun) (PairResult, error) {
	client, server, err := tcpPair(ctx,
		func() (ln net.Listener, err error) {
			err = b.Do(func() error {
				ln, err = net.Listen("tcp", netip.AddrPortFrom(b.IP, 0).String())
				return err
			})
			return ln, err
		},
		func(addr string) (c net.Conn, err error) {
			err = a.Do(func() error {
				var d net.Dialer
				c, err = d.DialContext(ctx, "tcp", addr)
				return err
			})
			return c, err
		})
	if err != nil {
		return PairResult{}, fmt.Errorf("bench: TCP between the hosts: %w", err)
	}
	defer client.Close()
	defer server.Close()
	srv := make(chan error, 1)
	go func() { srv <- PerfServer(ctx, NewTCPConn(server)) }()
	pr, err := PerfClient(ctx, NewTCPConn(client), run.Perf)
	pr.Link, pr.Profile = KindTCP, "kernel"
	if err != nil {
		return PairResult{PerfResult: pr}, err
	}
	if err := <-srv; err != nil {
		return PairResult{PerfResult: pr}, fmt.Errorf("bench: server: %w", err)
	}
	return PairResult{PerfResult: pr}, nil
}
