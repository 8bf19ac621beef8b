package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/sim"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// compareSim is spray compare's run in the simulator: the same all-to-all
// on the same leaf-spine, with the same transport code, under a simulated
// clock (package sim), for machines without root and for --sim.
type compareSim struct {
	tb                testbed.LeafSpineConfig
	scenarios, profs  []string
	size              int64
	iters, warmup     int
	seed              uint64
	pairwise          bool
	jsonFile, pngFile string
	why               string
}

// simTopo maps a testbed's leaf-spine onto the simulator as the testbed
// builds it (testbed.NewLeafSpine): the same counts, rates and MTU; every
// switch port a token-bucket shaper with the testbed's TBF bucket (100 µs
// at the rate, at least two frames) and its own queue of the TBF's limit,
// tail drop; links that take no time to cross (veths) but their delay;
// hosts' links unshaped towards their leaf; and the per-hop and per-host
// delays of software forwarding (testbedHopDelay, testbedHostDelay). A
// testbed that trims maps to switches that trim (sim.Topo.Trim) at a
// queue of its threshold: what it would queue past it goes on as headers,
// at priority with the control frames.
func simTopo(tb testbed.LeafSpineConfig) (sim.Topo, error) {
	t := sim.Topo{Kind: sim.LeafSpine, HostsPerLeaf: tb.Hosts, Leaves: tb.Leaves, Spines: tb.Spines, Rate: tb.RateBps, HostRate: tb.HostRateBps,
		Shaper: true, Delay: testbedHopDelay, HostDelay: testbedHopDelay + testbedHostDelay}
	var err error
	if tb.Rate != "" {
		if t.Rate, err = testbed.ParseRate(tb.Rate); err != nil {
			return t, err
		}
	}
	if t.Rate == 0 {
		t.Rate = testbed.DefaultRateBps
	}
	if tb.HostRate != "" {
		if t.HostRate, err = testbed.ParseRate(tb.HostRate); err != nil {
			return t, err
		}
	}
	mtu := tb.MTU
	if mtu == 0 {
		mtu = 1500
	}
	t.MTU = mtu + 14
	t.PortBuffer = tb.BufferBytes
	if t.PortBuffer == 0 { // the testbed's default: 1 ms at the rate, at least 16 frames
		t.PortBuffer = max(int(t.Rate/8/1000), 16*t.MTU)
	}
	if tb.Trim {
		r, err := tb.Resolve()
		if err != nil {
			return t, err
		}
		t.Trim, t.PortBuffer = true, r.TrimBytes
	}
	return t, nil
}

// testbedHopDelay and testbedHostDelay are the delays of the netns
// testbed's software, which the simulated links take instead of
// propagation: a frame's crossing of a veth and its forwarding by the
// next namespace, and a host's transport turnaround beyond it: each link
// crossing as measured on the default testbed with ICMP, and no host
// delay, since the smallest RTT a spray QP times there is the links'
// alone (docs/results.md, "Against the netns testbed").
const (
	testbedHopDelay  = 10 * time.Microsecond
	testbedHostDelay = 0
)

func (c compareSim) run(out io.Writer) error {
	t, err := simTopo(c.tb)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "spray compare: %s: running the scenarios in the simulator (spray sim): %s, the same transport code under a simulated clock; roce with PFC, spray without; tcp and collision are not simulated\n", c.why, t)
	var scen []string
	for _, s := range c.scenarios {
		switch s {
		case bench.ScenarioSpineFail:
			scen = append(scen, sim.ScenarioLinkFail)
		case sim.ScenarioLossless, sim.ScenarioLoss001, sim.ScenarioLoss01:
			scen = append(scen, s)
		}
	}
	var profs []string
	for _, p := range c.profs {
		if p == sim.ProfileRoCE || p == sim.ProfileSpray {
			profs = append(profs, p)
		}
	}
	if len(scen) == 0 || len(profs) == 0 {
		return fmt.Errorf("compare: nothing the simulator runs among scenarios %v and profiles %v", c.scenarios, c.profs)
	}
	kind := sim.WorkAllToAll
	if c.pairwise {
		kind = sim.WorkAllToAllPairwise
	}
	spec := fmt.Sprintf("%s:%d,iters=%d", kind, c.size, c.iters+c.warmup)
	w, err := sim.ParseWorkload(spec, t.Hosts(), c.seed)
	if err != nil {
		return err
	}
	// The transport settings spray compare gives a testbed's QPs: a
	// smallest retransmission timeout of four buffer drains (at least 5
	// ms), and for spray an ACK every 4 packets or as many frame times.
	drain := time.Duration(float64(t.PortBuffer) * 8 / float64(t.Rate) * 1e9)
	// Congestion control as compare calibrates it for a software fabric:
	// spray's "auto" and roce's "dcqcn" at the hosts' rate, for a base
	// RTT of 200µs.
	var ccErr error
	adjust := func(prof string, tc *transport.Config) {
		tc.MinRTO = max(4*drain, 5*time.Millisecond)
		name := bench.DefaultRoCECC
		if prof == sim.ProfileSpray {
			tc.AckEvery = 4
			tc.AckDelay = max(time.Duration(float64(4*t.MTU)*8/float64(t.Rate)*1e9), 20*time.Microsecond)
			name = bench.DefaultSprayCC
		}
		mk, err := cc.ByName(name, cc.Params{LineRate: float64(t.HostRate) / 8, BaseRTT: 200 * time.Microsecond, PacketBytes: t.MTU - 114, AckEvery: tc.AckEvery})
		if err != nil {
			ccErr = err
			return
		}
		tc.CC = mk
	}
	// ECN as the testbed's programs mark for roce (bench's compare): by
	// queue delay, from two to eight frame times at the spine rate; and
	// as they measure queues, at the next hop's ingress, so that the
	// leaves' ports towards hosts (which run no programs) mark nothing
	// and report no queue in INT.
	ft := time.Duration(float64(t.MTU) * 8 / float64(t.Rate) * 1e9)
	fab := sim.FabricConfig{ECNDelay: sim.ECNDelayConfig{KMin: 2 * ft, KMax: 8 * ft, PMax: 0.2}, EdgeUnmeasured: true}
	// A run may take as long as compare's --run-timeout gives a testbed
	// run by default, in simulated time.
	scfg := sim.Config{Topo: t, Workload: w, Profiles: profs, Scenarios: scen, Seed: c.seed, Transport: adjust, Fabric: fab, Limit: time.Minute,
		Progress: func(p sim.Progress) {
			fmt.Fprintf(os.Stderr, "spray: sim %s/%s: simulated %v, wall %v\n", p.Scenario, p.Profile, p.Sim.Round(time.Microsecond), p.Wall.Round(time.Second))
		}}
	sr, err := sim.Run(scfg)
	if err == nil && slices.Contains(profs, sim.ProfileRoCE) {
		// roce once more without PFC, as the testbed runs it (it has
		// none): the row "roce-nopfc".
		scfg.Profiles, scfg.PFC = []string{sim.ProfileRoCE}, "off"
		var np sim.Result
		if np, err = sim.Run(scfg); err == nil {
			for _, r := range np.Rows {
				r.Profile = "roce-nopfc"
				i := slices.IndexFunc(sr.Rows, func(x sim.Row) bool { return x.Scenario == r.Scenario && x.Profile == sim.ProfileRoCE })
				sr.Rows = slices.Insert(sr.Rows, i+1, r)
			}
		}
	}
	if err == nil {
		err = ccErr
	}
	if err != nil {
		return err
	}
	n := t.Hosts()
	res := bench.CompareResult{Mode: "sim", Testbed: t.String(), Link: "sim", AllToAll: "concurrent",
		BisectionGbps: float64(t.Leaves/2*t.Spines) * float64(t.Rate) / 1e9}
	if c.pairwise {
		res.AllToAll = "pairwise"
	}
	// The all-to-all's bound: each host's link carries (n-1)/n of its
	// buffer, each leaf's uplinks H(n-H)/n buffers.
	b := float64(c.size)
	host := b * float64(n-1) / float64(n) / (float64(t.HostRate) / 8)
	up := b * float64(t.HostsPerLeaf*(n-t.HostsPerLeaf)) / float64(n) / (float64(t.Spines) * float64(t.Rate) / 8)
	res.AllToAllLimit = b / max(host, up) / 1e9
	for _, r := range sr.Rows {
		scName := r.Scenario
		if scName == sim.ScenarioLinkFail {
			scName = bench.ScenarioSpineFail
		}
		row := bench.CompareRow{Profile: r.Profile, Scenario: scName, Bytes: c.size / int64(n) * int64(n), Ranks: n,
			Retransmits: r.Retransmits, TLPs: r.TLPs, Timeouts: r.Timeouts, Duplicates: r.Duplicates, ECNMarks: r.ECNMarks,
			Drops:   bench.Drops{Loss: r.Drops.Loss, Burst: r.Drops.Burst, Blackhole: r.Drops.Blackhole, Queue: r.Drops.Queue, Host: r.Drops.Host},
			Trimmed: r.Trimmed, Err: r.Err, SpineBytes: r.SpineBytes}
		// As the testbed reports it: the most any spine carried over the
		// mean (warm-up iterations included here).
		var sum, most uint64
		for _, b := range r.SpineBytes {
			sum, most = sum+b, max(most, b)
		}
		if sum > 0 {
			row.Imbalance = float64(most) * float64(len(r.SpineBytes)) / float64(sum)
		}
		if len(r.Iterations) > c.warmup {
			row.Samples = slices.Clone(r.Iterations[c.warmup:])
			s := bench.Summarize(slices.Clone(row.Samples))
			row.Iters = s.N
			row.Mean, row.P50, row.P99, row.P999 = s.Mean, s.P50, s.P99, s.P999
			row.AlgBW = float64(row.Bytes) / s.Mean.Seconds() / 1e9
			row.BusBW = row.AlgBW * float64(n-1) / float64(n)
		}
		pfc := "PFC off"
		if r.PFC {
			pfc = fmt.Sprintf("PFC on: %d PAUSE frames, %.3f ms paused", r.PauseFrames, float64(r.PausedTime)/1e6)
		}
		row.Note = fmt.Sprintf("simulated; %s; switch buffer max %.1f%%, mean %.1f%%", pfc, 100*r.BufferMax, 100*r.BufferMean)
		res.Rows = append(res.Rows, row)
	}
	bench.WriteCompareTable(out, res)
	var wrote []string
	write := func(name string, fn func(io.Writer) error) error {
		if name == "" {
			return nil
		}
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		err = fn(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("compare: writing %s: %w", name, err)
		}
		wrote = append(wrote, name)
		return nil
	}
	if err := write(c.jsonFile, func(w io.Writer) error { return bench.WriteCompareJSON(w, res) }); err != nil {
		return err
	}
	if err := write(c.pngFile, func(w io.Writer) error { return bench.WriteCompareCDF(w, res) }); err != nil {
		return err
	}
	if len(wrote) > 0 {
		fmt.Fprintf(out, "wrote %s\n", strings.Join(wrote, ", "))
	}
	return nil
}
