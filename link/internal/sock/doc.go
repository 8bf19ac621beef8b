// Package sock is the socket plumbing that link/udp and link/raw share: two
// buffer pools behind tagged frame IDs, batched sendmmsg/recvmmsg over
// pre-wired mmsghdr/iovec arrays, Wait/Wake with the runtime poller
// (package internal/poll) and an eventfd, Close and the bookkeeping of the
// file descriptors, and the counters both links keep. Each link keeps only what is its own: how its sockets are opened,
// what a frame looks like on the way in and out, and its extra counters.
//
// Use it for a link.Link over kernel sockets on Linux. On other platforms
// the package holds only Stub, the always-closed link behind the links'
// Open that returns ErrNotSupported.
//
// A Core is not usable as a zero value (see Core.Init) and is safe for
// concurrent use exactly as link.Link says: one goroutine calls Recv,
// Release, Alloc, Send and Wait; Wake, Close and the counters may be called
// from any goroutine.
package sock
