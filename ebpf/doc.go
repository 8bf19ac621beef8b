// Package ebpf holds spray's kernel programs and their Go loaders: the host
// steering XDP program, which sends RoCEv2-style frames (UDP to port 4791 by
// default) arriving on an interface to the AF_XDP socket of their RX queue
// and leaves every other frame to the kernel, and the fabric programs, which
// play the switches of a test fabric (see "Fabric" below).
//
// Use it through the AF_XDP driver (package xdp), or directly: LoadSteering,
// Attach to the interface, Register each queue's AF_XDP socket, read
// Counters, Close. Frames to the port arrive on a queue without a registered
// socket pass to the kernel and count NoSocket, so a kernel UDP socket on the
// port keeps working until a driver takes the queue over.
//
// What the program does with a frame, in order:
//
//  1. Ethernet, with at most one 802.1Q or 802.1ad VLAN tag; anything but
//     IPv4/IPv6 passes (ARP, LLDP, double-tagged frames).
//  2. If the IPv4 protocol or IPv6 next-header byte is not in the frame or
//     is not UDP, the frame passes (TCP, ICMP, IPv6 extension headers).
//  3. A truncated or inconsistent IP header (version, IHL below 5, total or
//     payload length beyond the frame) is dropped: Malformed.
//  4. IPv4 fragments pass (the kernel reassembles them).
//  5. A UDP header that does not fit in the IP payload is dropped: Malformed.
//  6. Frames to another UDP destination port pass.
//  7. A UDP length below 8 or beyond the IP payload is dropped: Malformed.
//  8. When Local is set, frames to other destination addresses pass.
//  9. When Allow is set, frames from other source addresses are dropped:
//     Refused.
//  10. The frame is redirected to the socket registered for its RX queue:
//     Steered, or passes when there is none: NoSocket.
//  11. With SteerConfig.Stamp, a redirected frame gets StampLen (8) bytes
//     prepended, bpf_xdp_adjust_head, holding bpf_ktime_get_ns()
//     (CLOCK_MONOTONIC in ns) as a little-endian uint64: the time it
//     reached the host, before it waited in the socket's RX ring. A frame
//     without headroom for it is dropped: NoRoom. Passed frames are never
//     stamped.
//
// Passes not counted NoSocket count Passed, so that the counters add up to
// the frames seen. The stamp costs a bpf_ktime_get_ns and a head adjust per
// steered frame; package xdp strips it into link.Frame.RxTime, so that the
// transport counts the time a frame waited on the host (its engine not
// scheduled) as endpoint delay, not fabric delay. It is prepended rather
// than written as XDP metadata because the kernel writes metadata into a
// chunk's headroom, which package xdp's in-place receive layout lends to
// the previous frame (TestSteerStamp, and TestLinkStamp in package xdp). The kernel would drop every frame dropped in 3, 5 and 7
// anyway; the program takes nothing from other applications on the host.
//
// # Fabric
//
// The fabric programs (fabric.c) are a tc ingress and a tc egress program
// that a Fabric attaches with tcx links to both directions of switch ports.
// LoadFabric loads their maps; AttachPort(ifindex, cfg), in the namespace of
// the calling thread, makes the interface the port cfg.ID
// (switch and port numbers, unique in the Fabric; the other methods take the
// PortID because ifindexes repeat across namespaces); AttachPortAt does the
// same in a namespace given by handle, from any thread. SetFaults and SetECN
// change a port while traffic flows; PortCounters reads its counters;
// DetachPort and Close detach. One Fabric serves every switch of a testbed:
// each port gets its own instance of the two programs (loaded by AttachPort,
// the port's slot a constant in it), and all instances share the Fabric's
// maps, in every namespace, which is how the ingress of one port measures
// the queue of the port that sent the frame.
//
// Both programs return "next" (TCX_NEXT) for every frame they do not drop,
// so that later tcx programs, the qdisc and the stack see it as before.
//
// On a port's egress, for every frame, in order:
//
//  1. Faults (all frames, or only RoCE frames with Faults.RoCEOnly):
//     blackhole drops (DropBlackhole); random loss with probability Loss
//     (DropLoss); Gilbert-Elliott burst loss (DropBurst). With Faults.Trim,
//     a whole spray data packet (opcode 0xE0, trim bit clear, IPv4 without
//     options or IPv6, its data header before the tag and ICRC) that loss
//     would drop is trimmed instead (Trimmed), as wire.Trim does it: cut
//     after the data header (bpf_skb_change_tail), BTH byte 4 bit 5 set and
//     PadCnt 0, Flags and INTMax 0, the IP and UDP lengths and the IPv4
//     header checksum rewritten, the UDP checksum 0 over IPv4 and computed
//     over IPv6, and a new ICRC (CRC-32 over the 8 bytes of ones and the
//     masked headers, at most 100 bytes, in a bpf_loop); skb->priority 7
//     (or PriorityClass) lets a qdisc send it ahead of the data. A secured
//     packet keeps its security header and loses its tag: its receiver
//     drops it. Frames that cannot be trimmed are dropped as without Trim.
//     The trimmed frame goes on through the next steps (no INT region left
//     to stamp).
//  2. With PortConfig.TrimQueue, the port's queue model: a byte count per
//     port, under a spin lock, that every frame adds to and the link drains
//     at RateMbps (from the time of the last frame; a second idle empties
//     it). A whole spray data packet that would take it beyond TrimQueue is
//     trimmed as in step 1 (Trimmed and TrimmedQueue; a failed trim drops
//     it, DropQueue) and the model counts its headers; other frames go on
//     whole; a frame that would take the model beyond QueueLimit is left
//     out of it, as the full queue drops it. The model stands in for the
//     qdisc's backlog, which a tc program cannot read: it matches a qdisc
//     that drains at RateMbps whenever it holds frames.
//  3. With PortConfig.PriorityClass, trimmed spray data packets (trimmed
//     here or at an earlier port) and RoCE control frames (RC ACK 0x11,
//     CNP 0x81, spray ACK 0xE1, credit grant and request 0xE2, 0xE3) get
//     skb->priority PriorityClass, which a classful qdisc (HTB) takes as
//     the class to queue them in.
//  4. Packets and Bytes count the frame; its bytes are added to the port's
//     transmit counter.
//  5. A RoCE frame is an IPv4 (not fragmented) or IPv6 (no extension
//     headers) UDP datagram to port 4791, with at most one VLAN tag in the
//     frame, whose UDP length holds a BTH and an ICRC. A spray data packet
//     (opcode 0xE0) with FlagINT and a consistent INT region (version 1,
//     1 <= max <= 8, max equal to the data header's INTMax, count <= max,
//     region inside the datagram) with a free slot gets hop record <count>
//     and count+1 (INTStamped); a full region counts INTFull. In a secured
//     packet (BTH byte 8 bit 6) the data header and the INT region follow
//     the 16-byte security header and the region must end before the
//     16-byte tag. The record:
//     Switch, Port = cfg.ID; RateMbps = cfg.RateMbps; TS = bpf_ktime_get_ns()
//     (CLOCK_MONOTONIC of the machine, ns) when the frame leaves the egress
//     program, that is before the port's qdisc; QLen = 0 until the next
//     port's ingress fills it; TxBytes = the low 32 bits of the port's
//     transmit counter including this frame. Every RoCE frame's egress time
//     and port are remembered (an LRU map of MaxInflight frames, keyed by
//     addresses, UDP source port, opcode, destination QP and PSN).
//
// A packet trimmed at the port (step 1 or 2) is then redirected to the port
// (bpf_redirect) with skb->mark 0x7370726d: the qdisc took the frame's
// length before the program ran, and would charge, shape and queue the
// packet at its old length. On that second pass the program clears the mark
// and lets the frame through at once, uncounted; crossing a veth into the
// next namespace clears the mark too.
//
// On a port's ingress, every frame counts RxPackets. At an Edge port (one
// facing a host) a RoCE frame's remembered egress time, if any, is stale
// and forgotten, and nothing more happens. Elsewhere, for a RoCE frame
// remembered by an egress, delay = now - egress time: the time the frame
// spent in the sending port's qdisc (where the testbed shapes and queues)
// and on the veth, which is the queue delay of the sending port, measured on
// one clock. It counts for the sending port (Measured, QueueDelaySum,
// MaxQueueDelay); the hop record that port wrote (if the frame still holds
// it, same TS) gets QLen = delay x RateMbps / 8000 bytes (saturating); and
// the sending port's ECNConfig decides a CE mark of an ECT frame (ECNMarked
// of the sending port): RED on delay instead of queue length. IPv4 marks fix
// the header checksum incrementally; IPv6 has none in its header. INT writes
// fix an IPv6 (or non-zero IPv4) UDP checksum; spray's zero IPv4 UDP
// checksum stays zero. The ICRC masks the INT region, TOS and traffic class,
// so it stays valid, and so does a secured packet's tag, which reads the INT
// region as ones.
//
// A Fabric normally lives as long as the process (its tcx links and maps go
// away with their file descriptors). Fabric.Pin pins the maps and every
// port's links in a bpffs directory (MountBPFFS mounts one if needed), so
// that the programs stay attached after the process exits;
// LoadPinnedFabric opens the fabric again from another process, and Unpin
// (or removing the directory) lets it go. Fabric.Objects and
// ObjectIDs.Alive check that a teardown left no program, link or map.
//
// Fabric caveats: a queue is measured only where the frame's next device runs
// the ingress program, so the last hop to a host is measured only if the
// host's interface is a port too, and not for frames that an XDP program
// redirects (AF_XDP) before tc sees them; without it the last hop record
// keeps QLen 0 (a receiver on the same machine can compute it from TS and its
// own CLOCK_MONOTONIC). Faults and marks happen per frame with the kernel's
// bpf_get_prandom_u32, not a seeded source; burst state is per port, shared
// by CPUs without locking. Frames that the LRU map forgot (more than
// MaxInflight in flight) and non-RoCE frames are never marked; a frame sent
// again with the same key while the first copy is in flight (a fast
// retransmit) gives one measurement, from the later egress time. Generated
// fabric_bpfel.go and fabric_bpfel.o are committed like the steering
// program's.
//
// Errors: test with errors.Is for ErrNotSupported (not little-endian Linux),
// ErrClosed (also matches net.ErrClosed), ErrInvalidConfig, ErrBadQueue,
// ErrAttached and ErrUnknownPort; kernel errors are wrapped with %w.
//
// Steering caveats: loading and attaching need root (CAP_BPF, CAP_NET_ADMIN). Attach
// and AF_XDP sockets act in the network namespace of the calling OS thread:
// lock the thread and enter the namespace first. Checksums are not verified
// (the AF_XDP consumer checks the ICRC). Frames whose VLAN tag the NIC
// strips are seen untagged. The program is loaded with the xdp.frags flag
// (Linux 5.18), so that it attaches to devices with jumbo MTUs and sees
// frames that come in several buffers; their headers must lie in the first
// buffer, and their IP and UDP lengths are checked against the whole frame
// (TestSteerJumbo). AF_XDP sockets receive such frames only when bound
// multi-buffer (package xdp, Config.MaxFrame). The generated
// steer_bpfel.go and steer_bpfel.o are committed; after editing steer.c run
// go generate ./ebpf/... (clang, llvm-strip and libbpf headers needed).
// regen.sh builds them in a temporary directory and fails on a difference,
// so that CI catches stale objects without touching the tree.
package ebpf
