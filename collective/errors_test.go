package collective_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// TestCommErrors checks both Comms: bad peers, cancelled and closed calls.
func TestCommErrors(t *testing.T) {
	for _, mk := range []func(*testing.T, int) world{tcpWorld, func(t *testing.T, n int) world { return sprayWorld(t, n, collectivetest.SprayConfig{}) }} {
		t.Run("", func(t *testing.T) {
			w := mk(t, 2)
			a, b := w.comms[0], w.comms[1]
			ctx := context.Background()
			for _, peer := range []int{-1, 0, 2} {
				if err := a.Send(ctx, peer, nil); !isInvalid(err) {
					t.Errorf("%s: Send to %d: %v, want ErrInvalid", w.name, peer, err)
				}
				if _, err := a.Recv(ctx, peer); !isInvalid(err) {
					t.Errorf("%s: Recv from %d: %v, want ErrInvalid", w.name, peer, err)
				}
			}
			// A message crosses, then Recv times out with nothing to read.
			if err := a.Send(ctx, 1, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			if m, err := b.Recv(ctx, 0); err != nil || string(m) != "hi" {
				t.Fatalf("%s: got %q, %v", w.name, m, err)
			}
			tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			if _, err := b.Recv(tctx, 0); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: Recv with nothing sent: %v, want DeadlineExceeded", w.name, err)
			}
			// A Recv that timed out without a byte leaves the stream intact.
			if err := a.Send(ctx, 1, []byte("again")); err != nil {
				t.Fatal(err)
			}
			if m, err := b.Recv(ctx, 0); err != nil || string(m) != "again" {
				t.Fatalf("%s: after a timed-out Recv: %q, %v", w.name, m, err)
			}
			// Close unblocks a pending Recv.
			errc := make(chan error, 1)
			go func() { _, err := a.Recv(ctx, 1); errc <- err }()
			time.Sleep(10 * time.Millisecond)
			a.Close()
			a.Close()
			if err := <-errc; !errors.Is(err, net.ErrClosed) {
				t.Fatalf("%s: pending Recv after Close: %v, want net.ErrClosed", w.name, err)
			}
			if err := a.Send(ctx, 1, nil); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("%s: Send after Close: %v, want net.ErrClosed", w.name, err)
			}
		})
	}
}

func TestTCPMessageBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := collectivetest.TCP(ctx, 2, TCPConfig{MaxMessage: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	defer cs[1].Close()
	if err := cs[0].Send(ctx, 1, make([]byte, 17)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs[1].Recv(ctx, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if _, err := cs[1].Recv(ctx, 0); !errors.Is(err, ErrBroken) {
		t.Fatalf("after a failed Recv: %v, want ErrBroken", err)
	}
}

// TestMismatch: ranks that pass different lengths get ErrMismatch, not
// wrong results. A rank that saw the mismatch first may cancel its own
// send, so its partner may only see its context end.
func TestMismatch(t *testing.T) {
	for _, mk := range []func(*testing.T, int) world{tcpWorld, func(t *testing.T, n int) world { return sprayWorld(t, n, collectivetest.SprayConfig{}) }} {
		w := mk(t, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for r, c := range w.comms {
			wg.Go(func() {
				x := make([]float32, 4+4*r)
				errs[r] = AllReduce(ctx, c, x, x, Sum, nil)
			})
		}
		wg.Wait()
		if !errors.Is(errs[0], ErrMismatch) && !errors.Is(errs[1], ErrMismatch) {
			t.Errorf("%s: errors %v, want ErrMismatch", w.name, errs)
		}
		for r, err := range errs {
			if !errors.Is(err, ErrMismatch) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s rank %d: %v, want ErrMismatch or DeadlineExceeded", w.name, r, err)
			}
		}
	}
}

// TestAbsentRank: a collective whose partner never comes returns the
// context's error and leaves no goroutine behind.
func TestAbsentRank(t *testing.T) {
	w := tcpWorld(t, 3)
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	buf := make([]float64, 3<<18) // large: the sends block in the kernel
	if err := AllToAll(ctx, w.comms[0], buf, make([]float64, len(buf)), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AllToAll: %v, want DeadlineExceeded", err)
	}
	if err := Broadcast(context.Background(), w.comms[0], buf, 5, nil); !isInvalid(err) {
		t.Fatalf("Broadcast from root 5: %v", err)
	}
	if err := AllReduce(context.Background(), w.comms[0], buf, buf, Op(7), nil); !isInvalid(err) {
		t.Fatalf("AllReduce with op 7: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left behind", runtime.NumGoroutine()-base)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBarrier: after Barrier returns on any rank, every rank has entered it.
func TestBarrier(t *testing.T) {
	for _, p := range worldSizes {
		for _, w := range []world{tcpWorld(t, p), sprayWorld(t, p, collectivetest.SprayConfig{})} {
			for round := range 3 {
				var entered atomic.Int32
				w.run(t, func(ctx context.Context, r int, c Comm) error {
					time.Sleep(time.Duration(r*round) * time.Millisecond)
					entered.Add(1)
					if err := Barrier(ctx, c); err != nil {
						return err
					}
					if n := entered.Load(); n != int32(p) {
						return fmt.Errorf("%s: left the barrier with %d of %d ranks in", w.name, n, p)
					}
					return nil
				})
			}
		}
	}
}

// TestRoCEProfile runs collectives over QPs of the classic RoCE profile
// (Go-Back-N, one path) on a lossy fabric.
func TestRoCEProfile(t *testing.T) {
	seed := testutil.Seed(t)
	rng := testutil.Rand(t)
	w := sprayWorld(t, 3, collectivetest.SprayConfig{
		Fabric:    mem.Config{Seed: seed, Loss: 0.005},
		Transport: transport.Config{Profile: transport.RoCE, Seed: seed, MinRTO: time.Millisecond},
	})
	checkAllReduce[float64](t, w, rng, 30000, Sum, nil)
	checkAllGather[int32](t, w, rng, 5000, nil)
}
