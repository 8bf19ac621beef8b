package transport

import (
	"context"
	"crypto/sha256"
	"errors"
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
