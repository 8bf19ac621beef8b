package cm

import (
	"context"
	"testing"
	"time"
)

// BenchmarkDial sets up and closes one connection per iteration between
// two endpoints on link/mem, whose connection managers talk over
// loopback TCP: in clear, with a pre-shared key, and with certificates
// verified both ways. The difference is the TLS handshake, the proofs
// and the QP keys' derivation.
func BenchmarkDial(b *testing.B) {
	ca := newPKI(b, "bench CA")
	for _, tc := range []struct {
		name string
		sec  [2]*Security
	}{
		{"clear", [2]*Security{nil, nil}},
		{"psk", [2]*Security{{PSK: testPSK}, {PSK: testPSK}}},
		{"certificates", [2]*Security{certSecurity(b, ca, "a", true), certSecurity(b, ca, "b", true)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, ea, eb := secPair(b, 1, tc.sec[0], tc.sec[1])
			ln, err := eb.Listen("bench")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				c, err := ea.Dial(ctx, ln.Addr(), "bench")
				if err != nil {
					b.Fatal(err)
				}
				d, err := ln.Accept(ctx)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
				d.Close()
			}
		})
	}
}
