//go:build linux

// Package poll waits on file descriptors through the Go runtime's network
// poller, so that a waiting goroutine parks and gives its thread and P to
// other goroutines, instead of blocking its thread in a system call.
//
// Why: a link's Wait that blocks in ppoll holds its thread; the goroutines
// the engine has just woken (an application's Recv, say) then need another
// thread, and on a virtual machine waking a sleeping thread costs tens of
// microseconds each time. Parked in the poller, the engine hands its P
// straight to them. The poller's timers are coarse (about a millisecond), so
// links use this for long or unlimited waits and ppoll for short, precise
// ones.
package poll

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Precise is the longest wait that links should do with ppoll rather than
// with a Waiter: the runtime poller's timers are about this coarse.
const Precise = time.Millisecond

// Waiter waits until one of a set of file descriptors is readable. It is
// safe for one goroutine to Wait while others call Wake.
type Waiter struct {
	f  *os.File // the epoll instance, registered with the runtime poller
	rc syscall.RawConn
	ev [4]unix.EpollEvent
}

// New returns a Waiter for the descriptors fds (readability). The caller
// keeps ownership of fds; Close releases only the Waiter's own descriptor.
func New(fds ...int) (*Waiter, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("poll: epoll_create1: %w", err)
	}
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(ep)
			return nil, fmt.Errorf("poll: epoll_ctl: %w", err)
		}
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("poll: %w", err)
	}
	f := os.NewFile(uintptr(ep), "spray-poll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("poll: %w", err)
	}
	return &Waiter{f: f, rc: rc}, nil
}

// Wait returns when a descriptor is readable or timeout passes (negative:
// no limit). Spurious returns are allowed. After Close it returns an error
// wrapping os.ErrClosed.
func (w *Waiter) Wait(timeout time.Duration) error {
	var dl time.Time
	if timeout >= 0 {
		dl = time.Now().Add(timeout)
	}
	if err := w.f.SetReadDeadline(dl); err != nil {
		return err
	}
	err := w.rc.Read(func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), w.ev[:], 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

// Close releases the Waiter; a pending Wait returns.
func (w *Waiter) Close() error { return w.f.Close() }
