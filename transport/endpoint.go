package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/multipath"
)

// internalID marks work request IDs that the blocking calls allocate; IDs
// posted with Conn.Post must not have this bit set.
const internalID = 1 << 63

// Endpoint runs engines on goroutines of their own over a link and offers
// a Go API on top: blocking calls that take a context, and a completion
// queue for asynchronous use. It owns the link and closes it on Close.
//
// On a multi-queue link (link.Multi) it runs one engine per queue by
// default (Config.Engines; see Shards): each QP belongs to one engine,
// which runs its protocol, its completions and its blocking calls, and
// memory regions are shared by all of them. Nothing in the API changes
// with the number of engines.
//
// An Endpoint is safe for concurrent use. Close is idempotent and makes
// every pending and later call return an error wrapping net.ErrClosed.
type Endpoint struct {
	link   link.Link
	sh     *Shards // nil with one engine
	shards []*epShard
	mrs    *mrTable
	clk    clock.Clock
	cfg    Config
	cq     *CQ
	next   atomic.Uint64 // engine of the next CreateQP
	od     epPeers       // on-demand Conns (peers_endpoint.go)

	mu   sync.Mutex
	live int // engine goroutines still running
	err  error
	done chan struct{}
}

// epShard is one engine of an Endpoint and what its goroutine owns.
type epShard struct {
	ep  *Endpoint
	eng *Engine
	idx int

	mu      sync.Mutex
	closing bool
	posting []*Conn // Conns with buffers from PostRecv to hand their QPs
	// unblocked are Conns whose Recv made room in a receive channel that
	// dispatch found full: their QPs hold messages to hand on.
	unblocked []*Conn

	// st guards the engine's state (its QPs, its link's rings) and the
	// fields below. The engine goroutine holds it while it steps, and lets
	// go of it only to block on the link; calls run under it on the
	// caller's goroutine, so that a post costs no hand-over to the engine
	// goroutine and back (BenchmarkPingPong).
	st      sync.Mutex
	split   link.WaitSplitter // the engine's link, when its Wait splits
	stepErr error             // a link error met by a Step on a caller's goroutine
	spare   []*Conn           // posting's other half
	unspare []*Conn           // unblocked's other half
	waiters map[uint64]chan Completion
	conns   map[uint32]*Conn
	nextID  uint64

	// changed says that a call changed the engine's state since its
	// goroutine's last turn began (wake).
	changed atomic.Bool

	// The application's polling (poll.go). polled is the clock time of
	// its last Poll; while that is recent (pollGrace), the engine
	// goroutine stands aside (aside): it sleeps on kick and a timer
	// instead of on the link. until is when its sleep ends by itself.
	// linkWait is set from the goroutine's PrepareWait (under st) until
	// its Block returns: a poller may prepare the link's wait only while
	// it is clear.
	polled    atomic.Int64
	linkWait  atomic.Bool
	kick      chan struct{}
	timer     *time.Timer   // the goroutine's, for standing aside
	aside     bool          // under st
	until     clock.Time    // under st; 0 while the goroutine steps
	flushOwed bool          // under st: a Poll did work since the link last flushed
	bulkAt    clock.Time    // under st: the last step that moved bulkFrames
	asides    atomic.Uint64 // times the goroutine stood aside (TestPollPingPong)
}

// ErrClosed is returned by calls on a closed Endpoint; it wraps net.ErrClosed.
var ErrClosed = fmt.Errorf("transport: endpoint closed: %w", net.ErrClosed)

// NewEndpoint starts the engines on l (see Config.Engines). The endpoint
// reads time from cfg.Clock, or from the system's monotonic clock when it
// is nil.
func NewEndpoint(l link.Link, cfg Config) (*Endpoint, error) {
	n := 1
	if m, ok := l.(link.Multi); ok {
		q := len(m.Queues())
		switch {
		case cfg.Engines == 0 && q > 0:
			n = q
		case cfg.Engines > 1 && cfg.Engines != q:
			return nil, fmt.Errorf("%w: Engines %d on a link with %d queues", ErrConfig, cfg.Engines, q)
		case cfg.Engines > 1:
			n = q
		}
	} else if cfg.Engines > 1 {
		return nil, fmt.Errorf("%w: Engines %d on a link with one queue", ErrConfig, cfg.Engines)
	}
	if len(cfg.CPUs) > 0 && !canPin {
		return nil, fmt.Errorf("%w: CPUs: pinning engines is supported on Linux only", ErrConfig)
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.NewSystem()
	}
	ep := &Endpoint{link: l, clk: clk, done: make(chan struct{}), cq: newCQ()}
	var engs []*Engine
	if n > 1 {
		sh, err := NewShards(l.(link.Multi), cfg)
		if err != nil {
			return nil, err
		}
		ep.sh, ep.mrs, engs = sh, sh.mrs, sh.engs
	} else {
		eng, err := NewEngine(l, cfg)
		if err != nil {
			return nil, err
		}
		ep.mrs, engs = eng.mrs, []*Engine{eng}
	}
	ep.cfg = engs[0].cfg
	rx := rxClockFor(clk)
	for _, e := range engs {
		e.setClock(clk)
		if rx != nil {
			e.SetRxClock(rx)
		}
	}
	ready := make(chan error, len(engs))
	ep.live = len(engs)
	for i, e := range engs {
		s := &epShard{ep: ep, eng: e, idx: i, waiters: map[uint64]chan Completion{}, conns: map[uint32]*Conn{},
			kick: make(chan struct{}, 1)}
		s.split, _ = e.link.(link.WaitSplitter)
		if e.cfg.Peers.Accept {
			s.initPeers() // before the engine runs: no lock needed yet
		}
		ep.shards = append(ep.shards, s)
	}
	for _, s := range ep.shards {
		go s.run(ready)
	}
	var perr error
	for range engs {
		if err := <-ready; err != nil && perr == nil {
			perr = err
		}
	}
	if perr != nil {
		ep.Close()
		return nil, perr
	}
	if cfg.OnEndpoint != nil {
		cfg.OnEndpoint(ep)
	}
	return ep, nil
}

// Engines returns the number of engines the endpoint runs.
func (ep *Endpoint) Engines() int { return len(ep.shards) }

// do runs fn on the engine's state, on the caller's goroutine, then wakes
// the engine goroutine to act on what fn changed.
func (s *epShard) do(ctx context.Context, fn func() error) error {
	ran, err := s.locked(ctx, fn)
	if ran {
		s.wake()
		s.kickAside()
	}
	return err
}

// wake tells the engine goroutine that a call changed its state, and
// wakes its link only when the goroutine sleeps or is about to: a
// goroutine that is stepping finds the change in its next turn, and a
// Wake per post is a system call on the links that sleep in one. The
// flag is set before sleeping is read, as run sets sleeping before it
// reads the flag: one of the two sees the other's store, so that no
// change waits for the deadline (TestPostWakesSleepingEngine).
//
// A goroutine that stands aside for a polling application (poll.go) is
// not woken: the application's next Poll takes the change, and the
// goroutine takes over when the polling stops (TestPollStopsResumes).
func (s *epShard) wake() {
	s.changed.Store(true)
	if s.eng.sleeping.Load() {
		s.eng.link.Wake()
	}
}

// view runs fn like do without waking the engine goroutine: for fns that
// only read.
func (s *epShard) view(ctx context.Context, fn func() error) error {
	_, err := s.locked(ctx, fn)
	return err
}

// locked runs fn under st unless ctx is done or the engine stopped, and
// reports whether it ran.
func (s *epShard) locked(ctx context.Context, fn func() error) (ran bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.st.Lock()
	defer s.st.Unlock()
	closing := s.isClosing()
	if closing {
		return false, s.ep.closedErr()
	}
	// Buffers from PostRecv first: a call made after PostRecv returned
	// (Post, Connect, Destroy) must find the buffer posted.
	s.takePosts()
	return true, fn()
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

func (s *epShard) run(ready chan<- error) {
	ep, e := s.ep, s.eng
	var err error
	defer func() {
		s.shutdown(err)
	}()
	if cpus := ep.cfg.CPUs; len(cpus) > 0 {
		runtime.LockOSThread()
		if perr := pinThread(cpus[s.idx%len(cpus)]); perr != nil {
			ready <- fmt.Errorf("transport: pinning engine %d: %w", s.idx, perr)
			return
		}
	}
	ready <- nil
	var lastWork clock.Time
	for {
		timeout, next, serr := s.turn(&lastWork)
		switch next {
		case turnStop:
			err = serr
			return
		case turnAgain:
			continue
		case turnSpin:
			runtime.Gosched()
			continue
		case turnAside:
			s.standAside(timeout)
			continue
		}
		// Announce the sleep before the last look at the calls' changes
		// and the hand-over rings: a call or an engine that comes after
		// the look sees the flag and wakes this one (wake, wakeOwners).
		e.sleeping.Store(true)
		if s.changed.Load() || (e.sh != nil && e.handedInPending()) {
			s.linkWait.Store(false)
			e.sleeping.Store(false)
			continue
		}
		// Let the goroutines that dispatch just woke run first: the links
		// of package link park their Waits in the runtime poller, but a
		// Wait that sleeps in a system call (AF_XDP waiting for transmit
		// completions) holds this thread's P, and a woken application
		// goroutine would then need another thread.
		runtime.Gosched()
		if s.split != nil {
			err = s.split.Block(timeout)
		} else {
			err = e.link.Wait(timeout)
		}
		s.linkWait.Store(false)
		e.sleeping.Store(false)
		if err != nil {
			return
		}
	}
}

// What an engine goroutine does after a turn.
const (
	turnSleep = iota // wait on the link for the timeout
	turnAgain        // step again at once
	turnSpin         // busy polling: yield, then step again
	turnStop         // stop, with the error if any
	turnAside        // the application polls: sleep off the link (poll.go)
)

// turn steps the engine once under st and says what to do next; to sleep,
// it prepares the link's wait and returns the timeout (-1: until woken).
func (s *epShard) turn(lastWork *clock.Time) (timeout time.Duration, next int, err error) {
	ep, e := s.ep, s.eng
	s.st.Lock()
	defer s.st.Unlock()
	closing := s.isClosing()
	if closing {
		return 0, turnStop, nil
	}
	if s.stepErr != nil {
		return 0, turnStop, s.stepErr
	}
	// This turn's step sees every change made under st before it.
	s.changed.Store(false)
	s.aside, s.until = false, 0
	posted := s.takePosts()
	now := ep.clk.Now()
	work, err := s.step(now)
	if err != nil {
		return 0, turnStop, err
	}
	if work || posted {
		*lastWork = now
		return 0, turnAgain, nil
	}
	if t, ok := s.asideFor(); ok {
		return t, turnAside, nil
	}
	if bp := ep.cfg.BusyPoll; bp > 0 && ep.clk.Now().Sub(*lastWork) < bp {
		return 0, turnSpin, nil
	}
	timeout = -1
	if d := e.NextDeadline(); d != clock.Never {
		if timeout = d.Sub(ep.clk.Now()); timeout <= 0 {
			return 0, turnAgain, nil
		}
	}
	if s.split != nil {
		t, ready, err := s.split.PrepareWait(timeout)
		if err != nil {
			return 0, turnStop, err
		}
		if ready {
			return 0, turnAgain, nil
		}
		timeout = t
		s.linkWait.Store(true)
	}
	s.until = clock.Never
	if timeout >= 0 {
		s.until = ep.clk.Now().Add(timeout)
	}
	return timeout, turnSleep, nil
}

// step runs the engine's Step at now under st and dispatches what it
// completed. With busy polling, what the received batch completed is
// dispatched before the engine transmits, since the application spins on
// its Recv and answers while the ACKs the batch owes are sent. Without
// it, a woken application would find st held by that transmission and
// park on it again, so Step runs whole, then dispatch
// (TestEndpointBusyPollPingPong; docs/results.md#jumbo-stamps).
func (s *epShard) step(now clock.Time) (bool, error) {
	e := s.eng
	frames := e.stats.RxFrames + e.stats.TxFrames
	defer func() {
		if e.stats.RxFrames+e.stats.TxFrames-frames >= bulkFrames {
			s.bulkAt = now
		}
	}()
	if s.ep.cfg.BusyPoll <= 0 {
		work, err := e.Step(now)
		if err == nil {
			s.dispatch()
		}
		return work, err
	}
	work, err := e.receive(now)
	if err != nil {
		return work, err
	}
	s.dispatch()
	sent, err := e.transmit(now)
	if err != nil {
		return work, err
	}
	e.plan(now, work || sent)
	s.dispatch()
	return work || sent, nil
}

// isClosing reports whether the engine was told to stop.
func (s *epShard) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// spins reports whether a caller that waits on this engine polls its link
// first: with Config.BusyPoll, on a link whose Wait splits.
func (s *epShard) spins() bool { return s.ep.cfg.BusyPoll > 0 && s.split != nil }

// poll steps the engine once on the caller's goroutine, unless another
// goroutine is stepping it, so that a frame that arrives is handled
// without waiting for the engine goroutine to be scheduled. It reports
// false once the engine stopped.
func (s *epShard) poll() bool {
	if !s.st.TryLock() {
		return true
	}
	defer s.st.Unlock()
	closing := s.isClosing()
	if closing || s.stepErr != nil {
		return false
	}
	s.takePosts()
	// Receive only: a message this finds returns to the caller at once,
	// and the ACK it owes leaves with the caller's answer, if one comes
	// soon (its post steps the engine), or from the engine goroutine.
	work, err := s.eng.receive(s.ep.clk.Now())
	if err != nil {
		s.stepErr = err // the engine goroutine stops on it
		s.eng.link.Wake()
		return false
	}
	s.dispatch()
	if work {
		// The engine goroutine sleeps until its old deadline: what this
		// step received may need an earlier one, and an ACK is owed.
		s.eng.link.Wake()
	}
	return true
}

// send runs fn like do and then, on a link whose Wait splits
// (link.WaitSplitter), steps the engine on the caller's goroutine, so that
// what fn posted leaves without waiting for the engine goroutine to be
// scheduled (BenchmarkPingPong).
//
// While the goroutine stands aside for a polling application, the post
// wakes it only for a deadline earlier than the one it sleeps to: the
// application's next Poll does the rest (poll.go).
func (s *epShard) send(ctx context.Context, fn func() error) error {
	aside := false
	ran, err := s.locked(ctx, func() error {
		if err := fn(); err != nil || s.split == nil {
			return err
		}
		if _, serr := s.eng.Step(s.ep.clk.Now()); serr != nil {
			s.stepErr = serr // the engine goroutine stops on it
			s.kickAside()
		}
		s.dispatch()
		aside = s.wakeAside()
		return nil
	})
	if ran && !aside {
		s.wake()
	}
	return err
}

// dispatch hands completions to their waiters, the CQ and the receivers:
// those of the QPs on the engine's completion list and of the Conns whose
// Recv made room since, never a pass over every Conn (sched.go).
func (s *epShard) dispatch() {
	e := s.eng
	list := e.takeCompl()
	for _, q := range list {
		if c := s.conns[q.qpn]; c != nil && c.qp == q {
			s.deliver(c)
		}
	}
	e.putCompl(list)
	s.mu.Lock()
	ub := s.unblocked
	s.unblocked = s.unspare[:0]
	s.mu.Unlock()
	for _, c := range ub {
		if s.conns[c.qp.qpn] == c {
			s.deliver(c)
		}
	}
	clear(ub)
	s.unspare = ub[:0]
}

// deliver hands c's completions to their waiters, the CQ and c's receive
// channel, as far as the channel has room.
func (s *epShard) deliver(c *Conn) {
	q := c.qp
	s.eng.visits++
	// The completions go out in order and the slice keeps its array: a
	// slice advanced past each would lose its front and reallocate as
	// completeSends appends (TestSmallMessageAllocs). Those for the CQ
	// are kept at its front and queued at once: one lock and one wake-up
	// for an ACK's worth of completions, not one per message.
	k := 0
	for _, comp := range q.comps {
		if comp.ID&internalID != 0 {
			if w := s.waiters[comp.ID]; w != nil {
				delete(s.waiters, comp.ID)
				w <- comp
			}
			continue
		}
		q.comps[k] = comp
		k++
	}
	s.ep.cq.push(q.comps[:k]...)
	clear(q.comps)
	q.comps = q.comps[:0]
	pushed := false
	for {
		comp, ok := q.peekRecv()
		if !ok {
			break
		}
		if comp.ID != 0 && comp.ID&internalID == 0 {
			// A buffer posted with Post(OpPostRecv): its completion
			// goes to the CQ.
			q.popRecv()
			s.ep.cq.push(comp)
			continue
		}
		if !c.rx.add(comp, s.eng.cfg.MaxMessages) {
			// Recv puts c on unblocked and wakes the engine when it
			// makes room; announce it before the last look, as Recv
			// takes before it looks at the flag.
			c.full.Store(true)
			if !c.rx.add(comp, s.eng.cfg.MaxMessages) {
				break
			}
		}
		pushed = true
		q.popRecv()
		if comp.Err != nil {
			c.noteRecvErr()
		}
	}
	if pushed {
		c.rx.wake() // once for the batch
	}
}

// shutdown ends one engine: it fails the engine's waiters, stops the other
// engines, and the last engine out closes the link and the endpoint.
// Commands that raced with it find the endpoint closing or done; running
// them would touch a dead engine.
func (s *epShard) shutdown(err error) {
	ep := s.ep
	s.st.Lock()
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	ep.mu.Lock()
	if err != nil && !errors.Is(err, net.ErrClosed) && ep.err == nil {
		ep.err = err
	}
	ep.live--
	last := ep.live == 0
	ep.mu.Unlock()
	for id, w := range s.waiters {
		w <- Completion{ID: id, Err: ErrClosed}
	}
	s.waiters = nil
	s.st.Unlock()
	ep.stop()
	if last {
		ep.cq.close()
		_ = ep.link.Close()
		close(ep.done)
	}
}

// stop tells every engine to end.
func (ep *Endpoint) stop() {
	for _, s := range ep.shards {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.eng.link.Wake()
		s.kickAside()
	}
}

// Close stops the engines, fails pending calls with ErrClosed and closes
// the link. It is idempotent.
func (ep *Endpoint) Close() error {
	ep.stop()
	<-ep.done
	return nil
}

// Err returns the error that stopped the engines, if they stopped on their
// own.
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

// Register registers buf as a memory region that peers may access as acc,
// on every engine. The caller must not touch buf's bytes while a peer may
// be writing them.
func (ep *Endpoint) Register(ctx context.Context, buf []byte, acc Access) (*MR, error) {
	if err := ep.open(ctx); err != nil {
		return nil, err
	}
	return ep.mrs.register(buf, acc), nil
}

// RegisterAt registers buf as Register does, under a remote key and
// address the caller chooses: one key for the same region on several
// endpoints (a libfabric domain's), addresses that are offsets from 0.
// Keys and addresses are then as guessable as the caller makes them. A key
// of 0 or one that names a registered region is refused with ErrConfig
// (TestRegisterAt).
func (ep *Endpoint) RegisterAt(ctx context.Context, buf []byte, acc Access, rkey uint32, addr uint64) (*MR, error) {
	if err := ep.open(ctx); err != nil {
		return nil, err
	}
	return ep.mrs.registerAt(buf, acc, rkey, addr)
}

// Deregister removes a region.
func (ep *Endpoint) Deregister(ctx context.Context, mr *MR) error {
	if err := ep.open(ctx); err != nil {
		return err
	}
	return ep.mrs.deregister(mr)
}

// open returns the error of a call made after Close or with ctx done.
func (ep *Endpoint) open(ctx context.Context) error {
	select {
	case <-ep.done:
		return ep.closedErr()
	default:
	}
	ep.mu.Lock()
	closing := ep.live < len(ep.shards)
	ep.mu.Unlock()
	if closing {
		return ErrClosed
	}
	return ctx.Err()
}

// Stats returns the engines' counters, summed.
func (ep *Endpoint) Stats(ctx context.Context) (EngineStats, error) {
	var sum EngineStats
	st, err := ep.EngineStats(ctx)
	for _, s := range st {
		sum.add(s)
	}
	return sum, err
}

// EngineStats returns the counters of each engine, in queue order.
func (ep *Endpoint) EngineStats(ctx context.Context) ([]EngineStats, error) {
	st := make([]EngineStats, len(ep.shards))
	for i, s := range ep.shards {
		if err := s.view(ctx, func() error { st[i] = s.eng.Stats(); return nil }); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// CreateQP creates a QP, on the engines in turn. Exchange Info with the
// peer and Connect.
func (ep *Endpoint) CreateQP(ctx context.Context) (*Conn, error) {
	return ep.createQP(ctx, func(e *Engine) []uint16 { return e.info.Ports })
}

// createQP creates a QP on the next engine in turn with the entropies
// ports gives.
func (ep *Endpoint) createQP(ctx context.Context, ports func(*Engine) []uint16) (*Conn, error) {
	s := ep.shards[int(ep.next.Add(1)-1)%len(ep.shards)]
	var c *Conn
	err := s.do(ctx, func() error {
		q, err := s.eng.createQP(ports(s.eng))
		if err != nil {
			return err
		}
		c = &Conn{ep: ep, s: s, qp: q, info: q.Info(), gone: make(chan struct{})}
		c.rx.ready = make(chan struct{}, 1)
		q.owner = c
		s.conns[q.qpn] = c
		return nil
	})
	return c, err
}

// Conn is one QP of an Endpoint with blocking calls. It is safe for
// concurrent use; messages are delivered to Recv in the order they were sent.
type Conn struct {
	ep   *Endpoint
	s    *epShard // the engine that owns qp
	qp   *QP
	info QPInfo
	rx   connRecv      // messages for Recv, at most MaxMessages
	gone chan struct{} // closed by Destroy
	full atomic.Bool   // the engine holds messages rx had no room for
	p    connPosts     // buffers from PostRecv: recvbuf_conn.go
}

// connRecv is the queue of messages the engine hands a Conn's Recv: a
// ring that grows with them (doubling from 4) and is given back when the
// QP trims, so that an idle Conn holds none, and a channel that wakes a
// Recv waiting for the first. Safe for concurrent use.
type connRecv struct {
	mu      sync.Mutex
	ring    []Completion
	head, n int
	ready   chan struct{} // holds a token while a message may wait
}

// add queues c unless limit messages wait, and reports whether it did; it
// wakes no Recv (the caller wakes one for its batch).
func (r *connRecv) add(c Completion, limit int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= limit {
		return false
	}
	r.put(c)
	return true
}

// put queues c; r.mu is held.
func (r *connRecv) put(c Completion) {
	if r.n == len(r.ring) {
		ring := make([]Completion, max(4, 2*len(r.ring)))
		for i := range r.n {
			ring[i] = r.ring[(r.head+i)%len(r.ring)]
		}
		r.ring, r.head = ring, 0
	}
	r.ring[(r.head+r.n)%len(r.ring)] = c
	r.n++
}

// pop takes the oldest message, and passes the wake-up on to another
// waiting Recv when more wait.
func (r *connRecv) pop() (Completion, bool) {
	r.mu.Lock()
	if r.n == 0 {
		r.mu.Unlock()
		return Completion{}, false
	}
	c := r.ring[r.head]
	r.ring[r.head] = Completion{}
	r.head = (r.head + 1) % len(r.ring)
	r.n--
	more := r.n > 0
	r.mu.Unlock()
	if more {
		r.wake()
	}
	return c, true
}

func (r *connRecv) wake() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

func (r *connRecv) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// trimBuffers gives back the Conn's receive ring and posted-buffer slices
// when they are empty; the QP calls it when it trims (engine goroutine,
// under st).
func (c *Conn) trimBuffers() {
	c.rx.mu.Lock()
	if c.rx.n == 0 {
		c.rx.ring, c.rx.head = nil, 0
	}
	c.rx.mu.Unlock()
	c.p.mu.Lock()
	if len(c.p.bufs) == 0 {
		c.p.bufs = nil
	}
	c.p.mu.Unlock()
	c.p.spare = nil
}

// Info returns what the peer needs to Connect to this QP.
func (c *Conn) Info() QPInfo { return c.info }

// Connect connects the QP to the peer's QP.
func (c *Conn) Connect(ctx context.Context, remote QPInfo) error {
	return c.s.do(ctx, func() error { return c.qp.Connect(remote) })
}

// Stats returns the QP's counters.
func (c *Conn) Stats(ctx context.Context) (QPStats, error) {
	var s QPStats
	err := c.s.view(ctx, func() error { s = c.qp.Stats(); return nil })
	return s, err
}

// PathStats returns the QP's per-path counters (see QP.PathStats).
func (c *Conn) PathStats(ctx context.Context) ([]multipath.PathStats, error) {
	var s []multipath.PathStats
	err := c.s.view(ctx, func() error { s = c.qp.PathStats(); return nil })
	return s, err
}

// Post queues a work request; its completion arrives on the Endpoint's CQ.
// The ID's top bit is reserved. OpPostRecv posts a receive buffer (see
// PostRecv) whose ID must not be 0: the message that lands in it completes
// on the CQ, not through Recv.
func (c *Conn) Post(ctx context.Context, wr WorkRequest) error {
	if wr.ID&internalID != 0 {
		return fmt.Errorf("%w: work request IDs must leave bit 63 clear", ErrInvalidRequest)
	}
	if wr.Op == OpPostRecv && wr.ID == 0 {
		return fmt.Errorf("%w: a receive buffer posted with Post needs a nonzero ID (or use PostRecv)", ErrInvalidRequest)
	}
	return c.s.send(ctx, func() error { return c.qp.Post(wr) })
}

// exec posts wr and waits until it completes or ctx ends. If ctx ends first
// the operation may still complete later; its outcome is then not reported.
func (c *Conn) exec(ctx context.Context, wr WorkRequest) error {
	ch := make(chan Completion, 1)
	var id uint64
	err := c.s.send(ctx, func() error {
		c.s.nextID++
		id = c.s.nextID | internalID
		wr.ID = id
		if err := c.qp.Post(wr); err != nil {
			return err
		}
		c.s.waiters[id] = ch
		return nil
	})
	if err != nil {
		// A deadline that ends before the request is posted (a loaded
		// machine can take that long to get here) is explained like one
		// that ends while waiting (TestExplainUnreachable).
		return c.explain(err, false)
	}
	select {
	case comp := <-ch:
		return c.explain(comp.Err, false)
	case <-ctx.Done():
		// A completion that arrived as ctx ended wins: select picks at
		// random among ready cases, and a connection torn down right
		// after the request completed (its drain saw nothing pending)
		// must not report the request as cut short.
		select {
		case comp := <-ch:
			return c.explain(comp.Err, false)
		default:
		}
		_ = c.s.view(context.Background(), func() error { delete(c.s.waiters, id); return nil })
		return c.explain(ctx.Err(), false)
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

// Read reads len(into) bytes of the peer's region at from into into (RDMA
// READ) and returns when they have all landed. A read outside the region,
// with a wrong key, of a region without read access or of one deregistered
// reads nothing and returns an error wrapping ErrRemoteAccess (the QP then
// fails, as for a WRITE). into belongs to the QP until Read returns; if
// ctx ends first, the bytes may still land in it later.
func (c *Conn) Read(ctx context.Context, into []byte, from Remote) error {
	return c.exec(ctx, WorkRequest{Op: OpRead, Data: into, Remote: from})
}

// Message is a received message, or the notice of a WRITE with immediate
// (then Data is nil and Len is the number of bytes written).
//
// Data is the application's: the posted receive buffer the message landed
// in (Data is its first Len bytes, see PostRecv), or, on a QP without
// posted buffers, a buffer of the transport's pool that Release gives
// back.
type Message struct {
	Data   []byte
	Len    int
	Imm    uint32
	HasImm bool

	pooled bool
}

// Release gives Data back to the transport's buffer pool, for a later
// message to reuse, and sets Data to nil: a Recv loop that releases each
// message once it is done with it allocates nothing per message. The bytes
// must not be used after Release, and a message (or a copy of it) must be
// released at most once. Release does nothing for a message in a posted
// buffer (that memory is the application's) or without data.
func (m *Message) Release() {
	if m.pooled {
		recvPool.put(m.Data)
	}
	m.Data, m.pooled = nil, false
}

// ErrDestroyed is returned by Recv on a destroyed Conn; it wraps
// net.ErrClosed.
var ErrDestroyed = fmt.Errorf("transport: QP destroyed: %w", net.ErrClosed)

// Recv returns the next received message. With posted buffers (PostRecv),
// a buffer that no message could fill comes back as an error with Data set
// to it (length 0): ErrLocalLength for the message that did not fit,
// ErrFlushed when the QP failed.
func (c *Conn) Recv(ctx context.Context) (Message, error) {
	if c.s.spins() {
		for end := c.ep.clk.Now().Add(c.ep.cfg.BusyPoll); ; {
			if comp, ok := c.rx.pop(); ok {
				return c.received(comp)
			}
			if c.ep.clk.Now() >= end || ctx.Err() != nil || !c.s.poll() {
				break
			}
			runtime.Gosched()
		}
	}
	for {
		if comp, ok := c.rx.pop(); ok {
			return c.received(comp)
		}
		select {
		case <-c.rx.ready:
		case <-ctx.Done():
			return Message{}, c.explain(ctx.Err(), true)
		case <-c.ep.done:
			return Message{}, c.ep.closedErr()
		case <-c.gone:
			if comp, ok := c.rx.pop(); ok {
				return message(comp), comp.Err
			}
			return Message{}, ErrDestroyed
		}
	}
}

func (c *Conn) received(comp Completion) (Message, error) {
	// A full receive channel wakes its engine once half of it is read:
	// one wake-up and one dispatch per half a channel of messages, not
	// one per message while the reader is behind.
	if c.full.Load() && c.rx.len() <= c.ep.cfg.MaxMessages/2 && c.full.Swap(false) {
		// Messages wait for the room this made.
		c.s.mu.Lock()
		c.s.unblocked = append(c.s.unblocked, c)
		c.s.mu.Unlock()
		c.s.wake()
	}
	if comp.ID&internalID != 0 {
		c.p.out.Add(-1)
	}
	return message(comp), c.explain(comp.Err, true)
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

// push queues cs, in order, and wakes a waiting Wait; none does nothing.
func (cq *CQ) push(cs ...Completion) {
	if len(cs) == 0 {
		return
	}
	cq.mu.Lock()
	cq.items = append(cq.items, cs...)
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
