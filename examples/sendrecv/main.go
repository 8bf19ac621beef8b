// Command sendrecv shows the transport's API between two endpoints: a
// two-sided Send and Recv, then a one-sided WRITE into a registered region.
// Both endpoints run in this process over kernel UDP sockets on loopback, so
// no privilege is needed; across hosts each side opens its own link and the
// two exchange their QPInfo out of band.
//
//	go run ./examples/sendrecv [-a 127.0.0.1] [-b 127.0.0.2]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/link/udp"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/transport"
)

// open starts an endpoint over kernel UDP sockets bound to ip. A UDP link
// sends only from the source ports it bound, so it is given 8 entropies for
// the spray profile to spray over.
func open(ip string, seed uint64) *transport.Endpoint {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		log.Fatal(err)
	}
	l, err := udp.Open(udp.Config{Local: addr, Entropies: multipath.Entropies(seed, 8)})
	if err != nil {
		log.Fatal(err)
	}
	ep, err := transport.NewEndpoint(l, transport.Config{Profile: transport.Spray})
	if err != nil {
		log.Fatal(err)
	}
	return ep
}

func main() {
	ipA := flag.String("a", "127.0.0.1", "address of endpoint a")
	ipB := flag.String("b", "127.0.0.2", "address of endpoint b")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	a, b := open(*ipA, 1), open(*ipB, 2)
	defer a.Close()
	defer b.Close()

	// A queue pair on each side, connected to the other's QPInfo.
	qa, err := a.CreateQP(ctx)
	if err != nil {
		log.Fatal(err)
	}
	qb, err := b.CreateQP(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := qa.Connect(ctx, qb.Info()); err != nil {
		log.Fatal(err)
	}
	if err := qb.Connect(ctx, qa.Info()); err != nil {
		log.Fatal(err)
	}

	// Two-sided: Send returns once b acknowledged every byte; Recv returns
	// whole messages in the order they were sent.
	sent := make(chan error, 1)
	go func() { sent <- qa.Send(ctx, []byte("hello from a")) }()
	m, err := qb.Recv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := <-sent; err != nil {
		log.Fatal(err)
	}
	fmt.Printf("b received %q\n", m.Data)

	// One-sided: b registers a region for remote writes; a writes into it
	// by address and key (mr.Remote), without b posting anything.
	buf := make([]byte, 4096)
	mr, err := b.Register(ctx, buf, transport.AccessRemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	data := []byte("written by a")
	if err := qa.Write(ctx, data, mr.Remote(0)); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("b's region holds %q\n", buf[:len(data)])
}
