package main

/*
#include "prov.h"
*/
import "C"

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"unsafe"

	"github.com/sprayfabric/spray/transport"
)

// memRegion is a registered memory region of a domain. Its key, drawn by
// the domain (FI_MR_PROV_KEY), is the transport's remote key on every
// endpoint of the domain, and peers name bytes in it by offset (no
// FI_MR_VIRT_ADDR). The region's bytes are the application's (C memory).
type memRegion struct {
	refs
	dom  *domain
	buf  []byte
	acc  transport.Access
	key  uint32
	regs map[*endpoint]*transport.MR // under dom.mu
}

func (m *memRegion) close() C.int {
	if r := m.shut(); r != 0 {
		return r
	}
	d := m.dom
	d.mu.Lock()
	delete(d.mrs, m)
	delete(d.keys, m.key)
	for ep, tm := range m.regs {
		_ = ep.sp.Deregister(context.Background(), tm)
	}
	clear(m.regs)
	d.mu.Unlock()
	d.release()
	return 0
}

// register makes m reachable through ep; called with dom.mu held.
func (m *memRegion) register(ep *endpoint) {
	if m.acc == 0 {
		return
	}
	tm, err := ep.sp.RegisterAt(context.Background(), m.buf, m.acc, m.key, 0)
	if err != nil {
		logf("spray: registering a region on %s: %v", ep.name, err)
		return
	}
	m.regs[ep] = tm
}

//export goMRReg
func goMRReg(dh C.uintptr_t, iov *C.struct_iovec, count C.size_t, access, offset, key, flags C.uint64_t, o *C.sp_mr) C.int {
	d, ok := object[*domain](dh)
	if !ok || d.closed.Load() {
		return -C.FI_EINVAL
	}
	if count != 1 || flags != 0 {
		return -C.FI_EINVAL
	}
	v := unsafe.Slice(iov, count)[0]
	if v.iov_len > 0 && v.iov_base == nil {
		return -C.FI_EINVAL
	}
	m := &memRegion{dom: d, regs: map[*endpoint]*transport.MR{}}
	if v.iov_len > 0 {
		m.buf = unsafe.Slice((*byte)(v.iov_base), v.iov_len)
	}
	if access&C.FI_REMOTE_WRITE != 0 {
		m.acc |= transport.AccessRemoteWrite
	}
	if access&C.FI_REMOTE_READ != 0 {
		m.acc |= transport.AccessRemoteRead
	}
	d.mu.Lock()
	for m.key == 0 || d.keys[m.key] {
		var b [4]byte
		rand.Read(b[:])
		m.key = binary.LittleEndian.Uint32(b[:])
	}
	d.keys[m.key] = true
	d.mrs[m] = struct{}{}
	for ep := range d.eps {
		m.register(ep)
	}
	d.mu.Unlock()
	d.hold()
	o.f.key = C.uint64_t(m.key)
	o.h = newHandle(m)
	return 0
}

//export goRMA
func goRMA(h C.uintptr_t, write C.int, iov *C.struct_iovec, count C.size_t, dest, raddr, key, data C.uint64_t, ctx unsafe.Pointer, flags C.uint64_t) C.ssize_t {
	ep, ok := object[*endpoint](h)
	if !ok || ep.closed.Load() {
		return -C.FI_EINVAL
	}
	if ep.caps&C.FI_RMA == 0 {
		return -C.FI_EOPNOTSUPP
	}
	v, n, ok := iovs(iov, count)
	if !ok || n > maxMsgSize || key > 0xffffffff || (flags&flagData != 0 && data > 0xffffffff) {
		return -C.FI_EINVAL
	}
	if flags&flagOpFlags != 0 {
		flags |= ep.txFlags
	}
	if flags&flagInject != 0 && n > injectSize {
		return -C.FI_EINVAL
	}
	remote := transport.Remote{Addr: uint64(raddr), RKey: uint32(key)}
	op := &txOp{ctx: ctx, n: n, buf: getBuf(n),
		comp: flags&flagInject == 0 && (!ep.txSel || flags&C.FI_COMPLETION != 0)}
	if write != 0 {
		gather(op.buf, v)
		op.flags, op.cnt = C.FI_RMA|C.FI_WRITE, cntWrite
		op.wr = transport.WorkRequest{Op: transport.OpWrite, Data: op.buf, Remote: remote}
		if flags&flagData != 0 {
			op.wr.Op, op.wr.Imm = transport.OpWriteImm, uint32(data)
		}
	} else {
		op.flags, op.cnt, op.readTo = C.FI_RMA|C.FI_READ, cntRead, v
		op.wr = transport.WorkRequest{Op: transport.OpRead, Data: op.buf, Remote: remote}
	}
	return ep.submit(dest, op)
}

// remoteWrite reports a peer's WRITE with immediate data: a completion
// on the receive CQ with the data, and the remote write counter.
func (ep *endpoint) remoteWrite(m transport.Message) {
	ep.mu.Lock()
	q, c := ep.rxcq, ep.cntr[cntRemoteWrite]
	ep.mu.Unlock()
	if c != nil {
		c.add(true)
	}
	if q != nil {
		q.push(entry{flags: C.FI_RMA | C.FI_REMOTE_WRITE | C.FI_REMOTE_CQ_DATA, len: C.size_t(m.Len),
			data: C.uint64_t(m.Imm), src: C.FI_ADDR_NOTAVAIL})
	}
}
