package sim

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

// TestBoundByHand: on leafspine:2x2x2 with 10 Gbit/s uplinks, flows
// 0->2, 1->3 and 0->1 of 10,000 bytes in frames of 1,000 payload bytes
// and 100 of headers (11,000 bytes each on the wire) load each of leaf
// 0's two uplinks with half of the two flows that leave the leaf: 11,000
// bytes, 8.8 µs at 10 Gbit/s, more than host 0's 22,000 bytes at 100
// Gbit/s (1.76 µs). With one uplink down the other carries both: 17.6 µs.
func TestBoundByHand(t *testing.T) {
	n := newNet(t, "leafspine:2x2x2,rate=10gbit,hostrate=100gbit", nil)
	flows := []Flow{{Src: 0, Dst: 2, Size: 10000}, {Src: 1, Dst: 3, Size: 10000}, {Src: 0, Dst: 1, Size: 10000}}
	f := framing{seg: 1000, hdr: 100}
	if got, want := n.Bound(flows, f), 8800*time.Nanosecond; got != want {
		t.Errorf("bound %v, want %v", got, want)
	}
	if got, want := n.Bound(flows[2:], f), 880*time.Nanosecond; got != want {
		t.Errorf("bound of the flow inside the leaf %v, want %v (host 0's link)", got, want)
	}
	if err := n.SetLinkDown(LinkRef{Switch: 0, Port: 3}, true, -1); err != nil {
		t.Fatal(err)
	}
	if got, want := n.Bound(flows, f), 17600*time.Nanosecond; got != want {
		t.Errorf("bound with an uplink down %v, want %v", got, want)
	}
}

// TestFramingFits: the framing the bound counts is a full data frame of
// each profile within the MTU, preamble, FCS and gap added.
func TestFramingFits(t *testing.T) {
	tp, err := ParseTopo("leafspine:2x2x2")
	if err != nil {
		t.Fatal(err)
	}
	tp, _ = tp.withDefaults()
	for _, prof := range []transport.Profile{transport.Spray, transport.RoCE} {
		f := framingOf(transport.Config{Profile: prof, MTU: tp.MTU, INTHops: 3}, tp)
		if f.seg < 1024 || f.seg+f.hdr > tp.MTU+wireOverhead {
			t.Errorf("profile %v: %d payload bytes and %d of headers per frame at MTU %d", prof, f.seg, f.hdr, tp.MTU)
		}
		if got := f.wire(int64(3 * f.seg)); got != int64(3*(f.seg+f.hdr)) {
			t.Errorf("profile %v: three full frames take %d bytes, want %d", prof, got, 3*(f.seg+f.hdr))
		}
	}
}

// TestBoundBelowRun: no profile ends a collective sooner than its bound,
// and the bound is the busiest link's (the host links of an all-to-all
// on a non-blocking fabric) within what the transport reaches.
func TestBoundBelowRun(t *testing.T) {
	tp, err := ParseTopo("leafspine:4x2x2,rate=100gbit")
	if err != nil {
		t.Fatal(err)
	}
	w, err := ParseWorkload("alltoall:256k,iters=2", tp.Hosts(), 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Topo: tp, Workload: w, Seed: 1, Scenarios: []string{ScenarioLossless}, Profiles: []string{ProfileRoCE, ProfileSpray}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Rows {
		if r.Err != "" || len(r.Iterations) != 2 || len(r.Bounds) != 2 {
			t.Fatalf("%s: %s, %d collectives, %d bounds", r.Profile, r.Err, len(r.Iterations), len(r.Bounds))
		}
		// Each host sends 7 blocks of 32 KiB on its 50 Gbit/s link (two
		// 100 Gbit/s uplinks over four hosts): 36.7 µs of payload, and at
		// most a tenth more of headers.
		if r.Bound < 36700*time.Nanosecond || r.Bound > 40400*time.Nanosecond {
			t.Errorf("%s: bound %v, want the host link's 229,376 bytes and their headers", r.Profile, r.Bound)
		}
		for k, d := range r.Iterations {
			if d < r.Bounds[k] {
				t.Errorf("%s: collective %d took %v, under its bound %v", r.Profile, k, d, r.Bounds[k])
			}
		}
	}
}

// slowLoads is loads without the sums: every flow walked from its host,
// hop by hop, down to the destination host, its share halved at every
// choice of uplinks (the reference for TestLoadsMatchSlow).
func slowLoads(n *Net, flows []Flow, f framing) []float64 {
	load := make([]float64, len(n.ports))
	var walk func(si int32, dst int32, b float64)
	walk = func(si, dst int32, b float64) {
		s := &n.switches[si]
		var outs []int32
		if dst >= s.lo && dst < s.hi {
			outs = []int32{s.down[(dst-s.lo)/s.div]}
		} else {
			outs = n.usableUps(s, dst)
		}
		for _, o := range outs {
			load[o] += b / float64(len(outs))
			if p := &n.ports[n.ports[o].peer]; !p.host {
				walk(p.node, dst, b/float64(len(outs)))
			}
		}
	}
	for _, fl := range flows {
		h := n.hosts[fl.Src]
		ports := h.planes
		if ports == nil {
			ports = []int32{h.port}
		}
		for _, hp := range ports {
			b := float64(f.wire(fl.Size)) / float64(len(ports))
			load[hp] += b
			walk(n.ports[n.ports[hp].peer].node, int32(fl.Dst), b)
		}
	}
	return load
}

// TestLoadsMatchSlow: the summed loads equal the hop-by-hop walk of every
// flow, on fabrics with planes, oversubscription and failed links, for
// random flows.
func TestLoadsMatchSlow(t *testing.T) {
	rng := testutil.Rand(t)
	for _, spec := range []string{"leafspine:3x4x2", "fattree:4,oversub=2,planes=2,fail=3", "fattree:6,hosts=4,fail=10"} {
		n := newNet(t, spec, nil)
		var flows []Flow
		for range 200 {
			s, d := rng.IntN(n.Hosts()), rng.IntN(n.Hosts())
			if s != d {
				flows = append(flows, Flow{Src: s, Dst: d, Size: 1 + rng.Int64N(1<<20)})
			}
		}
		f := framing{seg: 1400, hdr: 90}
		got, want := n.loads(flows, f), slowLoads(n, flows, f)
		for i := range want {
			if d := got[i] - want[i]; d > 1e-6*want[i]+1e-9 || -d > 1e-6*want[i]+1e-9 {
				t.Errorf("%s: port %d carries %v, the walk says %v", spec, i, got[i], want[i])
			}
		}
	}
}

// TestBoundCache: repeated collectives are computed once and get the
// bound computed afresh; another framing is another entry.
func TestBoundCache(t *testing.T) {
	n := newNet(t, "leafspine:2x2x2,rate=10gbit", nil)
	w := mustWork(t, "alltoall:64k,iters=3", n.Hosts())
	tc := transport.Config{Profile: transport.Spray, MTU: 1514, INTHops: 3}
	cache := boundCache{}
	bs := n.bounds(w, tc, cache)
	want := n.Bound(w.Flows[:len(w.Flows)/3], framingOf(tc, n.topo))
	if len(cache) != 1 || len(bs) != 3 || bs[0] != want || bs[1] != want || bs[2] != want {
		t.Errorf("bounds %v with %d cached, want 3 x %v from one entry", bs, len(cache), want)
	}
	tc.Profile = transport.RoCE
	n.bounds(w, tc, cache)
	if len(cache) != 2 {
		t.Errorf("%d entries after a second framing, want 2", len(cache))
	}
}
