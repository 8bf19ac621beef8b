// Command allreduce shows an all-reduce with package collective: every rank
// contributes a vector (a gradient, in training), and every rank gets the
// element-wise sum, over spray in this process and over kernel TCP, checked
// against a sum computed the plain way.
//
//	go run ./examples/allreduce [-ranks 8] [-elems 1048576]
//
// Across hosts, each process joins through collective.NewBootstrap at rank
// 0's address and builds its Comm with collective.NewSprayComm (on its own
// transport.Endpoint) or collective.NewTCPComm; the AllReduce call is the
// same.
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
	ranks := flag.Int("ranks", 8, "ranks in the world")
	elems := flag.Int("elems", 1<<20, "float32 elements per rank")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n, m := *ranks, *elems

	// Rank r's gradient; small integers, so that float32 sums are exact.
	grad := func(r, i int) float32 { return float32((i+r)%7 - 3) }
	want := make([]float32, m)
	for i := range want {
		for r := range n {
			want[i] += grad(r, i)
		}
	}

	spray, err := collectivetest.Spray(ctx, n, collectivetest.SprayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer spray.Close()
	tcp, err := collectivetest.TCP(ctx, n, collective.TCPConfig{})
	if err != nil {
		log.Fatal(err)
	}
	worlds := map[string][]collective.Comm{"spray": nil, "tcp": nil}
	for r := range n {
		worlds["spray"] = append(worlds["spray"], spray.Comms[r])
		worlds["tcp"] = append(worlds["tcp"], tcp[r])
		defer tcp[r].Close()
	}

	for _, name := range []string{"spray", "tcp"} {
		var wg sync.WaitGroup
		wrong := make([]int, n)
		start := time.Now()
		for r, comm := range worlds[name] { // one goroutine per rank, as one process per GPU would be
			wg.Go(func() {
				buf := make([]float32, m)
				for i := range buf {
					buf[i] = grad(r, i)
				}
				// In place: buf becomes the sum over all ranks.
				if err := collective.AllReduce(ctx, comm, buf, buf, collective.Sum, nil); err != nil {
					log.Fatalf("%s rank %d: %v", name, r, err)
				}
				for i := range buf {
					if buf[i] != want[i] {
						wrong[r]++
					}
				}
			})
		}
		wg.Wait()
		total := 0
		for _, w := range wrong {
			total += w
		}
		fmt.Printf("%-5s all-reduce of %d float32 on %d ranks: %v, %d elements wrong on all ranks together\n",
			name, m, n, time.Since(start).Round(time.Microsecond), total)
	}
}
