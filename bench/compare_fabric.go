package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/route"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// ErrNeedRoot is returned by Compare on a testbed when the process is not
// root; set CompareConfig.Loopback to run without privileges.
var ErrNeedRoot = errors.New("bench: compare on a testbed needs root (network namespaces, eBPF, AF_XDP); set Loopback to run without")

// cmpWorld is a set of ranks ready for an all-to-all.
type cmpWorld struct {
	comms []collective.Comm
	links []link.Link // the ranks' links, for their drop counters
	close func()
}

// hostDrops sums the receive drops of the world's links.
func (w *cmpWorld) hostDrops() uint64 {
	var n uint64
	for _, l := range w.links {
		if l, ok := l.(link.StatsReader); ok {
			n += l.Stats().RxDropped
		}
	}
	return n
}

// entropyLink reports a chosen set of entropies as the link's ports, so that
// the transport draws its QPs' entropies from them.
type entropyLink struct {
	link.Link
	ports []uint16
}

func (p *entropyLink) Info() link.Info {
	i := p.Link.Info()
	i.Ports = p.ports
	return i
}

// cmpFabric is the state of one profile under one scenario on a fabric.
type cmpFabric struct {
	cfg   CompareConfig
	fab   *testbed.Fabric
	progs *ebpf.Fabric
	// collide are, per host, entropies that its leaf hashes onto spine 0
	// towards every host of other leaves (ScenarioCollision).
	collide [][]uint16
	// linkLogf receives the links' log lines (the AF_XDP copy-mode
	// fallback), each kind once per comparison: every socket of every run
	// would otherwise say the same.
	linkLogf func(format string, args ...any)
}

func compareFabric(ctx context.Context, cfg CompareConfig) (_ CompareResult, err error) {
	if os.Geteuid() != 0 {
		return CompareResult{}, ErrNeedRoot
	}
	fab, err := testbed.NewLeafSpine(ctx, cfg.Testbed)
	if err != nil {
		return CompareResult{}, err
	}
	defer func() {
		// A testbed left behind is reported with the run's result.
		if cerr := fab.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%w: %s: %w", ErrTeardown, fab.Prefix, cerr))
		}
	}()
	res := CompareResult{Mode: "leafspine", Testbed: fab.Config.String(), Link: cfg.Link, RoCEAckTimeout: cfg.RoCEAckTimeout, Iterations: cfg.Iters,
		Protection: cfg.protection()}

	res.AllToAll = "concurrent"
	if cfg.Pairwise {
		res.AllToAll = "pairwise"
	}
	res.AllToAllLimit, res.BisectionGbps = AllToAllLimit(fab.Config)
	cfg.Logf("testbed %s: %s, %d ranks; bisection %.3f Gbit/s each way, all-to-all algbw limit %.4f GB/s",
		fab.Prefix, fab.Config, len(fab.Hosts), res.BisectionGbps, res.AllToAllLimit)
	fr := &cmpFabric{cfg: cfg, fab: fab, linkLogf: onceLogf(cfg.Logf)}
	defer func() {
		if fr.progs != nil {
			fr.progs.Close()
		}
	}()
	for _, sc := range cfg.Scenarios {
		if sc == ScenarioCollision && fr.collide == nil {
			if err := fr.attach(false); err != nil {
				return res, err
			}
			if fr.collide, err = fr.probeCollisions(ctx); err != nil {
				return res, fmt.Errorf("bench: probing ECMP hashes: %w", err)
			}
		}
		for _, prof := range cfg.Profiles {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			row, err := fr.run(ctx, prof, sc)
			if err != nil {
				return res, err
			}
			cfg.Logf("%-9s %-6s %s", sc, prof, cmpRowSummary(row))
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

func cmpRowSummary(r CompareRow) string {
	s := fmt.Sprintf("mean %v p99.9 %v algbw %.4f GB/s wrong %d retx %d drops %+v", r.Mean.Round(time.Microsecond), r.P999.Round(time.Microsecond), r.AlgBW, r.Wrong, r.Retransmits, r.Drops)
	if r.Err != "" {
		s += " error: " + r.Err
	}
	return s
}

// attach loads the fabric programs afresh (counters at zero), with ECN
// marking when ecn is set.
func (fr *cmpFabric) attach(ecn bool) error {
	if fr.progs != nil {
		fr.progs.Close()
		fr.progs = nil
	}
	var ec ebpf.ECNConfig
	if ecn {
		// Thresholds in frame times at the spine rate: at 100 Mbit/s one
		// 3.5 KB frame takes 280 µs, more than DCQCN's usual microseconds.
		ft := time.Duration(float64(fr.fab.Config.MTU+14) * 8 / float64(fr.fab.Config.RateBps) * 1e9)
		ec = ebpf.ECNConfig{KMin: 2 * ft, KMax: 8 * ft, PMax: 0.2}
	}
	p, err := fr.fab.AttachPrograms(ec)
	if err != nil {
		return err
	}
	fr.progs = p
	return nil
}

// spinePorts returns both ends of every leaf-spine link.
func (fr *cmpFabric) spinePorts() []ebpf.PortID {
	var ids []ebpf.PortID
	c := fr.fab.Config
	for _, l := range fr.fab.Leaves {
		for s := range c.Spines {
			ids = append(ids, fr.fab.PortID(l, c.Hosts+s))
		}
	}
	for _, s := range fr.fab.Spines {
		for l := range c.Leaves {
			ids = append(ids, fr.fab.PortID(s, l))
		}
	}
	return ids
}

// allPorts returns every switch port.
func (fr *cmpFabric) allPorts() []ebpf.PortID {
	var ids []ebpf.PortID
	for _, sws := range [][]*testbed.Switch{fr.fab.Leaves, fr.fab.Spines} {
		for _, sw := range sws {
			for i := range sw.Ports {
				ids = append(ids, fr.fab.PortID(sw, i))
			}
		}
	}
	return ids
}

// cmpSnapshot is the fabric's counters at one moment.
type cmpSnapshot struct {
	ports      map[ebpf.PortID]ebpf.PortCounters
	queueDrops uint64
	spine      []uint64
}

func (fr *cmpFabric) counters() (cmpSnapshot, error) {
	s := cmpSnapshot{ports: map[ebpf.PortID]ebpf.PortCounters{}, spine: make([]uint64, fr.fab.Config.Spines)}
	for _, id := range fr.allPorts() {
		pc, err := fr.progs.PortCounters(id)
		if err != nil {
			return s, err
		}
		s.ports[id] = pc
	}
	st, err := fr.fab.PortStats()
	if err != nil {
		return s, err
	}
	for _, p := range st {
		s.queueDrops += p.QueueDrops
	}
	for l := range fr.fab.Leaves {
		b, err := fr.fab.UplinkBytes(l)
		if err != nil {
			return s, err
		}
		for i, v := range b {
			s.spine[i] += v
		}
	}
	return s, nil
}

// account fills the row's fabric columns from two snapshots.
func (row *CompareRow) account(before, after cmpSnapshot) {
	var measured uint64
	var sum time.Duration
	for id, a := range after.ports {
		d := a.Sub(before.ports[id])
		row.Drops.Loss += d.DropLoss
		row.Drops.Burst += d.DropBurst
		row.Drops.Blackhole += d.DropBlackhole
		row.Trimmed += d.Trimmed
		row.ECNMarks += d.ECNMarked
		measured += d.Measured
		sum += d.QueueDelaySum
		row.MaxQueueDelay = max(row.MaxQueueDelay, a.MaxQueueDelay)
	}
	if measured > 0 {
		row.MeanQueueDelay = sum / time.Duration(measured)
	}
	row.Drops.Queue = after.queueDrops - before.queueDrops
	row.SpineBytes = make([]uint64, len(after.spine))
	for i := range after.spine {
		row.SpineBytes[i] = after.spine[i] - before.spine[i]
	}
	row.Imbalance = spineImbalance(row.SpineBytes)
}

// transportConfig is the transport of a profile on this fabric.
func (fr *cmpFabric) transportConfig(prof string) (transport.Config, error) {
	c := fr.fab.Config
	tc := transport.Config{Seed: fr.cfg.Seed, MTU: c.MTU + 14, Window: fr.cfg.Window, Entropies: fr.cfg.Entropies, MinRTO: fr.cfg.MinRTO}
	if tc.MinRTO == 0 {
		drain := time.Duration(float64(c.BufferBytes) * 8 / float64(c.RateBps) * 1e9)
		tc.MinRTO = max(4*drain, 5*time.Millisecond)
	}
	ccName := fr.cfg.SprayCC
	switch prof {
	case ProfileRoCE:
		tc.Profile, tc.Paths, tc.ECN = transport.RoCE, transport.PathsECMP, true
		tc.LocalAckTimeout = fr.cfg.RoCEAckTimeout
		ccName = fr.cfg.RoCECC
	case ProfileSpray:
		// As the leaf-spine runs use it, with one INT hop record per
		// switch on the longest path (leaf, spine, leaf): no spare.
		tc.Profile = transport.Spray
		tc = tc.OnINTFabric(sprayINTHops)
		// Acknowledgements share the spine links with the data going the
		// other way: an ACK every sprayAckEvery packets, or after as many
		// frame times at the spine rate, instead of one per packet; the
		// fixed window (8 packets) is large enough not to wait for them.
		tc.AckEvery = sprayAckEvery
		rate := float64(c.RateBps)
		if rate == 0 {
			rate = testbed.DefaultRateBps
		}
		tc.AckDelay = max(time.Duration(float64(sprayAckEvery*(c.MTU+14))*8/rate*1e9), 20*time.Microsecond)
	}
	switch ccName {
	case "default":
	case CCWindow:
		// Every QP may have half a port's buffer in flight. The
		// all-to-all's pairwise exchange has one QP per rank sending at a
		// time, so at most two QPs converge on a port (two ECMP flows
		// hashed onto one uplink) and cannot overflow it.
		w := max(c.BufferBytes/2, 2*(c.MTU+14))
		tc.CC = func() cc.Controller { return cc.Fixed{WindowBytes: w} }
	default:
		// The senders' own links are not shaped: the host ports of the
		// leaves are the fastest a flow can go. HPCC keeps at least
		// AckEvery frames in flight (cc.Params.AckEvery): a QP's share of
		// a 100 Mbit/s spine times the RTT is below one 3.5 KB frame
		// here, so HPCC's own window would have every packet acknowledged
		// at once, and those ACKs take the other direction's spine links
		// (cc's package doc, HPCCConfig.MinInflight).
		mk, err := cc.ByName(ccName, cc.Params{LineRate: float64(c.HostRateBps) / 8, BaseRTT: fabricBaseRTT, PacketBytes: c.MTU - 100, AckEvery: tc.AckEvery})
		if err != nil {
			return tc, err
		}
		tc.CC = mk
	}
	return tc, nil
}

// sprayINTHops and sprayAckEvery configure spray's QPs on a compare
// testbed: see transportConfig.
const (
	sprayINTHops  = 3
	sprayAckEvery = 4
)

// fabricBaseRTT is the unloaded round trip across a software leaf-spine
// fabric on a loaded two-core machine, roughly (cc calibration).
const fabricBaseRTT = 200 * time.Microsecond

// run runs one profile under one scenario.
func (fr *cmpFabric) run(ctx context.Context, prof, sc string) (CompareRow, error) {
	cfg := fr.cfg
	n := len(fr.fab.Hosts)
	block := int(cfg.Size / 4 / int64(n))
	row := CompareRow{Profile: prof, Scenario: sc, Ranks: n, Bytes: int64(block * n * 4)}
	if err := fr.attach(prof == ProfileRoCE); err != nil {
		return row, err
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.RunTimeout)
	defer cancel()
	var w *cmpWorld
	var err error
	if prof == ProfileTCP {
		w, err = fr.tcpWorld(rctx)
	} else {
		w, err = fr.sprayWorld(rctx, prof, sc)
	}
	if err != nil {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		row.Err = fmt.Sprintf("building the world: %v", err)
		return row, nil
	}
	defer w.close()
	switch sc {
	case ScenarioLoss001, ScenarioLoss01:
		p := 1e-4
		if sc == ScenarioLoss01 {
			p = 1e-3
		}
		for _, id := range fr.spinePorts() {
			if err := fr.progs.SetFaults(id, ebpf.Faults{Loss: p}); err != nil {
				return row, err
			}
		}
	case ScenarioCollision:
		if prof == ProfileTCP {
			row.Note = "kernel TCP keeps its own source ports"
		}
	}
	var before cmpSnapshot
	var qBefore qpSums
	var hBefore uint64
	hooks := a2aHooks{
		before: func(it int) error {
			if it != cfg.Warmup {
				return nil
			}
			var err error
			if before, err = fr.counters(); err != nil {
				return err
			}
			hBefore = w.hostDrops()
			qBefore, err = qpCounters(rctx, w.comms)
			return err
		},
	}
	if sc == ScenarioSpineFail {
		failAt := cfg.Warmup + cfg.Iters/3
		l0, last := fr.fab.Leaves[0], fr.fab.Spines[len(fr.fab.Spines)-1]
		dead := []ebpf.PortID{fr.fab.PortID(l0, fr.fab.Config.Hosts+len(fr.fab.Spines)-1), fr.fab.PortID(last, 0)}
		var once sync.Once
		hooks.during = func(ctx context.Context, it int, prev time.Duration) {
			if it != failAt {
				return
			}
			// Half way through a typical iteration.
			wait := max(prev/2, time.Millisecond)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			once.Do(func() {
				for _, id := range dead {
					if err := fr.progs.SetFaults(id, ebpf.Faults{Blackhole: true}); err != nil {
						cfg.Logf("spinefail: %v", err)
					}
				}
			})
		}
		row.Note = fmt.Sprintf("link %s-%s blackholed in iteration %d of %d", l0.Name, last.Name, failAt-cfg.Warmup+1, cfg.Iters)
	}
	samples, wrong, runErr := runAllToAll(rctx, w.comms, block, cfg.Warmup, cfg.Iters, cfg.Pairwise, hooks)
	row.Samples, row.Wrong = samples, wrong
	row.summarize()
	if runErr != nil {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		row.Err = runErr.Error()
		if errors.Is(runErr, context.DeadlineExceeded) {
			row.Err = fmt.Sprintf("did not finish within %v (%d of %d iterations): %v", cfg.RunTimeout, len(samples), cfg.Iters, runErr)
		}
	}
	if before.ports != nil {
		after, err := fr.counters()
		if err != nil {
			return row, err
		}
		row.account(before, after)
		row.Drops.Host = w.hostDrops() - hBefore
		// QP counters need the engines: read them with a fresh deadline
		// even when the run timed out.
		row.addQPCounters(ctx, w.comms, qBefore)
	}
	return row, nil
}

// sprayWorld opens a link in every host's namespace, an Endpoint on it, and
// connects a QP between every two ranks, each addressed to its next hop.
func (fr *cmpFabric) sprayWorld(ctx context.Context, prof, sc string) (*cmpWorld, error) {
	tc, err := fr.transportConfig(prof)
	if err != nil {
		return nil, err
	}
	hosts := fr.fab.Hosts
	n := len(hosts)
	eps := make([]*transport.Endpoint, n)
	w := &cmpWorld{close: func() {
		for _, ep := range eps {
			if ep != nil {
				ep.Close()
			}
		}
	}}
	ok := false
	defer func() {
		if !ok {
			w.close()
		}
	}()
	ports := multipath.Entropies(fr.cfg.Seed^0x706f727473, max(tc.Entropies, 8))
	hops := make([][][6]byte, n)
	for r, h := range hosts {
		var l link.Link
		hops[r] = make([][6]byte, n)
		err := h.Do(func() error {
			var err error
			l, err = OpenLink(LinkSpec{Kind: fr.cfg.Link, Ifindex: h.Ifindex, MAC: h.MAC, IP: h.IP, Ports: ports, FrameSize: h.MTU + 14, Logf: fr.linkLogf})
			if err != nil {
				return err
			}
			for j, p := range hosts {
				if j == r {
					continue
				}
				path, err := route.Resolve(ctx, p.IP)
				if err != nil {
					l.Close()
					return err
				}
				hops[r][j] = path.DstMAC
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("opening a %s link in %s: %w", fr.cfg.Link, h.Name, err)
		}
		w.links = append(w.links, l)
		if sc == ScenarioCollision && prof == ProfileRoCE && len(fr.collide[r]) > 0 {
			l = &entropyLink{Link: l, ports: fr.collide[r]}
		}
		c := tc
		c.Seed += uint64(r) * 0x9E3779B97F4A7C15
		c.OnEndpoint = fr.cfg.endpointHook(prof, sc, r)
		if eps[r], err = transport.NewEndpoint(l, c); err != nil {
			l.Close()
			return nil, err
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
				return nil, err
			}
			b, err := eps[j].CreateQP(ctx)
			if err != nil {
				return nil, err
			}
			ia, ib := a.Info(), b.Info()
			ib.MAC, ia.MAC = hops[i][j], hops[j][i]
			if err := fr.cfg.secure(ctx, a, b); err != nil {
				return nil, err
			}
			if err := a.Connect(ctx, ib); err != nil {
				return nil, err
			}
			if err := b.Connect(ctx, ia); err != nil {
				return nil, err
			}
			conns[i][j], conns[j][i] = a, b
		}
	}
	for r := range n {
		w.comms = append(w.comms, &qpComm{rank: r, conns: conns[r]})
	}
	ok = true
	return w, nil
}

// tcpWorld connects kernel TCP between every two hosts: the bootstrap and
// every socket are made inside the hosts' namespaces.
func (fr *cmpFabric) tcpWorld(ctx context.Context) (*cmpWorld, error) {
	hosts := fr.fab.Hosts
	n := len(hosts)
	var ln net.Listener
	if err := hosts[0].Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(hosts[0].IP, 0).String())
		return err
	}); err != nil {
		return nil, err
	}
	defer ln.Close()
	comms := make([]*collective.TCPComm, n)
	errs := make([]error, n)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for r, h := range hosts {
		wg.Go(func() {
			errs[r] = h.Do(func() error {
				bc := collective.BootstrapConfig{Rank: r, Size: n, Addr: ln.Addr().String()}
				if r == 0 {
					bc.Listener = ln
				}
				b, err := collective.NewBootstrap(bctx, bc)
				if err != nil {
					return err
				}
				defer b.Close()
				comms[r], err = collective.NewTCPComm(bctx, b, collective.TCPConfig{Listen: netip.AddrPortFrom(h.IP, 0).String()})
				return err
			})
			if errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	w := &cmpWorld{close: func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	}}
	if err := errors.Join(errs...); err != nil {
		w.close()
		return nil, err
	}
	for _, c := range comms {
		w.comms = append(w.comms, c)
	}
	return w, nil
}

// probeCollisions finds, for every host, entropies (UDP source ports) that
// its leaf hashes onto spine 0 towards every host of the other leaves, by
// sending a few datagrams from each candidate port and reading which
// uplink counted them. It returns nil entries for hosts where none was
// found among the candidates.
func (fr *cmpFabric) probeCollisions(ctx context.Context) ([][]uint16, error) {
	c := fr.fab.Config
	out := make([][]uint16, len(fr.fab.Hosts))
	if c.Leaves < 2 || c.Spines < 2 {
		return out, nil
	}
	cands := multipath.Entropies(fr.cfg.Seed^0x636f6c6c, 64)
	const want = 2
	for r, h := range fr.fab.Hosts {
		leaf := r / c.Hosts
		up := make([]ebpf.PortID, c.Spines)
		for s := range up {
			up[s] = fr.fab.PortID(fr.fab.Leaves[leaf], c.Hosts+s)
		}
		for _, port := range cands {
			if len(out[r]) == want {
				break
			}
			onZero := true
			for j, p := range fr.fab.Hosts {
				if j/c.Hosts == leaf || !onZero {
					continue
				}
				s, err := fr.probe(ctx, h, p.IP, port, up)
				if err != nil {
					return nil, err
				}
				onZero = s == 0
			}
			if onZero {
				out[r] = append(out[r], port)
			}
		}
		fr.cfg.Logf("collision: %s sends from ports %v onto spine 0", h.Name, out[r])
	}
	return out, nil
}

// probe sends datagrams from h's port to dst and returns the spine whose
// uplink counted them, or -1.
func (fr *cmpFabric) probe(ctx context.Context, h *testbed.Host, dst netip.Addr, port uint16, up []ebpf.PortID) (int, error) {
	before := make([]uint64, len(up))
	for s, id := range up {
		pc, err := fr.progs.PortCounters(id)
		if err != nil {
			return -1, err
		}
		before[s] = pc.Packets
	}
	const k = 4
	err := h.Do(func() error {
		// Unconnected: the ICMP port-unreachable that the peer answers
		// with does not fail the next write.
		conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.IP, port)))
		if err != nil {
			return err
		}
		defer conn.Close()
		to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791))
		for range k {
			if _, err := conn.WriteToUDP([]byte("spray compare: ECMP probe"), to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return -1, err
	}
	// Wait until the frames cross the leaf (a few ms at most).
	for range 100 {
		for s, id := range up {
			pc, err := fr.progs.PortCounters(id)
			if err != nil {
				return -1, err
			}
			if pc.Packets-before[s] >= k {
				return s, nil
			}
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	return -1, nil
}
