//go:build linux

package poll

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func eventfd(t *testing.T) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func newWaiter(t *testing.T, fds ...int) *Waiter {
	t.Helper()
	w, err := New(fds...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// waitAsync runs w.Wait(timeout) and returns its result channel.
func waitAsync(w *Waiter, timeout time.Duration) chan error {
	done := make(chan error, 1)
	go func() { done <- w.Wait(timeout) }()
	return done
}

func TestWaitTimeoutReturns(t *testing.T) {
	w := newWaiter(t, eventfd(t))
	defer w.Close()
	// Short and sub-millisecond timeouts come back with nothing readable
	// (the timerfd), over and over (each Wait re-arms it).
	for _, d := range []time.Duration{50 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond, 0} {
		for range 3 {
			select {
			case err := <-waitAsync(w, d):
				if err != nil {
					t.Fatalf("Wait(%v): %v", d, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Wait(%v) did not return", d)
			}
		}
	}
}

func TestWaitWakesOnReadable(t *testing.T) {
	efd := eventfd(t)
	w := newWaiter(t, efd)
	defer w.Close()
	// A timed Wait first leaves an armed timer behind; the untimed one
	// after it must still return when the descriptor becomes readable.
	if err := w.Wait(time.Microsecond); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-1, time.Hour} {
		done := waitAsync(w, d)
		time.Sleep(10 * time.Millisecond)
		if _, err := unix.Write(efd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Wait(%v): %v", d, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Wait(%v) missed the readable descriptor", d)
		}
		var b [8]byte
		if _, err := unix.Read(efd, b[:]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCloseEndsWait(t *testing.T) {
	w := newWaiter(t, eventfd(t))
	done := waitAsync(w, -1)
	time.Sleep(10 * time.Millisecond)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Wait ended by Close returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the pending Wait")
	}
	if err := w.Wait(-1); err == nil {
		t.Fatal("Wait after Close returned no error")
	}
}

func TestWakeEndsWait(t *testing.T) {
	w := newWaiter(t, eventfd(t))
	defer w.Close()
	for _, d := range []time.Duration{-1, time.Hour} {
		// A pending Wait returns, without an error, and the next one waits
		// again (the deadline Wake used is cleared).
		done := waitAsync(w, d)
		time.Sleep(10 * time.Millisecond)
		w.Wake()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Wait(%v) ended by Wake: %v", d, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Wake did not end the pending Wait(%v)", d)
		}
		if err := w.Wait(20 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// A Wake with no Wait pending ends the next Wait at once.
		w.Wake()
		select {
		case err := <-waitAsync(w, d):
			if err != nil {
				t.Fatalf("Wait(%v) after Wake: %v", d, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a Wake before Wait(%v) was lost", d)
		}
		done = waitAsync(w, d)
		select {
		case <-done:
			t.Fatalf("Wait(%v) returned with nothing readable and no Wake", d)
		case <-time.After(20 * time.Millisecond):
		}
		w.Wake() // one Wait at a time: end this one before the next
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestWokenTakesTheWake: a Wake is seen once, by Woken or by the next
// Wait: Woken reports it and forgets it, so that the Wait after it sleeps.
func TestWokenTakesTheWake(t *testing.T) {
	w := newWaiter(t, eventfd(t))
	defer w.Close()
	if w.Woken() {
		t.Fatal("Woken before any Wake")
	}
	w.Wake()
	if !w.Woken() {
		t.Fatal("Woken missed a Wake")
	}
	if w.Woken() {
		t.Fatal("Woken reported one Wake twice")
	}
	done := waitAsync(w, -1)
	select {
	case <-done:
		t.Fatal("Wait returned for a Wake that Woken took")
	case <-time.After(20 * time.Millisecond):
	}
	w.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not end the pending Wait")
	}
}

// TestQuietWait: after Quiet a descriptor that becomes readable does not
// make the Waiter's epoll set ready (nothing wakes the runtime poller),
// and the next Wait watches it again and returns for it, though it
// became readable before the Wait began.
func TestQuietWait(t *testing.T) {
	efd := eventfd(t)
	w := newWaiter(t, efd)
	defer w.Close()
	if err := w.Quiet(); err != nil {
		t.Fatal(err)
	}
	if err := w.Quiet(); err != nil { // again: nothing to do
		t.Fatal(err)
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if _, err := unix.Write(efd, one); err != nil {
		t.Fatal(err)
	}
	var ev [4]unix.EpollEvent
	if n, err := unix.EpollWait(w.ep, ev[:], 0); n != 0 || err != nil {
		t.Fatalf("quiet epoll set: %d ready, %v; want 0", n, err)
	}
	select {
	case err := <-waitAsync(w, -1):
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Wait after Quiet did not return for a descriptor readable before it")
	}
	if n, err := unix.EpollWait(w.ep, ev[:], 0); n != 1 || err != nil {
		t.Fatalf("epoll set after Wait: %d ready, %v; want 1", n, err)
	}
}
