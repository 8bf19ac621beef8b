package transport

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/rss"
)

// A QP created with the receiver's steering sprays over entropies that the
// receiver's RSS puts on the owner engine's queue: the receiving endpoint
// hands nothing over, and the QP still has all its paths.
func TestCreateQPSteered(t *testing.T) {
	const queues = 4
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 5 * time.Microsecond}, clock.NewSystem())
	defer fab.Close()
	ma, _ := fab.NewMultiPort(macA, ipA, queues, nil)
	mb, _ := fab.NewMultiPort(macB, ipB, queues, nil)
	ea, err := NewEndpoint(ma, Config{Seed: seed, MaxRetries: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := NewEndpoint(mb, Config{Seed: seed + 1, MaxRetries: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eb.CreateQP(ctx) // so that the QP below is not on engine 0
	cb, err := eb.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := eb.Steering(cb)
	if !ok || st.Queue != 1 {
		t.Fatalf("steering %+v, %v: want queue 1", st, ok)
	}
	if _, err := ea.CreateQPSteered(ctx, Steering{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty steering: %v", err)
	}
	ca, err := ea.CreateQPSteered(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Connect(ctx, cb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := cb.Connect(ctx, ca.Info()); err != nil {
		t.Fatal(err)
	}
	paths, _ := ca.PathStats(ctx)
	if len(paths) != 8 {
		t.Fatalf("%d paths, want 8", len(paths))
	}
	for _, p := range paths {
		q := st.Table.QueueOf(rss.Tuple{Src: ipA, Dst: ipB, SrcPort: p.Entropy, DstPort: roceUDPPort})
		if q != st.Queue {
			t.Errorf("entropy %d lands on queue %d", p.Entropy, q)
		}
	}
	msg := make([]byte, 2<<20)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	done := make(chan error, 1)
	go func() {
		err := ca.Send(ctx, msg)
		if err != nil {
			cancel()
		}
		done <- err
	}()
	got, err := cb.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got.Data) != sha256.Sum256(msg) {
		t.Fatal("message corrupted")
	}
	per, _ := eb.EngineStats(ctx)
	for i, s := range per {
		if s.HandedOver != 0 {
			t.Errorf("engine %d handed %d frames over", i, s.HandedOver)
		}
		if i != st.Queue && s.RxFrames != 0 {
			t.Errorf("engine %d received %d frames", i, s.RxFrames)
		}
	}
	if per[st.Queue].RxFrames == 0 {
		t.Error("the owner engine received nothing")
	}
	if _, ok := ea.Steering(ca); !ok {
		t.Error("no steering on a sharded mem endpoint")
	}
}

// steerPair is two 4-engine endpoints on link/mem multi-queue ports and a
// connected QP on each: ca on A's engine 0, cb on B's engine 1.
func steerPair(t *testing.T, ctx context.Context) (ea, eb *Endpoint, ca, cb *Conn) {
	t.Helper()
	const queues = 4
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 5 * time.Microsecond}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	ma, _ := fab.NewMultiPort(macA, ipA, queues, nil)
	mb, _ := fab.NewMultiPort(macB, ipB, queues, nil)
	var err error
	if ea, err = NewEndpoint(ma, Config{Seed: seed, MaxRetries: 50}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close() })
	if eb, err = NewEndpoint(mb, Config{Seed: seed + 1, MaxRetries: 50}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.Close() })
	if ca, err = ea.CreateQP(ctx); err != nil {
		t.Fatal(err)
	}
	eb.CreateQP(ctx) // so that cb is not on engine 0
	if cb, err = eb.CreateQP(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ca.Connect(ctx, cb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := cb.Connect(ctx, ca.Info()); err != nil {
		t.Fatal(err)
	}
	return ea, eb, ca, cb
}

// sendChecked sends msg from a to b and checks its SHA-256 at b.
func sendChecked(t *testing.T, ctx context.Context, a, b *Conn, msg []byte) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- a.Send(ctx, msg) }()
	got, err := b.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got.Data) != sha256.Sum256(msg) {
		t.Fatal("message corrupted")
	}
	got.Release()
}

// handedOver sums the frames ep's engines handed over.
func handedOver(t *testing.T, ctx context.Context, ep *Endpoint) uint64 {
	t.Helper()
	st, err := ep.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.HandedOver
}

// A connected QP that learns its peer's steering late re-chooses its
// entropies with Conn.Steer, even with a message in flight: every message
// arrives intact, the receiver hands frames over before (the entropies
// spread over its queues) and none after, and the QP still sprays over a
// full set of paths, all landing on the owner's queue.
func TestSteer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ea, eb, ca, cb := steerPair(t, ctx)
	msg := make([]byte, 2<<20)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	sendChecked(t, ctx, ca, cb, msg)
	if n := handedOver(t, ctx, eb); n == 0 {
		t.Fatal("no hand-overs at the receiver without steering")
	} else {
		t.Logf("%d frames handed over without steering", n)
	}
	st, ok := eb.Steering(cb)
	if !ok || st.Queue != 1 {
		t.Fatalf("steering %+v, %v: want queue 1", st, ok)
	}

	// Steer while a message is queued and going out.
	if err := ca.Post(ctx, WorkRequest{ID: 7, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	if err := ca.Steer(ctx, st); err != nil {
		t.Fatal(err)
	}
	got, err := cb.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got.Data) != sha256.Sum256(msg) {
		t.Fatal("message sent across Steer corrupted")
	}
	comps := make([]Completion, 1)
	for ea.CQ().Poll(comps) == 0 {
		if err := ea.CQ().Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if comps[0].ID != 7 || comps[0].Err != nil {
		t.Fatalf("completion %+v", comps[0])
	}

	paths, _ := ca.PathStats(ctx)
	if len(paths) != 8 {
		t.Fatalf("%d paths after Steer, want 8", len(paths))
	}
	for _, p := range paths {
		if q := st.Table.QueueOf(rss.Tuple{Src: ipA, Dst: ipB, SrcPort: p.Entropy, DstPort: roceUDPPort}); q != st.Queue {
			t.Errorf("entropy %d lands on queue %d", p.Entropy, q)
		}
	}
	// A frame sent before Steer can still arrive after the message
	// completed only as a duplicate of one retransmitted (a spurious
	// timeout on a loaded machine): the frames handed over from here on
	// are none, or at most those retransmissions.
	st0, _ := ca.Stats(ctx)
	before := handedOver(t, ctx, eb)
	sendChecked(t, ctx, ca, cb, msg[:1<<20])
	if n := handedOver(t, ctx, eb) - before; n > st0.Retransmits {
		t.Fatalf("the receiver handed %d frames over after Steer (%d retransmissions before)", n, st0.Retransmits)
	}
}

// Steer refuses what cannot be steered to, with ErrInvalidRequest, and a
// destroyed Conn with ErrDestroyed; a refused Steer changes nothing.
func TestSteerErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, eb, ca, cb := steerPair(t, ctx)
	st, _ := eb.Steering(cb)
	before, _ := ca.PathStats(ctx)
	bad := map[string]Steering{
		"empty":        {},
		"no key":       {IP: ipB, Table: rss.Table{Indir: st.Table.Indir}, Queue: 1},
		"IPv6":         {IP: netip.MustParseAddr("fd00::2"), Table: st.Table, Queue: 1},
		"queue 9":      {IP: ipB, Table: st.Table, Queue: 9},
		"queue -1":     {IP: ipB, Table: st.Table, Queue: -1},
		"another peer": {IP: ipA, Table: st.Table, Queue: 1},
	}
	for name, s := range bad {
		if err := ca.Steer(ctx, s); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
	after, _ := ca.PathStats(ctx)
	if len(after) != len(before) || after[0].Entropy != before[0].Entropy {
		t.Error("a refused Steer changed the entropies")
	}
	ca.Destroy(ctx)
	if err := ca.Steer(ctx, st); !errors.Is(err, ErrDestroyed) {
		t.Errorf("Steer on a destroyed Conn: %v, want ErrDestroyed", err)
	}
}
