// Package route finds, through netlink, what a link that writes whole
// Ethernet frames (link/raw, AF_XDP) must put in them to reach a peer: the
// egress interface, the source address, the next hop and its MAC address.
//
// Resolve asks the kernel's routing table (as `ip route get` does) and its
// neighbour table; when the next hop's MAC is not known yet it makes the
// kernel resolve it (ARP or neighbour discovery) and waits. Everything
// happens in the network namespace of the calling OS thread: from a
// testbed.Host.Do, or any goroutine locked to a thread in the right
// namespace.
//
// Caveats: Resolve returns what is true now; routes and neighbours change,
// so long-lived users resolve again when a peer stops answering. Resolution
// is triggered by a netlink request (NTF_USE, needs CAP_NET_ADMIN) or, when
// that is refused, by an empty UDP datagram to the next hop's discard port
// (9), which some peers answer with ICMP port unreachable. Policy routing
// by source address or mark is not taken into account.
//
// Errors: errors.Is(err, ErrNoRoute) when the kernel has no route;
// errors.Is(err, ErrNoNeighbour) when the next hop did not answer before ctx
// ended (the error also wraps ctx.Err()).
//
// Resolve is safe for concurrent use.
package route
