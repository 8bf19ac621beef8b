// Package ebpf holds spray's kernel programs and their Go loaders; today the
// host steering XDP program, which sends RoCEv2-style frames (UDP to port
// 4791 by default) arriving on an interface to the AF_XDP socket of their RX
// queue and leaves every other frame to the kernel.
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
//
// Passes not counted NoSocket count Passed, so that the counters add up to
// the frames seen. The kernel would drop every frame dropped in 3, 5 and 7
// anyway; the program takes nothing from other applications on the host.
//
// Errors: test with errors.Is for ErrNotSupported (not little-endian Linux),
// ErrClosed (also matches net.ErrClosed), ErrInvalidConfig, ErrBadQueue and
// ErrAttached; kernel errors are wrapped with %w.
//
// Caveats: loading and attaching need root (CAP_BPF, CAP_NET_ADMIN). Attach
// and AF_XDP sockets act in the network namespace of the calling OS thread:
// lock the thread and enter the namespace first. Checksums are not verified
// (the AF_XDP consumer checks the ICRC). Frames whose VLAN tag the NIC
// strips are seen untagged. The program is not multi-buffer aware: frames
// larger than one page are not seen in native mode. The generated
// steer_bpfel.go and steer_bpfel.o are committed; after editing steer.c run
// regen.sh (clang, llvm-strip and libbpf headers needed), which also fails on
// a difference so that CI catches stale objects.
package ebpf
