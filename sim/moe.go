package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// MoEModel is the traffic of mixture-of-experts training jobs with
// expert parallelism (moe:ep=G,...): every job splits its hosts into EP
// groups of EP ranks; each group's ranks hold Experts/EP experts each,
// and each step every rank dispatches each of its Tokens tokens to the
// ranks that hold its TopK experts (one copy per rank, as DeepEP sends
// it), computes, and combines the tokens back. With Grad set, the ranks
// that hold the same experts in different groups of a job (its data
// parallel group) then reduce-scatter and all-gather Grad bytes in a
// ring before the next step. The defaults are DeepSeek-V3's pretraining
// setting as DeepEP benchmarks it: 4096 tokens per rank, hidden 7168,
// 256 routed experts, top-8, FP8 dispatch (7,392 bytes a token copy:
// 7,168 values and a 4-byte scale per 128) and BF16 combine (14,336).
type MoEModel struct {
	EP      int    // ranks per EP group
	Place   string // PlaceLeaf, PlaceSpread or PlacePod
	Jobs    int    // jobs sharing the fabric, each on its own block of hosts; 0 means 1
	Tokens  int    // tokens per rank per step
	Experts int    // routed experts per group
	TopK    int    // experts per token
	Hidden  int    // the model's hidden size
	// Dispatch and Combine are the bytes of one token copy sent to an
	// expert's rank and back; 0 means FP8 and BF16 of Hidden.
	Dispatch, Combine int64
	// Grad is the gradient bytes each rank reduces with its data
	// parallel group between steps; 0 means none.
	Grad int64
	// Random draws each token's experts (seeded, once for every step)
	// instead of giving every rank pair the expected copies.
	Random bool
}

// Placements of EP groups.
const (
	// PlaceLeaf packs each group into consecutive hosts: a leaf (edge
	// switch) holds whole groups when they fit.
	PlaceLeaf = "leaf"
	// PlaceSpread deals a group's ranks round-robin over the job's leaves.
	PlaceSpread = "spread"
	// PlacePod deals a group's ranks round-robin over the job's pods (a
	// fat-tree's pods; a leaf-spine is one pod), consecutive within one.
	PlacePod = "pod"
)

// Layout is what placement needs of a fabric: its hosts, and the hosts
// under one leaf (edge switch) and in one pod, numbered consecutively.
type Layout struct{ Hosts, LeafHosts, PodHosts int }

// LayoutOf returns t's layout.
func LayoutOf(t Topo) Layout {
	l := Layout{Hosts: t.Hosts(), LeafHosts: t.HostsPerLeaf, PodHosts: t.Hosts()}
	if t.Kind == FatTree {
		h := t.HostsPerLeaf
		if h == 0 {
			h = t.K / 2
		}
		l.LeafHosts, l.PodHosts = h, t.K/2*h
	}
	return l
}

// defaultMoE is DeepSeek-V3's setting (MoEModel's doc).
func defaultMoE() MoEModel {
	return MoEModel{Place: PlaceLeaf, Jobs: 1, Tokens: 4096, Experts: 256, TopK: 8, Hidden: 7168}
}

// setOpt sets the model option k to v and reports whether k is one.
func (m *MoEModel) setOpt(k, v string) (bool, error) {
	atoi := func(lo, hi int) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("want %d to %d", lo, hi)
		}
		return n, nil
	}
	var err error
	switch k {
	case "ep":
		m.EP, err = atoi(2, 1<<17)
	case "place":
		if v != PlaceLeaf && v != PlaceSpread && v != PlacePod {
			err = errors.New("want leaf, spread or pod")
		}
		m.Place = v
	case "jobs":
		m.Jobs, err = atoi(1, 1<<16)
	case "tokens":
		m.Tokens, err = atoi(1, 1<<20)
	case "experts":
		m.Experts, err = atoi(1, 1<<16)
	case "topk":
		m.TopK, err = atoi(1, 64)
	case "hidden":
		m.Hidden, err = atoi(1, 1<<17)
	case "dispatch":
		m.Dispatch, err = ParseSize(v)
	case "combine":
		m.Combine, err = ParseSize(v)
	case "grad":
		m.Grad, err = ParseSize(v)
	case "routing":
		switch v {
		case "uniform":
			m.Random = false
		case "random":
			m.Random = true
		default:
			err = errors.New("want uniform or random")
		}
	default:
		return false, nil
	}
	return true, err
}

// check fills m's defaults and checks it on hosts hosts.
func (m *MoEModel) check(hosts int) error {
	if m.Dispatch == 0 {
		m.Dispatch = int64(m.Hidden + (m.Hidden+127)/128*4)
	}
	if m.Combine == 0 {
		m.Combine = int64(2 * m.Hidden)
	}
	switch {
	case m.EP < 2:
		return errors.New("ep: want an EP group of at least 2 ranks")
	case m.Experts%m.EP != 0:
		return fmt.Errorf("%d experts over EP groups of %d: want a multiple of the group", m.Experts, m.EP)
	case m.TopK > m.Experts:
		return fmt.Errorf("top-%d of %d experts", m.TopK, m.Experts)
	case m.Jobs*m.EP > hosts:
		return fmt.Errorf("%d job(s) of EP groups of %d on %d hosts", m.Jobs, m.EP, hosts)
	case m.Dispatch*int64(m.Tokens) > 1<<30 || m.Combine*int64(m.Tokens) > 1<<30:
		return fmt.Errorf("%d tokens of %d and %d bytes: over 1 GiB a rank pair", m.Tokens, m.Dispatch, m.Combine)
	}
	if m.Grad > 0 && m.Grad < int64(m.groups(hosts)) {
		return fmt.Errorf("grad %d bytes over data parallel groups of %d", m.Grad, m.groups(hosts))
	}
	return nil
}

// groups returns the EP groups of each job (its data parallel size).
func (m *MoEModel) groups(hosts int) int { return hosts / max(m.Jobs, 1) / m.EP }

// phases returns the collectives of a step: dispatch and combine, and
// with Grad a reduce-scatter and an all-gather when there are two groups
// or more a job.
func (m *MoEModel) phases(hosts int) []string {
	ps := []string{"dispatch", "combine"}
	if m.Grad > 0 && m.groups(hosts) > 1 {
		ps = append(ps, "reduce-scatter", "all-gather")
	}
	return ps
}

// shape returns the flows of steps steps and the host pairs they join.
func (m *MoEModel) shape(hosts, steps int) (flows, pairs int64, maxSize int64) {
	g, d, j := int64(m.EP), int64(m.groups(hosts)), int64(max(m.Jobs, 1))
	step := j * d * 2 * g * (g - 1)
	pairs = j * d * g * (g - 1) / 2
	if len(m.phases(hosts)) > 2 {
		step += j * g * 2 * (d - 1) * d
		ring := d // a ring of d ranks joins d pairs, or one when d is 2
		if d == 2 {
			ring = 1
		}
		pairs += j * g * ring
	}
	c := m.expectedCopies()
	maxSize = max(c*m.Dispatch, c*m.Combine)
	return step * int64(steps), pairs, maxSize
}

// expectedCopies returns the expected token copies a rank sends another
// of its group: its tokens times the chance that one of a token's TopK
// experts, drawn without repeat from Experts, is among the Experts/EP
// that the other holds; at least one (the count every dispatch sends).
func (m *MoEModel) expectedCopies() int64 {
	per := m.Experts / m.EP
	miss := 1.0
	for i := range m.TopK {
		miss *= float64(m.Experts-per-i) / float64(m.Experts-i)
	}
	return max(int64(float64(m.Tokens)*(1-max(miss, 0))+0.5), 1)
}

// copies returns, for one EP group, the token copies c[s][d] rank s
// dispatches to rank d: the expected count for every pair, or with
// Random each token's TopK experts drawn from rng; at least one a pair.
func (m *MoEModel) copies(rng *rand.Rand) [][]int64 {
	g := m.EP
	c := make([][]int64, g)
	per := m.Experts / g
	picked := make([]int, 0, m.TopK)
	hit := make([]bool, g)
	for s := range g {
		c[s] = make([]int64, g)
		if !m.Random {
			e := m.expectedCopies()
			for d := range g {
				if d != s {
					c[s][d] = e
				}
			}
			continue
		}
		for range m.Tokens {
			picked = picked[:0]
			for len(picked) < m.TopK {
				e := rng.IntN(m.Experts)
				dup := false
				for _, p := range picked {
					dup = dup || p == e
				}
				if !dup {
					picked = append(picked, e)
				}
			}
			clear(hit)
			for _, e := range picked {
				if d := e / per; d != s && !hit[d] {
					hit[d] = true
					c[s][d]++
				}
			}
		}
		for d := range g {
			if d != s {
				c[s][d] = max(c[s][d], 1)
			}
		}
	}
	return c
}

// placement returns the hosts of each job's EP groups: hosts[j][g][r] is
// rank r of group g of job j. Job j holds the j-th block of
// Hosts/Jobs consecutive hosts; in it, PlaceLeaf takes groups in host
// order, PlaceSpread and PlacePod in the order that deals one host of
// each leaf (pod) in turn.
func (m *MoEModel) placement(l Layout) [][][]int {
	jobs := max(m.Jobs, 1)
	per := l.Hosts / jobs
	d := per / m.EP
	unit := 1
	switch m.Place {
	case PlaceSpread:
		unit = l.LeafHosts
	case PlacePod:
		unit = l.PodHosts
	}
	unit = max(min(unit, per), 1)
	out := make([][][]int, jobs)
	for j := range jobs {
		base := j * per
		order := make([]int, 0, per)
		if unit == 1 {
			for h := range per {
				order = append(order, base+h)
			}
		} else {
			// Slot-major over the job's whole units, then the rest.
			units := per / unit
			for s := range unit {
				for u := range units {
					order = append(order, base+u*unit+s)
				}
			}
			for h := units * unit; h < per; h++ {
				order = append(order, base+h)
			}
		}
		out[j] = make([][]int, d)
		for g := range d {
			out[j][g] = order[g*m.EP : (g+1)*m.EP]
		}
	}
	return out
}

// build returns steps steps of m on layout l: flows in collective order
// (each step's dispatch, combine, and reduce-scatter and all-gather when
// there are), the triggers that chain them per rank, and where each
// collective's flows end. A rank dispatches step k+1 once it has its
// step k combine (and its all-gather), computes for compute once it has
// every dispatch of its group, and starts its ring's round once it has
// the previous round: ranks wait on their own receives, not on a barrier.
func (m *MoEModel) build(l Layout, compute time.Duration, steps int, seed uint64) ([]Flow, []Trigger, []int) {
	place := m.placement(l)
	rng := rand.New(rand.NewPCG(seed, seed^0x4D6F45))
	type group struct {
		hosts []int
		c     [][]int64
	}
	var groups []group
	for _, job := range place {
		for _, hs := range job {
			groups = append(groups, group{hs, m.copies(rng)})
		}
	}
	dp := len(m.phases(l.Hosts)) > 2
	d := m.groups(l.Hosts)
	var fs []Flow
	var ts []Trigger
	var ends []int
	trig := func(t Trigger) int { ts = append(ts, t); return len(ts) }
	ready := make([]int, l.Hosts) // the trigger that starts a host's next dispatch; 0 at step 0
	for k := range steps {
		last := k == steps-1
		dispatched := make([]int, l.Hosts)
		for _, gr := range groups {
			for _, h := range gr.hosts {
				dispatched[h] = trig(Trigger{Kind: TriggerBarrier, Count: m.EP - 1, Delay: compute})
			}
		}
		for _, gr := range groups {
			for s, hs := range gr.hosts {
				for o := 1; o < m.EP; o++ {
					r := (s + o) % m.EP
					hd := gr.hosts[r]
					fs = append(fs, Flow{Src: hs, Dst: hd, Size: gr.c[s][r] * m.Dispatch, Trigger: ready[hs], RecvDone: dispatched[hd]})
				}
			}
		}
		ends = append(ends, len(fs))
		combined := make([]int, l.Hosts)
		if !last || dp {
			for _, gr := range groups {
				for _, h := range gr.hosts {
					combined[h] = trig(Trigger{Kind: TriggerBarrier, Count: m.EP - 1})
				}
			}
		}
		for _, gr := range groups {
			for s, hs := range gr.hosts {
				for o := 1; o < m.EP; o++ {
					r := (s + o) % m.EP
					hd := gr.hosts[r]
					// The tokens r sent s come back.
					fs = append(fs, Flow{Src: hs, Dst: hd, Size: gr.c[r][s] * m.Combine, Trigger: dispatched[hs], RecvDone: combined[hd]})
				}
			}
		}
		ends = append(ends, len(fs))
		if !dp {
			ready = combined
			continue
		}
		// Ring reduce-scatter then all-gather in each data parallel
		// group: the ranks r of a job's groups, in group order.
		chunk := m.Grad / int64(d)
		start := combined
		for phase := range 2 {
			for round := range d - 1 {
				got := make([]int, l.Hosts)
				if !(last && phase == 1 && round == d-2) {
					for _, job := range place {
						for _, g := range job {
							for _, h := range g {
								got[h] = trig(Trigger{Kind: TriggerBarrier, Count: 1})
							}
						}
					}
				}
				for _, job := range place {
					for r := range m.EP {
						for g := range d {
							hs, hd := job[g][r], job[(g+1)%d][r]
							fs = append(fs, Flow{Src: hs, Dst: hd, Size: chunk, Trigger: start[hs], RecvDone: got[hd]})
						}
					}
				}
				start = got
			}
			ends = append(ends, len(fs))
		}
		ready = start
	}
	return fs, ts, ends
}

// groupsOf returns, for each phase of a step, the instance each host
// sends in (Workload.Groups): its EP group, numbered over every job, for
// dispatch and combine; its data parallel ring (one per job and rank
// within a group) for the reduce-scatter and all-gather; -1 for a host
// that no group holds.
func (m *MoEModel) groupsOf(l Layout) [][]int32 {
	place := m.placement(l)
	ps := m.phases(l.Hosts)
	out := make([][]int32, len(ps))
	for p := range ps {
		out[p] = make([]int32, l.Hosts)
		for h := range out[p] {
			out[p][h] = -1
		}
	}
	ep, ring := int32(0), int32(0)
	for _, job := range place {
		for _, g := range job {
			for r, h := range g {
				out[0][h], out[1][h] = ep, ep
				for p := 2; p < len(ps); p++ {
					out[p][h] = ring + int32(r)
				}
			}
			ep++
		}
		ring += int32(m.EP)
	}
	return out
}
