package transport

import (
	"context"
	"crypto/sha256"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
)

// sendCounter counts the Send calls on a link/mem port and the frames they
// carry; the port's split wait is promoted.
type sendCounter struct {
	*mem.Port
	calls, frames atomic.Int64
}

func (c *sendCounter) Send(fs []link.Frame) (int, error) {
	c.calls.Add(1)
	c.frames.Add(int64(len(fs)))
	return c.Port.Send(fs)
}

// TestAnswerCarriesAck: an application that answers each message it
// receives sends its answer and the ACK the message asked for in one
// batch (one Send, one system call on a real link) rather than the ACK
// first: the engine lets the application run before it transmits. Every
// answer arrives intact.
func TestAnswerCarriesAck(t *testing.T) {
	seed := testutil.Seed(t)
	_, pa, pb := memPorts(t, mem.Config{Seed: seed})
	server := &sendCounter{Port: pb}
	var _ link.WaitSplitter = server
	ea, err := NewEndpoint(pa, Config{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := NewEndpoint(server, Config{Seed: seed + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, cb := connectQPs(ctx, t, ea, eb)

	const pings = 300
	echoed := make(chan error, 1)
	go func() {
		for range pings {
			m, err := cb.Recv(ctx)
			if err == nil {
				err = cb.Send(ctx, m.Data)
			}
			if err != nil {
				echoed <- err
				return
			}
			m.Release()
		}
		echoed <- nil
	}()
	calls0, frames0 := server.calls.Load(), server.frames.Load()
	for i := range pings {
		msg := []byte{byte(i), byte(i >> 8), 1, 2, 3, 4, 5, 6}
		if err := ca.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		m, err := ca.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(m.Data) != sha256.Sum256(msg) {
			t.Fatalf("answer %d: %x, want %x", i, m.Data, msg)
		}
		m.Release()
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	calls, frames := server.calls.Load()-calls0, server.frames.Load()-frames0
	t.Logf("the answering side: %d Send calls, %d frames for %d pings", calls, frames, pings)
	// Without the batching every ping costs two calls, the ACK's and the
	// answer's; with it most cost one.
	if calls*2 > pings*3 {
		t.Errorf("%d Send calls for %d answered pings (%d frames): the ACKs leave apart from the answers", calls, pings, frames)
	}
}
