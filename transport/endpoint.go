package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/multipath"
)

// internalID marks work request IDs that the blocking calls allocate; IDs
// posted with Conn.Post must not have this bit set.
const internalID = 1 << 63

// Endpoint runs an Engine on its own goroutine over one link and offers a
// Go API on top: blocking calls that take a context, and a completion queue
// for asynchronous use. It owns the link and closes it on Close.
//
// An Endpoint is safe for concurrent use. Close is idempotent and makes
// every pending and later call return an error wrapping net.ErrClosed.
type Endpoint struct {
	eng *Engine
	clk clock.Clock

	mu      sync.Mutex
	cmds    []func()
	closing bool

	done    chan struct{}
	err     error // why the engine stopped, set before done closes
	waiters map[uint64]chan Completion
	conns   map[uint32]*Conn
	nextID  uint64
	cq      *CQ
}

// ErrClosed is returned by calls on a closed Endpoint; it wraps net.ErrClosed.
var ErrClosed = fmt.Errorf("transport: endpoint closed: %w", net.ErrClosed)

// NewEndpoint starts an engine on l. The endpoint reads time from
// cfg.Clock, or from the system's monotonic clock when it is nil.
func NewEndpoint(l link.Link, cfg Config) (*Endpoint, error) {
	eng, err := NewEngine(l, cfg)
	if err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.NewSystem()
	}
	ep := &Endpoint{
		eng: eng, clk: clk, done: make(chan struct{}),
		waiters: map[uint64]chan Completion{}, conns: map[uint32]*Conn{},
		cq: newCQ(),
	}
	go ep.run()
	if cfg.OnEndpoint != nil {
		cfg.OnEndpoint(ep)
	}
	return ep, nil
}

// submit queues fn to run on the engine goroutine.
func (ep *Endpoint) submit(fn func()) bool {
	ep.mu.Lock()
	if ep.closing {
		ep.mu.Unlock()
		return false
	}
	ep.cmds = append(ep.cmds, fn)
	ep.mu.Unlock()
	ep.eng.link.Wake()
	return true
}

// do runs fn on the engine goroutine and returns its error.
func (ep *Endpoint) do(ctx context.Context, fn func() error) error {
	res := make(chan error, 1)
	if !ep.submit(func() { res <- fn() }) {
		return ep.closedErr()
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-ep.done:
		select {
		case err := <-res:
			return err
		default:
			return ep.closedErr()
		}
	}
}

func (ep *Endpoint) closedErr() error {
	select {
	case <-ep.done:
		if ep.err != nil {
			return fmt.Errorf("%w: %w", ErrClosed, ep.err)
		}
	default:
	}
	return ErrClosed
}

func (ep *Endpoint) run() {
	var err error
	defer func() {
		ep.shutdown(err)
	}()
	for {
		ep.mu.Lock()
		cmds, closing := ep.cmds, ep.closing
		ep.cmds = nil
		ep.mu.Unlock()
		for _, fn := range cmds {
			fn()
		}
		if closing {
			return
		}
		var work bool
		work, err = ep.eng.Step(ep.clk.Now())
		if err != nil {
			return
		}
		ep.dispatch()
		if work || len(cmds) > 0 {
			continue
		}
		timeout := time.Duration(-1)
		if d := ep.eng.NextDeadline(); d != clock.Never {
			if timeout = d.Sub(ep.clk.Now()); timeout <= 0 {
				continue
			}
		}
		// Let the goroutines that dispatch just woke run first: the links
		// of package link park their Waits in the runtime poller, but a
		// Wait that sleeps in a system call (AF_XDP waiting for transmit
		// completions) holds this thread's P, and a woken application
		// goroutine would then need another thread.
		runtime.Gosched()
		if err = ep.eng.link.Wait(timeout); err != nil {
			return
		}
	}
}

// dispatch hands completions to their waiters, the CQ and the receivers.
func (ep *Endpoint) dispatch() {
	for _, c := range ep.conns {
		q := c.qp
		for len(q.comps) > 0 {
			comp := q.comps[0]
			q.comps[0] = Completion{}
			q.comps = q.comps[1:]
			if comp.ID&internalID != 0 {
				if w := ep.waiters[comp.ID]; w != nil {
					delete(ep.waiters, comp.ID)
					w <- comp
				}
				continue
			}
			ep.cq.push(comp)
		}
		for len(c.recv) < cap(c.recv) {
			comp, ok := q.popRecv()
			if !ok {
				break
			}
			c.recv <- comp
		}
	}
}

func (ep *Endpoint) shutdown(err error) {
	ep.mu.Lock()
	ep.closing = true
	cmds := ep.cmds
	ep.cmds = nil
	ep.mu.Unlock()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		ep.err = err
	}
	for id, w := range ep.waiters {
		w <- Completion{ID: id, Err: ErrClosed}
	}
	ep.waiters = nil
	ep.cq.close()
	_ = ep.eng.link.Close()
	close(ep.done)
	// Commands that raced with the shutdown find done closed; running them
	// would touch a dead engine.
	_ = cmds
}

// Close stops the engine, fails pending calls with ErrClosed and closes the
// link. It is idempotent.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	ep.closing = true
	ep.mu.Unlock()
	ep.eng.link.Wake()
	<-ep.done
	return nil
}

// Err returns the error that stopped the engine, if it stopped on its own.
func (ep *Endpoint) Err() error {
	select {
	case <-ep.done:
		return ep.err
	default:
		return nil
	}
}

// CQ returns the completion queue of work requests posted with Conn.Post.
func (ep *Endpoint) CQ() *CQ { return ep.cq }

// Register registers buf as a memory region that peers may access as acc.
// The caller must not touch buf's bytes while a peer may be writing them.
func (ep *Endpoint) Register(ctx context.Context, buf []byte, acc Access) (*MR, error) {
	var mr *MR
	err := ep.do(ctx, func() error { mr = ep.eng.Register(buf, acc); return nil })
	return mr, err
}

// Deregister removes a region.
func (ep *Endpoint) Deregister(ctx context.Context, mr *MR) error {
	return ep.do(ctx, func() error { return ep.eng.Deregister(mr) })
}

// Stats returns the engine's counters.
func (ep *Endpoint) Stats(ctx context.Context) (EngineStats, error) {
	var s EngineStats
	err := ep.do(ctx, func() error { s = ep.eng.Stats(); return nil })
	return s, err
}

// CreateQP creates a QP. Exchange Info with the peer and Connect.
func (ep *Endpoint) CreateQP(ctx context.Context) (*Conn, error) {
	var c *Conn
	err := ep.do(ctx, func() error {
		q, err := ep.eng.CreateQP()
		if err != nil {
			return err
		}
		c = &Conn{ep: ep, qp: q, info: q.Info(), recv: make(chan Completion, ep.eng.cfg.MaxMessages)}
		ep.conns[q.qpn] = c
		return nil
	})
	return c, err
}

// Conn is one QP of an Endpoint with blocking calls. It is safe for
// concurrent use; messages are delivered to Recv in the order they were sent.
type Conn struct {
	ep   *Endpoint
	qp   *QP
	info QPInfo
	recv chan Completion
}

// Info returns what the peer needs to Connect to this QP.
func (c *Conn) Info() QPInfo { return c.info }

// Connect connects the QP to the peer's QP.
func (c *Conn) Connect(ctx context.Context, remote QPInfo) error {
	return c.ep.do(ctx, func() error { return c.qp.Connect(remote) })
}

// Stats returns the QP's counters.
func (c *Conn) Stats(ctx context.Context) (QPStats, error) {
	var s QPStats
	err := c.ep.do(ctx, func() error { s = c.qp.Stats(); return nil })
	return s, err
}

// PathStats returns the QP's per-path counters (see QP.PathStats).
func (c *Conn) PathStats(ctx context.Context) ([]multipath.PathStats, error) {
	var s []multipath.PathStats
	err := c.ep.do(ctx, func() error { s = c.qp.PathStats(); return nil })
	return s, err
}

// Post queues a work request; its completion arrives on the Endpoint's CQ.
// The ID's top bit is reserved.
func (c *Conn) Post(ctx context.Context, wr WorkRequest) error {
	if wr.ID&internalID != 0 {
		return fmt.Errorf("%w: work request IDs must leave bit 63 clear", ErrInvalidRequest)
	}
	return c.ep.do(ctx, func() error { return c.qp.Post(wr) })
}

// exec posts wr and waits until it completes or ctx ends. If ctx ends first
// the operation may still complete later; its outcome is then not reported.
func (c *Conn) exec(ctx context.Context, wr WorkRequest) error {
	ch := make(chan Completion, 1)
	var id uint64
	err := c.ep.do(ctx, func() error {
		c.ep.nextID++
		id = c.ep.nextID | internalID
		wr.ID = id
		if err := c.qp.Post(wr); err != nil {
			return err
		}
		c.ep.waiters[id] = ch
		return nil
	})
	if err != nil {
		return err
	}
	select {
	case comp := <-ch:
		return comp.Err
	case <-ctx.Done():
		c.ep.submit(func() { delete(c.ep.waiters, id) })
		return ctx.Err()
	}
}

// Send sends msg and returns when the peer has acknowledged all of it.
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	return c.exec(ctx, WorkRequest{Op: OpSend, Data: msg})
}

// SendImm sends msg with an immediate value.
func (c *Conn) SendImm(ctx context.Context, msg []byte, imm uint32) error {
	return c.exec(ctx, WorkRequest{Op: OpSendImm, Data: msg, Imm: imm})
}

// Write writes data into the peer's region at to and returns when the peer
// has acknowledged all of it. A write outside the region, with a wrong key or
// into a region without write access writes nothing and returns an error
// wrapping ErrRemoteAccess.
func (c *Conn) Write(ctx context.Context, data []byte, to Remote) error {
	return c.exec(ctx, WorkRequest{Op: OpWrite, Data: data, Remote: to})
}

// WriteImm writes like Write, then gives the peer a completion with imm.
func (c *Conn) WriteImm(ctx context.Context, data []byte, to Remote, imm uint32) error {
	return c.exec(ctx, WorkRequest{Op: OpWriteImm, Data: data, Remote: to, Imm: imm})
}

// Message is a received message, or the notice of a WRITE with immediate
// (then Data is nil and Len is the number of bytes written).
type Message struct {
	Data   []byte
	Len    int
	Imm    uint32
	HasImm bool
}

// Recv returns the next received message.
func (c *Conn) Recv(ctx context.Context) (Message, error) {
	select {
	case comp := <-c.recv:
		c.ep.eng.link.Wake() // room for another message
		return Message{Data: comp.Data, Len: comp.Len, Imm: comp.Imm, HasImm: comp.Op == OpRecvImm}, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	case <-c.ep.done:
		return Message{}, c.ep.closedErr()
	}
}

// CQ is a completion queue for work requests posted with Conn.Post. It is
// safe for concurrent use.
type CQ struct {
	mu     sync.Mutex
	items  []Completion
	notify chan struct{}
	closed bool
}

func newCQ() *CQ { return &CQ{notify: make(chan struct{}, 1)} }

func (cq *CQ) push(c Completion) {
	cq.mu.Lock()
	cq.items = append(cq.items, c)
	cq.mu.Unlock()
	select {
	case cq.notify <- struct{}{}:
	default:
	}
}

func (cq *CQ) close() {
	cq.mu.Lock()
	cq.closed = true
	cq.mu.Unlock()
	select {
	case cq.notify <- struct{}{}:
	default:
	}
}

// Poll moves up to len(dst) completions into dst and returns how many.
func (cq *CQ) Poll(dst []Completion) int {
	cq.mu.Lock()
	n := copy(dst, cq.items)
	cq.items = cq.items[:copy(cq.items, cq.items[n:])]
	cq.mu.Unlock()
	return n
}

// Wait blocks until a completion is queued, ctx ends or the endpoint closes.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		cq.mu.Lock()
		n, closed := len(cq.items), cq.closed
		cq.mu.Unlock()
		if n > 0 {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-cq.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
