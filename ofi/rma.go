package main

/*
#include "prov.h"
*/
import "C"

import (
	"unsafe"
)

// memRegion is a registered memory region.
type memRegion struct {
	refs
	dom *domain
}

func (m *memRegion) close() C.int {
	if r := m.shut(); r != 0 {
		return r
	}
	m.dom.release()
	return 0
}

func (m *memRegion) register(ep *endpoint) {}

//export goMRReg
func goMRReg(dh C.uintptr_t, iov *C.struct_iovec, count C.size_t, access, offset, key, flags C.uint64_t, o *C.sp_mr) C.int {
	return -C.FI_ENOSYS
}

//export goRMA
func goRMA(h C.uintptr_t, write C.int, iov *C.struct_iovec, count C.size_t, peer, raddr, key, data C.uint64_t, ctx unsafe.Pointer, flags C.uint64_t) C.ssize_t {
	return -C.FI_ENOSYS
}
