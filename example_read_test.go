package spray_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/transport"
)

// RDMA READ: the owner registers a region for remote reading and sends
// its name; the reader reads from it without the owner taking part.
func ExampleConn_Read() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := pair(ctx)
	defer a.Close()
	defer b.Close()
	ln, err := b.Listen("share")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		mr, err := b.Register(ctx, []byte("read without a receiver"), transport.AccessRemoteRead)
		if err != nil {
			log.Fatal(err)
		}
		if err := c.Send(ctx, spray.AppendRemote(nil, mr.Remote(0))); err != nil {
			log.Fatal(err)
		}
		c.Recv(ctx) // the reader is done when it closes
	}()
	c, err := a.Dial(ctx, ln.Addr(), "share")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m, err := c.Recv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	from, err := spray.ParseRemote(m.Data)
	if err != nil {
		log.Fatal(err)
	}
	got := make([]byte, 23)
	if err := c.Read(ctx, got, from); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", got)
	// Output: read without a receiver
}
