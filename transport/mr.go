package transport

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// Access says what a remote peer may do to a memory region.
type Access uint8

const (
	// AccessRemoteWrite lets peers RDMA WRITE into the region.
	AccessRemoteWrite Access = 1 << iota
	// AccessRemoteRead lets peers RDMA READ from the region (reserved: READ
	// is not implemented yet).
	AccessRemoteRead
)

// MR is a registered memory region: a byte slice that remote peers may
// write into, named on the wire by its virtual address (Addr) and remote key.
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

// Remote names a remote region, or a place inside it, for a WRITE.
type Remote struct {
	Addr uint64
	RKey uint32
}

// Remote returns the address of Buf[off] for a peer to write to.
func (m *MR) Remote(off uint64) Remote { return Remote{Addr: m.Addr + off, RKey: m.RKey} }

// ErrRemoteAccess is the error of a WRITE that the peer refused: unknown
// key, range outside the region, or no write permission (NAK remote access
// error). Nothing was written.
var ErrRemoteAccess = errors.New("transport: remote access error")

// mrTable maps remote keys to regions. Regions get distinct, page-aligned,
// non-overlapping synthetic virtual addresses.
type mrTable struct {
	byKey  map[uint32]*MR
	nextVA uint64
	rng    *rand.Rand
}

func newMRTable(rng *rand.Rand) *mrTable {
	return &mrTable{byKey: map[uint32]*MR{}, nextVA: 0x7f00_0000_0000 + rng.Uint64N(1<<32)<<12, rng: rng}
}

func (t *mrTable) register(buf []byte, acc Access) *MR {
	key := t.rng.Uint32()
	for key == 0 || t.byKey[key] != nil {
		key = t.rng.Uint32()
	}
	mr := &MR{Buf: buf, Addr: t.nextVA, RKey: key, Access: acc}
	t.nextVA += (uint64(len(buf)) + 2<<12) &^ (1<<12 - 1)
	t.byKey[key] = mr
	return mr
}

func (t *mrTable) deregister(mr *MR) error {
	if t.byKey[mr.RKey] != mr {
		return fmt.Errorf("transport: region with key %#x is not registered", mr.RKey)
	}
	delete(t.byKey, mr.RKey)
	return nil
}

// target returns the bytes [va, va+n) of the region with key rkey if the
// whole operation [opVA, opVA+opLen) lies inside it and it allows writes.
func (t *mrTable) target(rkey uint32, opVA uint64, opLen uint32, off uint32, n int) ([]byte, bool) {
	mr := t.byKey[rkey]
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
