package main

/*
#include <string.h>
#include "prov.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// entry is one completion, written out in the CQ's format when read.
type entry struct {
	ctx   unsafe.Pointer // the application's op_context (C memory or NULL)
	flags C.uint64_t
	len   C.size_t
	buf   unsafe.Pointer
	data  C.uint64_t
	tag   C.uint64_t
	src   C.uint64_t // fi_addr_t of the sender, FI_ADDR_NOTAVAIL if unknown
	err   C.int      // positive FI_E* code; 0: success
	olen  C.size_t   // bytes that did not fit (FI_ETRUNC)
	prov  C.int      // provider error number (fi_cq_strerror)
}

// complQueue is a completion queue. Successful completions and errors
// keep their order: fi_cq_read returns completions up to the first
// error, then -FI_EAVAIL until fi_cq_readerr takes it. It is safe for
// concurrent use; its entries are bounded only by the work posted, which
// the endpoints bound (tx and rx queue sizes, unexpected messages).
type complQueue struct {
	refs
	dom    *domain
	c      *C.sp_cq // the C object, whose ready count mirrors len(items)
	format C.enum_fi_cq_format
	mu     sync.Mutex
	items  []entry
	wake   chan struct{}
	efd    int         // eventfd for FI_WAIT_FD, else -1
	signal atomic.Bool // fi_cq_signal: the blocked reader returns -FI_EAGAIN
	bound  atomic.Int64
	boundEPs
}

func (q *complQueue) close() C.int {
	if q.bound.Load() > 0 {
		return -C.FI_EBUSY
	}
	if r := q.shut(); r != 0 {
		return r
	}
	q.mu.Lock()
	q.c = nil
	if q.efd >= 0 {
		unix.Close(q.efd)
		q.efd = -1
	}
	q.mu.Unlock()
	q.dom.release()
	return 0
}

// setReady publishes the queue length to C; called with mu held.
func (q *complQueue) setReady() {
	if q.c != nil {
		atomic.StoreInt64((*int64)(unsafe.Pointer(&q.c.ready)), int64(len(q.items)))
	}
}

// push queues e and wakes a waiting reader.
func (q *complQueue) push(e entry) {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, e)
	q.setReady()
	if len(q.items) == 1 && q.efd >= 0 {
		var one = [8]byte{1}
		unix.Write(q.efd, one[:])
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *complQueue) entrySize() uintptr {
	switch q.format {
	case C.FI_CQ_FORMAT_CONTEXT:
		return C.sizeof_struct_fi_cq_entry
	case C.FI_CQ_FORMAT_MSG:
		return C.sizeof_struct_fi_cq_msg_entry
	case C.FI_CQ_FORMAT_DATA:
		return C.sizeof_struct_fi_cq_data_entry
	}
	return C.sizeof_struct_fi_cq_tagged_entry
}

// write stores e at p in the CQ's format.
func (q *complQueue) write(p unsafe.Pointer, e *entry) {
	switch q.format {
	case C.FI_CQ_FORMAT_CONTEXT:
		(*C.struct_fi_cq_entry)(p).op_context = e.ctx
	case C.FI_CQ_FORMAT_MSG:
		m := (*C.struct_fi_cq_msg_entry)(p)
		m.op_context, m.flags, m.len = e.ctx, e.flags, e.len
	case C.FI_CQ_FORMAT_DATA:
		m := (*C.struct_fi_cq_data_entry)(p)
		m.op_context, m.flags, m.len, m.buf, m.data = e.ctx, e.flags, e.len, e.buf, e.data
	default:
		m := (*C.struct_fi_cq_tagged_entry)(p)
		m.op_context, m.flags, m.len, m.buf, m.data, m.tag = e.ctx, e.flags, e.len, e.buf, e.data, e.tag
	}
}

// drainFD resets the eventfd once the queue is empty; called with mu held.
func (q *complQueue) drainFD() {
	if q.efd >= 0 && len(q.items) == 0 {
		var b [8]byte
		unix.Read(q.efd, b[:])
	}
}

//export goCQOpen
func goCQOpen(dh C.uintptr_t, attr *C.struct_fi_cq_attr, o *C.sp_cq) C.int {
	d, ok := object[*domain](dh)
	if !ok || d.closed.Load() {
		return -C.FI_EINVAL
	}
	format := attr.format
	switch format {
	case C.FI_CQ_FORMAT_UNSPEC:
		format = C.FI_CQ_FORMAT_CONTEXT
	case C.FI_CQ_FORMAT_CONTEXT, C.FI_CQ_FORMAT_MSG, C.FI_CQ_FORMAT_DATA, C.FI_CQ_FORMAT_TAGGED:
	default:
		return -C.FI_ENOSYS
	}
	if attr.flags&C.FI_AFFINITY != 0 {
		return -C.FI_ENOSYS
	}
	q := &complQueue{dom: d, c: o, format: format, wake: make(chan struct{}, 1), efd: -1}
	switch attr.wait_obj {
	case C.FI_WAIT_NONE, C.FI_WAIT_UNSPEC:
	case C.FI_WAIT_FD:
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			return -C.FI_ENOMEM
		}
		q.efd = fd
	default:
		return -C.FI_ENOSYS
	}
	if attr.wait_cond != C.FI_CQ_COND_NONE {
		if q.efd >= 0 {
			unix.Close(q.efd)
		}
		return -C.FI_ENOSYS
	}
	d.hold()
	o.h = newHandle(q)
	return 0
}

func (q *complQueue) control(cmd C.int, arg unsafe.Pointer) C.int {
	switch cmd {
	case C.FI_GETWAIT:
		if q.efd < 0 || arg == nil {
			return -C.FI_ENODATA
		}
		*(*C.int)(arg) = C.int(q.efd)
		return 0
	case C.FI_GETWAITOBJ:
		if arg == nil {
			return -C.FI_EINVAL
		}
		if q.efd >= 0 {
			*(*C.enum_fi_wait_obj)(arg) = C.FI_WAIT_FD
		} else {
			*(*C.enum_fi_wait_obj)(arg) = C.FI_WAIT_NONE
		}
		return 0
	}
	return -C.FI_ENOSYS
}

// A polling read (block 0) makes the progress of the endpoints bound to
// q first (progress.go) and sets *idle when it found nothing to do and
// returns -FI_EAGAIN.
//
//export goCQRead
func goCQRead(h C.uintptr_t, buf unsafe.Pointer, count C.size_t, src *C.uint64_t, timeout C.int, block C.int, idle *C.int) C.ssize_t {
	q, ok := object[*complQueue](h)
	if !ok || q.closed.Load() {
		return -C.FI_EINVAL
	}
	if count == 0 || buf == nil {
		return -C.FI_EINVAL
	}
	deadline := waitDeadline(timeout)
	size := q.entrySize()
	work := true
	if block == 0 {
		work = q.progress()
	}
	for {
		q.mu.Lock()
		n := 0
		for n < int(count) && n < len(q.items) && q.items[n].err == 0 {
			q.write(unsafe.Add(buf, uintptr(n)*size), &q.items[n])
			if src != nil {
				*(*C.uint64_t)(unsafe.Add(unsafe.Pointer(src), n*8)) = q.items[n].src
			}
			n++
		}
		if n > 0 {
			q.items = q.items[:copy(q.items, q.items[n:])]
			q.setReady()
			q.drainFD()
			q.mu.Unlock()
			return C.ssize_t(n)
		}
		avail := len(q.items) > 0
		q.mu.Unlock()
		if avail {
			return -C.FI_EAVAIL
		}
		if block == 0 {
			if !work && idle != nil {
				*idle = 1
			}
			return -C.FI_EAGAIN
		}
		q.standDown()
		if !sleepUntil(q.wake, deadline) || q.signal.Swap(false) {
			return -C.FI_EAGAIN
		}
		if q.closed.Load() {
			return -C.FI_EINVAL
		}
	}
}

//export goCQReadErr
func goCQReadErr(h C.uintptr_t, buf *C.struct_fi_cq_err_entry, flags C.uint64_t) C.ssize_t {
	q, ok := object[*complQueue](h)
	if !ok || q.closed.Load() || buf == nil {
		return -C.FI_EINVAL
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.items[0].err == 0 {
		return -C.FI_EAGAIN
	}
	e := q.items[0]
	if flags&C.FI_PEEK == 0 {
		q.items = q.items[:copy(q.items, q.items[1:])]
		q.setReady()
		q.drainFD()
	}
	buf.op_context, buf.flags, buf.len, buf.buf = e.ctx, e.flags, e.len, e.buf
	buf.data, buf.tag, buf.olen = e.data, e.tag, e.olen
	buf.err, buf.prov_errno = e.err, e.prov
	buf.err_data_size = 0
	return 1
}

//export goCQSignal
func goCQSignal(h C.uintptr_t) C.int {
	q, ok := object[*complQueue](h)
	if !ok || q.closed.Load() {
		return -C.FI_EINVAL
	}
	q.signal.Store(true)
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return 0
}
