package xdp_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/xdp"
)

// TestBlockBesideRings: while one goroutine sleeps in Block (after
// PrepareWait under a lock, as the transport's engine does), another moves
// frames through the same socket's rings under that lock; every frame
// arrives once and intact, Block returns for frames and for Wake, and the
// race detector sees no shared ring state.
func TestBlockBesideRings(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{})
	sb := b.open(t, xdp.Config{})
	var _ link.WaitSplitter = sa

	const total = 4000
	var (
		mu       sync.Mutex
		seen     [total]int
		got      int
		bad      int
		stop     atomic.Bool
		sleeping atomic.Bool // in Block, or about to enter it
	)
	rx := make([]link.Frame, 64)
	take := func() { // under mu
		n, err := sa.Recv(rx)
		if err != nil {
			t.Error(err)
			return
		}
		for _, f := range rx[:n] {
			seq, dir, ok := parseFrame(f.Buf)
			if !ok || dir != 1 || seq >= total {
				bad++
				continue
			}
			seen[seq]++
			got++
		}
		sa.Release(rx[:n])
	}
	done := make(chan error, 1)
	go func() {
		for {
			mu.Lock()
			take()
			if stop.Load() {
				mu.Unlock()
				done <- nil
				return
			}
			timeout, ready, err := sa.PrepareWait(-1)
			mu.Unlock()
			if err != nil {
				done <- err
				return
			}
			if !ready {
				sleeping.Store(true)
				err := sa.Block(timeout)
				sleeping.Store(false)
				if err != nil {
					done <- err
					return
				}
			}
		}
	}()

	fs := make([]link.Frame, 16)
	back := 0
	deadline := time.Now().Add(30 * time.Second)
	// asleep waits until the other goroutine sleeps in Block, which with
	// nothing sent it must. The transfer pauses for it every 1000 frames, so
	// that frames move beside a sleeping Block however the scheduler runs the
	// two goroutines.
	asleep := func() {
		for !sleeping.Load() {
			if time.Now().After(deadline) {
				t.Fatal("the waiting goroutine never blocked")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	for sent := 0; sent < total && time.Now().Before(deadline); {
		if sent%1000 < len(fs) {
			asleep()
		}
		k := sb.Alloc(fs[:min(len(fs), total-sent)])
		for i := range k {
			fs[i].Buf = fs[i].Buf[:buildFrame(fs[i].Buf, a.mac, b.mac, uint64(sent+i), 1)]
		}
		if q, err := sb.Send(fs[:k]); err != nil || q != k {
			t.Fatalf("Send = %d of %d, %v", q, k, err)
		}
		sent += k
		if k == 0 {
			sb.Wait(time.Millisecond)
		}
		// The rings of the socket the other goroutine sleeps on: a frame
		// back to b, and a look for received ones.
		mu.Lock()
		if sa.Alloc(fs[:1]) == 1 {
			fs[0].Buf = fs[0].Buf[:buildFrame(fs[0].Buf, b.mac, a.mac, uint64(back), 0)]
			if q, err := sa.Send(fs[:1]); err != nil || q != 1 {
				t.Errorf("Send back = %d, %v", q, err)
			}
			back++
		}
		take()
		mu.Unlock()
		if sent%256 == 0 {
			sa.Wake()
		}
	}
	for {
		mu.Lock()
		n := got + bad
		mu.Unlock()
		if n >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	sa.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Block still sleeping 30 s after Wake")
	}
	if got != total || bad != 0 {
		t.Fatalf("received %d of %d frames, %d malformed", got, total, bad)
	}
	for seq, n := range seen {
		if n != 1 {
			t.Fatalf("frame %d received %d times", seq, n)
		}
	}
	// Every frame a sent while the other goroutine slept reached b.
	backGot := 0
	for end := time.Now().Add(10 * time.Second); backGot < back && time.Now().Before(end); {
		n, err := sb.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		backGot += n
		sb.Release(rx[:n])
		if n == 0 {
			sb.Wait(time.Millisecond)
		}
	}
	if backGot != back {
		t.Errorf("b received %d of the %d frames a sent", backGot, back)
	}
}
