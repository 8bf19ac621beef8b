// Package udp is a link.Link over kernel UDP sockets: the portable,
// unprivileged way to run spray, and the one to use between processes on one
// host (bind them to 127.0.0.1 and 127.0.0.2, or give them different Ports).
//
// The kernel owns the Ethernet, IP and UDP headers here, so the link strips
// them on Send and synthesizes them on Recv (see link.Link): Send reads the
// destination IP, the UDP source port (the entropy) and the IP TOS out of
// each frame and sends the UDP payload (BTH to ICRC) to the destination IP at
// Config.PeerPort from the socket bound to that source port; Recv writes
// Ethernet | IPv4 or IPv6 | UDP headers in front of every datagram, with the
// sender's address and port as source, Config.Local as destination IP and
// 4791 as destination port, a correct IPv4 header checksum and, for IPv6, a
// correct UDP checksum (IPv4: UDP checksum 0). The MAC addresses are
// synthesized, locally administered ones: 02:00 followed by the last four
// bytes of the IP address.
//
// Sockets: one bound to Config.Local:Config.Port receives and sends, and one
// per entropy in Config.Entropies, bound to Config.Local:entropy, sends only
// (without Entropies, Config.EphemeralEntropies of them on ports the kernel
// picks; link.Info.Ports lists the ports bound, never "any"):
// a socket filter makes the kernel drop every datagram that arrives at an
// entropy port, so that its queue never holds memory nobody reads. Peers
// must therefore send to Port, as the transport always does (destination
// port 4791, or PeerPort when set).
//
// Caveats: frames of one Send batch are grouped by source socket, so frames
// with different entropies may leave in another order than given (they take
// different paths anyway); frames with the same entropy keep their order.
// Send blocks while a socket's send buffer is full (the kernel's
// backpressure). ECN and DSCP survive: the TOS of a sent frame is set per
// datagram and the received TOS is written into the synthesized header. TTL
// and the IPv4 identification are not carried (64 and 0 on receive). The
// RoCEv2 ICRC covers the IPv4 identification and the UDP source port, so a
// frame passes the receiver's ICRC check only if it was encoded with
// identification 0 (the wire codec's default) and a source port the link
// has a socket for (one of Info().Ports, or Port; see
// Counters.TxUnknownEntropy).
//
// Offload (unless Config.NoOffload): Send packs a run of frames of one
// Send batch that leave from the same socket to the same destination with
// the same TOS, all of one UDP payload length but the last (which may be
// shorter), into one UDP_SEGMENT message of at most 64 frames and 64 KiB,
// so the kernel builds and routes one packet where it built one per frame;
// a message the kernel refuses is sent again frame by frame, and a kernel
// without segmentation offload turns it off. The receiving socket asks for
// UDP_GRO: a datagram the kernel delivers coalesced (a peer's
// UDP_SEGMENT message crossing veth or loopback whole, or GRO in a NIC's
// driver) is split back into its frames, the first in place, the others
// copied into buffers of their own; frames beyond the slice given to Recv
// wait for the next Recv. Counters.TxSegmented and RxCoalesced count the
// frames that took each path.
//
// A Link is safe for concurrent use only as link.Link says: one goroutine
// calls Recv, Release, Alloc, Send and Wait; Wake, Close and the counters
// may be called from any goroutine. Close unblocks a pending Wait.
package udp
