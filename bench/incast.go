package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/route"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// DefaultIncastTestbed is the fabric RunIncast is meant for: four hosts on
// each of two leaves, two spines, the receiver's port shaped to 200 Mbit/s
// with a 32 KiB queue (1.3 ms) while the uplinks run at 1 Gbit/s, so that
// the last hop is the only bottleneck.
const DefaultIncastTestbed = "leafspine:4x2x2,hostrate=200mbit,buffer=32k"

// IncastControllers are the controllers RunIncast compares by default.
var IncastControllers = []string{"hpcc", "swift", "dcqcn", "none"}

// IncastConfig describes RunIncast. The zero value is usable: every field
// documents its default.
type IncastConfig struct {
	// Controllers are cc.ByName names, one run each; empty means
	// IncastControllers.
	Controllers []string
	// Senders is N, the hosts sending to the receiver (the first host of the
	// first leaf) at once: the other leaves' hosts first, then the
	// receiver's neighbours. 0 means 4.
	Senders int
	// Duration is how long the N senders send; 0 means 2s. The first
	// fifth is warm-up, left out of every figure but drops.
	Duration time.Duration
	// JoinAfter is how long one flow runs alone before a second joins;
	// 0 means 1s, negative skips the join run.
	JoinAfter time.Duration
	// JoinWatch is how long the two flows run together; 0 means 2s.
	JoinWatch time.Duration
	// Bin is the width of the goodput time bins the join time is measured
	// in; 0 means 10ms. The fair share is judged over 5 bins.
	Bin time.Duration
	// FairBand is how close to the fair share the joining flow must come
	// (0.2: within ±20%); 0 means 0.2.
	FairBand float64
	// Kind is the link kind (KindUDP, KindRaw, KindXDP); "" means KindUDP:
	// with KindXDP the receiver's XDP program takes the frames before the
	// fabric program on its interface measures the last hop's queue, and
	// INT then shows no queue there.
	Kind string
	// MsgSize is the size of the messages senders stream; 0 means 64 KiB.
	MsgSize int
	// ECN is the marking every port applies during the dcqcn run; zero
	// means KMin 100µs, KMax 400µs, PMax 0.2: marking from about two
	// packets queued at 200 Mbit/s (one takes 58µs there) up to a third of
	// the 32 KiB buffer, so that DCQCN, whose loop is a software RTT, runs
	// a standing queue below the buffer (ours: marking that begins below
	// one queued packet leaves the link idler under DCQCN).
	ECN ebpf.ECNConfig
	// PacingBurst is the senders' pacer burst in bytes
	// (transport.Config.PacingBurst); 0 means two full frames, as close to
	// a NIC's rate limiter as the transport's pacer goes. The transport's
	// default 16 KiB is half the bottleneck's buffer: paced senders that
	// resume together after a scheduling stall overflowed it.
	PacingBurst int
	// BaseRTT is the fabric's base RTT that HPCC's T is set to (and
	// cc.ByName's other parameters take from cc.Params). 0 means measured
	// before the runs: the median of 200 ping-pongs between the first
	// sender and the receiver. A software fabric's RTT (hundreds of µs on
	// a loaded machine) is far above cc.SoftwareBaseRTT, and HPCC's window,
	// at most line rate × T in all, cannot fill a pipe longer than T.
	BaseRTT time.Duration
	// Seed seeds the transport.
	Seed uint64
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

func (c IncastConfig) withDefaults() IncastConfig {
	if len(c.Controllers) == 0 {
		c.Controllers = IncastControllers
	}
	if c.Senders <= 0 {
		c.Senders = 4
	}
	if c.Duration <= 0 {
		c.Duration = 2 * time.Second
	}
	if c.JoinAfter == 0 {
		c.JoinAfter = time.Second
	}
	if c.JoinWatch <= 0 {
		c.JoinWatch = 2 * time.Second
	}
	if c.Bin <= 0 {
		c.Bin = 10 * time.Millisecond
	}
	if c.FairBand <= 0 {
		c.FairBand = 0.2
	}
	if c.Kind == "" {
		c.Kind = KindUDP
	}
	if c.MsgSize <= 0 {
		c.MsgSize = 64 << 10
	}
	if c.ECN == (ebpf.ECNConfig{}) {
		c.ECN = ebpf.ECNConfig{KMin: 100 * time.Microsecond, KMax: 400 * time.Microsecond, PMax: 0.2}
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// IncastResult is one controller's row of the incast table.
type IncastResult struct {
	Controller string `json:"controller"`
	Senders    int    `json:"senders"`
	// TargetUs is the queueing delay the controller aims at (cc.Target),
	// 0 for none and DCQCN.
	TargetUs float64 `json:"target_us"`
	// BaseRTTus is the base RTT the controllers were configured with.
	BaseRTTus float64 `json:"base_rtt_us"`
	// Queue delay of the bottleneck port (the receiver's leaf port), from
	// the INT records that ACKs echoed to the senders, after warm-up.
	QueueP50us float64 `json:"qdelay_p50_us"`
	QueueP99us float64 `json:"qdelay_p99_us"`
	QueueMaxus float64 `json:"qdelay_max_us"`
	INTSamples int     `json:"int_samples"`
	// PortMeanUs is the mean queue delay of every RoCE frame through the
	// bottleneck port, from the fabric program's counters.
	PortMeanUs float64 `json:"port_mean_us"`
	// OverflowDrops are the frames the bottleneck's queue dropped because
	// it was full (PortStat.QueueDrops), warm-up included.
	OverflowDrops uint64 `json:"overflow_drops"`
	// SteadyDrops are the overflow drops after warm-up (the start-up burst
	// of senders that begin at once left out).
	SteadyDrops uint64 `json:"overflow_drops_after_warmup"`
	// Jain is Jain's fairness index over the senders' goodput.
	Jain float64 `json:"jain"`
	// Utilization is the bottleneck port's transmitted bytes (Ethernet
	// frames) over its shaped rate.
	Utilization float64 `json:"utilization"`
	// GoodputMbps is each sender's acknowledged payload rate.
	GoodputMbps []float64 `json:"goodput_mbps"`
	Retransmits uint64    `json:"retransmits"`
	Timeouts    uint64    `json:"timeouts"`
	ECNMarked   uint64    `json:"ecn_marked"`
	// JoinMs is how long after it started a second flow took to come
	// within FairBand of the fair share (the end of the first 5-bin window
	// in which it did); -1 if it never did, 0 if the join run was skipped.
	JoinMs float64 `json:"join_ms"`
}

// ErrIncast is wrapped by RunIncast's errors about its arguments.
var ErrIncast = errors.New("bench: incast")

// RunIncast runs, for each controller in turn, N senders to one receiver at
// once across fab (which must have spray's fabric programs attached: progs)
// and then a flow joining a running one, and measures the bottleneck. The
// transport runs the spray profile with INT (4 hops) and oblivious
// spraying; dcqcn gets ECN on the packets and marking on every port.
//
// To measure the queue of the receiver's leaf port, RunIncast attaches the
// fabric program to the receiver's interface too (a leaf's host ports are
// edge ports, so nothing measures their queues otherwise) and detaches it
// at the end.
func RunIncast(ctx context.Context, fab *testbed.Fabric, progs *ebpf.Fabric, cfg IncastConfig) ([]IncastResult, error) {
	cfg = cfg.withDefaults()
	c := fab.Config
	rcv := fab.Host(0, 0)
	if cfg.PacingBurst <= 0 {
		cfg.PacingBurst = 2 * (rcv.MTU + 14)
	}
	var senders []*testbed.Host
	for l := 1; l < c.Leaves; l++ {
		for h := range c.Hosts {
			senders = append(senders, fab.Host(l, h))
		}
	}
	for h := 1; h < c.Hosts; h++ {
		senders = append(senders, fab.Host(0, h))
	}
	if cfg.Senders > len(senders) {
		return nil, fmt.Errorf("%w: %d senders asked, the fabric has %d hosts besides the receiver", ErrIncast, cfg.Senders, len(senders))
	}
	if cfg.JoinAfter > 0 && len(senders) < 2 {
		return nil, fmt.Errorf("%w: the join run needs two senders", ErrIncast)
	}
	leaf := fab.Leaves[0]
	bport := -1
	for i, p := range leaf.Ports {
		if p.Peer == rcv.Name {
			bport = i
		}
	}
	if bport < 0 {
		return nil, fmt.Errorf("%w: no port of %s faces %s", ErrIncast, leaf.Name, rcv.Name)
	}
	bid := fab.PortID(leaf, bport)
	hostID := ebpf.PortID{Switch: 0xfffe, Port: 0}
	if err := progs.AttachPortAt(rcv.NS, rcv.Ifindex, ebpf.PortConfig{ID: hostID}); err != nil {
		return nil, fmt.Errorf("bench: attaching the fabric program to the receiver: %w", err)
	}
	defer progs.DetachPort(hostID)

	if cfg.BaseRTT <= 0 {
		res, err := RunHosts(ctx, senders[0], rcv, PairRun{
			Kind:      cfg.Kind,
			Transport: transport.Config{Profile: transport.Spray, Paths: transport.PathsSpray, INTHops: 4, MTU: rcv.MTU + 14, Seed: cfg.Seed},
			Perf:      PerfConfig{Total: 64 << 10, MsgSize: 64 << 10, Pings: 200, PingSize: 64, Seed: cfg.Seed},
		})
		if err != nil {
			return nil, fmt.Errorf("bench: measuring the base RTT: %w", err)
		}
		cfg.BaseRTT = time.Duration(res.RTTp50us * 1e3)
		cfg.Logf("incast: base RTT %v (median of %d ping-pongs %s -> %s)", cfg.BaseRTT, res.Pings, senders[0].Name, rcv.Name)
	}
	var out []IncastResult
	for _, name := range cfg.Controllers {
		params := cc.Params{LineRate: float64(c.HostRateBps) / 8, PacketBytes: rcv.MTU - 150, BaseRTT: cfg.BaseRTT}
		mk, err := cc.ByName(name, params)
		if err != nil {
			return out, err
		}
		ecn := name == "dcqcn"
		if err := setECN(progs, ecn, cfg.ECN); err != nil {
			return out, err
		}
		r := IncastResult{Controller: name, Senders: cfg.Senders, TargetUs: us(cc.Target(name, params)), BaseRTTus: us(cfg.BaseRTT)}
		run := flowRun{fab: fab, rcv: rcv, bport: bport, bid: bid, progs: progs, mk: mk, ecn: ecn, cfg: cfg}
		cfg.Logf("incast %s: %d senders -> %s for %v", name, cfg.Senders, rcv.Name, cfg.Duration)
		starts := make([]time.Duration, cfg.Senders)
		m, err := run.run(ctx, senders[:cfg.Senders], starts, cfg.Duration)
		if err != nil {
			setECN(progs, false, cfg.ECN)
			return out, fmt.Errorf("bench: incast with %s: %w", name, err)
		}
		warm := cfg.Duration / 5
		r.fill(m, warm, cfg.Duration)
		if cfg.JoinAfter > 0 {
			cfg.Logf("incast %s: a flow joins after %v", name, cfg.JoinAfter)
			total := cfg.JoinAfter + cfg.JoinWatch
			jm, err := run.run(ctx, senders[:2], []time.Duration{0, cfg.JoinAfter}, total)
			if err != nil {
				setECN(progs, false, cfg.ECN)
				return out, fmt.Errorf("bench: join with %s: %w", name, err)
			}
			r.JoinMs = joinTime(jm, cfg.JoinAfter, total, cfg.Bin, cfg.FairBand)
		}
		if err := setECN(progs, false, cfg.ECN); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func setECN(progs *ebpf.Fabric, on bool, ecn ebpf.ECNConfig) error {
	if !on {
		ecn = ebpf.ECNConfig{}
	}
	for _, id := range progs.Ports() {
		if err := progs.SetECN(id, ecn); err != nil {
			return err
		}
	}
	return nil
}

// fill computes the row from a run's measurements over [warm, end).
func (r *IncastResult) fill(m *flowMeasure, warm, end time.Duration) {
	var qd []time.Duration
	for _, p := range m.probes {
		for _, s := range p.qdelay {
			if s.at >= warm {
				qd = append(qd, s.d)
			}
		}
	}
	st := Summarize(qd)
	r.INTSamples = st.N
	r.QueueP50us, r.QueueP99us, r.QueueMaxus = us(st.P50), us(st.P99), us(st.Max)
	r.PortMeanUs = us(m.port.MeanQueueDelay())
	r.OverflowDrops, r.SteadyDrops = m.drops, m.steadyDrops
	secs := (end - warm).Seconds()
	var rates []float64
	for _, p := range m.probes {
		b := p.bytesIn(warm, end)
		rates = append(rates, float64(b)*8/secs/1e6)
	}
	r.GoodputMbps = rates
	r.Jain = Jain(rates)
	r.Utilization = m.utilization
	r.Retransmits, r.Timeouts, r.ECNMarked = m.retransmits, m.timeouts, m.ecnMarked
}

// Jain returns Jain's fairness index of xs: (Σx)² / (n Σx²), 1 when all
// are equal, 1/n when one has everything; 0 for no values or all zero.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

// joinTime returns the ms from the second flow's start to the end of the
// first window of 5 bins in which its goodput was within band of half the
// two flows' total; -1 if none.
func joinTime(m *flowMeasure, start, end, bin time.Duration, band float64) float64 {
	a, b := m.probes[0], m.probes[1]
	win := 5 * bin
	for t := start; t+win <= end; t += bin {
		ba, bb := float64(a.bytesIn(t, t+win)), float64(b.bytesIn(t, t+win))
		fair := (ba + bb) / 2
		if fair > 0 && math.Abs(bb-fair) <= band*fair {
			return float64(t+win-start) / 1e6
		}
	}
	return -1
}

// flowRun runs flows from senders to the receiver with one controller.
type flowRun struct {
	fab   *testbed.Fabric
	rcv   *testbed.Host
	bport int
	bid   ebpf.PortID
	progs *ebpf.Fabric
	mk    func() cc.Controller
	ecn   bool
	cfg   IncastConfig
}

// flowMeasure is what one run measured.
type flowMeasure struct {
	probes                           []*ccProbe
	drops, steadyDrops               uint64
	utilization                      float64
	port                             ebpf.PortCounters // after warm-up
	retransmits, timeouts, ecnMarked uint64
}

// openEndpoint opens a link and an endpoint on h.
func (fr *flowRun) openEndpoint(h *testbed.Host, tcfg transport.Config) (*transport.Endpoint, error) {
	ports := multipath.Entropies(tcfg.Seed^0x706f727473, max(tcfg.Entropies, 8))
	var l link.Link
	if err := h.Do(func() error {
		var err error
		l, err = OpenLink(LinkSpec{Kind: fr.cfg.Kind, Ifindex: h.Ifindex, MAC: h.MAC, IP: h.IP, Ports: ports, FrameSize: h.MTU + 14})
		return err
	}); err != nil {
		return nil, fmt.Errorf("opening a %s link in %s: %w", fr.cfg.Kind, h.Name, err)
	}
	ep, err := transport.NewEndpoint(l, tcfg)
	if err != nil {
		l.Close()
		return nil, err
	}
	return ep, nil
}

func nextHop(ctx context.Context, from, to *testbed.Host) ([6]byte, error) {
	var mac [6]byte
	err := from.Do(func() error {
		p, err := route.Resolve(ctx, to.IP)
		mac = p.DstMAC
		return err
	})
	return mac, err
}

// incastMaxRetries is the incast endpoints' retry bound: every host of
// the testbed shares this machine's cores, and on a loaded machine a
// receiver can miss the default 7 doubling timeouts (about 130 ms) for
// want of CPU, failing a QP whose peer is alive.
const incastMaxRetries = 20

// run starts sender i at starts[i] after the common start and stops every
// flow at total.
func (fr *flowRun) run(ctx context.Context, senders []*testbed.Host, starts []time.Duration, total time.Duration) (*flowMeasure, error) {
	clk := clock.NewSystem() // one time base for every endpoint's samples
	tcfg := transport.Config{
		Profile: transport.Spray, Paths: transport.PathsSpray, INTHops: 4, ECN: fr.ecn,
		MTU: fr.rcv.MTU + 14, Seed: fr.cfg.Seed, Clock: clk, CC: fr.mk,
		PacingBurst: fr.cfg.PacingBurst, MaxRetries: incastMaxRetries,
	}
	var closers []*transport.Endpoint
	defer func() {
		for _, e := range closers {
			e.Close()
		}
	}()
	re, err := fr.openEndpoint(fr.rcv, tcfg)
	if err != nil {
		return nil, err
	}
	closers = append(closers, re)
	m := &flowMeasure{}
	conns := make([]*transport.Conn, len(senders))
	rconns := make([]*transport.Conn, len(senders))
	cqs := make([]*transport.CQ, len(senders))
	for i, h := range senders {
		tc := tcfg
		tc.Seed = fr.cfg.Seed + uint64(i) + 1
		p := &ccProbe{port: fr.bid, clk: clk}
		m.probes = append(m.probes, p)
		tc.CC = func() cc.Controller { p.Controller = fr.mk(); return p }
		se, err := fr.openEndpoint(h, tc)
		if err != nil {
			return nil, err
		}
		closers = append(closers, se)
		cs, err := se.CreateQP(ctx)
		if err != nil {
			return nil, err
		}
		cr, err := re.CreateQP(ctx)
		if err != nil {
			return nil, err
		}
		is, ir := cs.Info(), cr.Info()
		if ir.MAC, err = nextHop(ctx, h, fr.rcv); err != nil {
			return nil, err
		}
		if is.MAC, err = nextHop(ctx, fr.rcv, h); err != nil {
			return nil, err
		}
		if err := cs.Connect(ctx, ir); err != nil {
			return nil, err
		}
		if err := cr.Connect(ctx, is); err != nil {
			return nil, err
		}
		conns[i], rconns[i], cqs[i] = cs, cr, se.CQ()
	}
	before, err := fr.portStat()
	if err != nil {
		return nil, err
	}
	t0 := clk.Now()
	for _, p := range m.probes {
		p.start(t0)
	}
	rctx, stop := context.WithTimeout(ctx, total+time.Second)
	defer stop()
	sctx, sstop := context.WithTimeout(ctx, total)
	defer sstop()
	var wg sync.WaitGroup
	var recvd atomic.Int64
	for _, cr := range rconns {
		wg.Go(func() {
			for {
				msg, err := cr.Recv(rctx)
				if err != nil {
					return
				}
				recvd.Add(int64(msg.Len))
			}
		})
	}
	msg := make([]byte, fr.cfg.MsgSize)
	errs := make(chan error, len(conns))
	for i, cs := range conns {
		wg.Go(func() {
			select {
			case <-time.After(starts[i]):
			case <-sctx.Done():
				return
			}
			sc := &SprayConn{C: cs, CQ: cqs[i], Depth: 8}
			for sctx.Err() == nil {
				if err := sc.Send(sctx, msg); err != nil {
					if sctx.Err() == nil {
						errs <- err
					}
					return
				}
			}
		})
	}
	warm := total / 5
	if len(starts) > 1 && starts[len(starts)-1] > 0 {
		warm = 0 // the join run: port figures over the whole run
	}
	time.Sleep(warm)
	mid, tm, err := fr.portStatAt()
	if err != nil {
		return nil, err
	}
	pc0, err := fr.progs.PortCounters(fr.bid)
	if err != nil {
		return nil, err
	}
	<-sctx.Done()
	after, ta, err := fr.portStatAt()
	if err != nil {
		return nil, err
	}
	pc1, err := fr.progs.PortCounters(fr.bid)
	if err != nil {
		return nil, err
	}
	elapsed := ta.Sub(tm)
	for i, cs := range conns {
		st, err := cs.Stats(ctx)
		if err != nil {
			return nil, err
		}
		m.retransmits += st.Retransmits
		m.timeouts += st.Timeouts
		rs, err := rconns[i].Stats(ctx)
		if err != nil {
			return nil, err
		}
		m.ecnMarked += rs.ECNMarked
	}
	stop()
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	for _, p := range m.probes {
		p.finish()
	}
	m.drops = after.QueueDrops - before.QueueDrops
	m.steadyDrops = after.QueueDrops - mid.QueueDrops
	rate := float64(fr.fab.Config.HostRateBps) / 8
	m.utilization = float64(after.TxBytes-mid.TxBytes) / (rate * elapsed.Seconds())
	m.port = pc1.Sub(pc0)
	return m, nil
}

// portStatAt returns the counters of the bottleneck port and when they were
// read: the middle of the read, which walks every port of the fabric over
// netlink and takes milliseconds on a loaded machine (timing it from either
// end made utilization read up to 1.3).
func (fr *flowRun) portStatAt() (testbed.PortStat, time.Time, error) {
	t0 := time.Now()
	st, err := fr.portStat()
	t1 := time.Now()
	return st, t0.Add(t1.Sub(t0) / 2), err
}

// portStat returns the counters of the bottleneck port.
func (fr *flowRun) portStat() (testbed.PortStat, error) {
	st, err := fr.fab.PortStats()
	if err != nil {
		return testbed.PortStat{}, err
	}
	leaf := fr.fab.Leaves[0]
	for _, p := range st {
		if p.Switch == leaf.Name && p.Port == leaf.Ports[fr.bport].Name {
			return p, nil
		}
	}
	return testbed.PortStat{}, fmt.Errorf("%w: no counters for %s/%s", ErrIncast, leaf.Name, leaf.Ports[fr.bport].Name)
}

// maxProbeSamples bounds the queue delay samples one probe keeps.
const maxProbeSamples = 1 << 20

// probeBin is the resolution of a probe's acknowledged-bytes record.
const probeBin = time.Millisecond

// qSample is one queue delay reading, at a time since the run's start.
type qSample struct {
	at, d time.Duration
}

// ccProbe wraps a sender's controller: it records the bottleneck's queue
// delay from each ACK's INT records and the bytes acknowledged per
// millisecond. The engine goroutine calls it; start and finish bracket the
// run (the mutex orders them with the engine).
type ccProbe struct {
	cc.Controller
	port ebpf.PortID
	clk  clock.Clock

	mu     sync.Mutex
	t0     clock.Time
	on     bool
	qdelay []qSample
	acked  []int64 // bytes per probeBin since t0
}

func (p *ccProbe) start(t0 clock.Time) {
	p.mu.Lock()
	p.t0, p.on = t0, true
	p.mu.Unlock()
}

func (p *ccProbe) finish() {
	p.mu.Lock()
	p.on = false
	p.mu.Unlock()
}

// OnAck records the sample and passes it on.
func (p *ccProbe) OnAck(s cc.Sample) {
	p.Controller.OnAck(s)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on || s.Now < p.t0 {
		return
	}
	at := s.Now.Sub(p.t0)
	if bin := int(at / probeBin); bin < 1<<20 {
		for len(p.acked) <= bin {
			p.acked = append(p.acked, 0)
		}
		p.acked[bin] += int64(max(s.AckedBytes, 0))
	}
	for _, h := range s.INT {
		if h.Switch == p.port.Switch && h.Port == p.port.Port && h.RateMbps > 0 && len(p.qdelay) < maxProbeSamples {
			p.qdelay = append(p.qdelay, qSample{at, time.Duration(uint64(h.QLen) * 8000 / uint64(h.RateMbps))})
		}
	}
}

// bytesIn returns the bytes acknowledged in [from, to) since the start.
func (p *ccProbe) bytesIn(from, to time.Duration) int64 {
	lo, hi := int(from/probeBin), min(int(to/probeBin), len(p.acked))
	var n int64
	for _, b := range p.acked[min(max(lo, 0), hi):hi] {
		n += b
	}
	return n
}
