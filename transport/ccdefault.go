package transport

import "github.com/sprayfabric/spray/cc"

// ProfileCC returns the congestion control of profile p, for Config.CC:
// for Spray cc's "auto" (Swift from RTT, HPCC once ACKs echo INT records),
// for RoCE "dcqcn" (set Config.ECN too: DCQCN needs ECN-capable packets),
// as cc.ByName calibrates them for software fabrics, with packetBytes of
// payload per packet (0: 1400) and the line rate unknown (HPCC and DCQCN
// start from 100 Gb/s and come down).
//
// Config.CC nil still means an unlimited, unpaced Fixed controller, not
// these: where the CPU rather than a queue limits the transfer and no INT
// comes back, "auto" is Swift on RTTs, and over link/mem it moved 1.0-1.8
// Gbit/s against Fixed's 1.6-4.1 (about half; it was a ninth before Swift
// filtered scheduling spikes, cc.SwiftConfig.StandingDelay), over the pair
// testbed's UDP link 1.7-2.6 against 1.5-3.0 (loaded 2-core machine, 3
// runs each; see the cc package doc). They stay opt-in until that gap on
// link/mem closes.
func ProfileCC(p Profile, packetBytes int) func() cc.Controller {
	name := "auto"
	if p == RoCE {
		name = "dcqcn"
	}
	mk, err := cc.ByName(name, cc.Params{PacketBytes: packetBytes})
	if err != nil {
		return func() cc.Controller { return cc.Fixed{} } // unreachable: both names are known
	}
	return mk
}

// windowFull reports whether the packet about to be sent leaves no room in
// the controller's window for another, in a window too small for the
// receiver's AckEvery to keep acknowledgements coming (less than
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
func (q *QP) windowFull() bool {
	w := q.ctrl.Window()
	if w <= 0 || w >= 2*q.cfg.AckEvery*q.seg {
		return false
	}
	_, b := q.sb.InFlight()
	return b+2*q.seg > w
}
