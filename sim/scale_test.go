package sim

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// TestPodOversub: oversub=N leaves each aggregation switch K/2/N core
// uplinks: fattree:4,oversub=2 has 2 cores instead of 4 and 24 links
// between switches instead of 32, fattree:8,oversub=4 4 cores (68 switches) and 160;
// its capacity above the pod halves, and so the bound of traffic that
// crosses it doubles.
func TestPodOversub(t *testing.T) {
	for _, c := range []struct {
		spec            string
		switches, links int
	}{
		{"fattree:4", 20, 32},
		{"fattree:4,oversub=2", 18, 24},
		{"fattree:8,oversub=4", 68, 160},
	} {
		n := newNet(t, c.spec, nil)
		if n.Switches() != c.switches || len(n.CoreLinks()) != c.links || n.topo.FabricLinks() != c.links || n.topo.Switches() != c.switches {
			t.Errorf("%s: %d switches (%d counted), %d links between them (%d counted); want %d and %d",
				c.spec, n.Switches(), n.topo.Switches(), len(n.CoreLinks()), n.topo.FabricLinks(), c.switches, c.links)
		}
	}
	// Every host of pod 0 sends to its peer in pod 1: the agg-core
	// links carry everything.
	var flows []Flow
	for h := range 4 {
		flows = append(flows, Flow{Src: h, Dst: h + 4, Size: 100000})
	}
	f := framing{seg: 1000, hdr: 0}
	full := newNet(t, "fattree:4,rate=10gbit,hostrate=10gbit", nil).Bound(flows, f)
	half := newNet(t, "fattree:4,rate=10gbit,hostrate=10gbit,oversub=2", nil).Bound(flows, f)
	if full != 80*time.Microsecond || half != 160*time.Microsecond {
		t.Errorf("bound %v non-blocking and %v at 2:1 above the pod, want 80µs and 160µs", full, half)
	}
	for _, bad := range []string{"fattree:8,oversub=3", "leafspine:2x2x2,oversub=2", "fattree:4,oversub=0"} {
		if _, err := ParseTopo(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", bad, err)
		}
	}
}

// TestPlanesSpread: planes=2 gives every host a port into each of two
// copies of the fabric; frames of many ECMP keys leave by both and all
// arrive, frames of one key keep to one plane.
func TestPlanesSpread(t *testing.T) {
	n := newNet(t, "leafspine:2x2x2,planes=2", nil)
	if n.Switches() != 8 || len(n.CoreLinks()) != 8 || len(n.hosts[0].planes) != 2 {
		t.Fatalf("%d switches, %d links between them, %d host ports; want 8, 8, 2", n.Switches(), len(n.CoreLinks()), len(n.hosts[0].planes))
	}
	got := 0
	n.OnDeliver = func(h int, _ []byte, _ clock.Time) {
		if h == 3 {
			got++
		}
	}
	for sport := range 64 {
		for !n.hosts[0].Send(udpFrame(0, 3, uint16(1000+sport), 1000, false)) {
			n.Run(n.now+1000, nil)
		}
	}
	n.Run(clock.Time(time.Second), nil)
	a, b := n.ports[n.hosts[0].planes[0]].stats.TxFrames, n.ports[n.hosts[0].planes[1]].stats.TxFrames
	if got != 64 || a == 0 || b == 0 || a+b != 64 {
		t.Errorf("%d of 64 frames arrived, %d and %d by the two planes", got, a, b)
	}
	for range 16 {
		n.hosts[1].Send(udpFrame(1, 2, 7, 1000, false))
	}
	n.Run(clock.Time(2*time.Second), nil)
	a, b = n.ports[n.hosts[1].planes[0]].stats.TxFrames, n.ports[n.hosts[1].planes[1]].stats.TxFrames
	if min(a, b) != 0 || a+b != 16 {
		t.Errorf("one ECMP key left by both planes: %d and %d frames", a, b)
	}
}

// downLinks returns the links between switches that are down.
func downLinks(n *Net) []LinkRef {
	var ls []LinkRef
	for _, l := range n.CoreLinks() {
		pi, _ := n.portOf(l)
		if n.ports[pi].down && n.ports[n.ports[pi].peer].down {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestFaultsDeterministic: fail=N takes N links between switches down
// from the start, the same for a seed and others for another seed, and
// the same whatever the loss settings; lossy=SHARE/P gives that share of
// the links a loss probability P; the run's header names them.
func TestFaultsDeterministic(t *testing.T) {
	seeded := func(seed uint64) func(*FabricConfig) { return func(c *FabricConfig) { c.Seed = seed } }
	a := downLinks(newNet(t, "fattree:4,fail=3", seeded(1)))
	b := downLinks(newNet(t, "fattree:4,fail=3,lossy=0.25/0.5", seeded(1)))
	c := downLinks(newNet(t, "fattree:4,fail=3", seeded(2)))
	if len(a) != 3 || !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("fail=3: seed 1 %v, with lossy %v, seed 2 %v", a, b, c)
	}
	n := newNet(t, "fattree:4,fail=3,lossy=0.25/0.5", seeded(1))
	lossy := 0
	for _, l := range n.CoreLinks() {
		pi, _ := n.portOf(l)
		if p := &n.ports[pi]; p.loss == 0.5 && n.ports[p.peer].loss == 0.5 {
			lossy++
		}
	}
	if lossy != 8 {
		t.Errorf("lossy=0.25/0.5: %d of 32 links lose frames, want 8", lossy)
	}
	// A failed link is withdrawn: no route takes it, so traffic between
	// every pair of hosts arrives.
	got := 0
	n2 := newNet(t, "fattree:4,fail=3", seeded(1))
	n2.OnDeliver = func(int, []byte, clock.Time) { got++ }
	for s := range 16 {
		for d := range 16 {
			if s != d {
				for !n2.hosts[s].Send(udpFrame(s, d, uint16(d), 200, false)) {
					n2.Run(n2.now+1000, nil)
				}
			}
		}
	}
	n2.Run(clock.Time(time.Second), nil)
	if got != 16*15 {
		t.Errorf("%d of %d frames arrived around 3 failed links", got, 16*15)
	}
	tp := mustTopo(t, "fattree:4,oversub=2,planes=2,fail=3,flap=0.5/2s,lossy=0.25/1e-5")
	again, err := ParseTopo(tp.String())
	if err != nil || again != tp {
		t.Errorf("%q parses to %+v, %v", tp.String(), again, err)
	}
	var out bytes.Buffer
	WriteTable(&out, Result{Topo: tp.String(), PodOversub: tp.PodOversub, Planes: tp.Planes, Faults: tp.Faults()})
	for _, want := range []string{"2:1 oversubscribed above the pod; 2 planes", "3 of 48 links between switches down", "flapping 0.5 times an hour, down 2s", "12 links (0.25 of them) losing 1e-05"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("header without %q:\n%s", want, out.String())
		}
	}
	for _, bad := range []string{"fattree:4,fail=33", "fattree:4,flap=0", "fattree:4,flap=1/0s", "fattree:4,lossy=0.1", "fattree:4,lossy=2/0.1", "fattree:4,planes=17"} {
		if _, err := ParseTopo(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", bad, err)
		}
	}
}

// TestFlaps: at 360,000 flaps a link an hour (100 a second), 1 ms down
// each, the 4 links of leafspine:2x2x2 flap about 40 times in the 100 ms
// horizon, the same number for the same seed, and are all up again at
// the end.
func TestFlaps(t *testing.T) {
	run := func() uint64 {
		n := newNet(t, "leafspine:2x2x2,flap=360000/1ms", func(c *FabricConfig) { c.Horizon = 100 * time.Millisecond })
		n.Run(clock.Time(time.Second), nil)
		if d := downLinks(n); len(d) != 0 {
			t.Errorf("links %v still down", d)
		}
		return n.Flaps()
	}
	a, b := run(), run()
	if a != b || a < 20 || a > 60 {
		t.Errorf("%d and %d flaps, want the same, about 40", a, b)
	}
}
