package main

import "testing"

// TestBufPool: buffers come back with the length asked for, a buffer given
// back is reused for the same size class, and sizes beyond the pools work.
func TestBufPool(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 1 << 20, 1<<20 + 24, 1<<24 + 1} {
		b := getBuf(n)
		if len(b) != n {
			t.Fatalf("getBuf(%d): length %d", n, len(b))
		}
		putBuf(b)
	}
	allocs := testing.AllocsPerRun(100, func() {
		b := getBuf(4000)
		b[0] = 1
		putBuf(b)
	})
	if allocs > 1 {
		t.Errorf("a get and put of a pooled size allocates %.1f times", allocs)
	}
}
