package transport

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
)

// endpointPair is two Endpoints over a link/mem fabric on the real clock.
func endpointPair(t *testing.T, mc mem.Config, cfg Config) (*mem.Fabric, *Endpoint, *Endpoint, *Conn, *Conn) {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = testutil.Seed(t)
	}
	fab, pa, pb := memPorts(t, mc)
	ea, err := NewEndpoint(pa, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed++
	eb, err := NewEndpoint(pb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ca, cb := connectQPs(ctx, t, ea, eb)
	return fab, ea, eb, ca, cb
}

// memPorts returns a link/mem fabric on the system clock with ports A and
// B on it.
func memPorts(t *testing.T, mc mem.Config) (*mem.Fabric, *mem.Port, *mem.Port) {
	t.Helper()
	fab := mem.NewFabric(mc, clock.NewSystem())
	pa, err := fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	return fab, pa, pb
}

// connectQPs creates a QP on each endpoint and connects them to each other.
func connectQPs(ctx context.Context, t *testing.T, ea, eb *Endpoint) (*Conn, *Conn) {
	t.Helper()
	ca, err := ea.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := eb.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Connect(ctx, cb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := cb.Connect(ctx, ca.Info()); err != nil {
		t.Fatal(err)
	}
	return ca, cb
}

func TestEndpointSendRecv(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed, Loss: 0.01, Reorder: 0.2, ReorderDelay: 20 * time.Microsecond},
				Config{Profile: prof, Seed: seed, MinRTO: time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			msgs := randomMessages(testutil.Rand(t), 200, 256<<10)
			errc := make(chan error, 1)
			go func() {
				for _, m := range msgs {
					if err := ca.Send(ctx, m); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for i, want := range msgs {
				got, err := cb.Recv(ctx)
				if err != nil {
					t.Fatalf("recv %d: %v", i, err)
				}
				if hash(got.Data) != hash(want) {
					t.Fatalf("message %d: %d bytes, want %d, contents differ", i, len(got.Data), len(want))
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			// Asynchronous posts complete on the CQ with their IDs.
			for i := range 10 {
				if err := ca.Post(ctx, WorkRequest{ID: uint64(100 + i), Op: OpSendImm, Data: msgs[i], Imm: uint32(i)}); err != nil {
					t.Fatal(err)
				}
			}
			var comps [16]Completion
			seen := 0
			for seen < 10 {
				if err := ea.CQ().Wait(ctx); err != nil {
					t.Fatal(err)
				}
				n := ea.CQ().Poll(comps[:])
				for _, c := range comps[:n] {
					if c.Err != nil || c.ID != uint64(100+seen) {
						t.Fatalf("completion %+v, want ID %d without error", c, 100+seen)
					}
					seen++
				}
			}
			for i := range 10 {
				m, err := cb.Recv(ctx)
				if err != nil || !m.HasImm || m.Imm != uint32(i) || hash(m.Data) != hash(msgs[i]) {
					t.Fatalf("recv-imm %d: %+v %v", i, m.Imm, err)
				}
			}
			ea.Close()
			eb.Close()
			if err := ca.Send(ctx, []byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Send after Close: %v, want net.ErrClosed", err)
			}
			if _, err := cb.Recv(ctx); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Recv after Close: %v, want net.ErrClosed", err)
			}
		})
	}
	testutil.WaitGoroutines(t, base)
}

// TestDeadPeer: a peer that stops answering makes a blocking Send fail with
// ErrPeerUnreachable (not a context timeout), and nothing is left running.
func TestDeadPeer(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	fab, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed},
		Config{Seed: seed, MinRTO: time.Millisecond, MaxRTO: 20 * time.Millisecond, MaxRetries: 5})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ca.Send(ctx, make([]byte, 10000)); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	fab.Blackhole(true)
	start := time.Now()
	err := ca.Send(ctx, make([]byte, 10000))
	if !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("Send to a dead peer: %v, want ErrPeerUnreachable", err)
	}
	t.Logf("dead peer detected after %v: %v", time.Since(start), err)
	// The QP stays failed.
	if err := ca.Send(ctx, []byte("again")); !errors.Is(err, ErrQPFailed) {
		t.Fatalf("Send on a failed QP: %v, want ErrQPFailed", err)
	}
	ea.Close()
	eb.Close()
	ea.Close() // idempotent
	testutil.WaitGoroutines(t, base)
}

// TestMalformedFrames: garbage frames injected into a transfer are counted
// and dropped, and the transfer completes intact.
func TestMalformedFrames(t *testing.T) {
	seed := testutil.Seed(t)
	s := newSimPair(t, mem.Config{Seed: seed, Delay: time.Microsecond}, Config{Seed: seed})
	evil, err := s.fab.NewPort([6]byte{2, 0, 0, 0, 0, 0xee}, ipA)
	if err != nil {
		t.Fatal(err)
	}
	rng := testutil.Rand(t)
	msgs := randomMessages(rng, 50, 128<<10)
	for i, m := range msgs {
		if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
			t.Fatal(err)
		}
	}
	const inject = 300
	injected := 0
	err = s.run(clock.Time(time.Minute), func() bool {
		if injected < inject {
			fs := make([]link.Frame, 1)
			if evil.Alloc(fs) == 1 {
				n := 20 + rng.IntN(200)
				copy(fs[0].Buf, macB[:])
				for i := 6; i < n; i++ {
					fs[0].Buf[i] = byte(rng.Uint32())
				}
				if injected%2 == 0 { // half of them look like RoCE up to the BTH
					copy(fs[0].Buf[12:], []byte{0x08, 0x00, 0x45, 0, 0, 200, 0, 0, 0, 0, 64, 17})
				}
				fs[0].Buf = fs[0].Buf[:n]
				evil.Send(fs)
				injected++
			}
		}
		return len(s.cb) == len(msgs) && len(s.ca) == len(msgs) && s.eb.Stats().Malformed() >= inject
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range s.cb {
		if hash(c.Data) != hash(msgs[i]) {
			t.Fatalf("message %d corrupted", i)
		}
	}
	st := s.eb.Stats()
	t.Logf("receiver engine: %+v", st)
	if st.Malformed() != uint64(injected) {
		t.Fatalf("injected %d malformed frames, counted %d", injected, st.Malformed())
	}
}
