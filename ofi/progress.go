package main

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// Progress runs on two kinds of threads. The provider's goroutines (an
// endpoint's completion loop, one receiver per accepted connection) and
// the transport's engine goroutines make it whatever the application
// does (FI_PROGRESS_AUTO). An application that polls a CQ with
// fi_cq_read, or a counter with fi_cntr_read, makes it on its own thread
// instead: each read steps the transport's engines
// (transport.Endpoint.Poll: receive from the link, acknowledge,
// transmit, run the timers), then takes the completions and the
// messages they produced, so that a message or a completion reaches the
// application without a goroutine woken to carry it. While reads keep
// coming, at most pollGrace apart, the provider's goroutines and the
// engines' stand aside; they take over again pollGrace after the last
// read, or at once when a reader blocks in fi_cq_sread or fi_cntr_wait
// (standDown, transport.Endpoint.StopPolling; TestPollerHandsBack). A
// read that found nothing to do yields the CPU before it returns
// (prov.c): on a host with fewer cores than busy threads the peer may
// need it to answer.
const pollGrace = time.Millisecond

// pollBatch bounds the messages one read takes from one connection, so
// that a read returns while a peer floods.
const pollBatch = 16

// epoch is the origin of the endpoints' poll times (monotonic).
var epoch = time.Now()

func monoNow() int64 { return int64(time.Since(epoch)) }

// done is a context that has ended: a receive with it returns at once.
var done = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// rxConn is an accepted connection. Its mutex is held by whoever takes
// its messages (its serve goroutine or a polling reader), so that they
// are matched in the order they arrived.
type rxConn struct {
	c     recvConn
	mu    sync.Mutex
	src   netip.AddrPort // the name the hello gave; invalid before it
	clear bool           // unsecured: a reader may take the QP's messages (a secured one's carry close markers, which only the connection's Recv takes)
}

// poller is the application-driven side of an endpoint's progress.
type poller struct {
	last  atomic.Int64  // monoNow of the last fi_cq_read; 0: none pending
	kick  chan struct{} // closed-and-replaced: wakes the paused goroutines
	kmu   sync.Mutex
	conns cowList[*rxConn]
}

func (p *poller) init() {
	p.kick = make(chan struct{})
}

// pause waits while the application polls: until pollGrace after its
// last read, a blocking reader's kick or ctx's end. false: ctx ended.
func (p *poller) pause(ctx context.Context) bool {
	for {
		// The kick before the read time: a standDown between the two
		// closes this kick, one before both leaves the time 0.
		p.kmu.Lock()
		k := p.kick
		p.kmu.Unlock()
		t := p.last.Load()
		left := time.Duration(t + int64(pollGrace) - monoNow())
		if t == 0 || left <= 0 {
			return true
		}
		tm := time.NewTimer(left)
		select {
		case <-ctx.Done():
			tm.Stop()
			return false
		case <-k:
			tm.Stop()
		case <-tm.C:
		}
	}
}

// standDown hands progress back to the provider's goroutines: a reader
// is about to block.
func (p *poller) standDown() {
	if p.last.Swap(0) == 0 {
		return
	}
	p.kmu.Lock()
	close(p.kick)
	p.kick = make(chan struct{})
	p.kmu.Unlock()
}

func (p *poller) addConn(rc *rxConn)    { p.conns.add(rc) }
func (p *poller) removeConn(rc *rxConn) { p.conns.remove(rc) }

// progress is an application read's share of the work: it takes the
// transport's completions and the received messages of the connections
// no goroutine is reading.
//
// It reports whether it found work: the engines did, or a completion or
// a message came.
func (ep *endpoint) progress() bool {
	if ep.closed.Load() {
		return false
	}
	ep.poll.last.Store(monoNow())
	// The transport's engines first: what they receive and complete
	// now is taken below (transport.Endpoint.Poll).
	work, err := ep.sp.Poll()
	if err != nil {
		return false
	}
	if ep.reap() {
		work = true
	}
	for _, rc := range ep.poll.conns.list() {
		if !rc.clear || !rc.mu.TryLock() {
			continue
		}
		for range pollBatch {
			if ep.ueFull() {
				break // the serve goroutine waits for room; a reader must not
			}
			m, err := rc.c.QP().Recv(done)
			if err != nil {
				break // nothing there, or the connection ended: its goroutine sees it
			}
			work = true
			if !ep.handle(rc, m, false) {
				break
			}
		}
		rc.mu.Unlock()
	}
	return work
}

// reap turns the transport's completions into libfabric ones and posts
// what waited for send queue room, and reports whether there were any.
// It does not block.
func (ep *endpoint) reap() bool {
	var comps [64]transport.Completion
	got := false
	for {
		n := ep.sp.CQ().Poll(comps[:])
		got = got || n > 0
		for _, c := range comps[:n] {
			ep.mu.Lock()
			op := ep.ops[c.ID]
			ep.mu.Unlock()
			if op != nil {
				ep.finish(op, c.Err)
			}
		}
		if n < len(comps) {
			break
		}
	}
	ep.stallMu.Lock()
	if len(ep.stalled) == 0 {
		ep.stallMu.Unlock()
		return got
	}
	var ps []*peer
	for p := range ep.stalled {
		ps = append(ps, p)
	}
	clear(ep.stalled)
	ep.stallMu.Unlock()
	for _, p := range ps {
		ep.flush(p)
	}
	return true
}

// ueFull reports whether the unexpected messages are at their bound.
func (ep *endpoint) ueFull() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.unexp[0])+len(ep.unexp[1])+len(ep.claimed) >= ep.set.maxUE || ep.ueBytes >= ep.set.maxUEB
}

// cowList is a list that readers take without a lock: a change stores a
// new copy. Its zero value is an empty list; safe for concurrent use.
type cowList[T comparable] struct {
	p  atomic.Pointer[[]T]
	mu sync.Mutex // serialises changes
}

// list returns the current list; the caller must not change it.
func (l *cowList[T]) list() []T {
	if p := l.p.Load(); p != nil {
		return *p
	}
	return nil
}

func (l *cowList[T]) add(x T) {
	l.mu.Lock()
	old := l.list()
	l.p.Store(new(append(old[:len(old):len(old)], x)))
	l.mu.Unlock()
}

func (l *cowList[T]) remove(x T) {
	l.mu.Lock()
	var next []T
	for _, y := range l.list() {
		if y != x {
			next = append(next, y)
		}
	}
	l.p.Store(&next)
	l.mu.Unlock()
}

// boundEPs are the endpoints bound to a CQ or a counter, whose progress
// reads of it make. Its zero value is an empty list; safe for
// concurrent use.
type boundEPs struct{ eps cowList[*endpoint] }

func (b *boundEPs) addEndpoint(ep *endpoint)    { b.eps.add(ep) }
func (b *boundEPs) removeEndpoint(ep *endpoint) { b.eps.remove(ep) }
func (b *boundEPs) list() []*endpoint           { return b.eps.list() }

// progress makes the progress of the bound endpoints on the reader's
// thread (fi_cq_read, fi_cntr_read).
func (b *boundEPs) progress() bool {
	work := false
	for _, ep := range b.list() {
		if ep.progress() {
			work = true
		}
	}
	return work
}

// standDown hands the progress of the bound endpoints back to their
// goroutines before a reader blocks (fi_cq_sread, fi_cntr_wait).
func (b *boundEPs) standDown() {
	for _, ep := range b.list() {
		ep.poll.standDown()
		ep.sp.StopPolling()
	}
}
