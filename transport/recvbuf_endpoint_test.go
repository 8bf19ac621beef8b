package transport

import (
	"context"
	"errors"
	"math"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestEndpointPostRecv receives over Endpoints into buffers posted with
// PostRecv (a ring of four, reposted as Recv returns each) and with
// Post(OpPostRecv) (completions on the CQ), under loss and reordering, in
// both profiles: every message arrives byte-exact in its own buffer.
func TestEndpointPostRecv(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed, Loss: 0.01, Reorder: 0.2, ReorderDelay: 20 * time.Microsecond},
				Config{Profile: prof, Seed: seed, MinRTO: time.Millisecond})
			defer ea.Close()
			defer eb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			msgs := randomMessages(testutil.Rand(t), 40, 100<<10)
			ring := make([][]byte, 4)
			for i := range ring {
				ring[i] = make([]byte, 100<<10)
				if err := cb.PostRecv(ctx, ring[i]); err != nil {
					t.Fatal(err)
				}
			}
			sent := make(chan error, 1)
			go func() {
				for _, m := range msgs {
					if err := ca.Send(ctx, m); err != nil {
						sent <- err
						return
					}
				}
				sent <- nil
			}()
			for i, want := range msgs {
				m, err := cb.Recv(ctx)
				if err != nil {
					select {
					case serr := <-sent:
						t.Fatalf("recv %d: %v (sender: %v)", i, err, serr)
					default:
						t.Fatalf("recv %d: %v", i, err)
					}
				}
				b := ring[i%len(ring)]
				if hash(m.Data) != hash(want) || (len(m.Data) > 0 && &m.Data[0] != &b[0]) {
					t.Fatalf("message %d: %d bytes, want %d, in its buffer %v", i, len(m.Data), len(want), len(m.Data) > 0 && &m.Data[0] == &b[0])
				}
				m.Release() // nothing to give back: the buffer is ours
				if err := cb.PostRecv(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}

			// Buffers posted with Post complete on the CQ, with their IDs,
			// after the four posted with PostRecv.
			for i := range 4 {
				if err := cb.Post(ctx, WorkRequest{ID: uint64(100 + i), Op: OpPostRecv, Data: make([]byte, 100<<10)}); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range msgs[:8] {
				if err := ca.Send(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 4 {
				if m, err := cb.Recv(ctx); err != nil || hash(m.Data) != hash(msgs[i]) {
					t.Fatalf("recv %d: %v", i, err)
				}
			}
			var got []Completion
			for len(got) < 4 {
				if err := eb.CQ().Wait(ctx); err != nil {
					t.Fatal(err)
				}
				c := make([]Completion, 4)
				got = append(got, c[:eb.CQ().Poll(c)]...)
			}
			for i, c := range got {
				if c.ID != uint64(100+i) || c.Op != OpRecv || c.Err != nil || hash(c.Data) != hash(msgs[4+i]) {
					t.Fatalf("CQ completion %d: id %d op %v err %v", i, c.ID, c.Op, c.Err)
				}
			}
		})
	}
	testutil.WaitGoroutines(t, base)
}

// TestEndpointPostRecvDestroy destroys and closes with buffers posted and
// a Recv waiting: the Recv returns an error wrapping net.ErrClosed, the
// buffers posted with Post complete on the CQ with ErrFlushed, and no
// goroutine is left.
func TestEndpointPostRecvDestroy(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed}, Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []*Conn{ca, cb} {
		if err := c.PostRecv(ctx, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		if err := c.Post(ctx, WorkRequest{ID: 7, Op: OpPostRecv, Data: make([]byte, 100)}); err != nil {
			t.Fatal(err)
		}
	}
	recvd := make(chan error, 2)
	for _, c := range []*Conn{ca, cb} {
		go func() {
			_, err := c.Recv(ctx)
			recvd <- err
		}()
	}
	time.Sleep(time.Millisecond)
	if _, err := cb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-recvd; !errors.Is(err, ErrDestroyed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv on the destroyed Conn: %v, want ErrDestroyed", err)
	}
	if err := eb.CQ().Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c := make([]Completion, 2)
	if n := eb.CQ().Poll(c); n != 1 || c[0].ID != 7 || !errors.Is(c[0].Err, ErrFlushed) {
		t.Fatalf("CQ after Destroy: %d completions, %+v; want buffer 7 flushed", n, c[0])
	}
	if err := cb.PostRecv(ctx, make([]byte, 100)); err == nil {
		t.Fatal("PostRecv on a destroyed Conn succeeded")
	}
	ea.Close()
	if err := <-recvd; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv on a closed Endpoint: %v, want net.ErrClosed", err)
	}
	if err := ca.PostRecv(ctx, make([]byte, 100)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("PostRecv on a closed Endpoint: %v", err)
	}
	eb.Close()
	testutil.WaitGoroutines(t, base)
}

// BenchmarkEndpointPostedRecv is a steady loop over two Endpoints on
// link/mem and the real clock: post a 64 KiB buffer, Send a message into
// it, Recv it. Allocations per op include the sender's blocking Send.
func BenchmarkEndpointPostedRecv(b *testing.B) {
	for _, prof := range []Profile{Spray, RoCE} {
		b.Run(prof.String(), func(b *testing.B) {
			fab := mem.NewFabric(mem.Config{Seed: 1}, clock.NewSystem())
			defer fab.Close()
			pa, _ := fab.NewPort(macA, ipA)
			pb, _ := fab.NewPort(macB, ipB)
			ea, err := NewEndpoint(pa, Config{Profile: prof, Seed: 1, MTU: 9014})
			if err != nil {
				b.Fatal(err)
			}
			defer ea.Close()
			eb, err := NewEndpoint(pb, Config{Profile: prof, Seed: 2, MTU: 9014})
			if err != nil {
				b.Fatal(err)
			}
			defer eb.Close()
			ctx := context.Background()
			ca, _ := ea.CreateQP(ctx)
			cb, _ := eb.CreateQP(ctx)
			if err := ca.Connect(ctx, cb.Info()); err != nil {
				b.Fatal(err)
			}
			if err := cb.Connect(ctx, ca.Info()); err != nil {
				b.Fatal(err)
			}
			msg := make([]byte, 64<<10)
			buf := make([]byte, len(msg))
			round := func() {
				if err := cb.PostRecv(ctx, buf); err != nil {
					b.Fatal(err)
				}
				if err := ca.Send(ctx, msg); err != nil {
					b.Fatal(err)
				}
				if m, err := cb.Recv(ctx); err != nil || m.Len != len(msg) {
					b.Fatal(err)
				}
			}
			for range 100 {
				round()
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				round()
			}
		})
	}
}

// TestEndpointRecvNoAllocs guards the Endpoint's receive calls: PostRecv
// and Recv allocate nothing. The messages are sent (and acknowledged)
// first, so that the sender's blocking Send, which allocates, runs outside
// the measurement; the Spray receiver holds them until their buffers come.
func TestEndpointRecvNoAllocs(t *testing.T) {
	testutil.SkipIfInstrumented(t)
	seed := testutil.Seed(t)
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed}, Config{Seed: seed})
	defer ea.Close()
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := randomMessages(testutil.Rand(t), 3, 16<<10)[1]
	const n = 50
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, len(msg))
	}
	round := func(post bool) {
		for i := range n {
			if post {
				if err := cb.PostRecv(ctx, bufs[i]); err != nil {
					t.Fatal(err)
				}
			}
			if err := ca.Post(ctx, WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: msg}); err != nil {
				t.Fatal(err)
			}
		}
	}
	recv := func() {
		for i := range n {
			if err := cb.PostRecv(ctx, bufs[i]); err != nil {
				t.Fatal(err)
			}
			m, err := cb.Recv(ctx)
			if err != nil || hash(m.Data) != hash(msg) || &m.Data[0] != &bufs[i][0] {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	sent := func() {
		for got := 0; got < n; {
			if err := ea.CQ().Wait(ctx); err != nil {
				t.Fatal(err)
			}
			var c [n]Completion
			k := ea.CQ().Poll(c[:])
			for _, comp := range c[:k] {
				if comp.Err != nil {
					t.Fatal(comp.Err)
				}
			}
			got += k
		}
	}
	// Warm up: buffers posted as messages arrive, then held messages.
	round(true)
	sent()
	for range n {
		if _, err := cb.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	round(false)
	sent()
	recv()

	// The counts are the process's: the runtime allocates now and then
	// for goroutines that block in a select (link/mem's Wait, Recv), in
	// bursts, more often on a loaded machine. The least of up to 20 trials
	// shows what the calls allocate: a call that allocates adds at least
	// n to every trial.
	var least uint64 = math.MaxUint64
	var counts []uint64
	for trial := 0; trial < 20 && least != 0; trial++ {
		round(false)
		sent()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		recv()
		runtime.ReadMemStats(&after)
		counts = append(counts, after.Mallocs-before.Mallocs)
		least = min(least, after.Mallocs-before.Mallocs)
	}
	if least != 0 {
		t.Fatalf("allocations in %d PostRecv and Recv calls, per trial: %v; want 0", n, counts)
	}
}
