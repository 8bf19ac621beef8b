package spray_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/transport"
)

// Open an endpoint on an interface by name or, as here, by address. On a
// loopback address LinkAuto runs over kernel UDP; on a NIC it takes AF_XDP
// when the process may.
func ExampleOpen() {
	ctx := context.Background()
	ep, err := spray.Open(ctx, spray.Options{
		Addr: netip.MustParseAddr("127.0.80.1"), // or Interface: "eth0"
		Logf: func(string, ...any) {},           // default: log/slog
	})
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	kind, why := ep.Link()
	fmt.Println(kind, "-", why)
	// Output: udp - loopback interface
}

// pair opens two endpoints on loopback, as two hosts would on their NICs.
func pair(ctx context.Context) (a, b *spray.Endpoint) {
	quiet := func(string, ...any) {}
	a, err := spray.Open(ctx, spray.Options{Addr: netip.MustParseAddr("127.0.81.1"), Logf: quiet})
	if err != nil {
		log.Fatal(err)
	}
	b, err = spray.Open(ctx, spray.Options{Addr: netip.MustParseAddr("127.0.81.2"), Logf: quiet})
	if err != nil {
		log.Fatal(err)
	}
	return a, b
}

// Listen for a service on one endpoint and Dial it from another: each
// side gets a connected QP. Send returns when the peer acknowledged every
// byte; Recv returns whole messages in order.
func ExampleEndpoint_Dial() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := pair(ctx)
	defer a.Close()
	defer b.Close()

	ln, err := b.Listen("greeter") // b's connection manager: 127.0.81.2:4791/tcp
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		m, err := c.Recv(ctx)
		if err != nil {
			log.Fatal(err)
		}
		c.Send(ctx, append([]byte("hello, "), m.Data...))
	}()

	c, err := a.Dial(ctx, "127.0.81.2", "greeter")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // drains, tells the peer, frees both QPs
	if err := c.Send(ctx, []byte("world")); err != nil {
		log.Fatal(err)
	}
	m, err := c.Recv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(m.Data))
	// Output: hello, world
}

// RDMA WRITE: the target registers a region and sends its name; the
// writer writes into it with an immediate value, which tells the target
// that the bytes have landed.
func ExampleConn_Write() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := pair(ctx)
	defer a.Close()
	defer b.Close()
	ln, err := b.Listen("store")
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan []byte)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		buf := make([]byte, 64)
		mr, err := b.Register(ctx, buf, transport.AccessRemoteWrite)
		if err != nil {
			log.Fatal(err)
		}
		if err := c.Send(ctx, spray.AppendRemote(nil, mr.Remote(0))); err != nil {
			log.Fatal(err)
		}
		m, err := c.Recv(ctx) // the WRITE's immediate: Len bytes landed
		if err != nil || !m.HasImm {
			log.Fatal(m, err)
		}
		done <- buf[:m.Len]
	}()
	c, err := a.Dial(ctx, ln.Addr(), "store")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m, err := c.Recv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	to, err := spray.ParseRemote(m.Data)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.WriteImm(ctx, []byte("written in place"), to, 1); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", <-done)
	// Output: written in place
}

// Build a stack by hand, as the benchmarks do: resolve the interface, open
// the link with settings Options does not offer (here fixed UDP source
// ports), and start a transport endpoint on it. In another network
// namespace, lock the OS thread and enter it around the first two calls.
func ExampleOpenLink() {
	ifc, err := spray.LookupInterface("", netip.MustParseAddr("127.0.82.1"))
	if err != nil {
		log.Fatal(err)
	}
	l, kind, why, err := spray.OpenLink(spray.LinkConfig{
		Kind:      spray.LinkUDP,
		Interface: ifc,
		MTU:       1500,
		Entropies: []uint16{40001, 40002},
	})
	if err != nil {
		log.Fatal(err)
	}
	ep, err := transport.NewEndpoint(l, transport.Config{}) // owns l from here
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	fmt.Println(kind, "-", why, "- frames of", ep.LinkInfo().FrameSize, "bytes")
	// Output: udp - asked for - frames of 1514 bytes
}
