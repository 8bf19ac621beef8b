package collective

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzBootstrapRound feeds bytes to rank 1 of a world of 4 as rank 0's
// answer to an AllGather round: it returns four contributions of at most
// MaxBlob bytes each, or an error wrapping ErrBootstrap; it never
// allocates more than a frame's bound at a time, never panics, and ends
// when the bytes do.
func FuzzBootstrapRound(f *testing.F) {
	frame := func(b ...byte) []byte { return append([]byte{0, 0, 0, byte(len(b))}, b...) }
	var good []byte
	for r := range 4 {
		good = append(good, frame(byte(r), byte(r))...)
	}
	f.Add(good)
	f.Add(frame(1, 2, 3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(append(frame(), []byte{0, 0, 0, 65}...))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			io.ReadFull(b, make([]byte, 4+len("rank1"))) // rank 1's own frame
			b.Write(data)
			b.Close()
		}()
		boot := &Bootstrap{rank: 1, size: 4, maxBlob: 64, conns: []net.Conn{a, nil, nil, nil}, rds: []*bufio.Reader{bufio.NewReader(a), nil, nil, nil}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := boot.AllGather(ctx, []byte("rank1"))
		if err != nil {
			if !errors.Is(err, ErrBootstrap) {
				t.Fatalf("error %v does not wrap ErrBootstrap", err)
			}
			if ctx.Err() != nil {
				t.Fatal("the round waited for its deadline after the bytes ended")
			}
			return
		}
		if len(out) != 4 {
			t.Fatalf("%d contributions, want 4", len(out))
		}
		for r, m := range out {
			if len(m) > 64 {
				t.Fatalf("rank %d's contribution has %d bytes, bound 64", r, len(m))
			}
		}
	})
}
