// Package pool is a fixed-size pool of equal-sized frame buffers carved from
// one allocation, for the links that own their buffers (link/udp, link/raw,
// and any other link that needs one).
//
// Use it to hand out transmit and receive buffers by index without
// allocating on the hot path. A Pool catches the two mistakes a caller can
// make with an index, a foreign index and a double release, and reports
// them with a typed error instead of corrupting the free list.
//
// A Pool is not safe for concurrent use; a link uses each of its pools from
// the goroutine that drives it.
package pool
