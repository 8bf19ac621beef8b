package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// Flow is one message from Src to Dst of Size bytes. It starts at Start,
// or, with Trigger set, when that trigger fires. When its sender has
// sent it all (acknowledged) it activates SendDone, when its receiver has
// it all RecvDone (triggers numbered from 1; 0 is none), as htsim's
// connection matrices do.
type Flow struct {
	Src, Dst int
	Size     int64
	Start    clock.Time
	Trigger  int
	SendDone int
	RecvDone int
}

// Trigger kinds, as htsim names them.
const (
	// TriggerOneshot starts its flows at its first activation.
	TriggerOneshot = "oneshot"
	// TriggerMultishot starts, at each activation, the next of its flows
	// not yet started (in file order).
	TriggerMultishot = "multishot"
	// TriggerBarrier starts its flows at its Count-th activation.
	TriggerBarrier = "barrier"
)

// Trigger starts flows when activated: at once, or Delay after (the
// compute a rank does between two collectives).
type Trigger struct {
	Kind  string
	Count int
	Delay time.Duration
}

// Workload is a set of flows and the triggers that chain them.
type Workload struct {
	// Name describes the workload in reports ("alltoall:1M").
	Name  string
	Flows []Flow
	// Triggers[i-1] is trigger i.
	Triggers []Trigger
	// PerRank is the bytes each sending rank moves, for algbw: the
	// all-to-all's buffer, or the flow size.
	PerRank int64
	// Iters, when above 0, says that the flows are Iters repetitions of
	// one collective, each len(Flows)/Iters consecutive flows: Run then
	// reports the time of each.
	Iters int
	// Steps and Compute describe a training-step workload (moe): Steps
	// steps, each two collectives (Iters is twice Steps) with Compute
	// between them on every rank. RowSteps reads them.
	Steps   int
	Compute time.Duration
	// Ends, when set, are where each of the Iters collectives' flows end
	// (exclusive), for collectives of unequal flow counts; Phases then
	// names the collectives of one step (dispatch, combine, ...).
	Ends   []int
	Phases []string
	// Groups, when set, splits each collective into the instances that
	// run side by side: Groups[p][h] is the instance of phase p that
	// host h sends in (its EP group for dispatch and combine, its data
	// parallel ring for the reduce-scatter and all-gather). Without it a
	// collective is one instance. CollectiveStats reads it.
	Groups [][]int32
	// Model is the MoE jobs' model (moe:ep=G), or nil.
	Model *MoEModel
}

// Collectives returns the flow ranges [lo, hi) of w's collectives: Ends,
// or Iters equal parts, or the whole workload as one.
func (w Workload) Collectives() [][2]int {
	if len(w.Ends) > 0 {
		rs := make([][2]int, len(w.Ends))
		lo := 0
		for i, e := range w.Ends {
			rs[i] = [2]int{lo, e}
			lo = e
		}
		return rs
	}
	it := w.Iters
	if it < 1 || len(w.Flows)%it != 0 {
		it = 1
	}
	per := len(w.Flows) / it
	rs := make([][2]int, it)
	for k := range it {
		rs[k] = [2]int{k * per, (k + 1) * per}
	}
	return rs
}

// Workload kinds that ParseWorkload knows.
const (
	WorkPermutation      = "permutation"
	WorkAllToAll         = "alltoall"
	WorkAllToAllPairwise = "alltoall-pairwise"
	WorkIncast           = "incast"
	WorkMix              = "mix"
	WorkHtsim            = "htsim"
	WorkMoE              = "moe"
)

// MinRateWindow is the least simulated time from which a rate per minute
// is given: a count from a shorter run, scaled to a minute, says more
// about the scaling than about the fabric (one PAUSE in 3 ms reads as
// 20,000 a minute). A moe workload's default steps are enough that its
// compute alone lasts this long.
const MinRateWindow = 100 * time.Millisecond

// MaxFlows bounds a workload's flows (about 150 bytes each while it runs).
const MaxFlows = 1 << 23

// ParseWorkload builds the workload spec names for hosts hosts, seeded
// by seed:
//
//   - permutation:SIZE: every host sends SIZE to another, a random
//     derangement;
//   - alltoall:SIZE: every host sends SIZE/hosts to every other at once (NCCL's
//     grouped sends; SIZE is each rank's buffer, as nccl-tests and spray
//     compare name it);
//   - alltoall-pairwise:SIZE: the same in hosts-1 rounds, round r to host
//     (i+r) mod hosts, a host's next round once its send and its receive
//     of this one are done;
//   - incast:SIZE: every other host (or senders=N of them) sends SIZE to host 0;
//   - mix:SIZE: an incast of SIZE from senders=N (default 8) hosts to host
//     0 over a background permutation of bg=SIZE (default 10 x SIZE) flows;
//   - moe:SIZE: the all-to-alls of a mixture-of-experts layer in
//     training, iters=N steps: each rank sends SIZE/hosts to every other
//     (dispatch), computes for compute=DUR (default 1ms) once it has
//     received all of its dispatch, then sends SIZE/hosts to every other
//     again (combine), and starts the next step's dispatch once it has
//     received all of its combine. Ranks wait on their own receives, not
//     on each other (no global barrier). iters defaults to enough steps
//     that their compute alone takes MinRateWindow (100 ms);
//   - moe:ep=G[,place=leaf|spread|pod,jobs=J,tokens=T,experts=E,topk=K,
//     hidden=H,dispatch=B,combine=B,grad=SIZE,routing=uniform|random]:
//     MoE training with expert parallelism from the model (MoEModel), with
//     compute and iters as moe:SIZE; placement by leaf and pod needs
//     ParseWorkloadOn;
//   - htsim:FILE: an htsim connection matrix (see ReadConnectionMatrix).
//
// Options: iters=N repeats the flows N times, each repetition once the
// previous one is complete (a barrier; for moe, the steps); cdf=FILE
// draws each flow's size
// from a CDF file (see ReadCDF) instead of SIZE (permutation, incast, and
// mix's background). SIZE is bytes with an optional k, M or G (powers of
// 1024).
func ParseWorkload(spec string, hosts int, seed uint64) (Workload, error) {
	return parseWorkload(spec, Layout{Hosts: hosts, LeafHosts: hosts, PodHosts: hosts}, seed)
}

// ParseWorkloadOn is ParseWorkload for the hosts of topology t, whose
// leaves and pods place a moe workload's EP groups (place=spread, pod).
func ParseWorkloadOn(spec string, t Topo, seed uint64) (Workload, error) {
	return parseWorkload(spec, LayoutOf(t), seed)
}

func parseWorkload(spec string, l Layout, seed uint64) (Workload, error) {
	hosts := l.Hosts
	w := Workload{Name: spec}
	ws, err := parseSpec(spec, hosts)
	if err != nil {
		return w, err
	}
	if ws.model != nil {
		m := ws.model
		w.Flows, w.Triggers, w.Ends = m.build(l, ws.compute, ws.iters, seed)
		w.Phases, w.Model = m.phases(hosts), m
		w.Groups = m.groupsOf(l)
		w.Iters, w.Steps, w.Compute = len(w.Ends), ws.iters, ws.compute
		w.PerRank = m.expectedCopies() * m.Dispatch * int64(m.EP-1)
		return w, nil
	}
	kind, size, iters, senders, bg, compute, cdf := ws.kind, ws.size, ws.iters, ws.senders, ws.bg, ws.compute, ws.cdf
	if kind == WorkHtsim {
		f, err := os.Open(ws.path)
		if err != nil {
			return w, err
		}
		defer f.Close()
		cm, err := ReadConnectionMatrix(f)
		if err != nil {
			return w, err
		}
		if cm.Nodes > hosts {
			return w, fmt.Errorf("%w: connection matrix for %d nodes on %d hosts", ErrConfig, cm.Nodes, hosts)
		}
		cm.Name = spec
		return cm.Workload, nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x574F524B))
	draw := func(def int64) int64 {
		if cdf != nil {
			return cdf.Sample(rng)
		}
		return def
	}
	var one []Flow
	w.PerRank = size
	switch kind {
	case WorkPermutation:
		for s, d := range derangement(hosts, rng) {
			one = append(one, Flow{Src: s, Dst: d, Size: draw(size)})
		}
	case WorkAllToAll:
		block := size / int64(hosts)
		if block < 1 {
			return w, fmt.Errorf("%w: workload %q: %d bytes over %d ranks", ErrConfig, spec, size, hosts)
		}
		for s := range hosts {
			for k := 1; k < hosts; k++ {
				one = append(one, Flow{Src: s, Dst: (s + k) % hosts, Size: block})
			}
		}
	case WorkAllToAllPairwise:
		block := size / int64(hosts)
		if block < 1 {
			return w, fmt.Errorf("%w: workload %q: %d bytes over %d ranks", ErrConfig, spec, size, hosts)
		}
		w.Flows, w.Triggers = pairwise(hosts, block, iters)
		w.Iters = iters
		return w, nil
	case WorkMoE:
		block := size / int64(hosts)
		if block < 1 {
			return w, fmt.Errorf("%w: workload %q: %d bytes over %d ranks", ErrConfig, spec, size, hosts)
		}
		w.Flows, w.Triggers = moe(hosts, block, compute, iters)
		w.Iters, w.Steps, w.Compute = 2*iters, iters, compute
		return w, nil
	case WorkIncast:
		if senders == 0 {
			senders = hosts - 1
		}
		for s := 1; s <= senders; s++ {
			one = append(one, Flow{Src: s, Dst: 0, Size: draw(size)})
		}
	case WorkMix:
		if senders == 0 {
			senders = min(8, hosts-1)
		}
		for s, d := range derangement(hosts, rng) {
			one = append(one, Flow{Src: s, Dst: d, Size: draw(bg)})
		}
		for s := 1; s <= senders; s++ {
			one = append(one, Flow{Src: s, Dst: 0, Size: size})
		}
	default:
		return w, fmt.Errorf("%w: workload kind %q (want permutation, alltoall, alltoall-pairwise, incast, mix, moe or htsim)", ErrConfig, kind)
	}
	w.Flows, w.Triggers = repeat(one, iters)
	w.Iters = iters
	return w, nil
}

// workSpec is a workload spec's parameters, parsed and checked, before
// anything proportional to them is built.
type workSpec struct {
	kind, path     string // path: an htsim file
	size, bg       int64
	iters, senders int
	compute        time.Duration
	cdf            *CDF
	model          *MoEModel // moe with EP groups
}

// parseSpec parses and checks spec for hosts hosts, as ParseWorkload
// takes it, allocating nothing proportional to hosts or to the sizes.
func parseSpec(spec string, hosts int) (workSpec, error) {
	var ws workSpec
	kind, rest, _ := strings.Cut(spec, ":")
	parts := strings.Split(rest, ",")
	ws.kind = kind
	if kind == WorkHtsim {
		ws.path = parts[0]
		return ws, nil
	}
	if parts[0] == "" {
		return ws, fmt.Errorf("%w: workload %q: want KIND:SIZE", ErrConfig, spec)
	}
	var size int64
	var err error
	if kind == WorkMoE && strings.Contains(parts[0], "=") {
		// moe:ep=G,...: the model's sizes, no SIZE.
		m := defaultMoE()
		ws.model = &m
		parts = append([]string{""}, parts...)
		size = 1
	} else if size, err = ParseSize(parts[0]); err != nil {
		return ws, fmt.Errorf("%w: workload %q: %v", ErrConfig, spec, err)
	}
	iters, senders, bg := 1, 0, 10*size
	itersSet := false
	compute := time.Duration(0)
	var cdf *CDF
	for _, opt := range parts[1:] {
		k, v, ok := strings.Cut(opt, "=")
		if !ok {
			return ws, fmt.Errorf("%w: workload %q: option %q: want key=value", ErrConfig, spec, opt)
		}
		if ws.model != nil {
			if is, err := ws.model.setOpt(k, v); is {
				if err != nil {
					return ws, fmt.Errorf("%w: workload %q: option %q: %v", ErrConfig, spec, opt, err)
				}
				continue
			}
		} else if kind == WorkMoE {
			var probe MoEModel
			if is, _ := probe.setOpt(k, v); is {
				return ws, fmt.Errorf("%w: workload %q: option %q: the model's options come without SIZE (moe:ep=G,...)", ErrConfig, spec, opt)
			}
		}
		switch k {
		case "iters":
			iters, err = strconv.Atoi(v)
			if err == nil && (iters < 1 || iters > 10000) {
				err = errors.New("want 1 to 10000")
			}
			itersSet = true
		case "compute":
			if kind != WorkMoE {
				err = errors.New("only for moe")
			} else if compute, err = time.ParseDuration(v); err == nil && (compute <= 0 || compute > time.Second) {
				err = fmt.Errorf("%v: want a duration in (0, 1s]", compute)
			}
		case "senders":
			senders, err = strconv.Atoi(v)
			if err == nil && (senders < 1 || senders >= hosts) {
				err = fmt.Errorf("want 1 to %d", hosts-1)
			}
		case "bg":
			bg, err = ParseSize(v)
		case "cdf":
			var f *os.File
			if f, err = os.Open(v); err == nil {
				cdf, err = ReadCDF(f)
				f.Close()
			}
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return ws, fmt.Errorf("%w: workload %q: option %q: %v", ErrConfig, spec, opt, err)
		}
	}
	if hosts < 2 {
		return ws, fmt.Errorf("%w: %d hosts", ErrConfig, hosts)
	}
	switch kind {
	case WorkPermutation, WorkIncast, WorkMix:
	case WorkAllToAll, WorkAllToAllPairwise, WorkMoE:
		if ws.model != nil {
			if err := ws.model.check(hosts); err != nil {
				return ws, fmt.Errorf("%w: workload %q: %v", ErrConfig, spec, err)
			}
			break
		}
		if size/int64(hosts) < 1 {
			return ws, fmt.Errorf("%w: workload %q: %d bytes over %d ranks", ErrConfig, spec, size, hosts)
		}
	default:
		return ws, fmt.Errorf("%w: workload kind %q (want permutation, alltoall, alltoall-pairwise, incast, mix, moe or htsim)", ErrConfig, kind)
	}
	if kind == WorkMoE {
		if cdf != nil {
			return ws, fmt.Errorf("%w: workload %q: cdf is not for moe (every block is SIZE/hosts)", ErrConfig, spec)
		}
		if compute == 0 {
			compute = time.Millisecond
		}
		if !itersSet {
			iters = int((MinRateWindow + compute - 1) / compute)
		}
		f := 2 * int64(iters) * int64(hosts) * int64(hosts-1)
		if ws.model != nil {
			f, _, _ = ws.model.shape(hosts, iters)
		}
		if f > MaxFlows {
			return ws, fmt.Errorf("%w: workload %q: %d steps of their collectives over %d ranks are %d flows, more than %d: take fewer steps or a longer compute",
				ErrConfig, spec, iters, hosts, f, MaxFlows)
		}
	}
	ws.size, ws.bg, ws.iters, ws.senders, ws.compute, ws.cdf = size, bg, iters, senders, compute, cdf
	return ws, nil
}

// Shape is what a workload puts into a run: the hosts that send or
// receive, its flows, the host pairs that flows join (a QP at each end)
// and its largest flow.
type Shape struct {
	Hosts, Flows, Pairs, MaxSize int64
}

// WorkloadShape returns lower bounds of the Shape of ParseWorkload(spec,
// hosts, seed), for every seed, computed from spec's parameters without
// building anything proportional to them: Preflight's input. An htsim
// file's flows, bounded by its size, count as none, and so do the sizes a
// cdf draws.
func WorkloadShape(spec string, hosts int) (Shape, error) {
	ws, err := parseSpec(spec, hosts)
	if err != nil {
		return Shape{}, err
	}
	h, it := int64(hosts), int64(ws.iters)
	size := ws.size
	if ws.cdf != nil {
		size = 0
	}
	switch ws.kind {
	case WorkPermutation:
		// A permutation's h ordered pairs join at least h/2 host pairs.
		return Shape{Hosts: h, Flows: h * it, Pairs: (h + 1) / 2, MaxSize: size}, nil
	case WorkAllToAll, WorkAllToAllPairwise:
		return Shape{Hosts: h, Flows: h * (h - 1) * it, Pairs: h * (h - 1) / 2, MaxSize: ws.size / h}, nil
	case WorkMoE:
		if m := ws.model; m != nil {
			f, p, ms := m.shape(hosts, ws.iters)
			return Shape{Hosts: int64(max(m.Jobs, 1) * m.groups(hosts) * m.EP), Flows: f, Pairs: p, MaxSize: ms}, nil
		}
		return Shape{Hosts: h, Flows: 2 * h * (h - 1) * it, Pairs: h * (h - 1) / 2, MaxSize: ws.size / h}, nil
	case WorkIncast:
		n := int64(ws.senders)
		if n == 0 {
			n = h - 1
		}
		return Shape{Hosts: n + 1, Flows: n * it, Pairs: n, MaxSize: size}, nil
	case WorkMix:
		n := int64(ws.senders)
		if n == 0 {
			n = min(8, h-1)
		}
		bg := ws.bg
		if ws.cdf != nil {
			bg = 0
		}
		return Shape{Hosts: h, Flows: (h + n) * it, Pairs: (h + 1) / 2, MaxSize: max(ws.size, bg)}, nil
	}
	return Shape{}, nil // htsim
}

// repeat chains iters copies of flows: copy i+1 starts when a barrier
// has seen every flow of copy i received.
func repeat(one []Flow, iters int) ([]Flow, []Trigger) {
	var fs []Flow
	var ts []Trigger
	for it := range iters {
		for _, f := range one {
			if it > 0 {
				f.Trigger = it
			}
			if it < iters-1 {
				f.RecvDone = it + 1
			}
			fs = append(fs, f)
		}
		if it < iters-1 {
			ts = append(ts, Trigger{Kind: TriggerBarrier, Count: len(one)})
		}
	}
	return fs, ts
}

// pairwise builds the pairwise all-to-all: in round r host i sends to
// (i+r) mod n; its round r+1 starts when both its send of round r is done
// and the receive of round r from (i-r) mod n, a barrier of two per host
// and round.
func pairwise(n int, block int64, iters int) ([]Flow, []Trigger) {
	var fs []Flow
	var ts []Trigger
	rounds := (n - 1) * iters
	trig := func(host, round int) int { return round*n + host + 1 } // barrier before host's round
	for r := range rounds {
		k := r%(n-1) + 1
		for i := range n {
			f := Flow{Src: i, Dst: (i + k) % n, Size: block}
			if r > 0 {
				f.Trigger = trig(i, r-1)
			}
			if r < rounds-1 {
				f.SendDone = trig(i, r)
				f.RecvDone = trig((i+k)%n, r)
			}
			fs = append(fs, f)
		}
	}
	for range (rounds - 1) * n {
		ts = append(ts, Trigger{Kind: TriggerBarrier, Count: 2})
	}
	return fs, ts
}

// moe builds steps steps of an MoE layer on n ranks, each a dispatch
// all-to-all, compute and a combine all-to-all, in that flow order (so
// that each collective is len/(2 x steps) consecutive flows). Trigger
// dispatched(k, r) fires when rank r has received step k's dispatch from
// every other rank and starts r's combine compute later;
// combined(k, r) fires when r has received step k's combine and starts
// r's dispatch of step k+1.
func moe(n int, block int64, compute time.Duration, steps int) ([]Flow, []Trigger) {
	dispatched := func(k, r int) int { return 2*k*n + r + 1 }
	combined := func(k, r int) int { return 2*k*n + n + r + 1 }
	fs := make([]Flow, 0, 2*steps*n*(n-1))
	for k := range steps {
		for s := range n {
			for o := 1; o < n; o++ {
				d := (s + o) % n
				f := Flow{Src: s, Dst: d, Size: block, RecvDone: dispatched(k, d)}
				if k > 0 {
					f.Trigger = combined(k-1, s)
				}
				fs = append(fs, f)
			}
		}
		for s := range n {
			for o := 1; o < n; o++ {
				d := (s + o) % n
				f := Flow{Src: s, Dst: d, Size: block, Trigger: dispatched(k, s)}
				if k < steps-1 {
					f.RecvDone = combined(k, d)
				}
				fs = append(fs, f)
			}
		}
	}
	ts := make([]Trigger, (2*steps-1)*n)
	for k := range steps {
		for r := range n {
			ts[dispatched(k, r)-1] = Trigger{Kind: TriggerBarrier, Count: n - 1, Delay: compute}
			if k < steps-1 {
				ts[combined(k, r)-1] = Trigger{Kind: TriggerBarrier, Count: n - 1}
			}
		}
	}
	return fs, ts
}

// derangement returns a random permutation of [0, n) with no fixed point.
func derangement(n int, rng *rand.Rand) []int {
	p := rng.Perm(n)
	for i := range n {
		if p[i] == i {
			j := (i + 1) % n
			p[i], p[j] = p[j], p[i]
		}
	}
	return p
}

// ParseSize parses a byte count with an optional suffix k, M or G (powers
// of 1024, case-insensitive, an optional B after).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(s, "B"), "b")
	mul := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mul = 1 << 10
		case 'm', 'M':
			mul = 1 << 20
		case 'g', 'G':
			mul = 1 << 30
		}
		if mul > 1 {
			t = t[:len(t)-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 1 || v > (1<<32-1)/mul {
		return 0, fmt.Errorf("%q is not a size from 1 B to 4 GiB", s)
	}
	return v * mul, nil
}

// CDF is a flow-size distribution: sizes in bytes and their cumulative
// probabilities, both rising.
type CDF struct {
	Size []float64
	P    []float64
}

// ReadCDF reads a flow-size CDF, one "SIZE PROB" pair a line (the format
// of the HPCC and pFabric traffic generators' files: bytes, then the
// cumulative probability, as a fraction or a percentage up to 100). Lines
// starting with # are comments.
func ReadCDF(r io.Reader) (*CDF, error) {
	c := &CDF{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: CDF line %d: want SIZE PROB", ErrConfig, line)
		}
		s, err1 := strconv.ParseFloat(f[0], 64)
		p, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil || s < 0 || p < 0 || math.IsNaN(s) || math.IsNaN(p) || s > 1<<32 {
			return nil, fmt.Errorf("%w: CDF line %d: %q", ErrConfig, line, sc.Text())
		}
		if k := len(c.P); k > 0 && (p < c.P[k-1] || s < c.Size[k-1]) {
			return nil, fmt.Errorf("%w: CDF line %d: not rising", ErrConfig, line)
		}
		c.Size = append(c.Size, s)
		c.P = append(c.P, p)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(c.P) == 0 {
		return nil, fmt.Errorf("%w: empty CDF", ErrConfig)
	}
	top := c.P[len(c.P)-1]
	if top > 1.0000001 {
		if top > 100.0001 {
			return nil, fmt.Errorf("%w: CDF ends at %v (want 1 or 100)", ErrConfig, top)
		}
		for i := range c.P {
			c.P[i] /= 100
		}
	}
	if c.P[len(c.P)-1] < 0.999999 {
		return nil, fmt.Errorf("%w: CDF ends at %v (want 1 or 100)", ErrConfig, top)
	}
	return c, nil
}

// Sample draws a size, interpolating linearly between the points, at
// least 1 byte.
func (c *CDF) Sample(rng *rand.Rand) int64 {
	u := rng.Float64()
	i := sort.SearchFloat64s(c.P, u)
	if i == 0 {
		return max(int64(c.Size[0]), 1)
	}
	if i >= len(c.P) {
		return max(int64(c.Size[len(c.Size)-1]), 1)
	}
	p0, p1 := c.P[i-1], c.P[i]
	s := c.Size[i]
	if p1 > p0 {
		s = c.Size[i-1] + (c.Size[i]-c.Size[i-1])*(u-p0)/(p1-p0)
	}
	return max(int64(s), 1)
}

// ConnectionMatrix is a workload read from an htsim connection matrix.
type ConnectionMatrix struct {
	Workload
	Nodes int
}

// ReadConnectionMatrix reads an htsim connection matrix: a header of
// "Nodes N", "Connections C" and optionally "Triggers T" and "Failures
// 0", then one line per flow, "SRC->DST id ID start PS size BYTES" or
// with "trigger TID" instead of start, and optionally "send_done_trigger
// TID", "recv_done_trigger TID", "prio P" (ignored), and one per trigger,
// "trigger id TID oneshot|multishot|barrier [count N]". Start times are
// in picoseconds, as htsim keeps time. Flow IDs are not kept: flows are
// numbered in file order.
func ReadConnectionMatrix(r io.Reader) (ConnectionMatrix, error) {
	var cm ConnectionMatrix
	conns, trigs := -1, 0
	trig := map[int]Trigger{}
	used := map[int]bool{}
	sc := bufio.NewScanner(r)
	line := 0
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: connection matrix line %d: %s", ErrConfig, line, fmt.Sprintf(format, a...))
	}
	atoi := func(s string) (int, error) {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, bad("%q is not a count", s)
		}
		return v, nil
	}
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var err error
		switch {
		case f[0] == "Nodes" && len(f) == 2:
			cm.Nodes, err = atoi(f[1])
		case f[0] == "Connections" && len(f) == 2:
			conns, err = atoi(f[1])
		case f[0] == "Triggers" && len(f) == 2:
			trigs, err = atoi(f[1])
		case f[0] == "Failures" && len(f) == 2:
			if f[1] != "0" {
				err = bad("failures are not read: put them in the scenario")
			}
		case strings.Contains(f[0], "->"):
			err = cm.parseFlow(f, &used, bad, atoi)
		case f[0] == "trigger":
			var id int
			t := Trigger{}
			for i := 1; i < len(f) && err == nil; i++ {
				switch f[i] {
				case "id":
					if i++; i < len(f) {
						id, err = atoi(f[i])
					}
				case "count":
					if i++; i < len(f) {
						t.Count, err = atoi(f[i])
					}
				case TriggerOneshot, TriggerMultishot, TriggerBarrier:
					if t.Kind != "" {
						err = bad("two trigger kinds")
					}
					t.Kind = f[i]
				default:
					err = bad("unknown trigger token %q", f[i])
				}
			}
			if err == nil && (id == 0 || t.Kind == "") {
				err = bad("a trigger needs an id and a kind")
			}
			if err == nil {
				if _, dup := trig[id]; dup {
					err = bad("trigger %d twice", id)
				}
				trig[id] = t
			}
		default:
			err = bad("unknown line %q", sc.Text())
		}
		if err != nil {
			return cm, err
		}
	}
	if err := sc.Err(); err != nil {
		return cm, err
	}
	if cm.Nodes < 2 {
		return cm, fmt.Errorf("%w: connection matrix: Nodes %d", ErrConfig, cm.Nodes)
	}
	if conns >= 0 && conns != len(cm.Flows) {
		return cm, fmt.Errorf("%w: connection matrix: Connections %d but %d flows", ErrConfig, conns, len(cm.Flows))
	}
	if trigs != len(trig) {
		return cm, fmt.Errorf("%w: connection matrix: Triggers %d but %d defined", ErrConfig, trigs, len(trig))
	}
	// Renumber triggers densely, in ID order.
	ids := make([]int, 0, len(trig))
	for id := range trig {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	num := map[int]int{}
	for i, id := range ids {
		num[id] = i + 1
		cm.Triggers = append(cm.Triggers, trig[id])
	}
	for id := range used {
		if num[id] == 0 {
			return cm, fmt.Errorf("%w: connection matrix: trigger %d used but not defined", ErrConfig, id)
		}
	}
	for i := range cm.Flows {
		f := &cm.Flows[i]
		if f.Src >= cm.Nodes || f.Dst >= cm.Nodes || f.Src == f.Dst {
			return cm, fmt.Errorf("%w: connection matrix: flow %d: %d->%d with %d nodes", ErrConfig, i+1, f.Src, f.Dst, cm.Nodes)
		}
		f.Trigger, f.SendDone, f.RecvDone = num[f.Trigger], num[f.SendDone], num[f.RecvDone]
		cm.PerRank = max(cm.PerRank, f.Size)
	}
	return cm, nil
}

func (cm *ConnectionMatrix) parseFlow(f []string, used *map[int]bool, bad func(string, ...any) error, atoi func(string) (int, error)) error {
	s, d, _ := strings.Cut(f[0], "->")
	src, err := atoi(s)
	if err != nil {
		return err
	}
	dst, err := atoi(d)
	if err != nil {
		return err
	}
	fl := Flow{Src: src, Dst: dst}
	hasStart := false
	for i := 1; i < len(f); i++ {
		if i+1 >= len(f) {
			return bad("%q without a value", f[i])
		}
		k, v := f[i], f[i+1]
		i++
		switch k {
		case "id", "prio":
			if _, err := atoi(v); err != nil {
				return err
			}
		case "start":
			ps, err := strconv.ParseFloat(v, 64)
			if err != nil || ps < 0 || ps > 1e18 {
				return bad("start %q", v)
			}
			fl.Start = clock.Time(ps / 1000)
			hasStart = true
		case "size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n > 1<<32-1 {
				return bad("size %q", v)
			}
			fl.Size = n
		case "trigger", "send_done_trigger", "recv_done_trigger":
			t, err := atoi(v)
			if err != nil || t == 0 {
				return bad("%s %q", k, v)
			}
			(*used)[t] = true
			switch k {
			case "trigger":
				fl.Trigger = t
			case "send_done_trigger":
				fl.SendDone = t
			default:
				fl.RecvDone = t
			}
		default:
			return bad("unknown token %q", k)
		}
	}
	if fl.Size == 0 {
		return bad("flow without a size")
	}
	if hasStart == (fl.Trigger != 0) {
		return bad("a flow needs a start time or a trigger, not both")
	}
	cm.Flows = append(cm.Flows, fl)
	return nil
}

// WriteConnectionMatrix writes w in htsim's connection matrix format, so
// that htsim runs the same flows.
func WriteConnectionMatrix(out io.Writer, w Workload, nodes int) error {
	for i, t := range w.Triggers {
		if t.Delay != 0 {
			return fmt.Errorf("%w: trigger %d starts its flows %v late, which an htsim connection matrix cannot say", ErrConfig, i+1, t.Delay)
		}
	}
	bw := bufio.NewWriter(out)
	fmt.Fprintf(bw, "Nodes %d\nConnections %d\n", nodes, len(w.Flows))
	if len(w.Triggers) > 0 {
		fmt.Fprintf(bw, "Triggers %d\n", len(w.Triggers))
	}
	for i, f := range w.Flows {
		fmt.Fprintf(bw, "%d->%d id %d", f.Src, f.Dst, i+1)
		if f.Trigger != 0 {
			fmt.Fprintf(bw, " trigger %d", f.Trigger)
		} else {
			fmt.Fprintf(bw, " start %d", int64(f.Start)*1000)
		}
		fmt.Fprintf(bw, " size %d", f.Size)
		if f.SendDone != 0 {
			fmt.Fprintf(bw, " send_done_trigger %d", f.SendDone)
		}
		if f.RecvDone != 0 {
			fmt.Fprintf(bw, " recv_done_trigger %d", f.RecvDone)
		}
		fmt.Fprintln(bw)
	}
	for i, t := range w.Triggers {
		fmt.Fprintf(bw, "trigger id %d %s", i+1, t.Kind)
		if t.Kind == TriggerBarrier {
			fmt.Fprintf(bw, " count %d", t.Count)
		}
		fmt.Fprintln(bw)
	}
	return bw.Flush()
}
