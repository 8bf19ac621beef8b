package transport_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// A QP whose peer drops every frame fails with an error that says so: it
// matches ErrPeerUnreachable, and as a *QPError it carries the counters
// that explain it (no ACK came back) and its text what to check.
func ExampleQPError() {
	fab := mem.NewFabric(mem.Config{Seed: 1}, clock.NewSystem())
	cfg := transport.Config{Seed: 1, MinRTO: time.Millisecond, MaxRTO: 10 * time.Millisecond, MaxRetries: 3}
	var qps [2]*transport.Conn
	ctx := context.Background()
	for i := range qps {
		p, err := fab.NewPort([6]byte{2, 0, 0, 0, 0, byte(i + 1)}, netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}))
		if err != nil {
			log.Fatal(err)
		}
		ep, err := transport.NewEndpoint(p, cfg)
		if err != nil {
			log.Fatal(err)
		}
		defer ep.Close()
		if qps[i], err = ep.CreateQP(ctx); err != nil {
			log.Fatal(err)
		}
	}
	if err := errors.Join(qps[0].Connect(ctx, qps[1].Info()), qps[1].Connect(ctx, qps[0].Info())); err != nil {
		log.Fatal(err)
	}
	fab.Blackhole(true) // the peer hears nothing

	err := qps[0].Send(ctx, []byte("hello"))
	var qe *transport.QPError
	if errors.As(err, &qe) {
		fmt.Println("peer unreachable:", errors.Is(err, transport.ErrPeerUnreachable))
		fmt.Println("ACKs received:", qe.QP.AcksReceived, "- timeouts:", qe.QP.Timeouts)
	}
	// Output:
	// peer unreachable: true
	// ACKs received: 0 - timeouts: 3
}
