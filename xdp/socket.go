package xdp

import (
	"sync"
	"sync/atomic"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/nexthop"
)

// Socket is one AF_XDP socket bound to one queue of one device, with its own
// UMEM split into an RX and a TX pool. It implements link.Link.
//
// The zero value is not usable: get a Socket from Open. Close and Wake are
// safe to call from any goroutine, and so is Stats; Recv, Release, Alloc,
// Send and Wait must be called from one goroutine at a time (the engine
// loop that owns the queue). Frames handed out by Recv and Alloc point into
// the UMEM, which Close unmaps: do not touch them after Close.
type Socket struct {
	// mu is read-held by every call that touches the rings or the file
	// descriptors and write-held by Close while it releases them, so that
	// no call ever sees an unmapped ring or a reused descriptor number.
	mu        sync.RWMutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	c     core
	cfg   Config
	info  link.Info
	mode  Mode
	sys   sysSocket
	final kernelStats // kernel counters as they were at Close
	// hop writes each sent frame's next hop MAC (a Link's sockets, unless
	// LinkConfig.KeepDstMAC); nil leaves frames alone.
	hop *nexthop.Cache
}

var (
	_ link.Link = (*Socket)(nil)
)

// Info describes the socket. FrameSize is Config.MaxFrame: by default
// Config.FrameSize minus the 256 bytes of headroom that the kernel keeps in
// front of received frames (and minus StampLen on a Stamped socket).
func (s *Socket) Info() link.Info { return s.info }

// Queue returns the device queue the socket is bound to.
func (s *Socket) Queue() int { return s.cfg.Queue }

// Mode returns the mode the socket is bound in: Copy or ZeroCopy.
func (s *Socket) Mode() Mode { return s.mode }

// Recv fills fs with received frames and returns how many. Frame.Buf is a
// slice of the UMEM holding the frame, Frame.ID its UMEM address. On a
// Stamped socket Frame.RxTime is the frame's arrival time (CLOCK_MONOTONIC
// ns, from the steering program's stamp, which Buf does not include); 0
// otherwise. It never blocks.
func (s *Socket) Recv(fs []link.Frame) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, link.ErrClosed
	}
	if err := s.c.flushDue(); err != nil {
		return 0, err
	}
	return s.c.recv(fs), nil
}

// Release returns received frames to the RX pool: onto the fill ring, where
// the kernel receives into them again. Frames not held from Recv are
// ignored and counted (Stats.BadReleases).
func (s *Socket) Release(fs []link.Frame) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.c.release(fs)
}

// Alloc fills fs with free TX frames (each Buf is Info().FrameSize long) and
// returns how many. It first reaps completions when the free list is short.
// Fewer than len(fs) means the TX pool is exhausted: Wait, then Alloc again.
func (s *Socket) Alloc(fs []link.Frame) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0
	}
	return s.c.alloc(fs)
}

// Send puts the frames on the TX ring and kicks the kernel when it asks for
// it (or always, with need_wakeup off). Each Buf must lie within the frame
// that Alloc gave with that ID (it may start after the frame's start) and
// be 14 to Info().FrameSize bytes long; other frames are dropped and
// counted. When the TX ring is full the rest are dropped and counted too.
// Send takes back every frame; it returns how many it queued, and an error
// only when the kernel refused a kick for a reason other than being busy.
// The sockets of a Link write each frame's next hop MAC first (see
// LinkConfig.KeepDstMAC); a Socket from Open sends frames as they are.
func (s *Socket) Send(fs []link.Frame) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, link.ErrClosed
	}
	if s.hop != nil {
		for i := range fs {
			s.hop.Rewrite(fs[i].Buf)
		}
	}
	return s.c.send(fs)
}

// BusyPollState is what the kernel made of Config.BusyPoll, as
// Socket.BusyPoll reads it back.
type BusyPollState struct {
	// Requested is Config.BusyPoll.
	Requested bool
	// Usecs and Prefer are SO_BUSY_POLL and SO_PREFER_BUSY_POLL as the
	// socket holds them (20 and true when Requested). The kernel does not
	// read SO_BUSY_POLL_BUDGET back.
	Usecs  int
	Prefer bool
	// NapiID is the NAPI instance (device queue) that busy polling
	// drives, SO_INCOMING_NAPI_ID: the kernel records it when the first
	// frame arrives. 0 after that means there is none to poll and the
	// options do nothing; so it is on veth, whose native XDP hands AF_XDP
	// no NAPI instance in copy mode, and there a busy-polling Recv makes
	// no system call for it.
	NapiID uint32
}

// Flush kicks the kernel for the frames that Send left on the TX ring
// (Config.KickDelay). Recv and Wait do it too once it is due; a caller
// that stops calling them after a Send calls Flush, or Close, which
// flushes too.
func (s *Socket) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return link.ErrClosed
	}
	return s.c.flushTx()
}

// Stats returns the socket's counters. After Close it returns the counters
// as they were at Close.
func (s *Socket) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var st Stats
	s.c.stats(&st)
	k := s.final
	if !s.closed.Load() {
		if kk, err := s.sys.kernelStats(); err == nil {
			k = kk
		}
	}
	st.addKernel(k)
	return st
}
