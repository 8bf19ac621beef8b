package transport

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/sprayfabric/spray/transport/wire"
)

// OpPostRecv posts a receive buffer (WorkRequest.Data) with Post: the next
// SEND message lands in it and completes as OpRecv or OpRecvImm with the
// request's ID, Data the buffer's first Len bytes.
const OpPostRecv Op = 32

// Errors of posted receive buffers; errors.Is works on them.
var (
	// ErrLocalLength completes the posted buffer that a SEND message did
	// not fit in (IBA's local length error). The receiving side of the QP
	// then fails: every other posted buffer is flushed, later PostRecv
	// calls return the error, and the sender's request fails with
	// ErrInvalidRequest (the receiver answers it with a NAK invalid
	// request). Nothing is written past the buffer.
	ErrLocalLength = errors.New("transport: message longer than the posted receive buffer")
	// ErrFlushed completes a posted buffer that no message will fill: the
	// QP failed or was destroyed. It wraps the cause.
	ErrFlushed = errors.New("transport: receive buffer flushed")
	// ErrRecvQueueFull is returned by PostRecv when Config.MaxMessages
	// buffers are posted and not yet filled.
	ErrRecvQueueFull = errors.New("transport: receive queue full")
)

// postedBuf is one posted receive buffer.
type postedBuf struct {
	id  uint64
	buf []byte
}

// recvQueue is a QP's ring of posted receive buffers, filled in message
// order. It is on from the first PostRecv for the rest of the QP's life.
// The ring grows with the buffers posted (doubling from 4, up to
// MaxMessages) and is given back when empty and idle (QP.trim).
type recvQueue struct {
	on   bool
	bufs []postedBuf
	head int
	n    int
	err  error // the receiving side failed: PostRecv refuses with it
}

func (rq *recvQueue) at(i int) *postedBuf {
	j := rq.head + i
	if j >= len(rq.bufs) {
		j -= len(rq.bufs)
	}
	return &rq.bufs[j]
}

// grow doubles the ring (from 4, up to limit), keeping the buffers in
// order.
func (rq *recvQueue) grow(limit int) {
	bufs := make([]postedBuf, min(max(4, 2*len(rq.bufs)), limit))
	for i := range rq.n {
		bufs[i] = *rq.at(i)
	}
	rq.bufs, rq.head = bufs, 0
}

func (rq *recvQueue) pop() postedBuf {
	b := rq.bufs[rq.head]
	rq.bufs[rq.head] = postedBuf{}
	if rq.head++; rq.head == len(rq.bufs) {
		rq.head = 0
	}
	rq.n--
	return b
}

// consumes reports whether a message of kind k takes a posted buffer: SEND
// and SEND with immediate. A WRITE with immediate completes without one.
func consumes(k wire.OpKind) bool { return k == wire.KindSend || k == wire.KindSendImm }

// PostRecv posts buf as the QP's next receive buffer; id comes back in its
// completion. From the first PostRecv on, every SEND message delivered
// takes the next posted buffer, in order; until then the QP allocates one
// per message. A message whose buffer is not posted yet waits for it (in a
// pooled buffer, Spray) or is dropped and retransmitted (RoCE). PostRecv
// may be called before Connect. Errors: ErrRecvQueueFull, ErrQPFailed (the
// QP or its receiving side failed).
func (q *QP) PostRecv(id uint64, buf []byte) error {
	q.touch() // a held message may land, an error complete: sched.go
	q.recvQueue()
	switch {
	case q.state == stateError:
		return fmt.Errorf("%w: %w", ErrQPFailed, q.err)
	case q.rq.err != nil:
		return fmt.Errorf("%w: %w", ErrQPFailed, q.rq.err)
	}
	if q.rq.n == q.cfg.MaxMessages {
		return ErrRecvQueueFull
	}
	if q.rq.n == len(q.rq.bufs) {
		q.rq.grow(q.cfg.MaxMessages)
	}
	q.rq.on = true
	*q.rq.at(q.rq.n) = postedBuf{id: id, buf: buf}
	q.rq.n++
	if q.state == stateReady {
		q.rcv.posted()
	}
	return nil
}

// PostedRecvs returns the number of posted receive buffers not yet filled.
func (q *QP) PostedRecvs() int {
	if q.rq == nil {
		return 0
	}
	return q.rq.n
}

// recvQueue returns the QP's posted-buffer ring, allocated at its first
// use: most QPs never post one (TestQPSize).
func (q *QP) recvQueue() *recvQueue {
	if q.rq == nil {
		q.rq = new(recvQueue)
	}
	return q.rq
}

// failRecv fails the receiving side: posted buffer bad (or none, -1)
// completes with ErrLocalLength, every other one with ErrFlushed.
func (q *QP) failRecv(bad int, cause error) {
	q.recvQueue()
	if q.rq.err == nil {
		q.rq.err = cause
	}
	for i := 0; q.rq.n > 0; i++ {
		b := q.rq.pop()
		err := fmt.Errorf("%w: %w", ErrFlushed, cause)
		if i == bad {
			err = cause
		}
		q.pushComp(Completion{ID: b.id, QPN: q.qpn, Op: OpRecv, Err: err, Data: b.buf[:0]})
	}
}

// localLength fails the receiving side for a message of length bytes that
// does not fit posted buffer i.
func (q *QP) localLength(i int, length uint32) {
	q.failRecv(i, fmt.Errorf("%w: %d bytes into a buffer of %d", ErrLocalLength, length, len(q.rq.at(i).buf)))
}

// flushRecv takes the posted buffers off a destroyed QP and returns them.
func (q *QP) flushRecv() []postedBuf {
	var out []postedBuf
	q.recvQueue()
	for q.rq.n > 0 {
		out = append(out, q.rq.pop())
	}
	if q.rq.err == nil {
		q.rq.err = ErrClosed
	}
	return out
}

// pushComp queues a receive completion that does not count as a message
// (an error), growing the receive ring as it needs.
func (q *QP) pushComp(c Completion) {
	if int(q.recvLen) == len(q.recvq) {
		q.growRecv()
	}
	q.recvq[(q.recvHead+q.recvLen)%int32(len(q.recvq))] = c
	q.recvLen++
}

// bufPool is a bounded pool of message buffers in power-of-two size
// classes, shared by every QP of the process: received messages that the
// application gives back with Message.Release serve later messages, so that
// a steady receive loop allocates nothing. It keeps at most poolPerClass
// buffers per class and poolMaxBytes in all; above that, released buffers
// go to the garbage collector. Safe for concurrent use.
type bufPool struct {
	mu    sync.Mutex
	free  [poolClasses][][]byte
	bytes int64
}

const (
	poolMinShift = 6  // 64 bytes
	poolMaxShift = 24 // 16 MiB: larger messages are allocated
	poolClasses  = poolMaxShift - poolMinShift + 1
	poolPerClass = 256
	poolMaxBytes = 256 << 20
)

var recvPool bufPool

func poolClass(n int) (int, bool) {
	if n <= 1<<poolMinShift {
		return 0, true
	}
	s := bits.Len(uint(n - 1))
	if s > poolMaxShift {
		return 0, false
	}
	return s - poolMinShift, true
}

// get returns a buffer of length n, reused when the pool has one.
func (p *bufPool) get(n int) []byte {
	c, ok := poolClass(n)
	if !ok {
		return make([]byte, n)
	}
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		p.bytes -= int64(cap(b))
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return make([]byte, n, 1<<(c+poolMinShift))
}

// put gives b back; only buffers whose capacity is a class size are kept.
func (p *bufPool) put(b []byte) {
	c, ok := poolClass(cap(b))
	if !ok || cap(b) != 1<<(c+poolMinShift) {
		return
	}
	p.mu.Lock()
	if len(p.free[c]) < poolPerClass && p.bytes+int64(cap(b)) <= poolMaxBytes {
		if p.free[c] == nil {
			p.free[c] = make([][]byte, 0, poolPerClass)
		}
		p.free[c] = append(p.free[c], b[:0])
		p.bytes += int64(cap(b))
	}
	p.mu.Unlock()
}

// poolAppend appends p to b, moving b into a buffer at least twice as
// large when it is full: growth by the packet would copy a large message
// once per packet (TestLargeMessage's 64 MiB).
func poolAppend(b, p []byte) []byte {
	if n := len(b) + len(p); n > cap(b) {
		nb := recvPool.get(max(n, 2*cap(b)))[:len(b)]
		copy(nb, b)
		recvPool.put(b)
		b = nb
	}
	return append(b, p...)
}
