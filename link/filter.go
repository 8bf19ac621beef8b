package link

// FilterStats count the frames that a link's filter in the kernel (the
// steering XDP program of an AF_XDP link, package ebpf) dropped before any
// socket, and so any engine, saw them. Counters only grow.
type FilterStats struct {
	// Malformed counts IPv4/IPv6 UDP frames whose IP or UDP header is
	// truncated or inconsistent, a UDP length beyond the frame among them
	// (the kernel would drop them too).
	Malformed uint64
	// Refused counts frames to the transport's port from a source outside
	// the link's allowlist.
	Refused uint64
	// NoRoom counts frames dropped for want of headroom for the arrival
	// stamp.
	NoRoom uint64
}

// FilterStatsReader is implemented by links whose frames pass a filter in
// the kernel before they reach the link (*xdp.Link): their drops are
// counted there, not in Stats. transport.Endpoint.Snapshot reads it.
type FilterStatsReader interface {
	FilterStats() (FilterStats, error)
}
