// Package nexthop makes the frames of a link that writes whole Ethernet
// frames (AF_XDP, link/raw) reach peers behind routers: it rewrites each
// frame's destination MAC address to that of the next hop the kernel's
// routing and neighbour tables give for the frame's destination IP.
//
// A peer's QPInfo (or the connection manager's REQ/REP) carries the peer's
// own MAC address, which is the right destination only on one L2 segment;
// across a router the frame must go to the router's MAC. A Table, opened
// by the link in the link's network namespace, keeps the answer for every
// destination the link has sent to; a Cache, one per sending goroutine,
// applies it in the transmit path: one comparison per frame against the
// answer it holds for the destination (16 destinations, direct-mapped), a
// map lookup when that is not there or the Table has learnt something
// since, no allocation, no system call.
//
// The first frame to a new destination asks the Table's goroutine to
// resolve it (netlink route get, then the next hop's neighbour entry) and
// waits for the answer at most Config.MissWait; when the neighbour is not
// known yet, the Table makes the kernel resolve it (a netlink neighbour
// request with NTF_USE, or without CAP_NET_ADMIN an empty UDP datagram to
// the destination's discard port, which the kernel routes through the next
// hop) and frames go out unchanged until it answers. The Table follows
// the kernel: it subscribes to route and neighbour notifications, and
// re-resolves every destination when a route changes, and the ones behind
// a neighbour when that entry changes MAC, fails or goes away; every
// Config.Recheck it also re-resolves everything (a notification lost to a
// full socket buffer is then caught up) and asks the kernel to confirm
// next hops whose entry is STALE, as the kernel's own traffic would (frames
// sent over AF_XDP do not refresh neighbour entries).
//
// Frames are left as the caller wrote them when the destination is not
// IPv4 or IPv6 unicast, has no route, is reached through another
// interface than the link's, is local, or lies behind an interface without
// link-layer addresses; when the Table holds MaxEntries destinations
// already (new ones are counted in Stats.Overflow); and until a new
// destination's next hop answers. So a frame to a peer on the link's own
// segment, whose MAC the caller knows, is always right; a frame to a peer
// behind a router is right from the moment the router's MAC is known.
//
// Caveats: policy routing by source address, mark or port is not taken
// into account (the route is the one `ip route get DST` shows). A
// multipath route on the host picks one next hop per destination.
// Destinations are never forgotten before Close.
//
// A Table is safe for concurrent use; a Cache is not (one per goroutine
// that sends). Linux only: elsewhere Open returns ErrNotSupported.
package nexthop
