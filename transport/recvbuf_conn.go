package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// connPosts holds the buffers PostRecv took and the engine has not yet
// handed to the QP: PostRecv queues them without a round trip to the
// engine goroutine, so that a steady receive loop allocates nothing.
type connPosts struct {
	mu     sync.Mutex
	bufs   []postedBuf
	queued bool   // the Conn is on its shard's posting list
	nextID uint64 // IDs of PostRecv buffers (with internalID set)

	out   atomic.Int64             // PostRecv buffers that Recv has not returned
	err   atomic.Pointer[recvFail] // the receiving side failed
	spare []postedBuf              // bufs' other half, the engine's
}

type recvFail struct{ err error }

// PostRecv posts buf as the QP's next receive buffer (see QP.PostRecv): the
// next SEND message lands in it, placed there packet by packet whatever
// their order, and Recv returns it with Data = buf[:n]. From the first
// PostRecv on, every SEND message takes a posted buffer, in order: post
// before Connect so that the first one does too. At most
// Config.MaxMessages buffers wait at once (ErrRecvQueueFull).
//
// A message longer than its buffer fails the QP's receiving side: Recv
// returns ErrLocalLength with that buffer (Data of length 0), and every
// other posted buffer with ErrFlushed; nothing is written past the buffer.
// PostRecv hands the buffer to the engine without waiting for it, so a
// buffer posted just after the receiving side failed comes back from Recv
// with the error; later calls return it. Do not touch buf until Recv
// returned it. PostRecv does not allocate.
func (c *Conn) PostRecv(ctx context.Context, buf []byte) error {
	if err := c.ep.open(ctx); err != nil {
		return err
	}
	select {
	case <-c.gone:
		return ErrDestroyed
	default:
	}
	if f := c.p.err.Load(); f != nil {
		return fmt.Errorf("%w: %w", ErrQPFailed, f.err)
	}
	c.p.mu.Lock()
	if c.p.out.Load() >= int64(c.ep.cfg.MaxMessages) {
		c.p.mu.Unlock()
		return ErrRecvQueueFull
	}
	c.p.nextID++
	c.p.bufs = append(c.p.bufs, postedBuf{id: c.p.nextID | internalID, buf: buf})
	c.p.out.Add(1)
	queue := !c.p.queued
	c.p.queued = true
	c.p.mu.Unlock()
	if queue {
		s := c.s
		s.mu.Lock()
		s.posting = append(s.posting, c)
		s.mu.Unlock()
	}
	c.s.wake()
	return nil
}

// takePosts hands the buffers of PostRecv to their QPs, on the engine
// goroutine, and reports whether there were any.
func (s *epShard) takePosts() bool {
	s.mu.Lock()
	list := s.posting
	s.posting = s.spare[:0]
	s.mu.Unlock()
	for _, c := range list {
		c.takePosts()
	}
	clear(list)
	s.spare = list[:0]
	return len(list) > 0
}

func (c *Conn) takePosts() {
	c.p.mu.Lock()
	bufs := c.p.bufs
	c.p.bufs = c.p.spare[:0]
	c.p.queued = false
	c.p.mu.Unlock()
	if c.s.conns[c.qp.qpn] == c { // not destroyed
		for _, b := range bufs {
			if err := c.qp.PostRecv(b.id, b.buf); err != nil {
				c.qp.pushComp(Completion{ID: b.id, QPN: c.qp.qpn, Op: OpRecv, Err: err, Data: b.buf[:0]})
				c.noteRecvErr()
			}
		}
	}
	clear(bufs)
	c.p.spare = bufs[:0]
}

// noteRecvErr makes later PostRecv calls fail once the QP or its receiving
// side failed. Engine goroutine.
func (c *Conn) noteRecvErr() {
	if c.p.err.Load() != nil {
		return
	}
	switch {
	case c.qp.state == stateError:
		c.p.err.Store(&recvFail{c.qp.err})
	case c.qp.rq != nil && c.qp.rq.err != nil:
		c.p.err.Store(&recvFail{c.qp.rq.err})
	}
}
