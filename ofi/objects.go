package main

/*
#include <string.h>
#include "prov.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

var sprintf = fmt.Sprintf

// refs counts the objects opened from or bound to an object: close
// refuses with -FI_EBUSY while any remain, as libfabric asks of
// providers, so that closing out of order is an error, not a crash.
type refs struct {
	n      atomic.Int64
	closed atomic.Bool
}

func (r *refs) hold()    { r.n.Add(1) }
func (r *refs) release() { r.n.Add(-1) }

// shut marks the object closed unless it is in use.
func (r *refs) shut() C.int {
	if r.n.Load() > 0 {
		return -C.FI_EBUSY
	}
	if r.closed.Swap(true) {
		return -C.FI_EINVAL
	}
	return 0
}

// fabric is the root object; it holds nothing but its children's count.
type fabric struct{ refs }

func (f *fabric) close() C.int { return f.shut() }

//export goFabric
func goFabric(attr *C.struct_fi_fabric_attr, o *C.sp_fabric) C.int {
	if attr != nil && attr.name != nil && C.GoString(attr.name) != "spray" {
		return -C.FI_EINVAL
	}
	o.h = newHandle(&fabric{})
	return 0
}

// domain is one interface: its endpoints open their own transport
// endpoints on it.
type domain struct {
	refs
	fab  *fabric
	name string
	mu   sync.Mutex
	eps  map[*endpoint]struct{}
	mrs  map[*memRegion]struct{}
	keys map[uint32]bool
}

func (d *domain) addEndpoint(ep *endpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.eps[ep] = struct{}{}
	for mr := range d.mrs {
		mr.register(ep)
	}
}

func (d *domain) removeEndpoint(ep *endpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.eps, ep)
	for mr := range d.mrs {
		delete(mr.regs, ep)
	}
}

func (d *domain) close() C.int {
	if r := d.shut(); r != 0 {
		return r
	}
	d.fab.release()
	return 0
}

//export goDomain
func goDomain(fh C.uintptr_t, info *C.struct_fi_info, o *C.sp_domain) C.int {
	f, ok := object[*fabric](fh)
	if !ok || f.closed.Load() {
		return -C.FI_EINVAL
	}
	if info.domain_attr == nil || info.domain_attr.name == nil {
		return -C.FI_EINVAL
	}
	f.hold()
	o.h = newHandle(&domain{fab: f, name: C.GoString(info.domain_attr.name),
		eps: map[*endpoint]struct{}{}, mrs: map[*memRegion]struct{}{}, keys: map[uint32]bool{}})
	return 0
}

// eventQueue holds what the application writes to it (RDM endpoints
// report no connection events) and wakes fi_eq_sread.
type eventQueue struct {
	refs
	fab   *fabric
	mu    sync.Mutex
	items []eqItem
	wake  chan struct{}
}

type eqItem struct {
	event C.uint32_t
	data  []byte
	err   bool
}

func (q *eventQueue) close() C.int {
	if r := q.shut(); r != 0 {
		return r
	}
	q.fab.release()
	return 0
}

//export goEQOpen
func goEQOpen(fh C.uintptr_t, attr *C.struct_fi_eq_attr, o *C.sp_eq) C.int {
	f, ok := object[*fabric](fh)
	if !ok || f.closed.Load() {
		return -C.FI_EINVAL
	}
	switch attr.wait_obj {
	case C.FI_WAIT_NONE, C.FI_WAIT_UNSPEC:
	default:
		return -C.FI_ENOSYS
	}
	f.hold()
	o.h = newHandle(&eventQueue{fab: f, wake: make(chan struct{}, 1)})
	return 0
}

//export goEQWrite
func goEQWrite(h C.uintptr_t, event C.uint32_t, buf unsafe.Pointer, n C.size_t, flags C.uint64_t) C.ssize_t {
	q, ok := object[*eventQueue](h)
	if !ok || q.closed.Load() {
		return -C.FI_EINVAL
	}
	if n > 4096 || (n > 0 && buf == nil) {
		return -C.FI_EINVAL
	}
	q.mu.Lock()
	if len(q.items) >= 1024 {
		q.mu.Unlock()
		return -C.FI_EAGAIN
	}
	q.items = append(q.items, eqItem{event: event, data: C.GoBytes(buf, C.int(n))})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return C.ssize_t(n)
}

//export goEQRead
func goEQRead(h C.uintptr_t, event *C.uint32_t, buf unsafe.Pointer, n C.size_t, flags C.uint64_t, timeout C.int, block C.int) C.ssize_t {
	q, ok := object[*eventQueue](h)
	if !ok || q.closed.Load() {
		return -C.FI_EINVAL
	}
	deadline := waitDeadline(timeout)
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			it := q.items[0]
			if it.err {
				q.mu.Unlock()
				return -C.FI_EAVAIL
			}
			if int(n) < len(it.data) {
				q.mu.Unlock()
				return -C.FI_ETOOSMALL
			}
			if flags&C.FI_PEEK == 0 {
				q.items = q.items[1:]
			}
			q.mu.Unlock()
			if event != nil {
				*event = it.event
			}
			if len(it.data) > 0 {
				copy(unsafe.Slice((*byte)(buf), len(it.data)), it.data)
			}
			return C.ssize_t(len(it.data))
		}
		q.mu.Unlock()
		if block == 0 || !sleepUntil(q.wake, deadline) {
			return -C.FI_EAGAIN
		}
	}
}

//export goEQReadErr
func goEQReadErr(h C.uintptr_t, buf *C.struct_fi_eq_err_entry, flags C.uint64_t) C.ssize_t {
	q, ok := object[*eventQueue](h)
	if !ok || q.closed.Load() || buf == nil {
		return -C.FI_EINVAL
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || !q.items[0].err {
		return -C.FI_EAGAIN
	}
	it := q.items[0]
	q.items = q.items[1:]
	C.memset(unsafe.Pointer(buf), 0, C.sizeof_struct_fi_eq_err_entry)
	if len(it.data) >= int(C.sizeof_struct_fi_eq_err_entry) {
		C.memcpy(unsafe.Pointer(buf), unsafe.Pointer(&it.data[0]), C.sizeof_struct_fi_eq_err_entry)
	}
	return C.sizeof_struct_fi_eq_err_entry
}

// waitDeadline turns a libfabric timeout in milliseconds (negative:
// forever) into a deadline (zero: none).
func waitDeadline(ms C.int) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return time.Now().Add(time.Duration(ms) * time.Millisecond)
}

// sleepUntil waits for a wake-up or the deadline; false at the deadline.
func sleepUntil(wake <-chan struct{}, deadline time.Time) bool {
	if deadline.IsZero() {
		<-wake
		return true
	}
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
		return false
	}
}

// addrVec maps fi_addr_t values to endpoint names (IPv4 address and
// connection manager port). FI_AV_TABLE and FI_AV_MAP both hand out the
// entry's index: a map's addresses are opaque to the application, and an
// index serves as one.
type addrVec struct {
	refs
	dom    *domain
	typ    C.enum_fi_av_type
	mu     sync.RWMutex
	names  []netip.AddrPort // zero: removed
	byName map[netip.AddrPort]C.uint64_t
}

func (a *addrVec) close() C.int {
	if r := a.shut(); r != 0 {
		return r
	}
	a.dom.release()
	return 0
}

// lookup returns the name of fi, or false for an address never inserted
// or removed.
func (a *addrVec) lookup(fi C.uint64_t) (netip.AddrPort, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if fi >= C.uint64_t(len(a.names)) || !a.names[fi].IsValid() {
		return netip.AddrPort{}, false
	}
	return a.names[fi], true
}

// reverse returns the fi_addr_t of name, FI_ADDR_NOTAVAIL when it is not
// in the vector.
func (a *addrVec) reverse(name netip.AddrPort) C.uint64_t {
	if a == nil {
		return C.FI_ADDR_NOTAVAIL
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if fi, ok := a.byName[name]; ok {
		return fi
	}
	return C.FI_ADDR_NOTAVAIL
}

func (a *addrVec) insert(name netip.AddrPort) C.uint64_t {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fi, ok := a.byName[name]; ok && a.typ == C.FI_AV_MAP {
		return fi
	}
	fi := C.uint64_t(len(a.names))
	a.names = append(a.names, name)
	if _, ok := a.byName[name]; !ok {
		a.byName[name] = fi
	}
	return fi
}

//export goAVOpen
func goAVOpen(dh C.uintptr_t, attr *C.struct_fi_av_attr, o *C.sp_av) C.int {
	d, ok := object[*domain](dh)
	if !ok || d.closed.Load() {
		return -C.FI_EINVAL
	}
	typ := attr._type
	switch typ {
	case C.FI_AV_UNSPEC:
		typ = C.FI_AV_TABLE
	case C.FI_AV_MAP, C.FI_AV_TABLE:
	default:
		return -C.FI_EINVAL
	}
	if attr.rx_ctx_bits != 0 || attr.name != nil || attr.flags&^C.uint64_t(C.FI_EVENT|C.FI_SYMMETRIC) != 0 {
		return -C.FI_ENOSYS
	}
	if attr.flags&C.FI_EVENT != 0 {
		return -C.FI_ENOSYS
	}
	d.hold()
	o.h = newHandle(&addrVec{dom: d, typ: typ, byName: map[netip.AddrPort]C.uint64_t{}})
	return 0
}

//export goAVInsert
func goAVInsert(h C.uintptr_t, addr unsafe.Pointer, count C.size_t, out *C.uint64_t, flags C.uint64_t) C.int {
	a, ok := object[*addrVec](h)
	if !ok || a.closed.Load() || (count > 0 && addr == nil) {
		return -C.FI_EINVAL
	}
	var outs []C.uint64_t
	if out != nil {
		outs = unsafe.Slice(out, count)
	}
	n := 0
	for i := range int(count) {
		name, ok := sockaddrIn(unsafe.Add(addr, i*nameLen), nameLen)
		fi := C.uint64_t(C.FI_ADDR_NOTAVAIL)
		if ok && name.Port() != 0 && !name.Addr().IsUnspecified() && !name.Addr().IsMulticast() {
			fi = a.insert(name)
			n++
		}
		if outs != nil {
			outs[i] = fi
		}
	}
	return C.int(n)
}

//export goAVInsertSvc
func goAVInsertSvc(h C.uintptr_t, node, service *C.char, out *C.uint64_t, flags C.uint64_t) C.int {
	a, ok := object[*addrVec](h)
	if !ok || a.closed.Load() || node == nil || service == nil {
		return -C.FI_EINVAL
	}
	name, ok := resolve(node, service)
	if !ok || name.Port() == 0 || !name.Addr().IsValid() {
		if out != nil {
			*out = C.FI_ADDR_NOTAVAIL
		}
		return 0
	}
	fi := a.insert(name)
	if out != nil {
		*out = fi
	}
	return 1
}

//export goAVRemove
func goAVRemove(h C.uintptr_t, fis *C.uint64_t, count C.size_t, flags C.uint64_t) C.int {
	a, ok := object[*addrVec](h)
	if !ok || a.closed.Load() || (count > 0 && fis == nil) {
		return -C.FI_EINVAL
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ret := C.int(0)
	for _, fi := range unsafe.Slice(fis, count) {
		if fi >= C.uint64_t(len(a.names)) || !a.names[fi].IsValid() {
			ret = -C.FI_EINVAL
			continue
		}
		name := a.names[fi]
		a.names[fi] = netip.AddrPort{}
		if a.byName[name] == fi {
			delete(a.byName, name)
			for j, n := range a.names {
				if n == name {
					a.byName[name] = C.uint64_t(j)
					break
				}
			}
		}
	}
	return ret
}

//export goAVLookup
func goAVLookup(h C.uintptr_t, fi C.uint64_t, addr unsafe.Pointer, n *C.size_t) C.int {
	a, ok := object[*addrVec](h)
	if !ok || a.closed.Load() || n == nil {
		return -C.FI_EINVAL
	}
	name, ok := a.lookup(fi)
	if !ok {
		return -C.FI_ENOENT
	}
	if *n >= nameLen && addr != nil {
		putSockaddrIn(addr, name)
	}
	*n = nameLen
	return 0
}

// counter is a libfabric counter: a value and an error count that
// operations bump, with waiters woken on each change.
type counter struct {
	refs
	dom   *domain
	mu    sync.Mutex
	val   uint64
	errs  uint64
	wake  chan struct{} // closed and replaced at each change
	bound atomic.Int64
	boundEPs
}

func (c *counter) close() C.int {
	if c.bound.Load() > 0 {
		return -C.FI_EBUSY
	}
	if r := c.shut(); r != 0 {
		return r
	}
	c.dom.release()
	return 0
}

func (c *counter) change(fn func()) {
	c.mu.Lock()
	fn()
	w := c.wake
	c.wake = make(chan struct{})
	c.mu.Unlock()
	close(w)
}

func (c *counter) add(ok bool) {
	c.change(func() {
		if ok {
			c.val++
		} else {
			c.errs++
		}
	})
}

//export goCntrOpen
func goCntrOpen(dh C.uintptr_t, attr *C.struct_fi_cntr_attr, o *C.sp_cntr) C.int {
	d, ok := object[*domain](dh)
	if !ok || d.closed.Load() {
		return -C.FI_EINVAL
	}
	if attr != nil {
		if attr.events != C.FI_CNTR_EVENTS_COMP {
			return -C.FI_ENOSYS
		}
		switch attr.wait_obj {
		case C.FI_WAIT_NONE, C.FI_WAIT_UNSPEC:
		default:
			return -C.FI_ENOSYS
		}
	}
	d.hold()
	o.h = newHandle(&counter{dom: d, wake: make(chan struct{})})
	return 0
}

//export goCntrRead
func goCntrRead(h C.uintptr_t, errs C.int) C.uint64_t {
	c, ok := object[*counter](h)
	if !ok {
		return 0
	}
	c.progress()
	c.mu.Lock()
	defer c.mu.Unlock()
	if errs != 0 {
		return C.uint64_t(c.errs)
	}
	return C.uint64_t(c.val)
}

//export goCntrSet
func goCntrSet(h C.uintptr_t, errs, add C.int, v C.uint64_t) C.int {
	c, ok := object[*counter](h)
	if !ok || c.closed.Load() {
		return -C.FI_EINVAL
	}
	c.change(func() {
		p := &c.val
		if errs != 0 {
			p = &c.errs
		}
		if add != 0 {
			*p += uint64(v)
		} else {
			*p = uint64(v)
		}
	})
	return 0
}

//export goCntrWait
func goCntrWait(h C.uintptr_t, threshold C.uint64_t, timeout C.int) C.int {
	c, ok := object[*counter](h)
	if !ok || c.closed.Load() {
		return -C.FI_EINVAL
	}
	var t <-chan time.Time
	if timeout >= 0 {
		tm := time.NewTimer(time.Duration(timeout) * time.Millisecond)
		defer tm.Stop()
		t = tm.C
	}
	c.progress()
	c.standDown()
	for {
		c.mu.Lock()
		v, e0, w := c.val, c.errs, c.wake
		c.mu.Unlock()
		if v >= uint64(threshold) {
			return 0
		}
		select {
		case <-w:
			c.mu.Lock()
			e1 := c.errs
			c.mu.Unlock()
			if e1 != e0 {
				return -C.FI_EAVAIL
			}
		case <-t:
			return -C.FI_ETIMEDOUT
		}
	}
}
