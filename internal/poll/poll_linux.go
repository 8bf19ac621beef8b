//go:build linux

// Package poll waits on file descriptors through the Go runtime's network
// poller, so that a waiting goroutine parks and gives its thread and P to
// other goroutines, instead of blocking its thread in a system call.
//
// Why: a link's Wait that blocks in ppoll holds its thread; the goroutines
// the engine has just woken (an application's Recv, say) then need another
// thread, and on a virtual machine waking a sleeping thread costs tens of
// microseconds each time. Parked in the poller, the engine hands its P
// straight to them.
//
// Why every wait, short ones too: the runtime looks at its poller only when
// a P runs out of goroutines (or from sysmon, every 10 ms). Threads blocked
// in ppoll never get there, so while some engines of a process sat in short
// ppoll waits (pacing) and others were parked here, a frame for a parked
// engine would go unnoticed for a millisecond or more (link/udp's
// BenchmarkWakeWhilePacing measures it). A
// timeout is therefore a timerfd in the Waiter's epoll set, with the
// kernel's high-resolution timer, not a runtime deadline (whose poller
// sleep rounds up to a millisecond).
//
// Why Wake: the same rule makes a write to an eventfd in the set slow to
// wake a parked waiter while the Ps are busy (an engine whose application
// just posted work would run the post tens of µs later). Wake
// sets the read deadline of the epoll descriptor in the past instead: the
// runtime readies the waiter on the caller's P at once, without a system
// call, and a deadline needs no poller sleep to expire.
package poll

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Waiter waits until one of a set of file descriptors is readable or its
// timeout passes. It is safe for one goroutine to Wait while others call
// Wake on the descriptors.
type Waiter struct {
	f     *os.File // the epoll instance, registered with the runtime poller
	rc    syscall.RawConn
	ep    int   // f's descriptor
	fds   []int // the descriptors New was given
	quiet bool  // fds are in the set without events (Quiet)
	tfd   int   // timerfd in the epoll set
	armed bool  // tfd may expire or has expired since the last settime
	ev    [4]unix.EpollEvent
	// the callbacks given to rc, made once: a closure made per call
	// would allocate.
	ready func(fd uintptr) bool
	look  func(fd uintptr)
	err   error
	// wakes counts Wake calls; seen is the count the last Wait that
	// blocked answered (a Wake after it makes the next Wait return).
	wakes atomic.Uint64
	seen  uint64
}

// New returns a Waiter for the descriptors fds (readability). The caller
// keeps ownership of fds; Close releases only the Waiter's own descriptors.
func New(fds ...int) (*Waiter, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("poll: epoll_create1: %w", err)
	}
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("poll: timerfd_create: %w", err)
	}
	fail := func(err error) (*Waiter, error) {
		unix.Close(tfd)
		unix.Close(ep)
		return nil, err
	}
	for _, fd := range append(fds, tfd) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fail(fmt.Errorf("poll: epoll_ctl: %w", err))
		}
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		return fail(fmt.Errorf("poll: %w", err))
	}
	f := os.NewFile(uintptr(ep), "spray-poll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.Close(tfd)
		return nil, fmt.Errorf("poll: %w", err)
	}
	w := &Waiter{f: f, rc: rc, tfd: tfd, ep: ep, fds: append([]int(nil), fds...)}
	w.ready = func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), w.ev[:], 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	}
	w.look = func(fd uintptr) {
		if _, err := unix.EpollWait(int(fd), w.ev[:], 0); err != nil && err != unix.EINTR {
			w.err = fmt.Errorf("poll: epoll_wait: %w", err)
		}
	}
	return w, nil
}

// Woken reports whether Wake was called since Wait last returned, and
// forgets it: for a caller that sleeps another way (ppoll on an eventfd
// that Wake then writes) and must not miss a Wake that came first. Call it
// from Wait's goroutine, after announcing that other sleep.
func (w *Waiter) Woken() bool {
	if n := w.wakes.Load(); n != w.seen {
		w.seen = n
		return true
	}
	return false
}

// Quiet stops the descriptors from waking the runtime poller until the
// next Wait, which watches them again and returns at once for one that
// became readable meanwhile. For a caller that stops waiting for a while
// (an engine whose application polls its link): every frame that came
// would otherwise wake a thread asleep in the runtime poller, and the
// sender's system call would pay for the wake-up (TestQuietWait). Call
// it from Wait's goroutine, not during a Wait.
func (w *Waiter) Quiet() error {
	if w.quiet {
		return nil
	}
	w.quiet = true
	return w.watch(0)
}

// watch sets the events the epoll set watches on the descriptors.
func (w *Waiter) watch(events uint32) error {
	for _, fd := range w.fds {
		ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
		if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
			return fmt.Errorf("poll: epoll_ctl: %w", err)
		}
	}
	return nil
}

// Wait returns when a descriptor is readable or timeout passes (negative:
// no limit; 0: just look). Spurious returns are allowed. Once Close has
// begun it returns an error (the os package's "use of closed file").
func (w *Waiter) Wait(timeout time.Duration) error {
	if w.quiet {
		// A descriptor readable already is on the set's ready list at
		// once (epoll_ctl looks at it).
		if err := w.watch(unix.EPOLLIN); err != nil {
			return err
		}
		w.quiet = false
	}
	// timerfd_settime clears a pending expiry, so a timer left over from
	// an earlier Wait cannot end this one early.
	switch {
	case timeout > 0:
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(timeout.Nanoseconds())}
		if err := unix.TimerfdSettime(w.tfd, 0, &spec, nil); err != nil {
			return fmt.Errorf("poll: timerfd_settime: %w", err)
		}
		w.armed = true
	case w.armed:
		if err := unix.TimerfdSettime(w.tfd, 0, &unix.ItimerSpec{}, nil); err != nil {
			return fmt.Errorf("poll: timerfd_settime: %w", err)
		}
		w.armed = false
	}
	if timeout == 0 {
		w.err = nil
		if err := w.rc.Control(w.look); err != nil {
			return err
		}
		return w.err
	}
	// Clear the deadline of an earlier Wake before looking at the count:
	// a Wake that comes after the look sets the deadline again.
	if err := w.f.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	if n := w.wakes.Load(); n != w.seen {
		w.seen = n
		return nil
	}
	err := w.rc.Read(w.ready)
	// Whatever ended the wait, it returns after the Wakes counted so far.
	w.seen = w.wakes.Load()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil // Wake
	}
	return err
}

// Wake makes a pending Wait, or the next one, return; safe from any
// goroutine. It wakes the waiting goroutine through the runtime poller's
// deadline, without a system call: the runtime makes it runnable on the
// caller's P at once, where a write to a descriptor in the set would wait
// until some P looks at the poller, which a P busy with runnable goroutines
// does not do.
func (w *Waiter) Wake() {
	w.wakes.Add(1)
	_ = w.f.SetReadDeadline(pastDeadline)
}

// pastDeadline is a deadline that has passed.
var pastDeadline = time.Unix(1, 0)

// Close releases the Waiter; a pending Wait returns. Do not start a Wait
// once Close has begun (the links hold a lock for that): the timerfd's
// number could be reused.
func (w *Waiter) Close() error {
	err := w.f.Close()
	unix.Close(w.tfd)
	return err
}
