package transport

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/sprayfabric/spray/clock"
)

func TestSPSCRing(t *testing.T) {
	r := newSPSCRing(5, 16) // rounds up to 8 slots
	if r.cap() != 8 {
		t.Fatalf("cap %d, want 8", r.cap())
	}
	if _, _, ok := r.front(); ok {
		t.Fatal("empty ring has a front")
	}
	if r.push(make([]byte, 17), 0) {
		t.Fatal("a frame longer than a slot was accepted")
	}
	for i := range 8 {
		if !r.push([]byte{byte(i), 1, 2}, clock.Time(100+i)) {
			t.Fatalf("push %d refused below capacity", i)
		}
	}
	if r.push([]byte{9}, 0) {
		t.Fatal("push into a full ring accepted")
	}
	if r.len() != 8 {
		t.Fatalf("len %d, want 8", r.len())
	}
	for i := range 8 {
		b, at, ok := r.front()
		if !ok || !bytes.Equal(b, []byte{byte(i), 1, 2}) || at != clock.Time(100+i) {
			t.Fatalf("front %d = %v at %v, %v", i, b, at, ok)
		}
		r.pop()
		if i == 0 && !r.push([]byte{8, 1, 2}, 108) { // room again after one pop
			t.Fatal("push refused after a pop")
		}
	}
	b, _, ok := r.front()
	if !ok || b[0] != 8 {
		t.Fatalf("wrapped frame = %v, %v", b, ok)
	}
	r.pop()
	if r.len() != 0 {
		t.Fatalf("len %d after draining", r.len())
	}
	if n := testing.AllocsPerRun(100, func() {
		r.push([]byte{1}, 0)
		r.front()
		r.pop()
	}); n != 0 {
		t.Fatalf("%v allocations per push and pop", n)
	}
}

// A producer and a consumer goroutine: every frame the producer's push
// accepted arrives once, in order, intact; refused pushes are the drops.
// Run with -race.
func TestSPSCRingConcurrent(t *testing.T) {
	const total = 200000
	r := newSPSCRing(64, 64)
	accepted := make(chan uint64, 1)
	go func() {
		var buf [64]byte
		var n uint64
		for i := range uint64(total) {
			binary.BigEndian.PutUint64(buf[:], i)
			for j := 8; j < len(buf); j++ {
				buf[j] = byte(i) ^ byte(j)
			}
			if r.push(buf[:8+int(i%56)], clock.Time(i)) {
				n++
			}
			if i%1024 == 0 {
				runtime.Gosched()
			}
		}
		accepted <- n
	}()
	var got, last uint64
	first := true
	var n uint64
	done := false
	for !done || r.len() > 0 {
		if !done {
			select {
			case n = <-accepted:
				done = true
			default:
			}
		}
		b, at, ok := r.front()
		if !ok {
			runtime.Gosched()
			continue
		}
		i := binary.BigEndian.Uint64(b)
		if at != clock.Time(i) {
			t.Fatalf("frame %d arrived at %v", i, at)
		}
		if len(b) != 8+int(i%56) {
			t.Fatalf("frame %d has %d bytes", i, len(b))
		}
		for j := 8; j < len(b); j++ {
			if b[j] != byte(i)^byte(j) {
				t.Fatalf("frame %d corrupted at byte %d", i, j)
			}
		}
		if !first && i <= last {
			t.Fatalf("frame %d after %d", i, last)
		}
		first, last = false, i
		got++
		r.pop()
	}
	if got != n {
		t.Fatalf("consumer got %d frames, producer pushed %d", got, n)
	}
	t.Logf("%d of %d frames passed, %d refused on a full ring", n, total, total-n)
}
