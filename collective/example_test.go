package collective_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"
)

// An all-reduce over four ranks in one process (spray QPs over an
// in-memory fabric): every rank contributes its vector and every rank gets
// the element-wise sum.
func ExampleAllReduce() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := collectivetest.Spray(ctx, 4, collectivetest.SprayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	out := make([][]float32, 4)
	var wg sync.WaitGroup
	for r, comm := range w.Comms {
		wg.Go(func() {
			send := []float32{float32(r), 1, 10 * float32(r)}
			out[r] = make([]float32, len(send))
			if err := collective.AllReduce(ctx, comm, send, out[r], collective.Sum, nil); err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	fmt.Println(out[0], out[3])
	// Output: [6 4 60] [6 4 60]
}

// One rank of a world started by mpirun, srun or torchrun: the launcher's
// environment gives the rank, the world size and rank 0's address; the
// endpoint opens on the interface that reaches the others.
//
//	mpirun -np 8 -H a:4,b:4 -x SPRAY_BOOTSTRAP=a:18517 ./train
//	srun -N 2 --ntasks-per-node 4 ./train
//	torchrun --nnodes 2 --nproc-per-node 4 --rdzv-endpoint a:29500 ./train
func ExampleLaunchFromEnv() {
	ctx := context.Background()
	launch, ok, err := collective.LaunchFromEnv(os.Getenv)
	if err != nil || !ok {
		log.Fatal("not started by a launcher: ", err)
	}
	b, err := collective.NewBootstrap(ctx, launch.Config())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	ep, err := spray.Open(ctx, spray.Options{Interface: "eth0"})
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	comm, err := collective.NewSprayComm(ctx, ep.Endpoint, b)
	if err != nil {
		log.Fatal(err)
	}
	defer comm.Close()
	grad := make([]float32, 1<<20)
	if err := collective.AllReduce(ctx, comm, grad, grad, collective.Sum, nil); err != nil {
		log.Fatal(err)
	}
}
