// Package multipath chooses the entropy (the UDP source port) of each
// packet a queue pair sends, and so the path that ECMP switches hash it
// onto; it is sans-IO.
//
// Use Entropies to derive a QP's set of source ports, then a Policy to pick
// one per packet: NewECMP for the classic RoCEv2 behaviour (one entropy per
// QP, every packet on the same path), NewSpray for oblivious per-packet
// spraying (every path gets exactly one packet per round, in a fresh seeded
// order each round). The transport calls Next for every packet it sends and
// reports what happened to it with OnAck and OnLoss, which keep the per-path
// counters that Stats returns.
//
// A Policy reads no clock and draws no global randomness: time comes in as
// an argument and randomness from the seed given to its constructor, so the
// same seed and the same calls give the same entropies. Policies are not
// safe for concurrent use; the engine that owns the QP calls them.
//
// Caveats: ECMP hashing is not a bijection, so distinct entropies can land
// on the same path, and the mapping changes when the fabric does; an
// oblivious sprayer keeps sending to a failed or congested path. Adaptive
// spraying (scoring paths from the RTT, ECN and losses that OnAck and
// OnLoss report, steering away from bad ones and failing over) comes in a
// later change and will implement the same Policy interface.
package multipath
