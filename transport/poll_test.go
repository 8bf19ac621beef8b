package transport

import (
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// pollRecv returns c's next message, driving both endpoints with Poll
// only: a Recv with a done context takes what Poll handed over.
func pollRecv(t *testing.T, c *Conn, eps ...*Endpoint) Message {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50_000_000 {
		for _, ep := range eps {
			if _, err := ep.Poll(); err != nil {
				t.Fatalf("Poll: %v", err)
			}
		}
		m, err := c.Recv(done)
		if err == nil {
			return m
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv: %v", err)
		}
	}
	t.Fatal("no message after 50M polls")
	return Message{}
}

// pollCQ returns the next completion of ep's CQ, driving the endpoints
// with Poll only.
func pollCQ(t *testing.T, ep *Endpoint, eps ...*Endpoint) Completion {
	t.Helper()
	var c [1]Completion
	for range 50_000_000 {
		for _, e := range eps {
			if _, err := e.Poll(); err != nil {
				t.Fatalf("Poll: %v", err)
			}
		}
		if ep.CQ().Poll(c[:]) == 1 {
			return c[0]
		}
	}
	t.Fatal("no completion after 50M polls")
	return Completion{}
}

// TestPollPingPong drives a ping-pong of messages of every size class
// with Poll alone, on one goroutine: each message arrives intact (hash),
// each send completes on the CQ, and the endpoints' goroutines stood
// aside while it polled. Then the application stops polling and blocking
// calls still complete: the goroutines took over.
func TestPollPingPong(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed}, Config{Seed: seed})
	defer ea.Close()
	defer eb.Close()
	rng := rand.New(rand.NewPCG(seed, 1))
	sizes := []int{1, 64, 1000, 4096, 9000, 65536, 300_000}
	var id uint64
	for i := range 3 * len(sizes) {
		n := sizes[i%len(sizes)]
		msg := make([]byte, n)
		for k := range msg {
			msg[k] = byte(rng.Uint32())
		}
		want := sha256.Sum256(msg)
		from, to, src := ca, cb, ea
		if i%2 == 1 {
			from, to, src = cb, ca, eb
		}
		id++
		if err := from.Post(context.Background(), WorkRequest{ID: id, Op: OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
		m := pollRecv(t, to, ea, eb)
		if got := sha256.Sum256(m.Data); got != want || m.Len != n {
			t.Fatalf("message %d: %d bytes, hash %x; want %d bytes, %x", i, m.Len, got[:4], n, want[:4])
		}
		m.Release()
		c := pollCQ(t, src, ea, eb)
		if c.ID != id || c.Err != nil {
			t.Fatalf("send %d: completion %d, %v; want %d, nil", i, c.ID, c.Err, id)
		}
	}
	// The goroutines stand aside once they turn while the application
	// polls; more round trips give a loaded host's scheduler the time to
	// run them.
	aside := func() bool {
		return ea.shards[0].asides.Load() > 0 && eb.shards[0].asides.Load() > 0
	}
	for i := 0; i < 100_000 && !aside(); i++ {
		id++
		if err := ca.Post(context.Background(), WorkRequest{ID: id, Op: OpSend, Data: []byte("ping")}); err != nil {
			t.Fatal(err)
		}
		m := pollRecv(t, cb, ea, eb)
		m.Release()
		if c := pollCQ(t, ea, ea, eb); c.ID != id || c.Err != nil {
			t.Fatalf("send %d: completion %d, %v", id, c.ID, c.Err)
		}
	}
	if !aside() {
		t.Errorf("the engine goroutines never stood aside while the application polled: %d, %d times",
			ea.shards[0].asides.Load(), eb.shards[0].asides.Load())
	}
	// No more Poll: the goroutines carry the rest, however long the
	// grace takes to run out.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := []byte("after polling")
	errc := make(chan error, 1)
	go func() { errc <- ca.Send(ctx, msg) }()
	m, err := cb.Recv(ctx)
	if err != nil || string(m.Data) != string(msg) {
		t.Fatalf("Recv after polling: %q, %v", m.Data, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Send after polling: %v", err)
	}
}

// TestPollStopsResumes: an application polls, posts a send and stops
// polling at once; the send completes and the peer receives it without
// another Poll, from the goroutines alone. StopPolling hands back at
// once, and Poll after Close returns ErrClosed.
func TestPollStopsResumes(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed}, Config{Seed: seed})
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, stop := range []bool{false, true} {
		for range 1000 {
			if _, err := ea.Poll(); err != nil {
				t.Fatal(err)
			}
		}
		msg := make([]byte, 100_000)
		for k := range msg {
			msg[k] = byte(k * 7)
		}
		if err := ca.Post(ctx, WorkRequest{ID: 7, Op: OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
		if stop {
			ea.StopPolling()
		}
		m, err := cb.Recv(ctx)
		if err != nil || sha256.Sum256(m.Data) != sha256.Sum256(msg) {
			t.Fatalf("Recv: %d bytes, %v", len(m.Data), err)
		}
		if err := ea.CQ().Wait(ctx); err != nil {
			t.Fatal(err)
		}
		var c [1]Completion
		if ea.CQ().Poll(c[:]) != 1 || c[0].ID != 7 || c[0].Err != nil {
			t.Fatalf("completion %+v", c[0])
		}
	}
	ea.Close()
	if _, err := ea.Poll(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Poll after Close: %v, want ErrClosed", err)
	}
}

// BenchmarkPollPingPong measures the round trip of a 64-byte message and
// its echo between two Endpoints over link/mem driven by Poll alone on
// one goroutine, as a polling libfabric application drives them
// (fi_pingpong with fi_cq_read): time and allocations per round trip.
func BenchmarkPollPingPong(b *testing.B) {
	t := &testing.T{}
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: 1}, Config{Seed: 1})
	defer ea.Close()
	defer eb.Close()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var comps [8]Completion
	recv := func(c *Conn) {
		for {
			ea.Poll()
			eb.Poll()
			ea.CQ().Poll(comps[:])
			eb.CQ().Poll(comps[:])
			if m, err := c.Recv(done); err == nil {
				m.Release()
				return
			}
		}
	}
	msg := make([]byte, 64)
	var id uint64
	b.ReportAllocs()
	for b.Loop() {
		id++
		if err := ca.Post(context.Background(), WorkRequest{ID: id, Op: OpSend, Data: msg}); err != nil {
			b.Fatal(err)
		}
		recv(cb)
		if err := cb.Post(context.Background(), WorkRequest{ID: id, Op: OpSend, Data: msg}); err != nil {
			b.Fatal(err)
		}
		recv(ca)
	}
}

// quietPort is a mem port that counts Quiet calls (link.Quieter).
type quietPort struct {
	*mem.Port
	quiets atomic.Int64
}

func (p *quietPort) Quiet() { p.quiets.Add(1) }

// TestStandAsideQuietsLink: an engine goroutine that stands aside for a
// polling application quiets its link (link.Quieter) before it sleeps,
// and messages still flow both ways, polled and then blocking.
func TestStandAsideQuietsLink(t *testing.T) {
	seed := testutil.Seed(t)
	_, pa, pb := memPorts(t, mem.Config{Seed: seed})
	qa := &quietPort{Port: pa}
	ea, err := NewEndpoint(qa, Config{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := NewEndpoint(pb, Config{Seed: seed + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ca, cb := connectQPs(context.Background(), t, ea, eb)
	var id uint64
	for i := 0; i < 100_000 && ea.shards[0].asides.Load() == 0; i++ {
		id++
		if err := ca.Post(context.Background(), WorkRequest{ID: id, Op: OpSend, Data: []byte("ping")}); err != nil {
			t.Fatal(err)
		}
		m := pollRecv(t, cb, ea, eb)
		if string(m.Data) != "ping" {
			t.Fatalf("message %d: %q", id, m.Data)
		}
		m.Release()
		if c := pollCQ(t, ea, ea, eb); c.ID != id || c.Err != nil {
			t.Fatalf("send %d: completion %d, %v", id, c.ID, c.Err)
		}
	}
	if n := ea.shards[0].asides.Load(); n == 0 {
		t.Fatal("the engine goroutine never stood aside while the application polled")
	}
	if qa.quiets.Load() == 0 {
		t.Fatal("the engine goroutine stood aside without quieting its link")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- cb.Send(ctx, []byte("pong")) }()
	m, err := ca.Recv(ctx)
	if err != nil || string(m.Data) != "pong" {
		t.Fatalf("Recv after polling: %q, %v", m.Data, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Send after polling: %v", err)
	}
}
