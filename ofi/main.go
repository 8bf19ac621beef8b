package main

/*
#cgo CFLAGS: -O2 -Wall -Wno-unused-function
#cgo LDFLAGS: -ldl
#include "prov.h"
*/
import "C"

import (
	"runtime/cgo"
	"sync/atomic"
	"unsafe"
)

// closer is every object behind a handle: close returns 0 or a negative
// FI_E* code (-FI_EBUSY while other objects still use it).
type closer interface {
	close() C.int
}

// handles counts the live objects, for tests and leak checks.
var handles atomic.Int64

func newHandle(v closer) C.uintptr_t {
	handles.Add(1)
	return C.uintptr_t(cgo.NewHandle(v))
}

// object returns the Go state behind h as a T, or false for a handle of
// another class.
func object[T any](h C.uintptr_t) (T, bool) {
	var zero T
	if h == 0 {
		return zero, false
	}
	v, ok := cgo.Handle(h).Value().(T)
	if !ok {
		return zero, false
	}
	return v, true
}

//export goClose
func goClose(h C.uintptr_t) C.int {
	o, ok := object[closer](h)
	if !ok {
		return -C.FI_EINVAL
	}
	if r := o.close(); r != 0 {
		return r
	}
	cgo.Handle(h).Delete()
	handles.Add(-1)
	return 0
}

//export goBind
func goBind(h, bh C.uintptr_t, bclass C.int, flags C.uint64_t) C.int {
	if ep, ok := object[*endpoint](h); ok {
		return ep.bind(bh, flags)
	}
	if mr, ok := object[*memRegion](h); ok {
		_ = mr
		return -C.FI_ENOSYS
	}
	if av, ok := object[*addrVec](h); ok {
		if _, ok := object[*eventQueue](bh); ok {
			_ = av
			return 0
		}
		return -C.FI_EINVAL
	}
	return -C.FI_ENOSYS
}

//export goControl
func goControl(h C.uintptr_t, cmd C.int, arg unsafe.Pointer) C.int {
	if ep, ok := object[*endpoint](h); ok {
		return ep.control(cmd, arg)
	}
	if cq, ok := object[*complQueue](h); ok {
		return cq.control(cmd, arg)
	}
	if cmd == C.FI_ENABLE {
		return 0
	}
	return -C.FI_ENOSYS
}
