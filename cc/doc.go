// Package cc is spray's congestion control: the Controller interface that
// the transport drives, a fixed-rate controller and a pacer; it is sans-IO.
//
// Use a Controller per QP (or per destination) to decide how many bytes may
// be in flight (Window) and how fast to send them (Rate), and a Pacer to turn
// the rate into send times. The transport reports every event to the
// controller: OnSend for each packet it transmits (retransmissions
// included), OnAck for each acknowledgement with its RTT, ECN count and
// echoed INT records, OnLoss for each packet declared lost, OnTimeout for a
// retransmission timeout, OnCNP for a RoCEv2 congestion notification packet.
// It calls OnTimer whenever NextTimer has passed, and reads Window and Rate
// before it sends.
//
// The interface is shaped for the controllers that come next:
//
//   - HPCC (Li et al., SIGCOMM 2019) computes a window from the INT hop
//     records echoed in each ACK (per hop: link rate, timestamp, queue length
//     and transmitted-bytes counter, Sample.INT in the wire layout of
//     transport/wire.Hop) and paces at window/base RTT. It updates its
//     reference window once per RTT, which it can tell from its own OnSend
//     and OnAck byte counts.
//   - Swift (Kumar et al., SIGCOMM 2020) computes a window from the RTT
//     against a target delay; Sample.HoldTime separates the receiver's
//     hold time (endpoint delay) from the fabric delay. When its window falls
//     below one packet it keeps Window at one packet and paces with Rate.
//   - DCQCN (Zhu et al., SIGCOMM 2015) cuts its rate on OnCNP and raises it
//     from a byte counter (OnSend) and from timers (NextTimer/OnTimer).
//
// Nothing here reads a clock, starts a goroutine or draws global randomness:
// time is an argument of every call. Controllers and Pacers are not safe for
// concurrent use; the engine that owns the QP calls them.
//
// Caveat: a Pacer spaces packets by its rate and lets at most its burst
// through at once; it does not know the window. The transport must check
// both: a packet may go when the bytes in flight are below Window (or
// nothing is in flight) and Pacer.Next has passed.
package cc
