package collective

import (
	"fmt"
	"unsafe"
)

// Element is the constraint on the element types that collectives reduce
// and move. Elements travel in the host's byte order, which every rank
// must share (every platform spray runs on is little-endian).
type Element interface {
	float32 | float64 | int32
}

// Op is a reduction operator.
type Op uint8

const (
	// Sum adds. Integer sums wrap; float sums are rounded in the order
	// the algorithm adds, which differs from a serial loop's.
	Sum Op = iota
	// Min keeps the smaller (Go's min: NaN wins).
	Min
	// Max keeps the larger (Go's max: NaN wins).
	Max
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

func (o Op) valid() bool { return o <= Max }

// reduce sets dst[i] = op(dst[i], src[i]).
func reduce[T Element](dst, src []T, op Op) {
	src = src[:len(dst)]
	switch op {
	case Sum:
		for i, v := range src {
			dst[i] += v
		}
	case Min:
		for i, v := range src {
			dst[i] = min(dst[i], v)
		}
	case Max:
		for i, v := range src {
			dst[i] = max(dst[i], v)
		}
	}
}

func elemSize[T Element]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// bytesOf views x as bytes (no copy).
func bytesOf[T Element](x []T) []byte {
	if len(x) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*elemSize[T]())
}

// elemsOf views b as elements without a copy when b is aligned for T,
// and otherwise copies it into scratch (grown as needed). len(b) must be a
// multiple of the element size.
func elemsOf[T Element](b []byte, scratch *[]T) []T {
	n := len(b) / elemSize[T]()
	if n == 0 {
		return nil
	}
	var z T
	if uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(z) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
	}
	if cap(*scratch) < n {
		*scratch = make([]T, n)
	}
	s := (*scratch)[:n]
	copy(bytesOf(s), b)
	return s
}
