package spray

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// The front door's Listener and Conn carry the connection manager's
// behaviour through: a Dial for a service nobody serves fails with
// ErrUnknownService, a connection moves messages both ways intact, the
// closer's peer reads io.EOF and ErrPeerClosed, both QPs are freed, the
// counters move, and a closed Listener's Accept returns net.ErrClosed.
func TestFrontDoor(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb := memPair(t, mem.Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("front")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.Dial(ctx, ln.Addr(), "back"); !errors.Is(err, ErrUnknownService) {
		t.Fatalf("Dial of an unknown service: %v, want ErrUnknownService", err)
	}
	a, err := ea.Dial(ctx, ln.Addr(), "front")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.Service() != "front" || a.Remote() != b.Info() || b.Remote() != a.Info() || a.Protection() != ProtectionClear {
		t.Fatalf("a: service %q, remote %+v, protection %v; b: info %+v", a.Service(), a.Remote(), a.Protection(), b.Info())
	}
	r := testutil.Rand(t)
	if err := exchange(ctx, a, b, testutil.RandomMessages(r, 4, 32<<10)); err != nil {
		t.Fatal(err)
	}
	if err := exchange(ctx, b, a, testutil.RandomMessages(r, 4, 32<<10)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, err := b.Recv(ctx); err != io.EOF {
		t.Fatalf("the peer's Recv after Close: %v, want io.EOF", err)
	}
	<-b.Done()
	if b.Err() != ErrPeerClosed || a.Err() != ErrClosed {
		t.Fatalf("Err %v and %v, want ErrClosed and ErrPeerClosed", a.Err(), b.Err())
	}
	if qps(t, ea) != 0 || qps(t, eb) != 0 {
		t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
	}
	if s := eb.CMStats(); s.Accepted != 1 || s.Rejected != 1 {
		t.Fatalf("listener's CMStats %+v, want 1 accepted and 1 rejected", s)
	}
	ln.Close()
	if _, err := ln.Accept(ctx); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}
