package udp

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

// TestZeroConfigTransport runs the smallest program a newcomer writes: two
// endpoints over links opened with nothing but Local, connected, one Send.
// The links must advertise only ports they can send from, so that every
// frame passes the peer's ICRC check and the message arrives intact.
func TestZeroConfigTransport(t *testing.T) {
	r := testutil.Rand(t)
	ipA, ipB := loopbackPair(r)
	la, lb := open(t, Config{Local: ipA}), open(t, Config{Local: ipB})
	for _, l := range []*Link{la, lb} {
		ps := l.Info().Ports
		if len(ps) != DefaultEntropies || slices.Contains(ps, 0) {
			t.Fatalf("%s advertises ports %v, want %d bound ones", l.Info().Name, ps, 8)
		}
	}
	ea, err := transport.NewEndpoint(la, transport.Config{Profile: transport.Spray})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := transport.NewEndpoint(lb, transport.Config{Profile: transport.Spray})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	qa, err := ea.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := eb.CreateQP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := qa.Connect(ctx, qb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(ctx, qa.Info()); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 256<<10)
	for i := range msg {
		msg[i] = byte(r.Uint32())
	}
	if err := qa.Send(ctx, msg); err != nil {
		s, _ := eb.Stats(context.Background())
		t.Fatalf("Send: %v (receiver: %d frames with a bad ICRC)", err, s.BadICRC)
	}
	m, err := qb.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, msg) {
		t.Fatalf("received %d bytes, not the %d sent", len(m.Data), len(msg))
	}
	if c := la.Counters(); c.TxUnknownEntropy != 0 {
		t.Fatalf("%d frames sent from a port without a socket", c.TxUnknownEntropy)
	}
}

// TestEphemeralEntropiesNone keeps the one-socket link on request: it
// advertises Port alone.
func TestEphemeralEntropiesNone(t *testing.T) {
	r := testutil.Rand(t)
	ipA, _ := loopbackPair(r)
	l := open(t, Config{Local: ipA, EphemeralEntropies: -1})
	if ps := l.Info().Ports; !slices.Equal(ps, []uint16{RoCEPort}) {
		t.Fatalf("Ports %v, want [%d]", ps, RoCEPort)
	}
	if _, err := Open(Config{Local: ipA, Port: 4000, EphemeralEntropies: MaxEntropies + 1}); err == nil {
		t.Fatal("EphemeralEntropies above MaxEntropies accepted")
	}
}
