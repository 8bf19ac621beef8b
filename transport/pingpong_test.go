package transport

import (
	"context"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link/mem"
)

// BenchmarkPingPong measures the round trip of a 64-byte message and its
// echo between two Endpoints over link/mem on the real clock.
func BenchmarkPingPong(b *testing.B) {
	for _, prof := range []Profile{Spray, RoCE} {
		b.Run(prof.String(), func(b *testing.B) {
			t := &testing.T{}
			_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: 1}, Config{Profile: prof, Seed: 1})
			defer ea.Close()
			defer eb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			go func() {
				for {
					m, err := cb.Recv(ctx)
					if err != nil {
						return
					}
					if err := cb.Send(ctx, m.Data); err != nil {
						return
					}
				}
			}()
			msg := make([]byte, 64)
			for b.Loop() {
				if err := ca.Send(ctx, msg); err != nil {
					b.Fatal(err)
				}
				if _, err := ca.Recv(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
