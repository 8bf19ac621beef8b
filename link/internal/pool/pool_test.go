package pool

import (
	"errors"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

func TestConfig(t *testing.T) {
	for _, c := range [][2]int{{0, 1}, {1, 0}, {-1, 5}, {64, MaxFrames + 1}, {1 << 30, 1 << 24}} {
		if _, err := New(c[0], c[1]); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%d, %d) = %v, want ErrConfig", c[0], c[1], err)
		}
	}
}

// TestAgainstModel drives a pool with random Get/Put (including bad and
// double releases) and checks it against a map of what is out.
func TestAgainstModel(t *testing.T) {
	r := testutil.Rand(t)
	const n, size = 37, 16
	p, err := New(size, n)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]bool{}
	for step := 0; step < 20000; step++ {
		switch r.IntN(3) {
		case 0:
			i, ok := p.Get()
			if ok != (len(out) < n) {
				t.Fatalf("step %d: Get ok=%v with %d out", step, ok, len(out))
			}
			if !ok {
				continue
			}
			if out[i] {
				t.Fatalf("step %d: Get returned %d, already out", step, i)
			}
			out[i] = true
			if !p.InUse(i) {
				t.Fatalf("InUse(%d) false after Get", i)
			}
			b := p.Buf(i)
			if len(b) != size || cap(b) != size {
				t.Fatalf("Buf len %d cap %d", len(b), cap(b))
			}
			for k := range b {
				b[k] = byte(i)
			}
		default:
			i := uint32(r.IntN(n + 3))
			err := p.Put(i)
			switch {
			case i >= n:
				if !errors.Is(err, ErrBadIndex) {
					t.Fatalf("Put(%d) = %v, want ErrBadIndex", i, err)
				}
			case !out[i]:
				if !errors.Is(err, ErrNotInUse) {
					t.Fatalf("Put(%d) = %v, want ErrNotInUse", i, err)
				}
			default:
				if err != nil {
					t.Fatalf("Put(%d) = %v", i, err)
				}
				delete(out, i)
				if p.InUse(i) {
					t.Fatalf("InUse(%d) true after Put", i)
				}
			}
		}
		if p.Free() != n-len(out) {
			t.Fatalf("step %d: Free %d, want %d", step, p.Free(), n-len(out))
		}
		// Buffers never overlap: every outstanding buffer still holds its
		// own index.
		for i := range out {
			if b := p.Buf(i); b[0] != byte(i) || b[size-1] != byte(i) {
				t.Fatalf("buffer %d overwritten", i)
			}
		}
	}
}

func TestNoAllocs(t *testing.T) {
	p, err := New(64, 8)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		var ids [8]uint32
		for k := range ids {
			ids[k], _ = p.Get()
		}
		for _, i := range ids {
			_ = p.Put(i)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per Get/Put cycle", allocs)
	}
}
