package collective_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	. "github.com/sprayfabric/spray/collective"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/udp"
	"github.com/sprayfabric/spray/transport"
)

// TestProcesses runs a world of separate processes (this test binary
// re-executed, one per rank) that meet through the bootstrap at rank 0's
// address and then run AllReduce and AllToAll over TCP and over spray on
// link/udp sockets (rank r at 127.b.c.r+1, testutil.LoopbackNet). Each process checks its
// results against the serial reference, computed from the shared seed.
func TestProcesses(t *testing.T) {
	testutil.SkipIfSubprocess(t, "COLLECTIVE_RANK")
	seed := testutil.Seed(t)
	nb, nc := testutil.LoopbackNet(testutil.Rand(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // rank 0 listens there itself; the others retry until it does
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRankProcess$", "-test.v")
		cmd.Env = append(os.Environ(), "COLLECTIVE_RANK="+strconv.Itoa(r), "COLLECTIVE_SIZE="+strconv.Itoa(n),
			"COLLECTIVE_ADDR="+addr, "COLLECTIVE_SEED="+strconv.FormatUint(seed, 10),
			"COLLECTIVE_NET="+strconv.Itoa(int(nb))+"."+strconv.Itoa(int(nc)))
		cmds[r] = cmd
	}
	outs := make([]chan []byte, n)
	for r, cmd := range cmds {
		outs[r] = make(chan []byte, 1)
		go func() {
			out, err := cmd.CombinedOutput()
			if err != nil {
				out = append(out, fmt.Sprintf("\nexit: %v", err)...)
			}
			outs[r] <- out
		}()
	}
	for r := range n {
		out := <-outs[r]
		if cmds[r].ProcessState == nil || !cmds[r].ProcessState.Success() || !bytes.Contains(out, []byte("--- PASS: TestRankProcess")) {
			t.Errorf("rank %d failed:\n%s", r, out)
		}
	}
}

// TestRankProcess is one rank of TestProcesses; it skips unless run by it.
func TestRankProcess(t *testing.T) {
	testutil.SkipUnlessSubprocess(t, "COLLECTIVE_RANK")
	rankS := os.Getenv("COLLECTIVE_RANK")
	rank, _ := strconv.Atoi(rankS)
	size, _ := strconv.Atoi(os.Getenv("COLLECTIVE_SIZE"))
	seed, _ := strconv.ParseUint(os.Getenv("COLLECTIVE_SEED"), 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := NewBootstrap(ctx, BootstrapConfig{Rank: rank, Size: size, Addr: os.Getenv("COLLECTIVE_ADDR")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	tc, err := NewTCPComm(ctx, b, TCPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()

	ip, err := netip.ParseAddr("127." + os.Getenv("COLLECTIVE_NET") + "." + strconv.Itoa(rank+1))
	if err != nil {
		t.Fatal(err)
	}
	var ents []uint16
	for i := range 8 {
		ents = append(ents, uint16(50000+100*rank+i))
	}
	l, err := udp.Open(udp.Config{Local: ip, Entropies: ents})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := transport.NewEndpoint(l, transport.Config{Seed: seed + uint64(rank)})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	defer ep.Close()
	sc, err := NewSprayComm(ctx, ep, b)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()

	// Every process draws every rank's input from the shared seed.
	const m = 40000
	rng := rand.New(rand.NewPCG(seed, 1))
	in := make([][]float32, size)
	for r := range in {
		in[r] = values[float32](rng, size*m)
	}
	want := refReduce(in, Sum)
	for _, c := range []Comm{tc, sc} {
		got := make([]float32, size*m)
		if err := AllReduce(ctx, c, in[rank], got, Sum, nil); err != nil {
			t.Fatalf("%T: AllReduce: %v", c, err)
		}
		equal(t, fmt.Sprintf("%T AllReduce", c), got, want)
		if err := AllToAll(ctx, c, in[rank], got, nil); err != nil {
			t.Fatalf("%T: AllToAll: %v", c, err)
		}
		for k := range size {
			equal(t, fmt.Sprintf("%T AllToAll block %d", c, k), got[k*m:(k+1)*m], in[k][rank*m:(rank+1)*m])
		}
	}
	if err := b.Barrier(ctx); err != nil { // nobody closes while others still send
		t.Fatal(err)
	}
}
