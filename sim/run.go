package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/retransmit"
	"github.com/sprayfabric/spray/transport"
)

// Profiles that Run compares.
const (
	// ProfileRoCE is classic RoCEv2 as deployed: ECMP (one entropy per
	// QP), Go-Back-N, DCQCN on ECN marks, and by default PFC.
	ProfileRoCE = "roce"
	// ProfileSpray is spray: adaptive per-packet spraying, selective
	// repeat, HPCC on INT records, and by default no PFC.
	ProfileSpray = "spray"
	// ProfileSprayECMP is spray on one path per QP (ECMP): the ablation
	// that isolates spraying (htsim's comparison of ECMP and spraying
	// under one transport).
	ProfileSprayECMP = "spray-ecmp"
	// ProfileSprayCredits is spray with receiver-paced credits
	// (transport.Config.Credits): each host's engine grants its senders
	// its link's rate, and a host's bursts share 16 KiB unsolicited.
	ProfileSprayCredits = "spray-credits"
)

// Scenarios that Run knows.
const (
	ScenarioLossless = "lossless"
	// ScenarioLoss001 and ScenarioLoss01 drop 0.01% and 0.1% of the
	// frames leaving either end of every link between switches.
	ScenarioLoss001 = "loss0.01"
	ScenarioLoss01  = "loss0.1"
	// ScenarioLinkFail takes the link between the first leaf (edge) and
	// the last spine (agg) down FailAt into the run; the leaf stops using
	// it at once, the rest of the fabric after Reconverge.
	ScenarioLinkFail = "linkfail"
)

// Defaults of Config.
var (
	DefaultProfiles  = []string{ProfileRoCE, ProfileSpray}
	DefaultScenarios = []string{ScenarioLossless, ScenarioLoss01, ScenarioLinkFail}
)

// Config configures Run. The zero value is usable with Topo and Workload
// set: every other field documents its default.
type Config struct {
	Topo     Topo
	Workload Workload
	// Profiles and Scenarios to run, in order; nil means DefaultProfiles
	// and DefaultScenarios.
	Profiles, Scenarios []string
	// PFC is "on" or "off" to force PFC for every profile; "" gives roce
	// PFC and spray none.
	PFC string
	// Seed seeds the fabric, the transports and the workload's own
	// randomness: the same seed gives the same run.
	Seed uint64
	// Window bounds a QP's packets in flight; 0 means 256.
	Window int
	// Entropies is the paths a spray QP uses; 0 means 32.
	Entropies int
	// HostWindow bounds the data each host's spray engines keep in flight
	// (transport.Config.HostWindow), in bandwidth-delay products of its
	// link at the fabric's base RTT; 0 means DefaultHostWindow, a negative
	// value no bound.
	HostWindow float64
	// HostRate paces the new data each host's spray engines send
	// (transport.Config.HostRate) at this share of its link; 0 means no
	// bound. roce is never paced, as it models RoCE NICs.
	HostRate float64
	// Limit bounds a run's simulated time; 0 means 10 s. Flows not done
	// by then are reported as not done.
	Limit time.Duration
	// FailAt and Reconverge time the linkfail scenario; 0 means 20µs and
	// 5 ms (BFD-style failure detection and a route update); a negative
	// Reconverge never withdraws the link from the other switches' routes.
	FailAt, Reconverge time.Duration
	// SprayCC and RoCECC name the profiles' congestion controllers
	// (cc.ByName: hpcc, swift, dcqcn, fixed, ...); "" means hpcc (swift
	// when the fabric stamps no INT) and dcqcn.
	SprayCC, RoCECC string
	// Transport, when set, adjusts each engine's configuration for a
	// profile after Run made it (timers, ACK policy); it must not change
	// the profile or the seed.
	Transport func(profile string, c *transport.Config)
	// Fabric overrides the switch settings (ECN, alpha, PFC thresholds,
	// NIC queue); its Topo, Seed and PFC.On are set by Run.
	Fabric FabricConfig
	// Samples is the number of buffer-occupancy samples kept over a run;
	// 0 means 400.
	Samples int
	// Verify gives every flow its own payload and destination region and
	// checks the bytes that arrive (memory: the workload's bytes, twice).
	Verify bool
	// Memory bounds the bytes a run may hold, as Estimate reckons them:
	// Run refuses a larger one with an error wrapping ErrMemory. 0 means
	// MemoryBudget.
	Memory int64
	// Queues is the engines each host runs, one per NIC queue, its QPs
	// spread over them in turn and its frames steered to them by QP
	// number; 0 means 1, one engine holding every QP of the host.
	Queues int
	// Progress, when set, is called about once a second of wall time,
	// by one run at a time.
	Progress func(Progress)
	// Parallel is the most runs (scenario and profile pairs) Run makes
	// at once, each on its own fabric in its own goroutine, as far as
	// Memory holds that many; 0 means 1. The rows are the same, in the
	// same order, whatever it is (TestParallelRowsIdentical): runs share
	// nothing but the workload, which they only read. With more than one,
	// Transport is called from several goroutines at once.
	Parallel int
	// boundCache, set by Run, keeps the line-rate bounds of its rows'
	// collectives: the same on every row of a profile. boundMu guards it
	// while runs are built at once.
	boundCache boundCache
	boundMu    *sync.Mutex
}

// Progress reports a run in progress.
type Progress struct {
	Scenario, Profile string
	Sim               time.Duration
	Wall              time.Duration
	Events            uint64
	FlowsDone, Flows  int
	// Run is this run's number (from 1) of the Runs that Run makes, one
	// per scenario and profile.
	Run, Runs int
	// Delivered is the bytes the switches have handed to hosts, frames
	// whole (ACKs too); Expected the bytes of the workload's data frames.
	Delivered, Expected int64
	// Parallel is the runs made at once (Config.Parallel, as memory
	// allows).
	Parallel int
}

// Left estimates the wall time left in this run and in every run, from
// the share done so far: the larger of the flows done and the bytes
// delivered (at most 99%: ACKs count too). Later runs are taken to cost
// what this one will. ok is false before anything is done.
func (p Progress) Left() (run, all time.Duration, ok bool) {
	f := 0.0
	if p.Flows > 0 {
		f = float64(p.FlowsDone) / float64(p.Flows)
	}
	if p.Expected > 0 {
		f = max(f, min(float64(p.Delivered)/float64(p.Expected), 0.99))
	}
	if f <= 0 {
		return 0, 0, false
	}
	whole := time.Duration(float64(p.Wall) / f)
	run = whole - p.Wall
	// The runs after this one go max(Parallel, 1) at a time.
	par := max(p.Parallel, 1)
	later := (max(p.Runs-p.Run, 0) + par - 1) / par
	return run, run + time.Duration(later)*whole, true
}

// Row is the outcome of one profile under one scenario.
type Row struct {
	Scenario string `json:"scenario"`
	Profile  string `json:"profile"`
	PFC      bool   `json:"pfc"`
	Flows    int    `json:"flows"`
	Done     int    `json:"done"`
	Failed   int    `json:"failed"`
	Bytes    int64  `json:"bytes"`
	// Flow completion times (posted to received whole).
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
	// Makespan is when the last flow completed; AlgBW the workload's
	// bytes per rank over it (GB/s).
	Makespan time.Duration `json:"makespan_ns"`
	// Iterations are the times of the workload's repetitions (first
	// flow posted to last flow received), for collectives.
	Iterations []time.Duration `json:"iterations_ns,omitempty"`
	AlgBW      float64         `json:"algbw_gbps"`
	// Bound is the mean line-rate bound of the workload's collectives
	// (Net.Bound: the busiest link's bytes, these frames' headers
	// included, at the link's rate; the whole workload when it is not
	// collectives), to set beside Row.Collective; Bounds is each
	// collective's when there are several.
	Bound  time.Duration   `json:"bound_ns"`
	Bounds []time.Duration `json:"bounds_ns,omitempty"`
	// Transport counters, summed over every QP. DataPackets counts the
	// data packets sent, retransmissions included.
	DataPackets uint64 `json:"data_packets"`
	Retransmits uint64 `json:"retransmits"`
	// TLPs counts the tail loss probes among the retransmits.
	TLPs       uint64 `json:"tlps"`
	Duplicates uint64 `json:"duplicates"`
	Timeouts   uint64 `json:"timeouts"`
	ECNMarks   uint64 `json:"ecn_marks"`
	Drops      Drops  `json:"drops"`
	// Scoreboard sums the senders' loss-detection counters: losses by
	// rule (RACK, timeout, NAK, trim) and the resends found spurious.
	Scoreboard retransmit.Stats `json:"scoreboard"`
	// Credits (spray-credits): grant packets and credit requests sent,
	// packets sent unsolicited, waits for credit, and senders that gave
	// up on their receiver's credit (transport.QPStats).
	CreditGrants    uint64 `json:"credit_grants,omitempty"`
	CreditRequests  uint64 `json:"credit_requests,omitempty"`
	Unsolicited     uint64 `json:"unsolicited_packets,omitempty"`
	CreditWaits     uint64 `json:"credit_waits,omitempty"`
	CreditFallbacks uint64 `json:"credit_fallbacks,omitempty"`
	// Trimmed counts data frames the switches cut to their headers
	// instead of dropping them (Topo.Trim).
	Trimmed uint64 `json:"trimmed,omitempty"`
	// Simulated is the simulated time the row's counters cover.
	Simulated time.Duration `json:"simulated_ns"`
	// PFC: PAUSE frames sent, per minute of simulated time (0 and left
	// out of JSON when Simulated is under MinRateWindow: see PerMinute),
	// and paused time summed over ports and of the port paused longest.
	PauseFrames   uint64        `json:"pause_frames"`
	PausesPerMin  float64       `json:"pauses_per_min,omitempty"`
	PausedTime    time.Duration `json:"paused_ns"`
	MaxPortPaused time.Duration `json:"max_port_paused_ns"`
	// SpineBytes are the bytes each top-tier switch (a leaf-spine's
	// spine, a fat-tree's core) sent, in switch order: how evenly ECMP
	// or spraying spread the load.
	SpineBytes []uint64 `json:"spine_bytes,omitempty"`
	// LinkFlaps counts the flaps of Topo.FlapRate that began in the run.
	LinkFlaps      uint64          `json:"link_flaps,omitempty"`
	BufferMax      float64         `json:"buffer_max"`
	BufferMean     float64         `json:"buffer_mean"`
	Events         uint64          `json:"events"`
	PacketBuffers  int             `json:"packet_buffers"`
	Err            string          `json:"error,omitempty"`
	Wall           time.Duration   `json:"-"`
	Samples        []time.Duration `json:"-"`
	Occupancy      []float64       `json:"-"`
	OccupancyEvery time.Duration   `json:"-"`

	// Collectives are the times of the workload's collectives by kind,
	// over their instances (EP groups, rings) and steps.
	Collectives []CollectiveStats `json:"collectives,omitempty"`
	// CPU and RSS are what the row cost its process (user and system
	// time, peak resident bytes) when the caller measured them; like
	// Wall, they depend on the machine and stay out of JSON.
	CPU time.Duration `json:"-"`
	RSS int64         `json:"-"`
}

// Result is a comparison: its settings and one row per scenario and
// profile.
type Result struct {
	Topo    string  `json:"topo"`
	Hosts   int     `json:"hosts"`
	Oversub float64 `json:"oversubscription"`
	// PodOversub is a fat-tree's oversubscription above its pods, Planes
	// its planes and Faults its faults at scale (Topo.Faults).
	PodOversub  int           `json:"pod_oversubscription,omitempty"`
	Planes      int           `json:"planes,omitempty"`
	Faults      string        `json:"faults,omitempty"`
	Workload    string        `json:"workload"`
	Seed        uint64        `json:"seed"`
	BaseRTT     time.Duration `json:"base_rtt_ns"`
	BufferBytes int           `json:"switch_buffer_bytes"`
	Rows        []Row         `json:"rows"`
}

// Run runs every profile under every scenario on a fresh fabric each,
// and reports them.
func Run(cfg Config) (Result, error) {
	t, err := cfg.Topo.withDefaults()
	if err != nil {
		return Result{}, err
	}
	cfg.Topo = t
	if cfg.Profiles == nil {
		cfg.Profiles = DefaultProfiles
	}
	if cfg.Scenarios == nil {
		cfg.Scenarios = DefaultScenarios
	}
	for _, p := range cfg.Profiles {
		if p != ProfileRoCE && p != ProfileSpray && p != ProfileSprayECMP && p != ProfileSprayCredits {
			return Result{}, fmt.Errorf("%w: profile %q (want roce, spray, spray-ecmp or spray-credits)", ErrConfig, p)
		}
	}
	for _, s := range cfg.Scenarios {
		if !slices.Contains([]string{ScenarioLossless, ScenarioLoss001, ScenarioLoss01, ScenarioLinkFail}, s) {
			return Result{}, fmt.Errorf("%w: scenario %q (want lossless, loss0.01, loss0.1 or linkfail)", ErrConfig, s)
		}
	}
	switch cfg.PFC {
	case "", "on", "off":
	default:
		return Result{}, fmt.Errorf("%w: pfc %q (want on or off)", ErrConfig, cfg.PFC)
	}
	if len(cfg.Workload.Flows) == 0 {
		return Result{}, fmt.Errorf("%w: a workload without flows", ErrConfig)
	}
	for i, f := range cfg.Workload.Flows {
		if f.Src < 0 || f.Dst < 0 || f.Src >= t.Hosts() || f.Dst >= t.Hosts() || f.Src == f.Dst || f.Size < 1 || f.Size > 1<<30 {
			return Result{}, fmt.Errorf("%w: flow %d: %d->%d, %d bytes, on %d hosts", ErrConfig, i, f.Src, f.Dst, f.Size, t.Hosts())
		}
		for _, tr := range []int{f.Trigger, f.SendDone, f.RecvDone} {
			if tr < 0 || tr > len(cfg.Workload.Triggers) {
				return Result{}, fmt.Errorf("%w: flow %d: trigger %d of %d", ErrConfig, i, tr, len(cfg.Workload.Triggers))
			}
		}
	}
	if !(cfg.HostRate >= 0 && cfg.HostRate <= 1) {
		return Result{}, fmt.Errorf("%w: host rate %v (want a share of the host link in (0, 1], 0 for none)", ErrConfig, cfg.HostRate)
	}
	if !(cfg.HostWindow <= MaxHostWindow) {
		return Result{}, fmt.Errorf("%w: host window %v bandwidth-delay products (want at most %d)", ErrConfig, cfg.HostWindow, MaxHostWindow)
	}
	if cfg.Queues < 0 || cfg.Queues > 1024 {
		return Result{}, fmt.Errorf("%w: %d queues per host (want 1 to 1024)", ErrConfig, cfg.Queues)
	}
	if cfg.Memory < 0 {
		return Result{}, fmt.Errorf("%w: memory %d", ErrConfig, cfg.Memory)
	}
	if cfg.Parallel < 0 {
		return Result{}, fmt.Errorf("%w: %d runs at once", ErrConfig, cfg.Parallel)
	}
	fp, err := Estimate(cfg)
	if err != nil {
		return Result{}, err
	}
	if err := overBudget(cfg, fp); err != nil {
		return Result{}, err
	}
	if cfg.Window == 0 {
		cfg.Window = 256
	}
	if cfg.Entropies == 0 {
		cfg.Entropies = 32
	}
	if cfg.Limit == 0 {
		cfg.Limit = 10 * time.Second
	}
	if cfg.FailAt == 0 {
		cfg.FailAt = 20 * time.Microsecond
	}
	if cfg.Reconverge == 0 {
		cfg.Reconverge = 5 * time.Millisecond
	}
	if cfg.Samples == 0 {
		cfg.Samples = 400
	}
	runs := len(cfg.Scenarios) * len(cfg.Profiles)
	par := parallelRuns(cfg, fp, runs)
	cfg.boundCache, cfg.boundMu = boundCache{}, new(sync.Mutex)
	res := Result{Topo: t.String(), Hosts: t.Hosts(), Oversub: t.Oversubscription(), Workload: cfg.Workload.Name, Seed: cfg.Seed, BaseRTT: baseRTT(t),
		PodOversub: t.PodOversub, Planes: t.Planes, Faults: t.Faults()}
	type outcome struct {
		row Row
		buf int
		err error
		ran bool
	}
	out := make([]outcome, runs)
	var progressMu sync.Mutex
	one := func(i int) {
		c := cfg
		if p := cfg.Progress; p != nil {
			c.Progress = func(pr Progress) {
				pr.Run, pr.Runs, pr.Parallel = i+1, runs, par
				progressMu.Lock()
				defer progressMu.Unlock()
				p(pr)
			}
		}
		o := &out[i]
		o.ran = true
		o.row, o.buf, o.err = runOne(c, cfg.Scenarios[i/len(cfg.Profiles)], cfg.Profiles[i%len(cfg.Profiles)])
	}
	if par == 1 {
		for i := range runs {
			if one(i); out[i].err != nil {
				break
			}
		}
	} else {
		// par workers take the runs in order; the rows land in order.
		var next atomic.Int64
		var failed atomic.Bool
		var wg sync.WaitGroup
		for range par {
			wg.Go(func() {
				for !failed.Load() {
					i := int(next.Add(1)) - 1
					if i >= runs {
						return
					}
					if one(i); out[i].err != nil {
						failed.Store(true)
					}
				}
			})
		}
		wg.Wait()
	}
	for _, o := range out {
		if o.err != nil {
			return res, o.err
		}
		if !o.ran {
			break // an earlier run failed
		}
		res.BufferBytes = o.buf
		res.Rows = append(res.Rows, o.row)
	}
	return res, nil
}

// parallelRuns returns how many of cfg's runs to make at once: at most
// cfg.Parallel, the runs, and as many as cfg.Memory (or MemoryBudget)
// holds of footprint fp each; at least 1.
func parallelRuns(cfg Config, fp Footprint, runs int) int {
	par := min(max(cfg.Parallel, 1), runs)
	budget := cfg.Memory
	if budget == 0 {
		budget = MemoryBudget()
	}
	if fp.Total > 0 {
		par = min(par, int(min(budget/fp.Total, int64(runs))))
	}
	return max(par, 1)
}

// baseRTT is the unloaded round trip of the longest path: a full frame
// out and a small ACK back, over every link of it. On a Shaper fabric an
// idle port's bucket passes the frame at once: the delays alone.
func baseRTT(t Topo) time.Duration {
	type hop struct {
		rate  uint64
		delay time.Duration
	}
	hops := []hop{{t.HostRate, t.HostDelay}, {t.Rate, t.Delay}, {t.Rate, t.Delay}, {t.HostRate, t.HostDelay}}
	if t.Kind == FatTree {
		hops = slices.Insert(hops, 2, hop{t.CoreRate, t.CoreDelay}, hop{t.CoreRate, t.CoreDelay})
	}
	var ps int64
	for _, h := range hops {
		ps += 2 * int64(h.delay) * 1000
		if !t.Shaper {
			ps += serPs(t.MTU, h.rate) + serPs(100, h.rate)
		}
	}
	return time.Duration(ps / 1000)
}

// flowState is a flow's progress.
type flowState struct {
	posted, sent, recvd, failed bool
	start                       clock.Time
	done                        clock.Time
	qp                          *transport.QP // the sender's QP towards the receiver
	from, to                    *hostQueue    // the queues of the sender's and the receiver's QPs
	off                         int64         // verify: offset of the payload and of the destination region
}

// simHost is a host's transport: its queues' engines and how many QPs
// it holds.
type simHost struct {
	queues []*hostQueue
	qps    int
}

// hostQueue is one engine of a host, on one of its links, with the
// destination region that peers write into through its QPs.
type hostQueue struct {
	link link.Link
	eng  *transport.Engine
	mr   *transport.MR
}

type trigState struct {
	Trigger
	hits  int
	flows []int32
	next  int // multishot: next flow to start
}

// runner is one run's state.
type runner struct {
	cfg      Config
	n        *Net
	flows    []flowState
	trigs    []trigState
	done     int
	sink     []byte
	src      []byte
	comps    []transport.Completion
	lastDone clock.Time
	hosts    []*simHost      // by host index; nil for a host without flows
	qps      []*transport.QP // every QP, the two ends of a connection side by side
	ends     []*hostQueue    // the queue of each of qps
	expected int64           // the bytes of the workload's data frames
}

func runOne(cfg Config, sc, prof string) (Row, int, error) {
	r, row, err := newRunner(cfg, sc, prof)
	if err != nil {
		return row, 0, err
	}
	return r.run(row), r.n.SwitchBuffer(0), nil
}

// newRunner builds the fabric, the engines, the QPs and the flow starts
// of one run.
func newRunner(cfg Config, sc, prof string) (*runner, Row, error) {
	t, err := cfg.Topo.withDefaults()
	if err != nil {
		return nil, Row{}, err
	}
	cfg.Topo = t
	pfc := prof == ProfileRoCE
	switch cfg.PFC {
	case "on":
		pfc = true
	case "off":
		pfc = false
	}
	fc := cfg.Fabric
	fc.Topo, fc.Seed, fc.PFC.On = t, cfg.Seed, pfc
	if fc.Horizon == 0 {
		fc.Horizon = cfg.Limit
	}
	n, err := New(fc)
	if err != nil {
		return nil, Row{}, err
	}
	row := Row{Scenario: sc, Profile: prof, PFC: pfc, Flows: len(cfg.Workload.Flows)}
	r := &runner{cfg: cfg, n: n, flows: make([]flowState, len(cfg.Workload.Flows))}
	if err := r.scenario(sc); err != nil {
		return nil, row, err
	}
	tc, err := transportConfig(cfg, prof)
	if err != nil {
		return nil, row, err
	}
	fr := framingOf(tc, t)
	for _, f := range cfg.Workload.Flows {
		r.expected += fr.wire(f.Size)
	}
	if cfg.boundMu != nil {
		cfg.boundMu.Lock()
	}
	bs := n.bounds(cfg.Workload, tc, cfg.boundCache)
	if cfg.boundMu != nil {
		cfg.boundMu.Unlock()
	}
	if len(bs) > 0 {
		var sum time.Duration
		for _, b := range bs {
			sum += b
		}
		row.Bound = sum / time.Duration(len(bs))
		if len(bs) > 1 {
			row.Bounds = bs
		}
	}
	// Payloads: one read-only source for every flow; destinations: one
	// shared sink (the bytes of concurrent flows overwrite each other:
	// only the completions count), or with Verify a region per flow.
	var maxSize, total int64
	for _, f := range cfg.Workload.Flows {
		maxSize = max(maxSize, f.Size)
		total += f.Size
		row.Bytes += f.Size
	}
	if cfg.Verify {
		r.src = make([]byte, total)
		rng := rand.New(rand.NewPCG(cfg.Seed, 0x5645524946))
		for i := range r.src {
			r.src[i] = byte(rng.Uint32())
		}
	} else {
		r.src = make([]byte, maxSize)
	}
	sink := make([]byte, maxSize)
	if cfg.Verify {
		sink = make([]byte, total)
	}
	// One engine per host (or per queue with Queues), and one connected
	// QP per pair of hosts that exchange flows in either direction,
	// created in flow order; a host's QPs go to its queues in turn.
	r.hosts = make([]*simHost, t.Hosts())
	r.sink = sink
	queues := max(cfg.Queues, 1)
	newQP := func(h int) (*transport.QP, *hostQueue, error) {
		sh := r.hosts[h]
		if sh == nil {
			sh = &simHost{}
			r.hosts[h] = sh
		}
		qi := sh.qps % queues
		sh.qps++
		if qi == len(sh.queues) {
			c := tc
			c.Seed = cfg.Seed*1_000_003 + uint64(h*queues+qi) + 1
			l := n.hosts[h].QueueLink(qi)
			e, err := transport.NewEngine(l, c)
			if err != nil {
				return nil, nil, err
			}
			n.hosts[h].Attach(l, e)
			n.hosts[h].OnStep = r.onStep
			sh.queues = append(sh.queues, &hostQueue{link: l, eng: e, mr: e.Register(sink, transport.AccessRemoteWrite)})
		}
		hq := sh.queues[qi]
		q, err := hq.eng.CreateQP()
		// The queues' engines number their QPs apart: a number another
		// queue of the host holds is skipped.
		for err == nil && queues > 1 && !n.hosts[h].Steer(q.QPN(), hq.link) {
			hq.eng.DestroyQP(q)
			q, err = hq.eng.CreateQP()
		}
		return q, hq, err
	}
	conns := map[uint64]int{} // lower host<<32 | higher host: index in r.qps of the lower host's QP
	var off int64
	for i, f := range cfg.Workload.Flows {
		lo, hi := min(f.Src, f.Dst), max(f.Src, f.Dst)
		k := uint64(lo)<<32 | uint64(hi)
		c, ok := conns[k]
		if !ok {
			qa, a, err := newQP(lo)
			if err != nil {
				return nil, row, err
			}
			qb, b, err := newQP(hi)
			if err != nil {
				return nil, row, err
			}
			if err := qa.Connect(qb.Info()); err != nil {
				return nil, row, err
			}
			if err := qb.Connect(qa.Info()); err != nil {
				return nil, row, err
			}
			c = len(r.qps)
			conns[k] = c
			r.qps = append(r.qps, qa, qb)
			r.ends = append(r.ends, a, b)
		}
		from, to := c, c^1
		if f.Src == hi {
			from, to = to, from
		}
		r.flows[i].qp, r.flows[i].from, r.flows[i].to = r.qps[from], r.ends[from], r.ends[to]
		if cfg.Verify {
			r.flows[i].off = off
			off += f.Size
		}
	}
	// Every engine steps once before the first post, as an endpoint's
	// engine runs between connecting and the collective: a QP's connect
	// puts it on the ready list, and a list in connect order (by peer
	// index, on every host) would send every host's first burst to the
	// same peer. Posted later, a host's QPs take turns in the order it
	// posts to them (TestReadyInPostOrder).
	for h, sh := range r.hosts {
		if sh == nil {
			continue
		}
		for _, hq := range sh.queues {
			n.hosts[h].Kick(hq.link)
		}
	}
	r.trigs = make([]trigState, len(cfg.Workload.Triggers))
	for i, tr := range cfg.Workload.Triggers {
		r.trigs[i].Trigger = tr
	}
	// The flows without a trigger start at their time: one event per
	// time, which posts them in flow order.
	var timed []int32
	for i, f := range cfg.Workload.Flows {
		if f.Trigger != 0 {
			r.trigs[f.Trigger-1].flows = append(r.trigs[f.Trigger-1].flows, int32(i))
			continue
		}
		timed = append(timed, int32(i))
	}
	fl := cfg.Workload.Flows
	slices.SortStableFunc(timed, func(a, b int32) int { return cmp.Compare(fl[a].Start, fl[b].Start) })
	for len(timed) > 0 {
		k := 1
		for k < len(timed) && fl[timed[k]].Start == fl[timed[0]].Start {
			k++
		}
		group := timed[:k:k]
		timed = timed[k:]
		n.At(fl[group[0]].Start, func() {
			for _, i := range group {
				r.post(int(i))
			}
		})
	}
	return r, row, nil
}

// run runs the events until every flow is done or the limit, and reports.
func (r *runner) run(row Row) Row {
	cfg, n, sc, prof := r.cfg, r.n, row.Scenario, row.Profile
	// Buffer occupancy samples: every `every`, doubling (and halving the
	// samples kept) when they would exceed cfg.Samples.
	every := clock.Time(time.Microsecond)
	var occ []float64
	var sample func()
	sample = func() {
		occ = append(occ, n.BufferShare())
		if len(occ) >= 2*cfg.Samples {
			for i := range cfg.Samples {
				occ[i] = max(occ[2*i], occ[2*i+1])
			}
			occ = occ[:cfg.Samples]
			every *= 2
		}
		if r.done < len(r.flows) {
			n.At(n.now+every, sample)
		}
	}
	n.At(0, sample)
	wall := time.Now()
	last := wall
	check := 0
	n.Run(clock.Time(cfg.Limit), func() bool {
		if r.done == len(r.flows) {
			return true
		}
		if check++; check&0xffff == 0 && cfg.Progress != nil {
			if now := time.Now(); now.Sub(last) >= time.Second {
				last = now
				cfg.Progress(Progress{Scenario: sc, Profile: prof, Sim: time.Duration(n.now), Wall: now.Sub(wall), Events: n.nevents, FlowsDone: r.done, Flows: len(r.flows),
					Run: 1, Runs: 1, Delivered: n.delivered(), Expected: r.expected})
			}
		}
		return false
	})
	row.Wall = time.Since(wall)
	var errs []string
	for _, h := range n.hosts {
		if err := h.Err(); err != nil {
			errs = append(errs, fmt.Sprintf("host %d: %v", h.idx, err))
			break
		}
	}
	// Results.
	var fct []time.Duration
	for i := range r.flows {
		fs := &r.flows[i]
		switch {
		case fs.recvd:
			row.Done++
			fct = append(fct, time.Duration(fs.done-fs.start))
		case fs.failed:
			row.Failed++
		}
	}
	if nd := row.Flows - row.Done - row.Failed; nd > 0 {
		errs = append(errs, fmt.Sprintf("%d flows not done after %v", nd, time.Duration(n.now)))
	}
	if row.Failed > 0 {
		errs = append(errs, fmt.Sprintf("%d flows failed", row.Failed))
	}
	if cfg.Verify {
		sink := r.sink
		bad := 0
		for i, f := range cfg.Workload.Flows {
			fs := &r.flows[i]
			if fs.recvd && string(sink[fs.off:fs.off+f.Size]) != string(r.src[fs.off:fs.off+f.Size]) {
				bad++
			}
		}
		if bad > 0 {
			errs = append(errs, fmt.Sprintf("%d flows arrived with wrong bytes", bad))
		}
	}
	row.Samples = slices.Clone(fct)
	slices.Sort(fct)
	if len(fct) > 0 {
		var sum time.Duration
		for _, d := range fct {
			sum += d
		}
		row.Mean = sum / time.Duration(len(fct))
		row.P50, row.P99, row.P999, row.Max = pct(fct, 50), pct(fct, 99), pct(fct, 99.9), fct[len(fct)-1]
	}
	row.Makespan = time.Duration(r.lastDone)
	if cfg.Workload.Iters > 0 {
		for _, c := range cfg.Workload.Collectives() {
			first, last, ok := clock.Never, clock.Time(0), true
			for _, fs := range r.flows[c[0]:c[1]] {
				ok = ok && fs.recvd
				first, last = min(first, fs.start), max(last, fs.done)
			}
			if !ok {
				break
			}
			row.Iterations = append(row.Iterations, time.Duration(last-first))
		}
	}
	row.Collectives = collectiveStats(cfg.Workload, r.flows)
	if row.Makespan > 0 && row.Done == row.Flows {
		row.AlgBW = float64(cfg.Workload.PerRank) / row.Makespan.Seconds() / 1e9
	}
	for _, q := range r.qps {
		st := q.Stats()
		row.DataPackets += st.TxPackets
		row.Retransmits += st.Retransmits
		row.CreditGrants += st.CreditGrantsSent
		row.CreditRequests += st.CreditRequestsSent
		row.Unsolicited += st.UnsolicitedPackets
		row.CreditWaits += st.CreditWaits
		row.CreditFallbacks += st.CreditFallbacks
		row.Duplicates += st.Duplicates
		row.Timeouts += st.Timeouts
		row.ECNMarks += st.ECNMarked
		rs := q.RetransmitStats()
		row.TLPs += rs.TLPs
		row.Scoreboard.Add(rs)
	}
	fst := n.Stats()
	row.Drops = fst.Drops
	row.Trimmed = fst.Trimmed
	row.PauseFrames = fst.PauseFrames
	row.Simulated = time.Duration(n.now)
	row.PausesPerMin, _ = PerMinute(fst.PauseFrames, row.Simulated)
	row.PausedTime, row.MaxPortPaused = fst.PausedTime, fst.MaxPausedTime
	row.BufferMax, row.BufferMean = fst.BufferMax, fst.BufferMean
	row.SpineBytes = n.topBytes()
	row.Events = n.nevents
	row.LinkFlaps = n.Flaps()
	row.PacketBuffers = n.Packets()
	row.Occupancy, row.OccupancyEvery = occ, time.Duration(every)
	row.Err = strings.Join(errs, "; ")
	return row
}

func pct(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// scenario arms the faults of sc.
func (r *runner) scenario(sc string) error {
	n := r.n
	switch sc {
	case ScenarioLoss001, ScenarioLoss01:
		p := 1e-4
		if sc == ScenarioLoss01 {
			p = 1e-3
		}
		for _, l := range n.CoreLinks() {
			if err := n.SetLoss(l, p); err != nil {
				return err
			}
		}
	case ScenarioLinkFail:
		// The link between the first leaf (edge) and the last switch above it.
		links := n.CoreLinks()
		var pick *LinkRef
		for i := range links {
			l := links[i]
			pi := n.switches[l.Switch].ports[l.Port]
			if n.ports[n.ports[pi].peer].node == 0 {
				pick = &links[i]
			}
		}
		if pick == nil {
			return errors.New("sim: no link above the first leaf to fail")
		}
		l := *pick
		n.At(clock.Time(r.cfg.FailAt), func() { n.SetLinkDown(l, true, r.cfg.Reconverge) })
	}
	return nil
}

// DefaultHostWindow is the spray profiles' bound on a host's data in
// flight, in bandwidth-delay products of its link: enough that the 256
// KiB all-to-all at 128 hosts keeps its pace, few enough that drifted
// ranks of a 16 KiB all-to-all at 512 and 1,024 hosts no longer overflow
// the spines (docs/results.md#host-window; TestHostWindowDefault).
const DefaultHostWindow = 8

// MaxHostWindow bounds Config.HostWindow: beyond it the byte count of
// the window would overflow, and no fabric holds that much in flight.
const MaxHostWindow = 1 << 10

// sprayAckEvery is the spray profiles' AckEvery on a host link of
// bytesPerSec and base RTT rtt: a packet in eight of a round trip at line
// rate, 2 to 16. Each ACK and each INT region costs the link it crosses,
// and HPCC keeps AckEvery frames in flight per QP; eight ACKs a round
// trip still give HPCC and RACK fresh news within an eighth of it
// (docs/results.md#ack-every; TestSprayAckEvery).
func sprayAckEvery(bytesPerSec float64, rtt time.Duration, mtu int) int {
	pkts := bytesPerSec * rtt.Seconds() / float64(max(mtu, 1))
	return min(max(int(pkts/8), 2), 16)
}

// transportConfig is the engines' configuration for prof.
func transportConfig(cfg Config, prof string) (transport.Config, error) {
	t := cfg.Topo
	// A QP preallocates SendQueue work requests and MaxMessages
	// completions (1024 and 256 by default: 140 KB a QP, 4.9 GB for a
	// 128-host all-to-all's 32,512 QPs); a pair of hosts has at most its
	// flows outstanding.
	perPair := map[[2]int]int{}
	most := 0
	for _, f := range cfg.Workload.Flows {
		k := [2]int{f.Src, f.Dst}
		perPair[k]++
		most = max(most, perPair[k])
	}
	q := min(max(most, 16), 1024)
	tc := transport.Config{MTU: t.MTU, Window: cfg.Window, Entropies: cfg.Entropies, SendQueue: q, MaxMessages: min(q, 256)}
	rtt := baseRTT(t)
	// The NIC's rate: its port into every plane.
	nic := float64(t.HostRate) * float64(t.planes())
	p := cc.Params{LineRate: nic / 8, BaseRTT: rtt, PacketBytes: t.MTU - 100}
	name := "hpcc"
	switch prof {
	case ProfileRoCE:
		tc.Profile, tc.Paths, tc.ECN = transport.RoCE, transport.PathsECMP, true
		name = "dcqcn"
		if cfg.RoCECC != "" {
			name = cfg.RoCECC
		}
	case ProfileSpray, ProfileSprayECMP, ProfileSprayCredits:
		// INT records for every switch on the longest path.
		tc.Profile, tc.Paths, tc.INTHops = transport.Spray, transport.PathsAdaptive, 3
		if prof == ProfileSprayECMP {
			tc.Paths = transport.PathsECMP
		}
		if prof == ProfileSprayCredits {
			tc.Credits, tc.LineRate = true, nic/8
		}
		if t.Kind == FatTree {
			tc.INTHops = 5
		}
		if cfg.Fabric.NoINT {
			name = "swift"
		}
		if cfg.SprayCC != "" {
			name = cfg.SprayCC
		}
		p.AckEvery = sprayAckEvery(nic/8, rtt, t.MTU)
		tc.AckEvery = p.AckEvery
		if hw := cmp.Or(cfg.HostWindow, DefaultHostWindow); hw > 0 {
			tc.HostWindow = max(int(hw*nic/8*rtt.Seconds()), t.MTU)
		}
		if cfg.HostRate > 0 {
			tc.HostRate = cfg.HostRate * nic / 8 / float64(max(cfg.Queues, 1)) // the host's queues share its link
		}
	}
	mk, err := cc.ByName(name, p)
	if err != nil {
		return tc, err
	}
	tc.CC = mk
	if cfg.Transport != nil {
		cfg.Transport(prof, &tc)
	}
	return tc, nil
}

// post starts flow i.
func (r *runner) post(i int) {
	fs := &r.flows[i]
	if fs.posted {
		return
	}
	f := r.cfg.Workload.Flows[i]
	fs.posted = true
	fs.start = r.n.now
	data := r.src[:f.Size]
	var to transport.Remote
	mr := fs.to.mr
	if r.cfg.Verify {
		data = r.src[fs.off : fs.off+f.Size]
		to = mr.Remote(uint64(fs.off))
	} else {
		to = mr.Remote(0)
	}
	err := fs.qp.Post(transport.WorkRequest{ID: uint64(i), Op: transport.OpWriteImm, Data: data, Remote: to, Imm: uint32(i)})
	if err != nil {
		r.fail(i)
		return
	}
	r.n.hosts[f.Src].Kick(fs.from.link)
}

func (r *runner) fail(i int) {
	fs := &r.flows[i]
	if fs.failed || fs.recvd {
		return
	}
	fs.failed = true
	r.done++
	f := r.cfg.Workload.Flows[i]
	// A failed flow still releases what waits for it, so that one broken
	// QP does not stall the whole workload.
	r.activate(f.SendDone)
	r.activate(f.RecvDone)
}

// onStep collects the completions of a host's engine.
func (r *runner) onStep(e *transport.Engine) {
	r.comps = e.Completions(r.comps[:0])
	for _, c := range r.comps {
		switch c.Op {
		case transport.OpWriteImm:
			i := int(c.ID)
			if i >= len(r.flows) {
				continue
			}
			if c.Err != nil {
				r.fail(i)
				continue
			}
			r.flows[i].sent = true
			r.activate(r.cfg.Workload.Flows[i].SendDone)
		case transport.OpRecvImm:
			i := int(c.Imm)
			if i >= len(r.flows) || r.flows[i].recvd || r.flows[i].failed {
				continue
			}
			fs := &r.flows[i]
			fs.recvd = true
			fs.done = r.n.now
			r.lastDone = r.n.now
			r.done++
			r.activate(r.cfg.Workload.Flows[i].RecvDone)
		}
	}
}

// activate hits trigger id (0: none).
func (r *runner) activate(id int) {
	if id == 0 {
		return
	}
	t := &r.trigs[id-1]
	t.hits++
	post := r.post
	if t.Delay > 0 {
		post = r.postAfter(t.Delay)
	}
	switch t.Kind {
	case TriggerOneshot:
		if t.hits == 1 {
			for _, f := range t.flows {
				post(int(f))
			}
		}
	case TriggerMultishot:
		if t.next < len(t.flows) {
			post(int(t.flows[t.next]))
			t.next++
		}
	case TriggerBarrier:
		if t.hits == t.Count {
			for _, f := range t.flows {
				post(int(f))
			}
		}
	}
}

// postAfter returns a post that starts its flows d from now, all in one
// event (a trigger's Delay: the compute between two collectives).
func (r *runner) postAfter(d time.Duration) func(int) {
	var later []int
	return func(i int) {
		if later == nil {
			r.n.At(r.n.now.Add(d), func() {
				for _, f := range later {
					r.post(f)
				}
			})
		}
		later = append(later, i)
	}
}
