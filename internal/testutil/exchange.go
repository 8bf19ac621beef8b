package testutil

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// RandomMessages returns n messages of random lengths from 0 to maxLen,
// their bytes drawn from r.
func RandomMessages(r *rand.Rand, n, maxLen int) [][]byte {
	ms := make([][]byte, n)
	for i := range ms {
		ms[i] = make([]byte, r.IntN(maxLen+1))
		for j := range ms[i] {
			ms[i][j] = byte(r.Uint32())
		}
	}
	return ms
}

// Exchange sends msgs with send on a goroutine of its own while it takes
// as many messages with recv, and returns an error unless each arrived
// intact (SHA-256) and in order; data gives a received message's bytes.
func Exchange[M any](ctx context.Context, send func(context.Context, []byte) error,
	recv func(context.Context) (M, error), data func(M) []byte, msgs [][]byte) error {
	errc := make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if err := send(ctx, m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i, want := range msgs {
		got, err := recv(ctx)
		if err != nil {
			return fmt.Errorf("recv %d: %w", i, err)
		}
		if b := data(got); sha256.Sum256(b) != sha256.Sum256(want) {
			return fmt.Errorf("message %d: %d bytes, want %d, contents differ", i, len(b), len(want))
		}
	}
	return <-errc
}

// WaitGoroutines waits until the number of goroutines falls back to base,
// and fails the test if it does not within 10 seconds: something the test
// started was left running. The failure prints every goroutine's stack.
func WaitGoroutines(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left behind (base %d):\n%s", runtime.NumGoroutine()-base, base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
