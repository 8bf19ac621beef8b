package collective

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
)

// pipeComm is rank 1 of a TCPComm of two whose connection to rank 0 is
// one end of a pipe; the other end is returned.
func pipeComm(max int64) (*TCPComm, net.Conn) {
	a, b := net.Pipe()
	t := &TCPComm{rank: 1, size: 2, max: max, peers: []*tcpPeer{newTCPPeer(a), nil}}
	return t, b
}

// FuzzTCPRecv feeds a byte stream to a TCPComm and compares what Recv
// returns with a model of the framing: 8-byte big-endian length, payload.
func FuzzTCPRecv(f *testing.F) {
	frame := func(msgs ...string) []byte {
		var b []byte
		for _, m := range msgs {
			b = binary.BigEndian.AppendUint64(b, uint64(len(m)))
			b = append(b, m...)
		}
		return b
	}
	f.Add(frame("hello", "", "world"))
	f.Add(frame("truncated")[:10])
	f.Add(append(frame("ok"), 0xff, 0, 0, 0, 0, 0, 0, 0))
	f.Add(binary.BigEndian.AppendUint64(nil, 1<<10+1))
	f.Fuzz(func(t *testing.T, stream []byte) {
		const max = 1 << 10
		c, peer := pipeComm(max)
		defer c.Close()
		go func() {
			peer.Write(stream)
			peer.Close()
		}()
		rest := stream
		for {
			got, err := c.Recv(context.Background(), 0)
			switch {
			case len(rest) < 8:
				if err == nil {
					t.Fatalf("message %q from %d stray bytes", got, len(rest))
				}
				return
			case binary.BigEndian.Uint64(rest) > max:
				if !errors.Is(err, ErrTooLarge) {
					t.Fatalf("length %d: got %v, want ErrTooLarge", binary.BigEndian.Uint64(rest), err)
				}
				return
			case uint64(len(rest)-8) < binary.BigEndian.Uint64(rest):
				if err == nil {
					t.Fatalf("message %q from a truncated frame", got)
				}
				return
			}
			n := binary.BigEndian.Uint64(rest)
			if err != nil || !bytes.Equal(got, rest[8:8+n]) {
				t.Fatalf("got %q, %v; want %q", got, err, rest[8:8+n])
			}
			rest = rest[8+n:]
		}
	})
}

// FuzzHello feeds bytes to rank 0 as a joining rank's hello: it accepts a
// well-formed hello of a rank in range and refuses the rest with
// ErrBootstrap.
func FuzzHello(f *testing.F) {
	f.Add(hello(1, 4))
	f.Add(hello(4, 4))
	f.Add(hello(1, 5))
	f.Add([]byte("SPRY"))
	f.Fuzz(func(t *testing.T, h []byte) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			b.Write(h)
			b.Close()
		}()
		boot := &Bootstrap{size: 4}
		r, err := boot.readHello(context.Background(), a, bufio.NewReader(a))
		valid := len(h) >= 16 && bytes.Equal(h[:8], hello(0, 0)[:8]) &&
			binary.BigEndian.Uint32(h[12:]) == 4 && binary.BigEndian.Uint32(h[8:]) >= 1 && binary.BigEndian.Uint32(h[8:]) < 4
		if valid != (err == nil) {
			t.Fatalf("hello %x: rank %d, error %v; valid %v", h, r, err, valid)
		}
		if err != nil && !errors.Is(err, ErrBootstrap) {
			t.Fatalf("error %v does not wrap ErrBootstrap", err)
		}
		if err == nil && r != int(binary.BigEndian.Uint32(h[8:])) {
			t.Fatalf("rank %d from hello %x", r, h)
		}
	})
}
