package main

import (
	"math/bits"
	"sync"
)

// Send buffers (header and payload, gathered from the application's
// iovecs) come from pools by power-of-two size, up to 16 MiB, and go back
// when the transport completes their operation: a steady stream of sends
// allocates nothing per message. Larger buffers are allocated each time.
const (
	minPoolShift = 6
	maxPoolShift = 24
)

var bufPools [maxPoolShift + 1]sync.Pool

// getBuf returns a buffer of length n.
func getBuf(n int) []byte {
	shift := max(bits.Len(uint(max(n, 1)-1)), minPoolShift)
	if shift > maxPoolShift {
		return make([]byte, n)
	}
	if p, ok := bufPools[shift].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<shift)
}

// putBuf gives b back to its pool; b must not be used afterwards.
func putBuf(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	shift := bits.Len(uint(c)) - 1
	if shift < minPoolShift || shift > maxPoolShift {
		return
	}
	b = b[:0]
	bufPools[shift].Put(&b)
}
