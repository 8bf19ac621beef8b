package transport

import (
	"github.com/sprayfabric/spray/cc"
)

// ProfileCC returns the congestion control of profile p, what Config.CC
// nil means: for Spray cc's "auto" (Swift from RTT, HPCC once ACKs echo INT
// records), for RoCE "dcqcn" (which reacts to CE marks only: Config.CC nil
// makes RoCE's data packets ECN-capable; with this function as Config.CC
// set Config.ECN too), as cc.ByName calibrates them for software fabrics
// from prm: the payload of a full packet (0: 1400) and the link's rate
// (0: unknown; HPCC and DCQCN then start from 100 Gb/s and come down).
// Config.CC nil passes the QP's own payload size and Config.LineRate.
//
// Any profile takes any controller: set Config.CC, e.g. to cc.ByName's
// constructor of another name, or to a constructor of cc.Fixed{} for an
// unlimited, unpaced window (what Config.CC nil meant before).
//
// Over link/mem, where the CPU rather than a queue limits a transfer and
// no INT comes back, "auto" (Swift on RTTs) moves as many bytes per second
// as the unlimited window; over the pair testbed's veth, where the
// receiver's CPU is the bottleneck and its backlog counts as delay, 0.7-0.8
// of it (see the cc package doc, "Profiles").
func ProfileCC(p Profile, prm cc.Params) func() cc.Controller {
	name := "auto"
	if p == RoCE {
		name = "dcqcn"
	}
	mk, err := cc.ByName(name, prm)
	if err != nil {
		return func() cc.Controller { return cc.Fixed{} } // unreachable: both names are known
	}
	return mk
}

// newController makes the controller of a QP whose data packets carry seg
// bytes of payload: Config.CC's, or the profile's.
func newController(cfg *Config, seg int) cc.Controller {
	if cfg.CC != nil {
		return cfg.CC()
	}
	return ProfileCC(cfg.Profile, cc.Params{PacketBytes: seg, LineRate: cfg.LineRate})()
}
