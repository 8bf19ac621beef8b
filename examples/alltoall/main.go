// Command alltoall shows an all-to-all with package collective: a world of
// ranks in this one process over spray (link/mem), each rank sending block k
// of its buffer to rank k, and a check of what every rank received.
//
//	go run ./examples/alltoall [-ranks 4] [-elems 1024]
//
// Across hosts, each process would instead join the world through a
// Bootstrap at rank 0's address and make its Comm on its own Endpoint:
//
//	b, _ := collective.NewBootstrap(ctx, collective.BootstrapConfig{Rank: r, Size: n, Addr: "10.0.0.1:18516"})
//	comm, _ := collective.NewSprayComm(ctx, endpoint, b) // or collective.NewTCPComm(ctx, b, cfg)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"
)

func main() {
	ranks := flag.Int("ranks", 4, "ranks in the world")
	elems := flag.Int("elems", 1024, "int32 elements each rank sends to each rank")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// n ranks, n spray Endpoints on one in-memory fabric, one QP per pair.
	world, err := collectivetest.Spray(ctx, *ranks, collectivetest.SprayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer world.Close()

	n, m := *ranks, *elems
	// value is what rank `from` sends to rank `to` at position i of the block.
	value := func(from, to, i int) int32 { return int32(from*1_000_000 + to*1_000 + i%1_000) }

	var wg sync.WaitGroup
	wrong := make([]int, n)
	took := make([]time.Duration, n)
	for r, comm := range world.Comms { // each rank runs in its own goroutine, as it would in its own process
		wg.Go(func() {
			send, recv := make([]int32, n*m), make([]int32, n*m)
			for to := range n {
				for i := range m {
					send[to*m+i] = value(r, to, i)
				}
			}
			start := time.Now()
			if err := collective.AllToAll(ctx, comm, send, recv, nil); err != nil {
				log.Fatalf("rank %d: %v", r, err)
			}
			took[r] = time.Since(start)
			for from := range n { // block `from` of recv came from rank `from`
				for i := range m {
					if recv[from*m+i] != value(from, r, i) {
						wrong[r]++
					}
				}
			}
		})
	}
	wg.Wait()
	for r := range n {
		fmt.Printf("rank %d: received %d blocks of %d int32 in %v, %d wrong\n", r, n, m, took[r].Round(time.Microsecond), wrong[r])
	}
}
