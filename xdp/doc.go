// Package xdp is spray's AF_XDP driver. A Link serves every RX queue of a
// network device, with one AF_XDP socket per queue and the steering XDP
// program of package ebpf; a Socket is one of those sockets, bound to one
// queue. Both implement link.Link and move whole Ethernet frames between
// the device and UMEMs shared with the kernel; Link also implements
// link.Multi.
//
// Use OpenLink for the fast path on Linux; it does what the CLI and the
// benchmarks do:
//
//	l, err := xdp.OpenLink(xdp.LinkConfig{Ifindex: ifindex, MAC: mac, IP: ip})
//	// l.Info().Name == "xdp:eth0/q0-7"; one engine drives l, or one
//	// engine per element of l.Queues().
//	defer l.Close() // detaches the program, frees every socket and UMEM
//
// OpenLink reads the device's queue count from the kernel (the combined
// plus RX-only channels of ETHTOOL_GCHANNELS, what `ethtool -l` shows),
// attaches the steering program (native mode, generic as a fallback),
// opens a Socket on every queue and registers each in the program's XSKMAP
// at its queue index. A NIC spreads flows over its queues by a hash of
// their addresses and ports (RSS), and a sprayed QP sends from many UDP
// source ports: its frames arrive on every queue, and a queue without a
// socket would hand them to the kernel, which drops them. OpenLink
// therefore fails (ErrBusy) when a queue cannot be bound or another XDP
// program holds the device, unless LinkConfig.Partial asks it to leave
// such queues to the kernel (it logs which). A queue count that changes
// while the Link is open is noticed within LinkConfig.CheckEvery and makes
// Wait and Recv return ErrQueuesChanged.
//
// A Link's sockets write into every frame they send the MAC address of the
// next hop that the kernel's routing and neighbour tables give for the
// frame's destination IP (package link/nexthop, opened in the Link's
// namespace and following route and neighbour changes), so that frames to
// a peer behind a router go to the router, whatever MAC the caller wrote;
// LinkConfig.KeepDstMAC turns that off. A Socket from Open sends frames as
// they are.
//
// Link.RSS returns the device's RSS hash key and indirection table
// (ETHTOOL_GRSSH, what `ethtool -x` shows), with the entries numbered as
// Queues is, so that Link implements transport.RSSReader: an endpoint with
// an engine per queue then tells its peers which UDP source ports reach
// each QP's own engine (Endpoint.Steering, CreateQPSteered). A device
// without RSS (veth, the testbeds) has none (RSSTable's error wraps
// ErrNotSupported), and frames that arrive on another engine's queue reach
// their QP over the transport's hand-over rings. Steering assumes the NIC
// hashes UDP ports as well as addresses (`ethtool -n DEV rx-flow-hash
// udp4` shows "L4 bytes 0 & 1" and "2 & 3"; `ethtool -N DEV rx-flow-hash
// udp4 sdfn` sets it); with addresses only, every entropy of a QP lands on
// one queue and its engine's hand-overs carry the rest.
//
// Socket and Open remain for callers that manage the program and the
// queues themselves:
//
//	st, _ := ebpf.LoadSteering(ebpf.SteerConfig{})
//	st.Attach(ifindex, ebpf.Auto)
//	s, _ := xdp.Open(xdp.Config{Ifindex: ifindex, Queue: 0})
//	st.Register(s.Queue(), s.FD())
//
// Elsewhere, use link/raw or link/udp.
//
// # One UMEM per queue
//
// Each queue's Socket has its own UMEM, rather than one UMEM shared by all
// sockets (XDP_SHARED_UMEM). A UMEM's fill and completion rings belong to
// one (device, queue) pair anyway, so sharing one would still need a pool
// per queue, plus a lock or hand-over ring to move frames between them;
// separate UMEMs keep every queue's pools owned by the one goroutine that
// drives it, with the ownership checks of a single socket, and let an
// engine per queue run without sharing anything. The cost is memory: each
// queue's frames are its own. OpenLink sizes them for that (LinkConfig's
// Socket.RxFrames): on a device of more than two queues it gives each
// 2*DefaultFrames/queues, at least 512, so that a 64-queue NIC does not
// lock 64 times the memory of one queue.
//
// # Jumbo frames
//
// A UMEM chunk is a page at most (Config.FrameSize, 4 KiB), less 256 bytes
// of headroom. Config.MaxFrame above that makes a multi-buffer socket
// (XDP_USE_SG, Linux 6.6): the kernel delivers a long frame in several
// chunks, described by descriptors chained with XDP_PKT_CONTD
// (Stats.RxMultiBuffer), and the link hands out each frame as one slice.
// In copy mode (veth, and every driver without zero-copy) the socket
// registers an unaligned UMEM (XDP_UMEM_UNALIGNED_CHUNK_FLAG) whose RX
// entries start a chunk less 256 bytes apart: the kernel copies the
// pieces of a frame from 256 bytes into consecutive entries, so they lie
// back to back and the frame is handed out where it lies, without a copy
// in user space. An entry's headroom overlaps the end of the previous
// entry's data, which the kernel does not write (the steering program sets
// no metadata). The socket gives free entries back to the kernel in the
// order it consumed them, so that they stay consecutive; a frame whose
// pieces are not (one that straddles the end of the pool, say) is copied
// into one of a bounded set of reassembly buffers (Stats.RxReassembled).
// A socket that binds in zero-copy mode, where a driver's DMA may not
// cross pages, uses aligned chunks and copies every multi-buffer frame. A TX frame spans adjacent
// chunks, so the caller encodes it in place as usual, and Send splits it
// into chained descriptors. The steering program is loaded with the
// xdp.frags flag, which a device with an MTU above a page needs. Without
// multi-buffer, a frame longer than a chunk is dropped by the kernel and
// counted (Stats.KernelRxDropped, in RxDropped).
//
// # Arrival stamp
//
// Every frame a Link receives carries the time it reached the host in
// Frame.RxTime (CLOCK_MONOTONIC ns, the clock of Go's monotonic readings),
// so that the transport counts the time a frame waited in the RX ring, its
// engine not scheduled, as endpoint delay rather than fabric delay. The
// steering program takes the time with bpf_ktime_get_ns before the frame
// enters the ring and prepends it, 8 bytes little endian, with
// bpf_xdp_adjust_head (ebpf.SteerConfig.Stamp); the socket
// (Config.Stamped) strips it, so Frame.Buf holds the Ethernet frame alone.
// The cost is a bpf_ktime_get_ns and a head adjust per frame, and 8 bytes
// of each UMEM chunk: a stamped socket's default MaxFrame is a chunk less
// the headroom and the stamp, and it is multi-buffer when MaxFrame and the
// stamp exceed a chunk. The stamp is frame data, not XDP metadata, which
// the kernel would write into a chunk's headroom (see Jumbo frames).
// LinkConfig.NoStamp turns it off; RxTime is then 0. A Socket opened by
// Open is stamped only with Config.Stamped, and then needs a program that
// stamps (TestLinkStamp, TestStampedRecv).
//
// # Design
//
// Open maps one UMEM of RxFrames+TxFrames chunks (more for multi-buffer TX
// frames) and splits it in two pools: RX frames live on the fill ring, in
// the kernel, on the RX ring or with the caller between Recv and Release;
// TX frames live on a free
// list, with the caller between Alloc and Send, or in the kernel until the
// completion ring returns them. The pools are separate, so a flood of
// received frames never starves transmission nor the other way around, and
// every frame has exactly one owner, checked at every hand-over: a
// descriptor the kernel returns twice, a completion for a frame not in
// flight, or a frame the caller releases twice is counted in Stats and
// skipped rather than corrupting a pool. Recv hands out slices of the UMEM
// (Frame.ID is the UMEM address, with the socket's queue in its high bits
// when it belongs to a Link); nothing is copied in user space but the
// multi-buffer frames that cannot be handed out in place. The
// steady-state data path allocates nothing (bench's BenchmarkXDPTransfer).
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
// In copy mode every kick runs the kernel's whole transmit path (and, on
// veth, the peer's receive path) for what the ring holds, so that for
// small frames the system call, not the bytes, is the cost.
// Config.KickDelay lets the small Sends (up to 4 frames) of a stream (the
// third and later since Recv last returned frames or Wait last ran) leave their frames on the
// ring while the last kick is younger than KickDelay: they leave with the
// next kick, made by a Send or Recv once the last kick is KickDelay old,
// by Wait before it sleeps, by Flush or Close, or once 32 frames wait,
// what copy mode sends per kick (Stats.TxDeferredKicks counts such
// Sends). A reply, and a request right
// behind its acknowledgement, still kick at once. It suits a caller that
// loops over Recv, Send and Wait, as the transport's engines do; 0 (the
// default) kicks on every Send.
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
// Errors wrap ErrNotSupported, ErrInvalidConfig, ErrBusy,
// ErrQueuesChanged, link.ErrClosed (which wraps net.ErrClosed) and the unix
// errno as they apply; test with errors.Is. On other platforms Open and
// OpenLink return ErrNotSupported.
package xdp
