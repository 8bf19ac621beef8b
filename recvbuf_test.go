package spray

import (
	"context"
	"crypto/sha256"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestConnPostRecv receives on a Dial/Accept connection into posted
// buffers, under loss: each message arrives byte-exact in its buffer, and
// a Recv waiting on a posted buffer when the peer closes returns io.EOF.
func TestConnPostRecv(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	_, ea, eb := memPair(t, mem.Config{Seed: seed, Loss: 0.02, Reorder: 0.2, ReorderDelay: 20 * time.Microsecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("recv")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ea.Dial(ctx, ln.Addr(), "recv")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs := testutil.RandomMessages(testutil.Rand(t), 10, 64<<10)
	bufs := make([][]byte, len(msgs)+1)
	for i := range bufs {
		bufs[i] = make([]byte, 64<<10)
		if err := b.PostRecv(ctx, bufs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range msgs {
		if err := a.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range msgs {
		m, err := b.Recv(ctx)
		if err != nil {
			t.Fatalf("recv %d: %v", i, err)
		}
		if sha256.Sum256(m.Data) != sha256.Sum256(want) || (len(m.Data) > 0 && &m.Data[0] != &bufs[i][0]) {
			t.Fatalf("message %d: %d bytes, want %d, or not in its buffer", i, len(m.Data), len(want))
		}
	}
	recvd := make(chan error, 1)
	go func() {
		_, err := b.Recv(ctx) // one buffer is still posted
		recvd <- err
	}()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-recvd; err != io.EOF {
		t.Fatalf("Recv after the peer closed: %v, want io.EOF", err)
	}
	if err := b.PostRecv(ctx, bufs[0]); err == nil {
		t.Fatal("PostRecv on a closed connection succeeded")
	}
	ln.Close()
	ea.Close()
	eb.Close()
	testutil.WaitGoroutines(t, base)
}
