// Command twohosts moves a message each way between two endpoints, one per
// host, and reads the peer's copy of it with an RDMA READ: one side listens,
// the other dials; each registers its message for remote reading and sends
// it with the region's name appended, then reads the peer's. Each side
// names its own address; Open finds the interface that holds it and runs
// AF_XDP there when it can (root), kernel UDP otherwise.
//
//	hostB$ twohosts 10.0.0.2            # ADDR: listen
//	hostA$ twohosts 10.0.0.1 10.0.0.2   # ADDR PEER: dial the peer
//
// On one host, over kernel UDP on loopback: twohosts 127.0.0.2, then
// twohosts 127.0.0.1 127.0.0.2.
package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/transport"
)

func main() {
	addr, peer := os.Args[1], os.Args[2:] // twohosts ADDR [PEER]
	ctx := context.Background()           // calls fail when the peer process ends
	ep := must(spray.Open(ctx, spray.Options{Addr: netip.MustParseAddr(addr)}))
	defer ep.Close()
	var c *spray.Conn
	if len(peer) == 0 {
		c = must(must(ep.Listen("hello")).Accept(ctx))
	} else {
		c = must(ep.Dial(ctx, peer[0], "hello"))
	}
	msg := []byte("hello from " + addr)
	mr := must(ep.Register(ctx, msg, transport.AccessRemoteRead))
	check(c.Send(ctx, spray.AppendRemote(msg[:len(msg):len(msg)], mr.Remote(0))))
	m := must(c.Recv(ctx)) // the peer's message, then its region's name
	n := m.Len - spray.RemoteLen
	got := make([]byte, n)
	check(c.Read(ctx, got, must(spray.ParseRemote(m.Data[n:m.Len]))))
	fmt.Printf("received %q, read %q\n", m.Data[:n], got)
	check(c.Send(ctx, nil)) // done reading: the peer may go
	must(c.Recv(ctx))
	check(c.Close())
}

func must[T any](v T, err error) T { check(err); return v }

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
