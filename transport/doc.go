// Package transport is spray's reliable transport: queue pairs (QPs) that
// carry messages and one-sided RDMA WRITEs between two hosts over any
// link.Link, with per-packet multipath spraying, out-of-order placement and
// selective retransmit (the Spray profile), or classic RoCEv2 behaviour (the
// RoCE profile: one path per QP, in-order reception, Go-Back-N).
//
// # Layers
//
// QP is the sans-IO state machine of one connection: Handle a decoded
// packet at a time, PollTransmit to encode the next packet into a buffer,
// NextTimeout and HandleTimeout for timers. It does no I/O, starts no
// goroutines, reads no clock and takes its randomness from Config.Seed.
// Loss recovery (package retransmit), reordering (package reorder), path
// choice (package multipath) and congestion control (package cc) are parts
// it is built from, chosen by Config.
//
// Engine drives the QPs of one link: Step(now) receives a batch, decodes it
// (transport/wire) and dispatches by destination QP, runs timers and
// transmits in batches into link-owned buffers. Given link/mem and a
// clock.Sim, an Engine runs deterministically and as fast as the CPU allows:
// the protocol tests of this package work that way.
//
// Endpoint runs an Engine on its own goroutine with the real clock and
// offers the Go API: CreateQP, Connect (after exchanging QPInfo out of
// band), blocking Send/Write/Recv calls that take a context, Post with a
// completion queue (CQ) for asynchronous use, and memory registration.
//
// # Semantics
//
//   - Messages of 0 bytes up to Config.MaxMessageSize (default 1 GiB) are
//     delivered whole, exactly once, in the order they were posted, whatever
//     the order their packets arrive in. A sender's completion means the peer
//     acknowledged every byte.
//   - A WRITE names a peer's region by address and remote key (MR.Remote).
//     The receiver checks every packet against the region's bounds, key and
//     access; a refused WRITE writes nothing and the receiver answers it,
//     and every later packet, with a NAK remote access error. As in IBA the
//     writer's QP then moves to the error state: the WRITE fails with
//     ErrRemoteAccess, every other pending request with ErrQPFailed.
//   - A peer that stops acknowledging fails the QP with ErrPeerUnreachable
//     after Config.MaxRetries retransmission timeouts in a row; every pending
//     and later request then fails with ErrQPFailed.
//   - Receive buffers are allocated per message when its first packet
//     arrives (Spray) or grown as packets arrive in order (RoCE). The
//     receiver holds at most Config.MaxMessages undelivered messages per QP:
//     beyond that, packets are dropped (counted in NoBuffer) and the sender
//     retransmits them later: a slow reader slows its sender down instead of
//     growing memory.
//   - Every bound is in Config; frames that fail to decode, packets for
//     unknown QPs and packets from the wrong source are counted and dropped.
//
// # Wire
//
// The Spray profile uses spray's opcodes (0xE0 data, 0xE1 ACK with SACK
// bitmap, echoed timestamp and INT records); the RoCE profile uses the
// standard RC opcodes and AETH ACK/NAK, so that its packets decode in
// Wireshark as RoCEv2. Classic packets carry a power-of-two payload (the
// RoCE path MTU: 1024 bytes for a 1500-byte MTU), spray packets as much as
// the MTU allows.
//
// # Errors
//
// errors.Is works with the exported sentinels: ErrConfig, ErrRemoteAccess,
// ErrPeerUnreachable, ErrQPFailed, ErrQueueFull, ErrNotConnected,
// ErrInvalidRequest, and net.ErrClosed for a closed Endpoint.
package transport
