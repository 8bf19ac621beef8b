// Package xdp is spray's AF_XDP driver: a Socket bound to one queue of one
// network device that moves whole Ethernet frames between the device and a
// UMEM shared with the kernel, and implements link.Link.
//
// Use it for the fast path on Linux, with the steering XDP program of package
// ebpf redirecting the RoCEv2 frames (UDP 4791) of each queue to the socket
// registered for that queue:
//
//	st, _ := ebpf.LoadSteering(ebpf.SteerConfig{})
//	st.Attach(ifindex, ebpf.Auto)
//	s, _ := xdp.Open(xdp.Config{Ifindex: ifindex, Queue: 0})
//	st.Register(s.Queue(), s.FD())
//
// One Socket serves one queue; a multi-queue device needs one Socket per
// queue, each driven by its own engine goroutine. Elsewhere, use link/raw or
// link/udp.
//
// # Design
//
// Open maps one UMEM of (RxFrames+TxFrames)*FrameSize bytes and splits it in
// two pools: RX frames live on the fill ring, in the kernel, on the RX ring
// or with the caller between Recv and Release; TX frames live on a free
// list, with the caller between Alloc and Send, or in the kernel until the
// completion ring returns them. The pools are separate, so a flood of
// received frames never starves transmission nor the other way around, and
// every frame has exactly one owner, checked at every hand-over: a
// descriptor the kernel returns twice, a completion for a frame not in
// flight, or a frame the caller releases twice is counted in Stats and
// skipped rather than corrupting a pool. Recv hands out slices of the UMEM
// (Frame.ID is the UMEM address); nothing is copied in user space. The
// steady-state data path allocates nothing.
//
// The four rings are single-producer single-consumer queues whose indices
// are shared with the kernel: the socket reads the kernel's index with an
// atomic load (acquire) and publishes its own with an atomic store (release)
// after writing or reading the entries, and caches both so that a batch
// costs one of each.
//
// # need_wakeup
//
// By default the socket binds with XDP_USE_NEED_WAKEUP: the kernel sets a
// flag on the TX or fill ring when it needs a system call to look at it, and
// the socket makes one (sendto with MSG_DONTWAIT for TX, recvfrom for the
// fill ring) only then. In copy mode the kernel transmits only inside such
// a call, at most 32 frames per call, and stops when the completion ring is
// full, so Send kicks repeatedly, reaping completions between kicks, as long
// as each kick makes progress; Wait kicks again before it sleeps.
// Config.NoNeedWakeup makes Send kick on every call instead.
//
// # Copy and zero-copy
//
// In zero-copy mode the driver DMAs straight into the UMEM; in copy mode the
// kernel copies each frame between its own buffers and the UMEM. Mode Auto
// lets the kernel pick zero-copy when the driver supports it and falls back
// to copy (logged). veth has no zero-copy support: on veth (the testbed) a
// Socket always runs in copy mode, which still skips the network stack.
// Transmitting into a veth needs an XDP program attached to its peer for the
// peer's XDP path, and a Socket on the peer, to see the frames.
//
// # Why not github.com/asavie/xdp
//
// That package is archived; its Transmit panics on errors, RX and TX share
// one free list (so either direction can starve the other), it has no
// need_wakeup, and its issue tracker reports a hang on veth and duplicated
// descriptors under loss. This package talks to the kernel through
// golang.org/x/sys/unix directly, returns every errno as a wrapped error,
// keeps the pools apart, and checks frame ownership.
//
// # Caveats
//
// Open acts in the calling thread's network namespace: to open a socket in
// another namespace, lock the OS thread and enter the namespace first. The
// UMEM is locked memory (32 MiB with the defaults): without CAP_IPC_LOCK it
// counts against RLIMIT_MEMLOCK. Frames from Recv and Alloc point into the
// UMEM, which Close unmaps: using them after Close crashes the process.
// Errors wrap ErrNotSupported, ErrInvalidConfig, link.ErrClosed (which
// wraps net.ErrClosed) and the unix errno as they apply; test with
// errors.Is. On other platforms Open returns ErrNotSupported.
package xdp
