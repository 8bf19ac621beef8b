// Command twohosts moves a message each way between two endpoints, one per
// host: one side listens, the other dials, both send and receive. Each side
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
)

func main() {
	addr := flag.String("addr", "127.0.0.1", "local IPv4 address")
	peer := flag.String("peer", "", "address of the listening side; empty: listen")
	flag.Parse()
	ctx := context.Background() // calls fail when the peer process ends
	ep, err := spray.Open(ctx, spray.Options{Addr: netip.MustParseAddr(*addr)})
	check(err)
	defer ep.Close()
	var c *spray.Conn
	if *peer == "" {
		ln, err := ep.Listen("hello")
		check(err)
		c, err = ln.Accept(ctx)
		check(err)
	} else {
		c, err = ep.Dial(ctx, *peer, "hello")
		check(err)
	}
	check(c.Send(ctx, []byte("hello from "+*addr)))
	m, err := c.Recv(ctx)
	check(err)
	fmt.Printf("received %q\n", m.Data)
	check(c.Close())
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
