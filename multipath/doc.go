// Package multipath chooses the entropy (the UDP source port) of each
// packet a queue pair sends, and so the path that ECMP switches hash it
// onto; it is sans-IO.
//
// Use Entropies to derive a QP's set of source ports, then a Policy to pick
// one per packet: NewECMP for the classic RoCEv2 behaviour (one entropy per
// QP, every packet on the same path), NewSpray for oblivious per-packet
// spraying (every path gets exactly one packet per round, in a fresh seeded
// order each round), NewAdaptive for spraying that steers away from slow,
// marked, lossy and dead paths. The transport calls Next for every packet
// it sends and reports what happened to it with OnAck and OnLoss, which
// keep the per-path counters that Stats returns; for a policy that
// implements INTObserver it also passes on the INT queue delay that an ACK
// echoes, with OnINT.
//
// A Policy reads no clock and draws no global randomness: time comes in as
// an argument and randomness from the seed given to its constructor, so the
// same seed and the same calls give the same entropies. Policies are not
// safe for concurrent use; the engine that owns the QP calls them.
//
// # Adaptive spraying
//
// NewAdaptive keeps, for each path, the smoothed RTT and its minimum (from
// OnAck), the smoothed INT queue delay (OnINT, EWMA gain 1/8), the fraction
// of ECN-marked ACKs and the loss rate (EWMAs with gain 1/16, a loss
// counting 1 and an ACK 0). From these it gives each active path a weight
//
//	w = 1 / (1 + max(SRTT - base, QueueDelay)/DelayScale + ECNWeight*ecn + LossWeight*loss)
//
// where base is the smallest RTT measured on any active path, so RTT counts
// relative to the best path and a delay that all paths share (the
// receiver's own link) changes nothing. Entropies that PathObserver put on
// one physical path (the same switches and ports in their INT records) are
// scored together, from the means of their SRTTs, queue delays and rates,
// and split the path's weight: one entropy sees a few packets per round
// trip, and scored alone the 32 entropies of an all-to-all QP over two
// equal spines got weights from 0.19 to 1, drawn by the noise of their
// acknowledgements' way back. Weights are divided by the largest and raised
// to at least MinWeight, so the best path has weight 1 and every active
// path keeps a share. Packets go out in rounds: at the start of a round
// each active path adds its weight to a credit and joins the round once
// for every whole packet of credit (deficit round robin; credits start at
// spread phases, so that entropies of equal weight do not all join the
// same rounds), and the round is shuffled with the seeded generator, then
// interleaved so that every stretch of it loads the physical paths in
// proportion to their entries (within each path the shuffled order stays):
// a message's last packets end in the middle of a round, and shuffled
// whole a round put up to a dozen packets of a 79-packet message more on
// one spine than on the other, which the message then waits for. A path of
// weight w thus gets a share w / sum(weights) of the packets; on equal
// paths this is exactly oblivious spraying. A round lasts at most len(set)
// packets; weights and stalls (below) are re-evaluated at the start of
// each, while a path taken out for losses leaves at once.
//
// The transport reports every packet an ACK newly acknowledges (not only
// the one that triggered it) with OnAck, so a path's ACK count and RTT
// follow all of its packets.
//
// A path is taken out of the spray set when
//   - LossLimit losses are reported on it with no ACK between them, or its
//     loss rate reaches MaxLossRate, unless more than half of the active
//     paths lost their latest packet too: losses that most paths share
//     are a bottleneck they all cross (the receiver's link, an incast),
//     and taking paths out would only crowd the others (this is what lets
//     the transport's Spray profile spray adaptively by default); or
//   - it stalls: a packet has been sent on it more than StallRTTs times its
//     smoothed RTT ago (at least MinStallTimeout) with no ACK on it since,
//     while another path has acknowledged a packet sent later. The last
//     condition keeps a stopped receiver from looking like a path failure;
//     a gap in sending longer than StallRTTs times the largest SRTT
//     restarts every path's stall clock, so an idle sender does not either;
//     and when more than half of the active paths stall at once (a
//     receiver or host that paused and then acknowledges a burst, latest
//     first), none is taken out and every stall clock restarts: a failed
//     link takes out 1/S of the paths of an S-spine fabric, not most of
//     them. A path with no RTT sample yet is never judged stalled (its
//     first RTT may be a deep queue's); a dead one goes out on its losses.
//
// The last active path is never taken out. A path that is out is probed:
// ProbeInterval after its removal Next sends one packet on it (counted in
// PathStats.Probes), one probe in flight at a time across the set: after a
// spine dies, half of a QP's entropies may be out, and a burst after an
// idle gap that opened with a probe on each lost them all (in spray
// compare's spinefail, limiting probes cut the frames lost on the dead link
// over the 20 iterations after the failure from about 3,200 to 850). Retransmissions take their entropy from NextResend
// (the Resender interface), which never probes: a resend often holds the
// sender's window, and lost again on a dead path it would stall the QP
// until its retransmission timeout; an ACK of that probe (an OnAck whose RTT places the
// acknowledged packet's send time at or after the probe's, so the RTT must
// be positive) within the probe timeout (StallRTTs times the larger of the
// largest active SRTT and the path's own SRTT from before it went out, at
// least MinStallTimeout) puts the path back with its loss history cleared
// and its SRTT restarted from the probe's RTT or the largest SRTT of the
// active paths, whichever is larger (the probe crossed an empty queue),
// and with it every path out
// of the set whose INT path signature (OnPath) is the same: they cross the
// same links. A probe that times out doubles the interval to the next one,
// up to MaxProbeInterval, and the paths of the same signature wait for it
// too. (After a spine came back, its eight entropies of a 32-entropy QP
// needed eight probes, one in flight at a time; a probe that failed on one
// of them did not stop the next from trying the same dead links.) Losses
// reported on a path that is out are counted but change nothing, as they
// may be of packets sent before it went out.
//
// A resend also passes over the paths whose latest packet was lost (while
// any active path's latest report was an ACK), and in retransmission
// timeout backoff (NextResend's urgent) goes on the freshest active path,
// the one whose acknowledged packets were sent latest: with many entropies
// and a few packets each between idle gaps, a dead path may not have
// LossLimit losses yet, and a timed-out packet resent on it again costs
// another, doubled, timeout. (The transport sends a second copy of that
// packet on the next path of the round, as the freshest proof may predate
// the failure.) Where the physical paths are known (OnPath), the proof is
// the physical path's: the freshest one wins even when each of its
// entropies lost its latest packet, since after a spine dies the entropies
// on it keep their clean record (nothing is sent there any more) while
// those of the live spine lose packets whose acknowledgements went to the
// dead one; picking clean entropies would send each resend of a QP in
// backoff to another entropy of the dead spine until the QP failed.
//
// Acknowledgements leave on the same paths as the QP's own data, so the
// policy also picks their entropies (AckPather.NextAck): the set in turn,
// passing over paths out of the set, paths that lost their latest packet,
// and paths on which an acknowledgement was probably lost (AckLost, which
// the transport calls when the peer resends a packet it had acknowledged;
// an ACK of data on the path clears it, and when every active path is
// marked all marks clear). An urgent acknowledgement (one that answers such
// a duplicate) goes on the freshest path. With both directions of a spine
// link dead, blind rotation would lose every acknowledgement that hashed
// onto it, and a QP whose last packets were acknowledged only there would
// fail after MaxRetries timeouts (TestAdaptiveAckPaths,
// TestAdaptiveUrgentAfterSpineFailure).
//
// A path is stalled after StallRTTs (2) of its RTTs without an ACK: the
// packets caught on a dead path hold part of a fixed window until their
// entropies leave the set, so a longer wait costs goodput right after a
// failure. On a leaf-spine testbed the dead spine's entropies leave the set
// within milliseconds and a probe brings the spine back after a restore
// (bench's TestFabricFailover; the figures are in docs/results.md).
//
// Defaults (AdaptiveConfig's zero value): StallRTTs 2, MinStallTimeout
// 50µs, InitialRTT 100µs, LossLimit 3, MaxLossRate 0.25, ProbeInterval 1ms,
// MaxProbeInterval 64ms, DelayScale the best path's RTT, ECNWeight 4,
// LossWeight 16, MinWeight 1/16.
//
// Caveats: a QP that only receives learns about its acknowledgement paths
// from duplicates alone (AckLost), as it sends no data to score them.
// ECMP hashing is not a bijection, so distinct entropies can land
// on the same path, and the mapping changes when the fabric does; an
// oblivious sprayer keeps sending to a failed or congested path. The
// adaptive policy cannot tell which packet an ACK or a loss is for beyond
// the RTT that comes with it, so a burst of ACKs processed with a Next
// between them after a long pause of the peer can take a healthy path out
// for one probe interval. A path that carries a small share also gets few
// RTT samples, so its weight recovers over some tens of its packets after
// its congestion clears. A path whose RTT jumps to more than StallRTTs
// times its SRTT at once counts as stalled and waits out a probe interval.
// Stall detection needs packets on a path more often than its stall
// timeout; at lower rates a dead path goes out when the retransmitter
// reports its losses. Losses of packets sent before a path went out that
// are reported only after it came back count against it again. Weighting
// and interleaving cost O(len(set) x physical paths) per round, that is
// O(physical paths) per packet unless one path dominates.
package multipath
