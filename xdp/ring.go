package xdp

import (
	"sync/atomic"
	"unsafe"
)

// ringNeedWakeup is XDP_RING_NEED_WAKEUP, the flag the kernel sets on a ring
// when it wants a system call before it looks at the ring again.
const ringNeedWakeup = 1

// ring is the user's half of one single-producer, single-consumer ring whose
// producer and consumer indices are shared with the kernel. The indices are
// free-running uint32 counters; an entry's slot is index&mask.
//
// The peer's index is read with an atomic load (acquire) and ours published
// with an atomic store (release) after the entries are written or read, so
// the kernel never sees an index ahead of the entries it covers. Both
// indices are also cached here, so that a batch costs one load and one
// store.
type ring struct {
	prod, cons, flags *uint32
	mask, size        uint32
	// local is our index: the producer index for a ring we fill (fill,
	// TX), the consumer index for a ring we drain (RX, completion). It is
	// published to the kernel by publish.
	local uint32
	// peer caches the kernel's index: its consumer index plus size for a
	// ring we fill (so peer-local is the free space), its producer index
	// for a ring we drain (so peer-local is the number of entries).
	peer uint32
}

// free returns the number of free slots, reloading the kernel's consumer
// index only when the cached value shows fewer than want.
func (r *ring) free(want uint32) uint32 {
	n := r.peer - r.local
	if n < want {
		r.peer = atomic.LoadUint32(r.cons) + r.size
		n = r.peer - r.local
		if n > r.size { // a consumer index ahead of ours: not from a sane kernel
			r.peer = r.local
			n = 0
		}
	}
	return n
}

// avail returns the number of entries ready to read, reloading the kernel's
// producer index only when the cached value shows fewer than want.
func (r *ring) avail(want uint32) uint32 {
	n := r.peer - r.local
	if n < want {
		r.peer = atomic.LoadUint32(r.prod)
		n = r.peer - r.local
		if n > r.size { // a producer index behind ours or lapping us
			r.peer = r.local
			n = 0
		}
	}
	return n
}

// publishProd makes the entries written so far visible to the kernel.
func (r *ring) publishProd() { atomic.StoreUint32(r.prod, r.local) }

// publishCons hands the slots read so far back to the kernel.
func (r *ring) publishCons() { atomic.StoreUint32(r.cons, r.local) }

// outstanding returns how many entries of a ring we fill the kernel has not
// consumed yet.
func (r *ring) outstanding() uint32 {
	n := r.local - atomic.LoadUint32(r.cons)
	if n > r.size {
		return 0
	}
	return n
}

// needWakeup reports whether the kernel asked for a system call.
func (r *ring) needWakeup() bool {
	return r.flags != nil && atomic.LoadUint32(r.flags)&ringNeedWakeup != 0
}

// desc is an RX or TX ring entry (struct xdp_desc).
type desc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// addrRing is a fill or completion ring: entries are UMEM addresses.
type addrRing struct {
	ring
	descs []uint64
}

// descRing is an RX or TX ring.
type descRing struct {
	ring
	descs []desc
}

// ringLayout is where a ring's parts lie in its mapping (struct
// xdp_ring_offset).
type ringLayout struct {
	prod, cons, desc, flags uint64
}

// initRing points r at the ring mapped at mem.
func initRing(r *ring, mem []byte, l ringLayout, size uint32) {
	base := unsafe.Pointer(unsafe.SliceData(mem))
	r.prod = (*uint32)(unsafe.Add(base, l.prod))
	r.cons = (*uint32)(unsafe.Add(base, l.cons))
	r.flags = (*uint32)(unsafe.Add(base, l.flags))
	r.size = size
	r.mask = size - 1
}

func newAddrRing(mem []byte, l ringLayout, size uint32, producer bool) addrRing {
	var r addrRing
	initRing(&r.ring, mem, l, size)
	r.descs = unsafe.Slice((*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(mem)), l.desc)), size)
	r.syncIndices(producer)
	return r
}

func newDescRing(mem []byte, l ringLayout, size uint32, producer bool) descRing {
	var r descRing
	initRing(&r.ring, mem, l, size)
	r.descs = unsafe.Slice((*desc)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(mem)), l.desc)), size)
	r.syncIndices(producer)
	return r
}

// syncIndices loads the indices as they are in the mapping (zero for a new
// ring).
func (r *ring) syncIndices(producer bool) {
	if producer {
		r.local = atomic.LoadUint32(r.prod)
		r.peer = atomic.LoadUint32(r.cons) + r.size
	} else {
		r.local = atomic.LoadUint32(r.cons)
		r.peer = atomic.LoadUint32(r.prod)
	}
}

// ringBytes is the length of a ring's mapping.
func ringBytes(l ringLayout, size uint32, entry uintptr) int {
	return int(l.desc) + int(size)*int(entry)
}
