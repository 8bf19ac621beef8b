package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// Profiles that Compare runs, in its default order.
const (
	ProfileRoCE  = "roce"
	ProfileSpray = "spray"
	ProfileTCP   = "tcp"
)

// Scenarios that Compare runs, in its default order.
const (
	// ScenarioLossless runs with no injected fault.
	ScenarioLossless = "lossless"
	// ScenarioLoss001 drops 0.01% of the frames at the egress of every
	// spine link, in both directions (a frame crossing the spines passes
	// two such ports).
	ScenarioLoss001 = "loss0.01"
	// ScenarioLoss01 drops 0.1% the same way.
	ScenarioLoss01 = "loss0.1"
	// ScenarioCollision gives every ECMP flow entropies that the fabric
	// hashes onto the same spine (probed before the run), the unlucky case
	// of ECMP hashing. Spraying QPs keep their usual entropy set; kernel
	// TCP keeps the source ports the kernel chose.
	ScenarioCollision = "collision"
	// ScenarioSpineFail blackholes the link between the first leaf and
	// the last spine (both directions) during the first third of the
	// timed iterations, and never restores it (no routing reconvergence).
	ScenarioSpineFail = "spinefail"
)

// DefaultScenarios and DefaultProfiles are what Compare runs when its
// config names none.
var (
	DefaultScenarios = []string{ScenarioLossless, ScenarioLoss001, ScenarioLoss01, ScenarioCollision, ScenarioSpineFail}
	DefaultProfiles  = []string{ProfileRoCE, ProfileSpray, ProfileTCP}
)

// DefaultCompareTestbed is the fabric Compare builds when its config gives
// none: two leaves of two hosts, two spines, spine links shaped to 100
// Mbit/s and host links to 200 Mbit/s (so that the spines, not the hosts'
// last hop, bound an all-to-all, and the two CPUs forward it), MTU 3500
// (the largest the AF_XDP link takes, fewer frames to forward).
const DefaultCompareTestbed = "leafspine:2x2x2,rate=100mbit,hostrate=200mbit,mtu=3500"

// Congestion control of the compared profiles on a testbed (see
// CompareConfig.SprayCC): each profile's own, as transport.ProfileCC gives
// them and cc.ByName calibrates them to the fabric's rates: spray runs
// "auto" (HPCC from the INT records its ACKs echo, Swift until they come),
// roce runs DCQCN from ECN marks, as classic RoCEv2 does (without PFC:
// the testbed has none, and spray needs none). CCWindow gives both the same
// fixed window instead, so that they differ only in paths and loss
// recovery.
const (
	DefaultSprayCC = "auto"
	DefaultRoCECC  = "dcqcn"
)

// CCWindow names a fixed window instead of a congestion controller: each
// QP may have half a switch port's buffer in flight, unpaced. In the
// all-to-all's pairwise exchange at most two QPs converge on one port, so
// they never overflow it.
const CCWindow = "window"

// ErrCompare is wrapped by Compare's configuration errors.
var ErrCompare = errors.New("bench: invalid compare config")

// CompareConfig configures Compare. The zero value is usable: every field
// documents its default. Compare does not modify it.
type CompareConfig struct {
	// Testbed is the leaf-spine fabric to build; a zero Hosts means
	// DefaultCompareTestbed. Ignored with Loopback.
	Testbed testbed.LeafSpineConfig
	// Loopback runs every rank in this process over loopback (link/udp for
	// spray and roce, kernel TCP for tcp) instead of on a testbed: no root
	// needed, no fabric, and only the lossless and loss scenarios (loss is
	// then injected by the sending links, once per frame).
	Loopback bool
	// Scenarios to run, in order; nil means DefaultScenarios.
	Scenarios []string
	// Profiles to run under each scenario, in order; nil means
	// DefaultProfiles.
	Profiles []string
	// Size is the bytes each rank sends per all-to-all (its whole send
	// buffer, nccl-tests' size), rounded down to a multiple of 4 bytes
	// per rank; 0 means 1 MiB.
	Size int64
	// Iters is the number of timed all-to-alls per run; 0 means 30.
	// Warmup is the number run before them, untimed; 0 means 2, negative
	// means none.
	Iters, Warmup int
	// Link is the link kind that spray and roce ranks use on a testbed
	// (KindXDP, KindRaw or KindUDP); "" means KindXDP.
	Link string
	// Entropies is the number of entropies (paths) a spraying QP uses; 0
	// means 32.
	Entropies int
	// Window bounds the packets a QP has outstanding; 0 means 256.
	Window int
	// MinRTO is the smallest retransmission timeout of spray QPs (and of
	// roce QPs with an adaptive timer, RoCEAckTimeout < 0) on a testbed; 0
	// means four times the time a full switch queue takes to drain at the
	// spine rate (at least 5 ms), so that a queue that builds on a
	// software fabric does not look like a loss.
	MinRTO time.Duration
	// RoCEAckTimeout is the roce QPs' Local ACK Timeout exponent
	// (transport.Config.LocalAckTimeout): a fixed retransmission timer of
	// 4.096µs x 2^RoCEAckTimeout. 0 means the transport's default
	// (transport.DefaultLocalAckTimeout, 67.1 ms); negative gives roce the
	// adaptive timer of spray (from MinRTO, doubling).
	RoCEAckTimeout int
	// SprayCC and RoCECC name the congestion controllers (cc.ByName) of
	// the spray and roce QPs on a testbed, calibrated to the fabric's
	// rates, or CCWindow; "" means DefaultSprayCC and DefaultRoCECC,
	// "default" the transport's own default for the profile.
	SprayCC, RoCECC string
	// RunTimeout bounds one run (one profile under one scenario); a run
	// that does not finish in time is reported with its error and the
	// comparison goes on. 0 means 60 s.
	RunTimeout time.Duration
	// Pairwise runs the all-to-all as p-1 pairwise rounds, one peer per
	// round; the default sends to and receives from every peer at once
	// (collective.Options.AllToAllConcurrent), as NCCL's grouped sends do.
	Pairwise bool
	// Seed seeds the transports, the fault injection and the payloads.
	Seed uint64
	// PSK, when set, secures the spray and roce QPs as PerfConfig.PSK
	// does (IntegrityOnly: payloads in clear); kernel TCP stays clear.
	PSK           []byte
	IntegrityOnly bool
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// OnEndpoint, when not nil, is called with every spray and roce
	// Endpoint a run starts, before its first packet, and a name for it:
	// "PROFILE/SCENARIO/rankR" (roce/loss0.1/rank0). It instruments them
	// (telemetry.InstrumentWith), as transport.Config.OnEndpoint does, and
	// must not block. The endpoints close when their run ends.
	OnEndpoint func(ep *transport.Endpoint, name string)
}

// secure secures the pair of QPs a and b before they connect, as c asks.
func (c CompareConfig) secure(ctx context.Context, a, b *transport.Conn) error {
	return PerfConfig{PSK: c.PSK, IntegrityOnly: c.IntegrityOnly}.securePair(ctx, a, b)
}

// protection names what protects c's spray and roce QPs.
func (c CompareConfig) protection() string {
	return PerfConfig{PSK: c.PSK, IntegrityOnly: c.IntegrityOnly}.protection()
}

// endpointHook returns the transport hook of rank r's endpoint in the run
// of prof under sc, or nil.
func (c CompareConfig) endpointHook(prof, sc string, r int) func(*transport.Endpoint) {
	if c.OnEndpoint == nil {
		return nil
	}
	name := fmt.Sprintf("%s/%s/rank%d", prof, sc, r)
	return func(ep *transport.Endpoint) { c.OnEndpoint(ep, name) }
}

// ErrTeardown wraps the error of a testbed that could not be removed
// after a run; the run's rows are complete. spray testbed down --all
// removes what is left.
var ErrTeardown = errors.New("bench: testbed teardown failed (spray testbed down --all removes what is left)")

// Check returns the error Compare would return for c's settings before
// building anything (wrapping ErrCompare), or nil: spray compare refuses
// such a command line as a usage error.
func (c CompareConfig) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c CompareConfig) withDefaults() (CompareConfig, error) {
	if c.Testbed.Hosts == 0 && !c.Loopback {
		tb, err := testbed.ParseLeafSpine(DefaultCompareTestbed)
		if err != nil {
			return c, err
		}
		c.Testbed = tb
	}
	if c.Scenarios == nil {
		c.Scenarios = DefaultScenarios
	}
	if c.Profiles == nil {
		c.Profiles = DefaultProfiles
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(DefaultScenarios, s) {
			return c, fmt.Errorf("%w: unknown scenario %q (want %s)", ErrCompare, s, strings.Join(DefaultScenarios, ", "))
		}
	}
	for _, p := range c.Profiles {
		if !slices.Contains(DefaultProfiles, p) {
			return c, fmt.Errorf("%w: unknown profile %q (want %s)", ErrCompare, p, strings.Join(DefaultProfiles, ", "))
		}
	}
	if c.Size == 0 {
		c.Size = 1 << 20
	}
	if c.Size < 0 || c.Size > 1<<30 {
		return c, fmt.Errorf("%w: size %d: want 1 B to 1 GiB", ErrCompare, c.Size)
	}
	if c.Iters == 0 {
		c.Iters = 30
	}
	if c.Iters < 0 || c.Iters > 1e6 {
		return c, fmt.Errorf("%w: iters %d", ErrCompare, c.Iters)
	}
	switch {
	case c.Warmup == 0:
		c.Warmup = 2
	case c.Warmup < 0:
		c.Warmup = 0
	}
	if c.Link == "" {
		c.Link = KindXDP
	}
	if c.Link != KindXDP && c.Link != KindRaw && c.Link != KindUDP {
		return c, fmt.Errorf("%w: link %q (want xdp, raw or udp)", ErrCompare, c.Link)
	}
	if c.Entropies == 0 {
		c.Entropies = 32
	}
	if c.Window == 0 {
		c.Window = 256
	}
	if c.SprayCC == "" {
		c.SprayCC = DefaultSprayCC
	}
	if c.RoCECC == "" {
		c.RoCECC = DefaultRoCECC
	}
	for _, name := range []string{c.SprayCC, c.RoCECC} {
		if name == "default" || name == CCWindow {
			continue
		}
		if _, err := cc.ByName(name, cc.Params{}); err != nil {
			return c, fmt.Errorf("%w: %w (or window, default)", ErrCompare, err)
		}
	}
	if c.RoCEAckTimeout == 0 {
		c.RoCEAckTimeout = transport.DefaultLocalAckTimeout
	}
	if c.RoCEAckTimeout > transport.MaxLocalAckTimeout {
		return c, fmt.Errorf("%w: roce Local ACK Timeout %d above %d", ErrCompare, c.RoCEAckTimeout, transport.MaxLocalAckTimeout)
	}
	if c.RunTimeout == 0 {
		c.RunTimeout = time.Minute
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c, nil
}

// Drops are the frames the fabric dropped during a run, by cause.
type Drops struct {
	Loss      uint64 `json:"loss"`      // random loss (fault injection)
	Burst     uint64 `json:"burst"`     // burst loss (fault injection)
	Blackhole uint64 `json:"blackhole"` // a failed link
	Queue     uint64 `json:"queue"`     // a full egress queue (congestion)
	// Host counts frames that reached a rank's link and were dropped
	// there (receive ring or pool full: the rank did not keep up).
	Host uint64 `json:"host"`
}

// Total returns the sum of the drops.
func (d Drops) Total() uint64 { return d.Loss + d.Burst + d.Blackhole + d.Queue + d.Host }

// CompareRow is one profile under one scenario: plain data, as JSON
// encodes it.
type CompareRow struct {
	Profile  string `json:"profile"`
	Scenario string `json:"scenario"`
	// Bytes each rank sent per all-to-all, Ranks the world size, Iters the
	// timed all-to-alls that completed.
	Bytes int64 `json:"bytes"`
	Ranks int   `json:"ranks"`
	Iters int   `json:"iters"`
	// Completion time of an all-to-all: from the moment every rank is
	// released to the moment the last one returns.
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	// AlgBW is Bytes/Mean and BusBW AlgBW*(Ranks-1)/Ranks, in GB/s (1e9
	// bytes/s), as nccl-tests reports them.
	AlgBW float64 `json:"algbw_gbytes"`
	BusBW float64 `json:"busbw_gbytes"`
	// Wrong counts received elements that differ from what was sent.
	Wrong int `json:"wrong"`
	// Retransmits and Timeouts sum the QPs' counters (0 for tcp: the kernel
	// keeps its own).
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	// Duplicates counts data packets that receivers already had: the
	// retransmissions that were not needed.
	Duplicates uint64 `json:"duplicates"`
	// TLPs counts the tail loss probes among the retransmissions.
	TLPs uint64 `json:"tlps"`
	// ECNMarks, Drops and the queue delays come from the fabric programs
	// and queues of every switch port (zero on loopback, where Drops.Loss
	// counts the frames the links dropped).
	ECNMarks uint64 `json:"ecn_marks"`
	Drops    Drops  `json:"drops"`
	// Trimmed counts the spray data packets that switch ports cut to their
	// headers instead of dropping them, on a fabric that trims
	// (leafspine:...,trim).
	Trimmed uint64 `json:"trimmed"`
	// MaxQueueDelay is the largest queue delay a port measured (warm-up
	// included); MeanQueueDelay the mean over the measured frames of the
	// timed iterations. The fabric measures spray and roce frames only.
	MaxQueueDelay  time.Duration `json:"max_queue_delay_ns"`
	MeanQueueDelay time.Duration `json:"mean_queue_delay_ns"`
	// SpineBytes are the bytes that crossed each spine (leaf uplinks), and
	// Imbalance their max/mean (1 is a perfect spread; 0 when no byte
	// crossed).
	SpineBytes []uint64 `json:"spine_bytes,omitempty"`
	Imbalance  float64  `json:"imbalance"`
	// Samples are the completion times of the timed iterations, in order.
	Samples []time.Duration `json:"samples_ns"`
	// Err is why the run stopped early, if it did; Note says what the
	// row does not measure.
	Err  string `json:"error,omitempty"`
	Note string `json:"note,omitempty"`
}

// CompareResult is what Compare measured: plain data, as JSON encodes it
// (durations in nanoseconds).
type CompareResult struct {
	// Mode is "leafspine" or "loopback"; Testbed the fabric's config.
	Mode    string `json:"mode"`
	Testbed string `json:"testbed,omitempty"`
	// Link is the link kind of the spray and roce ranks.
	Link string `json:"link"`
	// AllToAll is the all-to-all's schedule: "concurrent" or "pairwise".
	AllToAll string `json:"alltoall"`
	// Iterations is the number of timed all-to-alls each row asked for; a
	// row whose Iters is lower stopped early (its Err says why).
	Iterations int `json:"iterations"`
	// BisectionGbps is the capacity between the fabric's two halves of
	// leaves, in each direction. AllToAllLimit is the largest all-to-all
	// algbw the fabric allows (GB/s), from the spine links and the leaves'
	// host ports; 0 on loopback.
	// RoCEAckTimeout is the roce QPs' Local ACK Timeout exponent (their
	// fixed retransmission timer is 4.096µs x 2^RoCEAckTimeout), negative
	// when they ran the adaptive timer instead.
	RoCEAckTimeout int `json:"roce_local_ack_timeout"`
	// Protection is what protected the spray and roce QPs' packets
	// (ProtectionClear, ProtectionEncrypted, ProtectionIntegrity).
	Protection    string       `json:"protection"`
	BisectionGbps float64      `json:"bisection_gbps"`
	AllToAllLimit float64      `json:"alltoall_limit_gbytes"`
	Rows          []CompareRow `json:"rows"`
}

// Row returns the row of profile under scenario, or nil.
func (r *CompareResult) Row(profile, scenario string) *CompareRow {
	for i := range r.Rows {
		if r.Rows[i].Profile == profile && r.Rows[i].Scenario == scenario {
			return &r.Rows[i]
		}
	}
	return nil
}

// AllToAllLimit returns the fabric's bound on an all-to-all's algbw in
// GB/s, and its bisection bandwidth (one direction, Gbit/s). In an
// all-to-all of n = Hosts*Leaves ranks every rank sends size/n to each
// rank: a host port towards a host carries (n-1)/n of size, a leaf's
// uplinks together carry Hosts*size*(n-Hosts)/n. The bound is the slower
// of the two. Rates count Ethernet frames, so the payload rate is somewhat
// lower (headers: about 4% at MTU 3500).
//
// What the default comparison loses against this bound: the data
// headers (a spray data frame at MTU 3500 carries 3,328 bytes of payload
// in 3,410 bytes, 3,486 with the INT region of 3 hop records, which only
// the frames an ACK is likely to echo reserve), the ACKs of the other
// direction's data on the same links, and the spines' idle time at the
// start and end of each all-to-all. docs/results.md has the breakdown of
// a spine capture.
func AllToAllLimit(c testbed.LeafSpineConfig) (algbw, bisectionGbps float64) {
	rate, host := float64(c.RateBps), float64(c.HostRateBps)
	if rate == 0 {
		rate = testbed.DefaultRateBps
	}
	if host == 0 {
		host = rate * float64(c.Spines) / float64(max(c.Hosts, 1))
	}
	bisectionGbps = float64(c.Leaves/2) * float64(c.Spines) * rate / 1e9
	n := float64(c.Hosts * c.Leaves)
	if n <= 1 {
		return 0, bisectionGbps
	}
	// Seconds per byte of size, per bound.
	tHost := (n - 1) / n * 8 / host
	tUp := 0.0
	if c.Leaves > 1 {
		tUp = float64(c.Hosts) * (n - float64(c.Hosts)) / n * 8 / (float64(c.Spines) * rate)
	}
	return 1 / math.Max(tHost, tUp) / 1e9, bisectionGbps
}

// Compare runs the same all-to-all workload with each profile under each
// scenario, one run after the other, one rank per testbed host (or per
// loopback address), and collects the table users compare: completion
// times, algbw and busbw, retransmits, ECN marks, drops by cause, queue
// delays and how evenly the spines were used. A run that fails or times
// out is reported in its row (Err) and the comparison goes on; Compare
// returns an error only when it cannot build or inspect the fabric, or
// when ctx ends.
//
// On a testbed it needs root. It builds the fabric, attaches spray's
// fabric programs afresh for every run (counters start at zero; ECN
// marking is on for roce, whose DCQCN reads it), and tears everything
// down before it returns.
func Compare(ctx context.Context, cfg CompareConfig) (CompareResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return CompareResult{}, err
	}
	if cfg.Loopback {
		return compareLoopback(ctx, cfg)
	}
	return compareFabric(ctx, cfg)
}

// summarize fills the row's times and bandwidths from its samples.
func (r *CompareRow) summarize() {
	r.Iters = len(r.Samples)
	if len(r.Samples) == 0 {
		return
	}
	s := Summarize(slices.Clone(r.Samples))
	r.Mean, r.P50, r.P99, r.P999 = s.Mean, s.P50, s.P99, s.P999
	if s.Mean > 0 {
		r.AlgBW = float64(r.Bytes) / s.Mean.Seconds() / 1e9
		r.BusBW = r.AlgBW * float64(r.Ranks-1) / float64(r.Ranks)
	}
}

// imbalance returns max/mean of b, or 0 if b sums to zero.
func spineImbalance(b []uint64) float64 {
	var sum, mx uint64
	for _, v := range b {
		sum += v
		mx = max(mx, v)
	}
	if sum == 0 {
		return 0
	}
	return float64(mx) / (float64(sum) / float64(len(b)))
}
