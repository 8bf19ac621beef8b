package transport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Access says what a remote peer may do to a memory region.
type Access uint8

const (
	// AccessRemoteWrite lets peers RDMA WRITE into the region.
	AccessRemoteWrite Access = 1 << iota
	// AccessRemoteRead lets peers RDMA READ from the region.
	AccessRemoteRead
)

// MR is a registered memory region: a byte slice that remote peers may
// write into or read from, as its Access allows, named on the wire by its virtual address (Addr) and remote key.
// The zero value is not usable: get one from Engine.Register or
// Endpoint.Register. Its fields do not change after registration; the bytes
// of Buf change under remote writes, and a write-with-immediate completion
// tells the owner when a write has fully landed.
type MR struct {
	Buf    []byte
	Addr   uint64 // virtual address of Buf[0] on the wire
	RKey   uint32
	Access Access
}

// Remote names a remote region, or a place inside it, for a WRITE or a READ.
type Remote struct {
	Addr uint64
	RKey uint32
}

// Remote returns the address of Buf[off] for a peer to write to or read from.
func (m *MR) Remote(off uint64) Remote { return Remote{Addr: m.Addr + off, RKey: m.RKey} }

// ErrRemoteAccess is the error of a WRITE or READ that the peer refused:
// unknown key (a deregistered region included), range outside the region,
// or no write (read) permission (NAK remote access error). Nothing was
// written (read).
var ErrRemoteAccess = errors.New("transport: remote access error")

// mrTable maps remote keys to regions. It is shared by every engine of an
// endpoint (a remote WRITE may arrive on any of them) and read far more
// often than written: lookups load an immutable map through an atomic
// pointer, and register and deregister copy the map under a mutex.
//
// Regions get distinct, page-aligned, non-overlapping addresses. With an
// unpredictable source (no Config.Seed) keys and addresses are drawn from
// it anew for every region, so that one region's key and address say
// nothing about another's; with a seed, addresses follow each other from a
// seeded base. TestRegionsConcurrent guards the sharing.
type mrTable struct {
	m atomic.Pointer[map[uint32]*MR]

	mu     sync.Mutex // serializes writers; guards the fields below
	rng    *rand.Rand
	seeded bool
	nextVA uint64
}

// Region addresses lie in [minVA, maxVA): user-space-looking, 47 bits.
const (
	minVA = 0x1000_0000_0000
	maxVA = 0x7fff_0000_0000
)

func newMRTable(rng *rand.Rand, seeded bool) *mrTable {
	t := &mrTable{rng: rng, seeded: seeded, nextVA: 0x7f00_0000_0000 + rng.Uint64N(1<<32)<<12}
	m := map[uint32]*MR{}
	t.m.Store(&m)
	return t
}

func (t *mrTable) register(buf []byte, acc Access) *MR {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	key := t.rng.Uint32()
	for key == 0 || old[key] != nil {
		key = t.rng.Uint32()
	}
	span := (uint64(len(buf)) + 2<<12) &^ (1<<12 - 1)
	va := t.nextVA
	if t.seeded {
		t.nextVA += span
	} else {
		va = t.randomVA(old, span)
	}
	mr := &MR{Buf: buf, Addr: va, RKey: key, Access: acc}
	m := make(map[uint32]*MR, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[key] = mr
	t.m.Store(&m)
	return mr
}

// registerAt adds a region under the caller's key and address.
func (t *mrTable) registerAt(buf []byte, acc Access, key uint32, va uint64) (*MR, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	if key == 0 || old[key] != nil {
		return nil, fmt.Errorf("%w: remote key %#x is 0 or taken", ErrConfig, key)
	}
	if va+uint64(len(buf)) < va {
		return nil, fmt.Errorf("%w: region at %#x of %d bytes wraps", ErrConfig, va, len(buf))
	}
	mr := &MR{Buf: buf, Addr: va, RKey: key, Access: acc}
	m := make(map[uint32]*MR, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[key] = mr
	t.m.Store(&m)
	return mr, nil
}

// randomVA returns a page-aligned address at which span bytes overlap no
// region of m.
func (t *mrTable) randomVA(m map[uint32]*MR, span uint64) uint64 {
	span = min(span, maxVA-minVA)
	for {
		va := (minVA + t.rng.Uint64N(maxVA-minVA-span+1)) &^ (1<<12 - 1)
		free := true
		for _, r := range m {
			end := r.Addr + (uint64(len(r.Buf))+2<<12)&^(1<<12-1)
			if va < end && r.Addr < va+span {
				free = false
				break
			}
		}
		if free {
			return va
		}
	}
}

func (t *mrTable) deregister(mr *MR) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	if old[mr.RKey] != mr {
		return fmt.Errorf("transport: region with key %#x is not registered", mr.RKey)
	}
	m := make(map[uint32]*MR, len(old))
	for k, v := range old {
		if k != mr.RKey {
			m[k] = v
		}
	}
	t.m.Store(&m)
	return nil
}

// target returns the bytes [va, va+n) of the region with key rkey if the
// whole operation [opVA, opVA+opLen) lies inside it and it allows writes.
func (t *mrTable) target(rkey uint32, opVA uint64, opLen uint32, off uint32, n int) ([]byte, bool) {
	mr := (*t.m.Load())[rkey]
	if mr == nil || mr.Access&AccessRemoteWrite == 0 {
		return nil, false
	}
	if opVA < mr.Addr {
		return nil, false
	}
	start := opVA - mr.Addr
	size := uint64(len(mr.Buf))
	if start > size || uint64(opLen) > size-start {
		return nil, false
	}
	if uint64(off)+uint64(n) > uint64(opLen) {
		return nil, false
	}
	s := start + uint64(off)
	return mr.Buf[s : s+uint64(n)], true
}

// source returns the bytes [va, va+n) of the region with key rkey if they
// lie inside it and it allows reads: what a READ request may read. The
// response reads them as it is sent; a region deregistered meanwhile stays
// readable by the responses already queued (Go memory, never freed under
// them).
func (t *mrTable) source(rkey uint32, va uint64, n uint32) ([]byte, bool) {
	mr := (*t.m.Load())[rkey]
	if mr == nil || mr.Access&AccessRemoteRead == 0 || va < mr.Addr {
		return nil, false
	}
	start, size := va-mr.Addr, uint64(len(mr.Buf))
	if start > size || uint64(n) > size-start {
		return nil, false
	}
	return mr.Buf[start : start+uint64(n) : start+uint64(n)], true
}
