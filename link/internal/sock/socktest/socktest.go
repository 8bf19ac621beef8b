package socktest

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link"
)

// Content fills p with bytes that depend on seq only, seq itself in the
// first four bytes when p has room for them.
func Content(p []byte, seq uint32) {
	x := uint64(seq)*0x9E3779B97F4A7C15 + 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
	if len(p) >= 4 {
		binary.BigEndian.PutUint32(p, seq)
	}
}

// maxIdle is how many empty Waits in a row Exchange and Recv put up with
// before they give up.
const maxIdle = 100

// Exchange sends fs on a, then receives and releases on b until as many
// frames arrived, calling b.Wait(wait) whenever none is there; it gives up
// after 100 such Waits in a row. It returns the frames sent and received,
// and does not allocate.
func Exchange(a, b link.Link, fs, in []link.Frame, wait time.Duration) (sent, got int) {
	sent, _ = a.Send(fs)
	for idle := 0; got < sent && idle < maxIdle; {
		k, _ := b.Recv(in)
		b.Release(in[:k])
		got += k
		if k > 0 {
			idle = 0
			continue
		}
		idle++
		b.Wait(wait)
	}
	return sent, got
}

// Recv calls b.Recv(in) until it returns frames or an error, calling
// b.Wait(wait) in between, at most 100 times. The frames are not released.
func Recv(b link.Link, in []link.Frame, wait time.Duration) (int, error) {
	for range maxIdle {
		if k, err := b.Recv(in); k > 0 || err != nil {
			return k, err
		}
		b.Wait(wait)
	}
	return 0, nil
}

// NoAllocs runs 200 rounds of: Alloc up to 16 frames on a, fill each (i is
// its index in the round), Exchange them to b; and fails t if a round
// allocates or a frame does not arrive. fill must not allocate either.
func NoAllocs(t testing.TB, a, b link.Link, fill func(i int, buf []byte) []byte) {
	t.Helper()
	fs := make([]link.Frame, 16)
	in := make([]link.Frame, 16)
	var sent, got int
	allocs := testing.AllocsPerRun(200, func() {
		n := a.Alloc(fs)
		for i := range n {
			fs[i].Buf = fill(i, fs[i].Buf)
		}
		s, g := Exchange(a, b, fs[:n], in, 50*time.Millisecond)
		sent, got = sent+s, got+g
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per batch", allocs)
	}
	if sent == 0 || got != sent {
		t.Fatalf("sent %d frames, received %d", sent, got)
	}
}
