// Package mem is an in-memory Ethernet fabric whose ports implement
// link.Link: the test double that spray's protocol tests run on.
//
// Use it to run two or more transport engines in one process, under a
// simulated clock (*clock.Sim) for deterministic tests that take no wall-clock
// time, or under clock.NewSystem() for tests with real goroutines and
// blocking Waits. A Fabric switches frames by destination MAC (bytes 0-5 of
// the frame) and injects the faults its Config asks for: random and burst
// (Gilbert-Elliott, with bursts optionally bounded in time) loss,
// duplication, reordering, propagation delay and jitter, a serialization rate
// per destination port with a bounded tail-drop queue, a blackhole (link
// down) and a caller's Filter for targeted loss. The faults can be changed
// while frames are in flight (SetLoss, Blackhole, ...).
//
// Frames are not copied: the buffer a sender gets from Alloc travels to the
// receiver, which hands it back with Release; it then returns to the
// sender's pool. Each port owns Config.Frames transmit buffers, so a
// receiver that holds frames without releasing them exerts backpressure on
// its senders (their Alloc returns fewer frames), as a real NIC's ring would.
// A duplicate is a copy, in another buffer of the sender's pool (no
// duplicate is made when that pool is empty).
//
// # Queues
//
// Fabric.NewMultiPort attaches a port with several receive queues that
// implements link.Multi, as a NIC with RSS: a frame switched to it lands on
// the queue that its RSS indirection table gives the Toeplitz hash of the
// frame's addresses and UDP ports (package link/rss; queue 0 for frames
// without them), and each queue is a Port of its own, with its own buffer
// pool, so that frames sent on queue i leave from queue i. Use it to run an
// endpoint with one engine per queue without a kernel.
//
// # Time
//
// A frame sent at now becomes receivable at
//
//	due = serialization end + Delay + uniform[0, Jitter] + (with probability Reorder) uniform[0, ReorderDelay]
//
// where the serialization end is now + N*8/Bandwidth for an N-byte frame
// when the destination port's FIFO is idle, and later when frames are queued
// ahead of it. Recv hands out the frames whose due time has passed, in due
// order. Under a *clock.Sim, Wait returns at once and the simulation moves
// the clock, typically to NextDelivery() or the engines' next timer. Under
// the system clock, a Wait of up to 100µs (a frame due after Delay, an
// engine's delayed-ACK timer) spins, yielding the processor, rather than
// sleep on a runtime timer, which an otherwise idle Go process oversleeps
// to a millisecond.
//
// # Determinism
//
// Every random decision about a frame (loss, burst state, duplication,
// jitter, reorder delay) is drawn from a PCG source that belongs to the
// sending port, seeded from Config.Seed and the port's creation order. The
// same seed, the same port creation order and the same sequence of calls
// therefore give the same outcomes; the frames one port sends meet the same
// fate whatever other ports do concurrently, except for queue drops and
// queueing delay, which depend on how traffic interleaves.
//
// # Caveats
//
// Only unicast is switched: a frame for a MAC that no open port has
// (broadcast included) is dropped and counted in NoRoute. Jitter and the
// reorder delay do reorder frames, as netem does. Misuse of the link
// interface (a foreign or stale frame ID, a double Release, a buffer resliced
// away from its start) never corrupts the pools: the frame is ignored and
// counted in FabricStats.Misuse, which tests of the transport should check is
// zero.
package mem
