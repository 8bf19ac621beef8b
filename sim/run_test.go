package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

func mustTopo(t *testing.T, s string) Topo {
	t.Helper()
	tp, err := ParseTopo(s)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func mustWork(t *testing.T, s string, hosts int) Workload {
	t.Helper()
	w, err := ParseWorkload(s, hosts, 1)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestRunVerify: both profiles complete every flow of an all-to-all with
// its bytes intact, lossless and under loss (by retransmitting), and only
// with PFC does the fabric pause. 4 MiB per host: 20 to 40 frames lost
// between switches at 0.1% for each profile, so that no seed draws none.
func TestRunVerify(t *testing.T) {
	tp := mustTopo(t, "leafspine:4x2x2,rate=100gbit,buffer=200k")
	res, err := Run(Config{Topo: tp, Workload: mustWork(t, "alltoall:4m", tp.Hosts()), Seed: testutil.Seed(t), Verify: true,
		Scenarios: []string{ScenarioLossless, ScenarioLoss01}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(res.Rows))
	}
	var lost, retx uint64
	for _, r := range res.Rows {
		t.Logf("%s/%s: mean %v p99 %v makespan %v retx %d drops %+v pauses %d buffer %.3f",
			r.Scenario, r.Profile, r.Mean, r.P99, r.Makespan, r.Retransmits, r.Drops, r.PauseFrames, r.BufferMax)
		if r.Err != "" || r.Done != r.Flows || r.Flows != 56 {
			t.Errorf("%s/%s: %d of %d flows done: %s", r.Scenario, r.Profile, r.Done, r.Flows, r.Err)
		}
		if r.PFC != (r.Profile == ProfileRoCE) {
			t.Errorf("%s/%s: PFC %v", r.Scenario, r.Profile, r.PFC)
		}
		if !r.PFC && r.PauseFrames != 0 {
			t.Errorf("%s/%s: %d PAUSE frames without PFC", r.Scenario, r.Profile, r.PauseFrames)
		}
		if r.Scenario == ScenarioLoss01 {
			lost += r.Drops.Loss
			retx += r.Retransmits
		}
		if r.TLPs > r.Retransmits || (r.Profile == ProfileRoCE && r.TLPs != 0) {
			t.Errorf("%s/%s: %d tail loss probes among %d retransmits (roce probes none)", r.Scenario, r.Profile, r.TLPs, r.Retransmits)
		}
		if r.Mean <= 0 || r.P99 < r.P50 || r.Makespan < r.Max {
			t.Errorf("%s/%s: inconsistent times %+v", r.Scenario, r.Profile, r)
		}
	}
	// Some of the lost frames carried data (others were ACKs): the
	// bytes arrived intact all the same, so they were sent again.
	if lost == 0 || retx == 0 {
		t.Errorf("loss scenario: %d frames lost, %d retransmits", lost, retx)
	}
}

// TestDeterminism: the same seed gives the same bytes of JSON; another
// seed other bytes.
func TestDeterminism(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x2x2,rate=25gbit")
	run := func(seed uint64) []byte {
		w, err := ParseWorkload("permutation:64k", tp.Hosts(), seed)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(Config{Topo: tp, Workload: w, Seed: seed, Scenarios: []string{ScenarioLoss01, ScenarioLinkFail}})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteJSON(&b, res); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b, c := run(7), run(7), run(8)
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs with seed 7 differ:\n%s\n%s", a, b)
	}
	if bytes.Equal(a, c) {
		t.Fatal("seeds 7 and 8 gave the same JSON")
	}
	var res Result
	if err := json.Unmarshal(a, &res); err != nil || len(res.Rows) != 4 {
		t.Fatalf("JSON does not read back: %v", err)
	}
}

// TestINTReachesHPCC: spray's ACKs echo the hop records the switches
// stamp, in the format its controller reads.
func TestINTReachesHPCC(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x2x2,rate=25gbit")
	w := mustWork(t, "permutation:256k", tp.Hosts())
	n, r := setupRun(t, tp, w, ProfileSpray)
	n.Run(clockMax, func() bool { return r.done == len(r.flows) })
	var acks, stamped uint64
	for _, f := range r.flows {
		acks += f.qp.Stats().INTAcks
	}
	stamped = n.Stats().INTStamped
	if acks == 0 || stamped == 0 {
		t.Fatalf("INT: %d records stamped, %d ACKs with records", stamped, acks)
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"leafspine:2x2", "leafspine:0x2x2", "fattree:3", "ring:4", "leafspine:2x2x2,rate=fast", "leafspine:2x2x2,foo=1",
		"leafspine:2x2x2,portbuffer=100", "leafspine:2x2x2,shaper=100", "leafspine:2x2x2,shaper=slow"} {
		if _, err := ParseTopo(s); err == nil {
			t.Errorf("ParseTopo(%q): no error", s)
		}
	}
	for _, s := range []string{"alltoall", "alltoall:0", "permutation:1M,iters=0", "incast:1k,senders=9", "bcast:1M", "alltoall:4"} {
		if _, err := ParseWorkload(s, 8, 1); err == nil {
			t.Errorf("ParseWorkload(%q): no error", s)
		}
	}
	if _, err := Run(Config{Topo: mustTopo(t, "leafspine:2x2x2"), Workload: mustWork(t, "permutation:1k", 4), Profiles: []string{"tcp"}}); err == nil || !strings.Contains(err.Error(), "profile") {
		t.Errorf("unknown profile: %v", err)
	}
}

// TestParseTopoShaper: the testbed options survive String and ParseTopo,
// and the TBF bucket defaults to the testbed's.
func TestParseTopoShaper(t *testing.T) {
	for _, s := range []string{"leafspine:2x2x2,rate=100mbit,mtu=3514,portbuffer=56224,shaper=tbf", "leafspine:2x2x2,mtu=1514,shaper=8192"} {
		tp := mustTopo(t, s)
		if back := mustTopo(t, tp.String()); back != tp {
			t.Errorf("%q: String gave %q, which parses to %+v", s, tp.String(), back)
		}
	}
	tp := mustTopo(t, "leafspine:2x2x2,rate=100mbit,hostrate=200mbit,mtu=3514,portbuffer=56224,shaper=tbf")
	if !tp.Shaper || tp.PortBuffer != 56224 || tp.ShaperBucket != 0 {
		t.Fatalf("parsed %+v", tp)
	}
	n, err := New(FabricConfig{Topo: tp})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range n.ports {
		// The testbed's TBF: max(100 µs at the rate, two frames) = 7028 B.
		if p.shaper != !p.host || p.instant != p.host || (p.shaper && p.bucketPs != shaperPs(7028, p.rate)) {
			t.Fatalf("port at %d bit/s, host %v: shaper %v instant %v bucket %d ps", p.rate, p.host, p.shaper, p.instant, p.bucketPs)
		}
	}
}

var clockMax = clock.Never

// setupRun builds one run of w on tp for prof, lossless, not yet run.
func setupRun(t *testing.T, tp Topo, w Workload, prof string) (*Net, *runner) {
	t.Helper()
	cfg := Config{Topo: tp, Workload: w, Seed: 1, Window: 256, Entropies: 32, Samples: 10, Limit: time.Second}
	r, _, err := newRunner(cfg, ScenarioLossless, prof)
	if err != nil {
		t.Fatal(err)
	}
	return r.n, r
}

// TestOneFlowLineRate: one flow across leaf, spine and leaf completes in
// the serialization of the frames its sender put on the wire plus the
// path of the last one, within 1%, with each profile's transport left
// unpaced (a fixed window: HPCC aims at 95% of the line by design).
func TestOneFlowLineRate(t *testing.T) {
	tp := mustTopo(t, "leafspine:1x2x1,rate=100gbit")
	w := mustWork(t, "incast:2M,senders=1", tp.Hosts())
	for _, prof := range []string{ProfileRoCE, ProfileSpray} {
		cfg := Config{Topo: tp, Workload: w, Seed: 1, SprayCC: "fixed", RoCECC: "fixed", Window: 256, Entropies: 32, Samples: 10, Limit: time.Second}
		r, row, err := newRunner(cfg, ScenarioLossless, prof)
		if err != nil {
			t.Fatal(err)
		}
		row = r.run(row)
		if row.Done != 1 {
			t.Fatalf("%s: flow not done: %s", prof, row.Err)
		}
		st := r.hosts[w.Flows[0].Src].queues[0].eng.Stats()
		tp := r.n.topo
		wire := int64(float64(st.TxBytes+uint64(wireOverhead)*st.TxFrames) * 8e12 / float64(tp.HostRate))
		last := 3*serPs(int(st.TxBytes/st.TxFrames), tp.Rate) + 4*int64(time.Microsecond)*1000
		ideal := time.Duration((wire + last) / 1000)
		ratio := float64(row.Mean) / float64(ideal)
		t.Logf("%s: %d frames, %d bytes: %v against %v (%.4f)", prof, st.TxFrames, st.TxBytes, row.Mean, ideal, ratio)
		if ratio < 0.99 || ratio > 1.01 {
			t.Errorf("%s: flow took %v, serialization and propagation %v (%.3f)", prof, row.Mean, ideal, ratio)
		}
	}
}

// TestMemoryBound: a run whose estimate exceeds Config.Memory is refused
// with ErrMemory before anything runs, and one that fits runs; the
// estimate counts one QP per host and peer.
func TestMemoryBound(t *testing.T) {
	tp := mustTopo(t, "leafspine:16x16x16")
	big := Config{Topo: tp, Workload: mustWork(t, "alltoall:1M", tp.Hosts())}
	fp, err := Estimate(big)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("256 hosts: %+v", fp)
	if fp.Hosts != 256 || fp.QPs != 256*255 || fp.QPBytes <= 0 || fp.EngineBytes <= 0 || fp.Total < int64(fp.QPs)*fp.QPBytes {
		t.Fatalf("estimate %+v", fp)
	}
	big.Memory = fp.Total / 2
	if _, err := Run(big); !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "65280 QPs") {
		t.Fatalf("256-host all-to-all in half its estimate: %v", err)
	}
	tp = mustTopo(t, "leafspine:2x2x2")
	small := Config{Topo: tp, Workload: mustWork(t, "alltoall:64k", tp.Hosts()), Scenarios: []string{ScenarioLossless}, Profiles: []string{ProfileSpray}}
	if fp, err = Estimate(small); err != nil {
		t.Fatal(err)
	}
	// The measured QP cost varies by a few bytes from one measurement to
	// the next (the runtime's own allocations): 10% either side.
	small.Memory = fp.Total * 9 / 10
	if _, err := Run(small); !errors.Is(err, ErrMemory) {
		t.Fatalf("10%% short of the estimate: %v", err)
	}
	small.Memory = fp.Total * 11 / 10
	res, err := Run(small)
	if err != nil || res.Rows[0].Done != res.Rows[0].Flows {
		t.Fatalf("within the estimate: %v %+v", err, res.Rows)
	}
}

// TestNICRefill: a host sending to three peers through one engine keeps
// its NIC busy (the flows end when the sender's frames have serialized,
// within 1%), and its engine is stepped far less often than once per
// frame it sends and receives: a free NIC slot wakes it only once half
// the queue has drained.
func TestNICRefill(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x2x1,rate=100gbit")
	w := Workload{Name: "fanout", PerRank: 3 << 20}
	for d := 1; d <= 3; d++ {
		w.Flows = append(w.Flows, Flow{Src: 0, Dst: d, Size: 1 << 20})
	}
	for _, prof := range []string{ProfileRoCE, ProfileSpray} {
		cfg := Config{Topo: tp, Workload: w, Seed: 1, SprayCC: "fixed", RoCECC: "fixed", Window: 256, Entropies: 32, Samples: 10, Limit: time.Second}
		r, row, err := newRunner(cfg, ScenarioLossless, prof)
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		h := r.n.hosts[0]
		on := h.OnStep
		h.OnStep = func(e *transport.Engine) { steps++; on(e) }
		row = r.run(row)
		if row.Done != 3 {
			t.Fatalf("%s: %d flows done: %s", prof, row.Done, row.Err)
		}
		st := r.hosts[0].queues[0].eng.Stats()
		wire := time.Duration(float64(st.TxBytes+uint64(wireOverhead)*st.TxFrames) * 8e9 / float64(r.n.topo.HostRate))
		ratio := float64(row.Makespan) / float64(wire)
		t.Logf("%s: %d frames sent, %d received, in %d steps; makespan %v, the sender's serialization %v (%.4f)", prof, st.TxFrames, st.RxFrames, steps, row.Makespan, wire, ratio)
		if ratio < 1 || ratio > 1.01 {
			t.Errorf("%s: the fan-out took %v, its serialization %v: the NIC idled", prof, row.Makespan, wire)
		}
		// Every frame received (ACKs) may take a step; the NIC's slots
		// add one per half queue of frames sent, where a wake-up per
		// free slot would add one per frame.
		if uint64(steps) > st.RxFrames+st.TxFrames/8 {
			t.Errorf("%s: %d steps for %d frames sent and %d received", prof, steps, st.TxFrames, st.RxFrames)
		}
	}
}

// TestOneQPPerPeer: in an all-to-all every host runs one engine holding
// one QP per peer, and both directions between two hosts go over the
// same connected pair of QPs; every flow's bytes arrive intact.
func TestOneQPPerPeer(t *testing.T) {
	tp := mustTopo(t, "leafspine:4x2x2,rate=100gbit")
	w := mustWork(t, "alltoall:256k", tp.Hosts())
	cfg := Config{Topo: tp, Workload: w, Seed: 5, Window: 256, Entropies: 32, Samples: 10, Limit: time.Second, Verify: true}
	r, row, err := newRunner(cfg, ScenarioLossless, ProfileSpray)
	if err != nil {
		t.Fatal(err)
	}
	hosts := tp.Hosts()
	if len(r.qps) != hosts*(hosts-1) {
		t.Fatalf("%d QPs for %d hosts, want %d", len(r.qps), hosts, hosts*(hosts-1))
	}
	byPair := map[[2]int]*transport.QP{}
	for i, f := range w.Flows {
		q, from := r.flows[i].qp, r.flows[i].from
		if len(r.hosts[f.Src].queues) != 1 || r.hosts[f.Src].queues[0] != from || from.eng.QP(q.QPN()) != q {
			t.Fatalf("flow %d->%d: its QP is not on the sender's engine", f.Src, f.Dst)
		}
		byPair[[2]int{f.Src, f.Dst}] = q
	}
	// r.qps holds each connection's two ends side by side.
	conn := map[*transport.QP]int{}
	for i, q := range r.qps {
		conn[q] = i / 2
	}
	for k, q := range byPair {
		back := byPair[[2]int{k[1], k[0]}]
		if back == nil || back == q || conn[back] != conn[q] {
			t.Fatalf("%d->%d and back: QPs %d and %v are not the two ends of one connection", k[0], k[1], q.QPN(), back)
		}
	}
	row = r.run(row)
	if row.Err != "" || row.Done != row.Flows {
		t.Fatalf("%d of %d flows: %s", row.Done, row.Flows, row.Err)
	}
}

// TestQueues: with three queues per host, each host's QPs are spread over
// three engines, the NIC steers every frame to the engine of its QP (none
// arrives at an engine that does not know its QP), and every flow's bytes
// arrive intact, under loss too.
func TestQueues(t *testing.T) {
	tp := mustTopo(t, "leafspine:4x2x2,rate=100gbit")
	w := mustWork(t, "alltoall:256k", tp.Hosts())
	for _, prof := range []string{ProfileRoCE, ProfileSpray} {
		cfg := Config{Topo: tp, Workload: w, Seed: 5, Window: 256, Entropies: 32, Samples: 10, Limit: time.Second, Verify: true, Queues: 3}
		r, row, err := newRunner(cfg, ScenarioLoss01, prof)
		if err != nil {
			t.Fatal(err)
		}
		row = r.run(row)
		if row.Err != "" || row.Done != row.Flows {
			t.Fatalf("%s: %d of %d flows: %s", prof, row.Done, row.Flows, row.Err)
		}
		for h, sh := range r.hosts {
			if len(sh.queues) != 3 {
				t.Fatalf("%s: host %d runs %d engines", prof, h, len(sh.queues))
			}
			for i, q := range sh.queues {
				st := q.eng.Stats()
				if st.RxFrames == 0 || st.UnknownQP != 0 || st.Malformed() != 0 {
					t.Errorf("%s: host %d queue %d: %d frames received, %d for QPs it does not hold, %d malformed", prof, h, i, st.RxFrames, st.UnknownQP, st.Malformed())
				}
			}
			if m := r.n.hosts[h].Misuse(); m != 0 {
				t.Errorf("%s: host %d: %d link misuses", prof, h, m)
			}
		}
	}
}

// TestReadyInPostOrder: a host's QPs take their first turns in the order
// the host posts to them, not in the order they were connected. In an
// all-to-all host s posts to s+1, s+2, ... (mod hosts) while its QPs were
// connected in peer order, so connect order would send every host's first
// bursts to the same few hosts. After each host's first step that sends
// data, the QPs that sent are a proper prefix of its post order.
func TestReadyInPostOrder(t *testing.T) {
	tp := mustTopo(t, "leafspine:8x2x4,rate=100gbit")
	w := mustWork(t, "alltoall:2M", tp.Hosts())
	for _, prof := range []string{ProfileRoCE, ProfileSpray} {
		cfg := Config{Topo: tp, Workload: w, Seed: 5, Window: 256, Entropies: 32, Samples: 10, Limit: time.Second}
		r, row, err := newRunner(cfg, ScenarioLossless, prof)
		if err != nil {
			t.Fatal(err)
		}
		hosts := tp.Hosts()
		order := make([][]*transport.QP, hosts) // by host, in post order
		for i, f := range w.Flows {
			order[f.Src] = append(order[f.Src], r.flows[i].qp)
		}
		checked := 0
		for h := range hosts {
			on, first := r.n.hosts[h].OnStep, true
			r.n.hosts[h].OnStep = func(e *transport.Engine) {
				on(e)
				if !first || e.Stats().TxFrames == 0 {
					return
				}
				first = false
				k := 0
				for k < len(order[h]) && order[h][k].Stats().TxPackets > 0 {
					k++
				}
				sent := k
				for _, q := range order[h][k:] {
					if q.Stats().TxPackets > 0 {
						sent++
					}
				}
				if k == 0 || k == len(order[h]) || sent != k {
					t.Errorf("%s: host %d's first data went out on %d QPs, the first %d in post order", prof, h, sent, k)
				}
				checked++
			}
		}
		row = r.run(row)
		if row.Err != "" || row.Done != row.Flows {
			t.Fatalf("%s: %d of %d flows: %s", prof, row.Done, row.Flows, row.Err)
		}
		if checked != hosts {
			t.Fatalf("%s: %d hosts checked of %d", prof, checked, hosts)
		}
	}
}

// TestSprayAckEvery: the spray profiles acknowledge once per eighth of the
// packets a round trip carries at the host's rate, 2 to 16; roce keeps
// the transport's default.
func TestSprayAckEvery(t *testing.T) {
	for _, tc := range []struct {
		rate float64 // bytes/s
		rtt  time.Duration
		want int
	}{
		{12.5e9, 8531 * time.Nanosecond, 8}, // 100 Gb/s, the 128-host leaf-spine
		{1.25e9, 8531 * time.Nanosecond, 2}, // 10 Gb/s: 7 packets a round trip
		{50e9, 20 * time.Microsecond, 16},   // 400 Gb/s: capped
	} {
		if got := sprayAckEvery(tc.rate, tc.rtt, 1514); got != tc.want {
			t.Errorf("%.0f B/s, RTT %v: AckEvery %d, want %d", tc.rate, tc.rtt, got, tc.want)
		}
	}
	tp, err := mustTopo(t, "leafspine:16x8x16,rate=100gbit").withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Topo: tp, Workload: mustWork(t, "alltoall:32M", tp.Hosts())}
	for prof, want := range map[string]int{ProfileSpray: 8, ProfileSprayCredits: 8, ProfileRoCE: 0} {
		tc, err := transportConfig(cfg, prof)
		if err != nil {
			t.Fatal(err)
		}
		if tc.AckEvery != want {
			t.Errorf("%s: AckEvery %d, want %d", prof, tc.AckEvery, want)
		}
	}
}

// TestSprayCredits: the spray-credits profile's receivers pace fan-in:
// 31 senders of 256 KiB into one host finish with grants sent, a switch
// buffer peak under half the peak with credits off and no more than 5%
// longer, every flow done.
func TestSprayCredits(t *testing.T) {
	tp := mustTopo(t, "leafspine:8x4x4,rate=100gbit")
	w := mustWork(t, "incast:256k,senders=31", tp.Hosts())
	rows := map[bool]Row{}
	for _, on := range []bool{true, false} {
		cfg := Config{Topo: tp, Workload: w, Seed: testutil.Seed(t), Profiles: []string{ProfileSprayCredits}, Scenarios: []string{ScenarioLossless}}
		if !on {
			cfg.Transport = func(_ string, c *transport.Config) { c.Credits = false }
		}
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Rows[0]
		if r.Err != "" || r.Done != r.Flows {
			t.Fatalf("credits %v: %d of %d flows done: %s", on, r.Done, r.Flows, r.Err)
		}
		t.Logf("credits %v: mean %v, makespan %v, buffer peak %.1f%%, grants %d", on, r.Mean, r.Makespan, 100*r.BufferMax, r.CreditGrants)
		rows[on] = r
	}
	if rows[true].CreditGrants == 0 {
		t.Error("no credit grants under a fan-in of 31 senders")
	}
	if rows[true].BufferMax*2 > rows[false].BufferMax {
		t.Errorf("buffer peak %.1f%% with credits, %.1f%% without: want under half", 100*rows[true].BufferMax, 100*rows[false].BufferMax)
	}
	if rows[true].Makespan > rows[false].Makespan*21/20 {
		t.Errorf("incast took %v with credits, %v without: want at most 5%% longer", rows[true].Makespan, rows[false].Makespan)
	}
}

// TestHostWindowDefault: the spray profiles bound each host's flight at
// DefaultHostWindow bandwidth-delay products of its link unless told
// otherwise, a negative HostWindow lifts the bound, and roce has none.
func TestHostWindowDefault(t *testing.T) {
	tp, err := mustTopo(t, "leafspine:16x8x16,rate=100gbit").withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	bdp := 12.5e9 * baseRTT(tp).Seconds() // bytes a round trip carries at 100 Gb/s
	for _, tc := range []struct {
		prof string
		hw   float64
		want int
	}{
		{ProfileSpray, 0, int(DefaultHostWindow * bdp)},
		{ProfileSprayCredits, 0, int(DefaultHostWindow * bdp)},
		{ProfileSpray, 2, int(2 * bdp)},
		{ProfileSpray, -1, 0},
		{ProfileRoCE, 0, 0},
	} {
		cfg := Config{Topo: tp, Workload: mustWork(t, "alltoall:32M", tp.Hosts()), HostWindow: tc.hw}
		c, err := transportConfig(cfg, tc.prof)
		if err != nil {
			t.Fatal(err)
		}
		if d := c.HostWindow - tc.want; d < -1 || d > 1 {
			t.Errorf("%s, HostWindow %v: %d bytes, want %d", tc.prof, tc.hw, c.HostWindow, tc.want)
		}
	}
}

// TestHostRate: HostRate paces a spray host's new data at its share of
// the host link, so a lone 1 MB flow at 0.5 takes at least its bytes at
// half the link and arrives whole; roce is not paced; a share outside [0, 1] is refused.
func TestHostRate(t *testing.T) {
	tp := mustTopo(t, "leafspine:2x2x2,rate=100gbit")
	took := map[string]time.Duration{}
	for _, prof := range []string{ProfileSpray, ProfileRoCE} {
		for _, share := range []float64{0, 0.5} {
			res, err := Run(Config{Topo: tp, Workload: mustWork(t, "permutation:1M", tp.Hosts()), Seed: 1, Verify: true,
				Profiles: []string{prof}, Scenarios: []string{ScenarioLossless}, HostRate: share})
			if err != nil {
				t.Fatal(err)
			}
			row := res.Rows[0]
			if row.Done != row.Flows {
				t.Fatalf("%s at %v: %d of %d flows done", prof, share, row.Done, row.Flows)
			}
			took[fmt.Sprint(prof, share)] = row.Max
		}
	}
	t.Log(took)
	// At 6.25 GB/s the payload alone takes 168 µs, less the pacer's
	// burst: no flow under the bound ends sooner.
	burst := 16 << 10 // Config.PacingBurst's default
	paced := time.Duration(float64(1<<20-burst) / 6.25e9 * float64(time.Second))
	if took["spray0.5"] < paced || took["spray0"] >= paced {
		t.Errorf("spray's flow took %v at half the link and %v at line rate; want the first at least %v, the second less", took["spray0.5"], took["spray0"], paced)
	}
	if took["roce0.5"] != took["roce0"] {
		t.Errorf("roce paced by HostRate: %v against %v", took["roce0.5"], took["roce0"])
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		if _, err := Run(Config{Topo: tp, Workload: mustWork(t, "permutation:1k", tp.Hosts()), HostRate: bad}); !errors.Is(err, ErrConfig) {
			t.Errorf("HostRate %v: err %v, want ErrConfig", bad, err)
		}
	}
}
