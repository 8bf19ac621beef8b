package transport

import (
	"context"
	"fmt"
)

// Pending returns the number of work requests posted on the QP and not yet
// completed, and the error that failed the QP (nil while it works). A
// connection manager drains a QP before it destroys it by waiting until
// Pending is 0 or the QP failed.
func (c *Conn) Pending(ctx context.Context) (n int, failed error, err error) {
	err = c.s.view(ctx, func() error {
		n, failed = c.qp.Pending(), c.qp.Err()
		return nil
	})
	return n, failed, err
}

// Destroy removes the QP from its endpoint: packets addressed to it are
// counted as UnknownQP from then on, its QP number and buffers are freed,
// and its work requests never complete (blocking calls waiting on them
// return when their context ends). It returns the received messages that
// Recv had not yet returned, in order. Receive buffers posted and not
// filled are let go: those posted with Post(OpPostRecv) complete on the CQ
// with ErrFlushed, those posted with PostRecv are the caller's again, and
// Recv returns an error wrapping net.ErrClosed. Destroying a destroyed Conn returns
// nothing and no error. Guarded by the root package's connection tests
// (TestCloseFreesQP).
func (c *Conn) Destroy(ctx context.Context) ([]Message, error) {
	var left []Message
	err := c.s.do(ctx, func() error {
		if c.s.conns[c.qp.qpn] != c {
			return nil
		}
		c.s.eng.DestroyQP(c.qp)
		delete(c.s.conns, c.qp.qpn)
		defer close(c.gone)
		flushed := c.qp.flushRecv()
		defer func() {
			for _, b := range flushed {
				if b.id&internalID == 0 {
					c.ep.cq.push(Completion{ID: b.id, QPN: c.qp.qpn, Op: OpRecv, Err: fmt.Errorf("%w: %w", ErrFlushed, ErrDestroyed), Data: b.buf[:0]})
				}
			}
		}()
		for {
			comp, ok := c.rx.pop()
			if !ok {
				break
			}
			if comp.Err == nil {
				left = append(left, message(comp))
			}
		}
		for {
			comp, ok := c.qp.popRecv()
			if !ok {
				break
			}
			switch {
			case comp.ID != 0 && comp.ID&internalID == 0:
				c.ep.cq.push(comp)
			case comp.Err == nil:
				left = append(left, message(comp))
			}
		}
		return nil
	})
	return left, err
}

// QPs returns the number of QPs the endpoint holds, over all its engines.
func (ep *Endpoint) QPs(ctx context.Context) (int, error) {
	var n int
	for _, s := range ep.shards {
		if err := s.view(ctx, func() error { n += len(s.eng.qps); return nil }); err != nil {
			return n, err
		}
	}
	return n, nil
}

func message(comp Completion) Message {
	return Message{Data: comp.Data, Len: comp.Len, Imm: comp.Imm, HasImm: comp.Op == OpRecvImm, pooled: comp.pooled}
}
