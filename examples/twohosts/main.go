// Command twohosts moves a message each way between two endpoints, one per
// host, and reads the peer's copy of it with an RDMA READ: one side listens,
// the other dials; each registers its message for remote reading and sends
// it with the region's name appended, then reads the peer's. Each side
// names its own address; Open finds the interface that holds it and runs
// AF_XDP there when it can (root), kernel UDP otherwise.
//
//	hostB$ twohosts -addr 10.0.0.2
//	hostA$ twohosts -addr 10.0.0.1 -peer 10.0.0.2
//
// On one host, over kernel UDP on loopback: -addr 127.0.0.2, then
// -addr 127.0.0.1 -peer 127.0.0.2.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/transport"
)

func main() {
	addr := flag.String("addr", "127.0.0.1", "local IPv4 address")
	peer := flag.String("peer", "", "address of the listening side; empty: listen")
	flag.Parse()
	ctx := context.Background() // calls fail when the peer process ends
	ep := must(spray.Open(ctx, spray.Options{Addr: netip.MustParseAddr(*addr)}))
	defer ep.Close()
	var c *spray.Conn
	if *peer == "" {
		c = must(must(ep.Listen("hello")).Accept(ctx))
	} else {
		c = must(ep.Dial(ctx, *peer, "hello"))
	}
	msg := []byte("hello from " + *addr)
	mr := must(ep.Register(ctx, msg, transport.AccessRemoteRead))
	check(c.Send(ctx, spray.AppendRemote(msg[:len(msg):len(msg)], mr.Remote(0))))
	m := must(c.Recv(ctx)) // the peer's message, then its region's name
	text, name := m.Data[:m.Len-spray.RemoteLen], m.Data[m.Len-spray.RemoteLen:]
	fmt.Printf("received %q\n", text)
	got := make([]byte, len(text))
	check(c.Read(ctx, got, must(spray.ParseRemote(name))))
	fmt.Printf("read %q\n", got)
	check(c.Send(ctx, nil)) // done reading: the peer may go
	must(c.Recv(ctx))
	check(c.Close())
}

func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
