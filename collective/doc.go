// Package collective runs the collective operations of AI training
// (AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, Barrier) over
// a world of ranks joined by spray QPs or by kernel TCP.
//
// A world starts with a Bootstrap: rank 0 listens on a TCP address, every
// other rank connects to it, and rank 0 gathers and broadcasts what the
// ranks need to reach each other. NewTCPComm then connects one TCP
// connection per pair of ranks; NewSprayComm creates one QP per peer on a
// transport.Endpoint and connects them (NewSprayCommConfig with a
// SprayConfig.NextHop when peers sit behind routers, as on a leaf-spine
// fabric, so that frames go to the router's MAC). Both implement Comm,
// ordered point to point messages between ranks, and every collective
// works over any Comm. Package collectivetest builds a whole world inside one process
// (loopback TCP, or one link/mem fabric) for tests and examples.
//
// The collectives are generic over Element (float32, float64, int32) with
// the operators Sum, Min and Max, and write their results into a buffer of
// the caller's. AllReduce uses recursive doubling for small payloads on a
// power-of-two world and a ring (reduce-scatter, then all-gather)
// otherwise; ReduceScatter and AllGather use the ring; AllToAll uses
// pairwise exchange; Broadcast a binomial tree pipelined by chunks. Long
// transfers are cut into chunks of Options.ChunkBytes, and every send runs
// beside its receive, so that two ranks that send to each other never wait
// for each other.
//
// # Caveats
//
//   - Every rank must call the same collectives in the same order with the
//     same lengths, root and Options, as in MPI. A length mismatch is
//     reported as ErrMismatch when a message of the wrong size arrives, but
//     some mismatches only show as a call that waits until its context
//     ends.
//   - A collective that fails or is cancelled half way leaves messages in
//     flight; the Comm should then be closed, not reused. A TCPComm marks a
//     connection broken (ErrBroken) when a call on it stops mid-message.
//   - Elements travel in the host's byte order: all ranks must share it.
//   - Float sums are rounded in the algorithm's order, not a serial loop's;
//     every rank gets the same bits.
//   - The transport has no call that destroys a QP: a closed SprayComm's
//     QPs stay on their Endpoint until it closes.
//
// # Errors
//
// errors.Is works with ErrInvalid, ErrMismatch, ErrTooLarge, ErrBootstrap,
// ErrBroken, ErrClosed (which wraps net.ErrClosed), the context's errors,
// and the transport's errors from a SprayComm.
package collective
