package transport

import (
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/psn"
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

// windowFull reports whether the data packet p about to be sent leaves no
// room in the controller's window for another, in a window too small for
// the receiver's AckEvery to keep acknowledgements coming (less than
// 2*AckEvery packets): the sender then waits for an ACK, so the packet
// asks the receiver to acknowledge at once (BTH AckReq) rather than after
// its delayed-ACK timer. Without it a window of a packet or two (an incast
// share, Swift below one packet) moves one window per delayed-ACK timeout,
// which fires up to a ms late on a loaded machine, and the retransmission
// timer (1 ms) fires spuriously. A larger window gets an acknowledgement
// every AckEvery packets anyway; asking there made the receiver
// acknowledge every packet of a window-limited sender (spray compare's
// fixed window of 8 packets: 65 ACKs for 81 data packets, 6% of the
// spines' bytes).
//
// A window that holds AckEvery full frames asks at most once per AckEvery
// new packets: when the sender is blocked, the packets in flight sent
// since the latest that asked are at least AckEvery (the receiver
// acknowledges them by count) or include it (acknowledged on arrival).
// Asking on every packet that filled the window made a window of AckEvery
// frames, refilled a packet or two per ACK, ask on most of them (spray
// compare's all-to-all with HPCC keeping 4 frames in flight: 10.7k of
// 14.5k ACKs per 30 all-to-alls were asked for, 0.51 ACKs per packet;
// 6.8k and 0.43 with the rule). Resends ask as before.
func (q *QP) windowFull(p psn.PSN) bool {
	w := q.ctrl.Window()
	if w <= 0 || w >= 2*q.cfg.AckEvery*q.seg {
		return false
	}
	_, b := q.sb.InFlight()
	if b+2*q.seg <= w {
		return false
	}
	if !q.resending && q.reqSet && w >= (q.cfg.AckEvery-1)*q.cfg.MTU+q.seg && p.Diff(q.reqPSN) < int32(q.cfg.AckEvery) {
		return false // the window holds AckEvery frames; one of the last AckEvery asked
	}
	return true
}

// wantINT reports whether data packet p (asking for an ACK or not) carries
// an INT region (Config.INTHops), and notes it. An ACK echoes the records
// of one packet (the latest with records since the previous ACK), so with
// AckEvery above 1 only the packets likely to be echoed carry the region:
// those that ask for an ACK, resends, and a new packet once AckEvery have
// gone without one. The others are that much shorter (a shim and 24 bytes
// per hop: 76 of spray compare's 3,486-byte frames); the payload per
// packet stays the same. With AckEvery 1 every packet carries it.
func (q *QP) wantINT(p psn.PSN, ackReq bool) bool {
	if q.cfg.AckEvery <= 1 || q.resending {
		return true
	}
	if q.intSet && !ackReq && p.Diff(q.intPSN) < int32(q.cfg.AckEvery) {
		return false
	}
	q.intPSN, q.intSet = p, true
	return true
}
