package sim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// DefaultHorizon is FabricConfig.Horizon's default.
const DefaultHorizon = 10 * time.Second

// faults arms the topology's faults at scale (Topo.FailLinks, FlapRate,
// LossyShare) on the links between switches, each chosen by its own
// stream of the fabric's seed so that one fault's setting does not move
// another's links (TestFaultsDeterministic).
func (n *Net) faults() {
	t := n.topo
	if t.FailLinks == 0 && t.FlapRate == 0 && (t.LossyShare == 0 || t.LossyRate == 0) {
		return
	}
	links := n.CoreLinks()
	stream := func(salt uint64) *rand.Rand { return rand.New(rand.NewPCG(n.cfg.Seed, salt)) }
	failed := make(map[LinkRef]bool, t.FailLinks)
	for _, i := range stream(0x4641494C).Perm(len(links))[:t.FailLinks] {
		l := links[i]
		failed[l] = true
		pi, _ := n.portOf(l)
		for _, x := range []int32{pi, n.ports[pi].peer} {
			n.ports[x].down = true
			n.withdraw(&n.ports[x], true)
		}
	}
	if t.LossyShare > 0 && t.LossyRate > 0 {
		k := int(t.LossyShare*float64(len(links)) + 0.5)
		for _, i := range stream(0x4C4F5353).Perm(len(links))[:k] {
			n.SetLoss(links[i], t.LossyRate)
		}
	}
	if t.FlapRate > 0 {
		rng := stream(0x464C4150)
		horizon := clock.Time(n.cfg.Horizon)
		if horizon == 0 {
			horizon = clock.Time(DefaultHorizon)
		}
		// Exponential intervals of mean 1/FlapRate hours.
		mean := float64(time.Hour) / t.FlapRate
		next := func() clock.Time { return clock.Time(math.Min(rng.ExpFloat64()*mean, float64(math.MaxInt64/2))) }
		for _, l := range links {
			if failed[l] {
				continue
			}
			n.flapAt(l, next(), next, horizon)
		}
	}
}

// flapAt schedules a flap of link l at t, and the next one an interval
// drawn by next after the link is back, while before horizon.
func (n *Net) flapAt(l LinkRef, t clock.Time, next func() clock.Time, horizon clock.Time) {
	if t >= horizon {
		return
	}
	n.At(t, func() {
		n.flaps++
		n.SetLinkDown(l, true, DefaultReconverge)
		n.At(n.now.Add(n.topo.FlapDown), func() {
			n.SetLinkDown(l, false, 0)
			n.flapAt(l, n.now+next(), next, horizon)
		})
	})
}

// Flaps returns how many link flaps have begun.
func (n *Net) Flaps() uint64 { return n.flaps }
