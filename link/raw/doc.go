// Package raw is a link.Link over an AF_PACKET raw socket bound to one
// interface: whole Ethernet frames in and out, spray's headers written by
// spray, without AF_XDP. Use it where AF_XDP is not available (no driver
// support, old kernel) and root is; use link/udp where root is not.
//
// A classic BPF socket filter lets through only UDP frames to Config.Port
// (IPv4 without fragments or IPv6 without extension headers, untagged or
// with one 802.1Q tag in the frame), and neither the socket's own nor other
// hosts' frames (PACKET_IGNORE_OUTGOING where the kernel has it, and a
// packet-type test in the filter everywhere), so the kernel's stack keeps
// every other frame: TCP, ARP, ping work as before. The kernel's stack also
// gets a copy of the frames the link receives; so that it does not answer
// them with ICMP port-unreachable messages, Open binds a UDP socket to
// Config.IP:Port that drops everything it gets (unless the port is taken,
// e.g. by a link/udp Link in the same namespace).
//
// Send writes into every frame the MAC address of the next hop that the
// kernel's routing and neighbour tables give for the frame's destination
// IP (package link/nexthop), so that frames to a peer behind a router go
// to the router; Config.KeepDstMAC turns that off.
//
// Send and Recv move batches with sendmmsg and recvmmsg; Send blocks while
// the socket's send buffer is full. A VLAN tag that the kernel or the NIC
// took off a received frame is put back in place (from PACKET_AUXDATA), so
// Recv returns frames as they were on the wire. Caveats: memory-mapped
// TPACKET_V3 rings are not used (a possible speed-up); received frames
// larger than FrameSize (tag included) are dropped and counted.
//
// A Link is safe for concurrent use only as link.Link says: one goroutine
// calls Recv, Release, Alloc, Send and Wait; Wake, Close and the counters
// may be called from any goroutine. Close unblocks a pending Wait.
package raw
