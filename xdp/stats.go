package xdp

import "github.com/sprayfabric/spray/link"

// Stats are a socket's counters: the kernel's XDP_STATISTICS and the
// socket's own. Counters only grow; the pool fields are a snapshot.
type Stats struct {
	// Stats are the counters every link keeps. RxDropped is the kernel's
	// rx_dropped plus rx_ring_full plus RxBadDescs; TxDropped counts frames
	// handed to Send that were not queued (bad frame, TX ring full), those
	// the device dropped (TxDeviceDrops) and the kernel's tx_invalid_descs.
	link.Stats

	// From the kernel (XDP_STATISTICS; zero when the kernel has none).

	// KernelRxDropped: frames dropped before the RX ring (too long, no
	// room in the UMEM frame).
	KernelRxDropped uint64
	// RxInvalidDescs and TxInvalidDescs: descriptors the kernel refused.
	RxInvalidDescs, TxInvalidDescs uint64
	// RxRingFull: frames dropped because the RX ring was full (the caller
	// does not Recv fast enough).
	RxRingFull uint64
	// RxFillRingEmpty: times the kernel found the fill ring empty (the
	// caller holds every RX frame, or does not Release fast enough).
	RxFillRingEmpty uint64
	// TxRingEmpty: times the kernel found the TX ring empty when woken.
	TxRingEmpty uint64

	// Kept by the socket.

	// Fills counts frames put on the fill ring; Completions counts TX
	// frames the kernel returned through the completion ring.
	Fills, Completions uint64
	// TxWakeups and RxWakeups count the system calls that kicked the
	// kernel (sendto for TX, recvfrom for the fill ring and busy polling);
	// Waits counts the calls of Wait that went to sleep.
	TxWakeups, RxWakeups, Waits uint64
	// TxDeferredKicks counts the calls of Send that left their frames on
	// the TX ring for a later kick (Config.KickDelay).
	TxDeferredKicks uint64
	// TxDeviceDrops counts frames the kernel consumed from the TX ring but
	// the device dropped (sendto returned EBUSY, copy mode).
	TxDeviceDrops uint64
	// RxBadDescs counts RX descriptors that did not name a frame the kernel
	// owned (an address outside the RX pool, a frame delivered twice); they
	// are skipped. On a Stamped socket it also counts single-chunk frames
	// too short for the stamp and an Ethernet header, dropped. Zero on a
	// healthy kernel.
	RxBadDescs uint64
	// BadReleases counts frames passed to Release that were not held from
	// Recv (double release, a foreign ID); they are ignored.
	BadReleases uint64
	// RxOversize counts multi-buffer frames dropped by the socket: longer
	// than Config.MaxFrame (behind the stamp, on a Stamped socket), shorter
	// than an Ethernet header, or with a piece the kernel did not own. (A
	// frame longer than one UMEM chunk that reaches a socket without
	// multi-buffer is dropped by the kernel: KernelRxDropped.)
	RxOversize uint64
	// RxMultiBuffer counts frames received in several UMEM chunks
	// (multi-buffer sockets only), RxReassembled those among them that
	// the socket copied into a reassembly buffer because their pieces did
	// not lie back to back in the UMEM; the others were handed out in
	// place (see the package doc).
	RxMultiBuffer, RxReassembled uint64
	// BadCompletions counts completion entries that did not name a frame in
	// flight; they are ignored. Zero on a healthy kernel.
	BadCompletions uint64

	// Pools. RxFree+RxHeld is always Config.RxFrames, and
	// TxFree+TxHeld+TxInFlight always Config.TxFrames.

	// RxFree: RX frames the socket owns (on the fill ring, in the kernel,
	// waiting on the RX ring, or waiting for room on the fill ring);
	// RxHeld: frames returned by Recv and not yet released.
	RxFree, RxHeld int
	// TxFree: TX frames on the free list; TxHeld: frames returned by Alloc
	// and not yet passed to Send; TxInFlight: frames sent whose completion
	// has not been reaped yet.
	TxFree, TxHeld, TxInFlight int
}

// kernelStats is struct xdp_statistics.
type kernelStats struct {
	RxDropped, RxInvalidDescs, TxInvalidDescs uint64
	RxRingFull, RxFillRingEmptyDescs          uint64
	TxRingEmptyDescs                          uint64
}

func (st *Stats) addKernel(k kernelStats) {
	st.KernelRxDropped = k.RxDropped
	st.RxInvalidDescs, st.TxInvalidDescs = k.RxInvalidDescs, k.TxInvalidDescs
	st.RxRingFull = k.RxRingFull
	st.RxFillRingEmpty = k.RxFillRingEmptyDescs
	st.TxRingEmpty = k.TxRingEmptyDescs
	st.RxDropped = k.RxDropped + k.RxRingFull + st.RxBadDescs + st.RxOversize
	st.TxDropped += k.TxInvalidDescs
}
