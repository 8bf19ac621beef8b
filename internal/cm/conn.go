package cm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// Conn is a connected QP set up by Dial or Accept, with the connection
// manager's channel to the peer. Its blocking calls take a context and
// return an error wrapping net.ErrClosed once the connection is closed
// (ErrClosed, ErrPeerClosed, ErrPeerGone). It is safe for concurrent use.
type Conn struct {
	ep      *Endpoint
	qp      *transport.Conn
	tc      net.Conn
	ends    *endConn // under tc's TLS session; nil in clear
	ver     uint8    // of the connection protocol, agreed in the handshake
	prot    Protection
	service string
	remote  transport.QPInfo

	life context.Context // cancelled, with the cause, when torn down
	kill context.CancelCauseFunc
	once sync.Once
	done chan struct{} // closed when torn down
	wmu  sync.Mutex    // serializes writes to tc

	// halt ends the application's Recv on the QP when the teardown
	// begins: from then on the teardown alone reads it (recvQP).
	halt    context.Context
	haltNow context.CancelFunc
	rmu     chan struct{} // holds one token: serializes reads of the QP (recvQP)

	mu       sync.Mutex
	cause    error // why it closes; nil while open
	left     []transport.Message
	sentDREQ bool
	gotDREQ  bool // on the channel
	gotDREP  bool // on the channel
	qpDREQ   bool // as a close marker on the QP (secured only)
	qpDREP   bool // as a close marker on the QP (secured only)
	overQP   bool // a close marker was sent (Stats.ClosesOverQP)
	eof      bool
	notify   chan struct{}
	rdone    chan struct{} // the reader's end
}

type closeKind uint8

const (
	byLocal closeKind = iota // Close: drain, DREQ, wait for DREP
	byPeer                   // DREQ received: drain, DREP
	byGone                   // channel broke: tear down at once
)

func (ep *Endpoint) newConn(qc *transport.Conn, tc net.Conn, ends *endConn, ver uint8, service string, remote transport.QPInfo, prot Protection) (*Conn, error) {
	c := &Conn{ep: ep, qp: qc, tc: tc, ends: ends, ver: ver, prot: prot, service: service, remote: remote,
		done: make(chan struct{}), notify: make(chan struct{}, 1), rdone: make(chan struct{})}
	c.life, c.kill = context.WithCancelCause(context.Background())
	c.halt, c.haltNow = context.WithCancel(context.Background())
	c.rmu = make(chan struct{}, 1)
	c.rmu <- struct{}{}
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil, ErrClosed
	}
	ep.conns[c] = struct{}{}
	ep.mu.Unlock()
	go c.read()
	return c, nil
}

// errUnaskedDREP is why a Conn closes whose peer confirmed a disconnect
// request this side never sent: one was injected on the path, and the
// peer has freed its QP (TestCMInjectedDREQ).
var errUnaskedDREP = &wrapped{"spray: peer went away: it confirmed a disconnect request this side never sent (one was injected on the path) and freed its QP", ErrPeerGone}

// wrapped is an error with its own text that wraps err.
type wrapped struct {
	text string
	err  error
}

func (w *wrapped) Error() string { return w.text }
func (w *wrapped) Unwrap() error { return w.err }

// read follows the peer's messages on the channel until it breaks.
//
// A secured connection believes only what TLS authenticates: DREQ, DREP,
// the peer's close_notify (an orderly close, taken as a DREQ) and, from
// the peer, a message it cannot parse. The end of its channel without
// close_notify (a FIN, a reset, a record that fails its tag) can be
// forged on the path, so it is counted (Stats.ChannelsCut) and leaves
// the QP running, whose packets are authenticated: a peer that is really
// gone shows as transport.ErrPeerUnreachable on the next operation, and
// Close then goes over the QP (closeLocal; TestCMInjectedDREQ's secured
// row, TestSecureChannelCut, TestSecureCloseOverQP).
func (c *Conn) read() {
	defer close(c.rdone)
	for {
		m, err := readMsg(c.tc)
		if err != nil && c.prot != ProtectionClear {
			notified := errors.Is(err, io.EOF) && !c.ends.ended.Load()
			c.mu.Lock()
			c.eof = true
			c.gotDREQ = c.gotDREQ || notified
			open := c.cause == nil
			c.mu.Unlock()
			select {
			case c.notify <- struct{}{}:
			default:
			}
			switch {
			case !open:
			case notified:
				c.start(byPeer, nil)
			default:
				c.ep.mu.Lock()
				c.ep.cm.ChannelsCut++
				c.ep.mu.Unlock()
				c.ep.cfg.logf("spray: connection %q to QP %#x: the connection manager's channel ended without the peer's close_notify (%v); the QP carries on", c.service, c.remote.QPN, err)
			}
			return
		}
		c.mu.Lock()
		unasked := false
		switch {
		case err != nil || m.version != c.ver:
			c.eof = true
		case m.typ == msgDREQ:
			c.gotDREQ = true
		case m.typ == msgDREP:
			c.gotDREP = true
			unasked = !c.sentDREQ
		}
		eof, dreq := c.eof, c.gotDREQ
		c.mu.Unlock()
		select {
		case c.notify <- struct{}{}:
		default:
		}
		switch {
		case unasked:
			c.start(byGone, errUnaskedDREP)
		case eof:
			c.start(byGone, nil)
			return
		case dreq:
			c.start(byPeer, nil)
		}
	}
}

// start begins the teardown once, for the first reason given, with cause
// or the kind's usual error.
func (c *Conn) start(k closeKind, cause error) {
	c.once.Do(func() {
		if cause == nil {
			cause = map[closeKind]error{byLocal: ErrClosed, byPeer: ErrPeerClosed, byGone: ErrPeerGone}[k]
		}
		c.mu.Lock()
		c.cause = cause
		c.mu.Unlock()
		c.haltNow()
		go c.teardown(k, cause)
	})
}

func (c *Conn) send(typ uint8) {
	c.wmu.Lock()
	c.tc.SetWriteDeadline(time.Now().Add(c.ep.cfg.CloseTimeout))
	c.tc.Write(appendMsgV(nil, c.ver, typ, nil))
	c.wmu.Unlock()
}

func (c *Conn) teardown(k closeKind, cause error) {
	timeout := c.ep.cfg.CloseTimeout
	deadline := time.Now().Add(timeout)
	var stopReading func()
	if c.prot != ProtectionClear && k != byGone {
		stopReading = c.readQP()
	}
	if k != byGone {
		c.drain(deadline)
	}
	switch k {
	case byLocal:
		if !c.closeLocal(deadline) {
			c.ep.mu.Lock()
			c.ep.cm.CloseUnconfirmed++
			c.ep.mu.Unlock()
		}
	case byPeer:
		c.mu.Lock()
		onQP := c.qpDREQ
		c.mu.Unlock()
		c.send(msgDREP)
		if onQP {
			c.sendMarker(deadline, markDREP)
		}
	}
	if stopReading != nil {
		stopReading()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	left, _ := c.qp.Destroy(ctx)
	cancel()
	c.mu.Lock()
	for _, m := range left {
		if !c.isMarker(m) {
			c.left = append(c.left, m)
		}
	}
	c.mu.Unlock()
	c.kill(cause)
	c.tc.Close()
	<-c.rdone
	c.ep.mu.Lock()
	delete(c.ep.conns, c)
	c.ep.mu.Unlock()
	close(c.done)
}

// closeLocal tells the peer that this side closes and waits until
// deadline for its confirmation; false if none came.
//
// A clear Conn sends DREQ on the channel and takes DREP, or the channel's
// end, as the confirmation. A secured Conn does not believe the channel's
// end (Conn.read), so when its channel has ended, or has said nothing for
// a quarter of the close timeout (a channel cut towards the peer only
// looks open from here), it sends DREQ over the QP as a close marker:
// authenticated like every packet of the QP, acknowledged and retried by
// the transport. The peer answers on the path the request came by, and
// the first DREP, on either path, confirms (TestSecureCloseOverQP).
func (c *Conn) closeLocal(deadline time.Time) bool {
	secured := c.prot != ProtectionClear
	c.mu.Lock()
	c.sentDREQ = true
	eof := c.eof
	c.mu.Unlock()
	if !secured || !eof {
		c.send(msgDREQ)
	}
	// The DREQ marker is acknowledged once the peer's QP has it; a peer
	// that answered on the channel and freed its QP never acknowledges
	// it, so it is sent aside and abandoned once confirmed.
	mctx, mcancel := context.WithDeadline(context.Background(), deadline)
	var marking sync.WaitGroup
	defer func() {
		mcancel()
		marking.Wait()
	}()
	overQP := false
	sendQP := func() {
		if !overQP {
			overQP = true
			c.countOverQP()
			marking.Go(func() { c.qp.SendImm(mctx, nil, markDREQ) })
		}
	}
	var fallback <-chan time.Time
	if secured {
		ft := time.NewTimer(c.ep.cfg.CloseTimeout / 4)
		defer ft.Stop()
		fallback = ft.C
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	sentDREP, sentMarkDREP := false, false
	for {
		c.mu.Lock()
		dreq, drep, qdreq, qdrep, eof := c.gotDREQ, c.gotDREP, c.qpDREQ, c.qpDREP, c.eof
		c.mu.Unlock()
		if dreq && !sentDREP { // both sides closed at once
			c.send(msgDREP)
			sentDREP = true
		}
		if qdreq && !sentMarkDREP {
			// Both sides close at once: the peer's DREQ says it has
			// drained, and its QP's acknowledgement of this DREP that
			// it knows this side closes (TestSecureCloseOverQP, both).
			sentMarkDREP = true
			if c.sendMarker(deadline, markDREP) == nil {
				return true
			}
		}
		switch {
		case drep || qdrep:
			return true
		case eof && !secured:
			return true
		case eof:
			sendQP()
		}
		select {
		case <-c.notify:
		case <-fallback:
			fallback = nil
			sendQP()
		case <-t.C:
			return false
		}
	}
}

// sendMarker sends a close marker (markDREQ, markDREP) over the QP and
// waits until the peer acknowledged it (nil) or deadline.
func (c *Conn) sendMarker(deadline time.Time, imm uint32) error {
	c.countOverQP()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return c.qp.SendImm(ctx, nil, imm)
}

// countOverQP counts, once per Conn, a close that went over the QP.
func (c *Conn) countOverQP() {
	c.mu.Lock()
	first := !c.overQP
	c.overQP = true
	c.mu.Unlock()
	if first {
		c.ep.mu.Lock()
		c.ep.cm.ClosesOverQP++
		c.ep.mu.Unlock()
	}
}

// isMarker reports whether m is a close marker: on a secured Conn, a
// message without data whose immediate is markDREQ or markDREP. Only an
// authenticated QP carries them; in clear one could be forged on the
// path, so there it is an ordinary message.
func (c *Conn) isMarker(m transport.Message) bool {
	return c.prot != ProtectionClear && m.HasImm && m.Len == 0 && (m.Imm == markDREQ || m.Imm == markDREP)
}

// onMarker notes a close marker read from the QP: a DREQ closes the Conn
// as a DREQ on the channel does.
func (c *Conn) onMarker(imm uint32) {
	c.mu.Lock()
	if imm == markDREQ {
		c.qpDREQ = true
	} else {
		c.qpDREP = true
	}
	c.mu.Unlock()
	c.signal()
	if imm == markDREQ {
		c.start(byPeer, nil)
	}
}

// signal wakes a teardown waiting for the peer.
func (c *Conn) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// recvQP returns the QP's next message, taking the close markers it reads
// on the way. It is the only reader of the QP: Recv until the teardown
// begins (c.halt), readQP after.
func (c *Conn) recvQP(ctx context.Context) (transport.Message, error) {
	select {
	case <-c.rmu:
	case <-ctx.Done():
		return transport.Message{}, ctx.Err()
	}
	defer func() { c.rmu <- struct{}{} }()
	for {
		m, err := c.qp.Recv(ctx)
		if err != nil || !c.isMarker(m) {
			return m, err
		}
		m.Release()
		c.onMarker(m.Imm)
	}
}

// readQP reads a secured Conn's QP during its teardown, keeping the
// messages for Recv and taking the close markers, until stop.
func (c *Conn) readQP() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := c.recvQP(ctx)
			if err != nil {
				return
			}
			c.mu.Lock()
			c.left = append(c.left, m)
			c.mu.Unlock()
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// drain waits until the QP has no work request pending or has failed.
func (c *Conn) drain(deadline time.Time) {
	wait := 100 * time.Microsecond
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		n, failed, err := c.qp.Pending(ctx)
		cancel()
		if err != nil || failed != nil || n == 0 {
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// Close drains the work posted on the connection (up to
// Options.CloseTimeout), tells the peer, waits for its confirmation and
// frees the QP on this side; the peer frees its own. A secured Conn
// whose channel was cut closes over the QP instead (see closeLocal). It
// frees the QP after Options.CloseTimeout at the latest, confirmed or not.
// Calls pending on the Conn then return ErrClosed. Close is idempotent:
// every call waits for the teardown and returns nil.
func (c *Conn) Close() error {
	c.start(byLocal, nil)
	<-c.done
	return nil
}

// Done is closed when the connection is torn down, by either side.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection closed (ErrClosed, ErrPeerClosed or an
// error wrapping ErrPeerGone), or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// Protection returns how the connection's traffic is protected: in clear,
// or, when both endpoints have Options.Security, authenticated and
// (unless both asked for integrity only) encrypted.
func (c *Conn) Protection() Protection { return c.prot }

// Service returns the service the connection was set up for.
func (c *Conn) Service() string { return c.service }

// Info returns the local QP's information; Remote the peer's.
func (c *Conn) Info() transport.QPInfo { return c.qp.Info() }

// Remote returns the peer QP's information.
func (c *Conn) Remote() transport.QPInfo { return c.remote }

// QP returns the underlying transport connection, for Post and the
// completion queue. Work posted there is drained by Close like the rest.
func (c *Conn) QP() *transport.Conn { return c.qp }

// Stats returns the QP's counters.
func (c *Conn) Stats(ctx context.Context) (transport.QPStats, error) { return c.qp.Stats(ctx) }

// call runs fn with a context that also ends when the connection is torn
// down. It refuses new work once the teardown began. The transport's
// errors explain themselves (transport.QPError).
func (c *Conn) call(ctx context.Context, fn func(context.Context) error) error {
	if err := c.Err(); err != nil {
		return err
	}
	err := c.withLife(ctx, fn)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && c.life.Err() != nil {
		return context.Cause(c.life)
	}
	return err
}

// withLife runs fn with a context that also ends at the teardown.
func (c *Conn) withLife(ctx context.Context, fn func(context.Context) error) error {
	return withCtx(ctx, c.life, fn)
}

// withCtx runs fn with a context that ends with ctx or with also, whose
// cause it then takes.
func withCtx(ctx, also context.Context, fn func(context.Context) error) error {
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(also, func() { cancel(context.Cause(also)) })
	err := fn(cctx)
	stop()
	cancel(nil)
	return err
}

// Send sends msg and returns when the peer has acknowledged all of it.
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	return c.call(ctx, func(ctx context.Context) error { return c.qp.Send(ctx, msg) })
}

// SendImm sends msg with an immediate value. On a secured Conn, an
// empty message with the immediate 0x53504305 or 0x53504306 is reserved:
// it is the close marker (see Close).
func (c *Conn) SendImm(ctx context.Context, msg []byte, imm uint32) error {
	if err := c.checkImm(msg, imm); err != nil {
		return err
	}
	return c.call(ctx, func(ctx context.Context) error { return c.qp.SendImm(ctx, msg, imm) })
}

// Write writes data into the peer's region at to (see transport.Conn.Write)
// and returns when the peer has acknowledged all of it.
func (c *Conn) Write(ctx context.Context, data []byte, to transport.Remote) error {
	return c.call(ctx, func(ctx context.Context) error { return c.qp.Write(ctx, data, to) })
}

// WriteImm writes like Write, then gives the peer a completion with imm.
// As for SendImm, an empty write with a close marker's immediate is
// refused on a secured Conn.
func (c *Conn) WriteImm(ctx context.Context, data []byte, to transport.Remote, imm uint32) error {
	if err := c.checkImm(data, imm); err != nil {
		return err
	}
	return c.call(ctx, func(ctx context.Context) error { return c.qp.WriteImm(ctx, data, to, imm) })
}

// checkImm refuses what the peer would take for a close marker.
func (c *Conn) checkImm(data []byte, imm uint32) error {
	if c.prot != ProtectionClear && len(data) == 0 && (imm == markDREQ || imm == markDREP) {
		return fmt.Errorf("%w: an empty message with the immediate %#x is the secured close marker", transport.ErrInvalidRequest, imm)
	}
	return nil
}

// Read reads len(into) bytes of the peer's region at from into into (see
// transport.Conn.Read) and returns when they have all landed; a refused read
// returns an error wrapping transport.ErrRemoteAccess.
func (c *Conn) Read(ctx context.Context, into []byte, from transport.Remote) error {
	return c.call(ctx, func(ctx context.Context) error { return c.qp.Read(ctx, into, from) })
}

// Recv returns the next received message. After the peer closed the
// connection it returns the messages that arrived before, then io.EOF.
// Once the teardown begins, by either side, it returns what the QP held
// then (the teardown reads it from there on), then ErrClosed, io.EOF or
// why the connection broke.
func (c *Conn) Recv(ctx context.Context) (transport.Message, error) {
	for {
		c.mu.Lock()
		if len(c.left) > 0 {
			m := c.left[0]
			c.left = c.left[1:]
			c.mu.Unlock()
			return m, nil
		}
		cause := c.cause
		c.mu.Unlock()
		select {
		case <-c.done:
			if cause == ErrPeerClosed {
				return transport.Message{}, io.EOF
			}
			return transport.Message{}, cause
		default:
		}
		if cause == nil {
			var m transport.Message
			err := withCtx(ctx, c.halt, func(ctx context.Context) error {
				var err error
				m, err = c.recvQP(ctx)
				return err
			})
			if err == nil {
				return m, nil
			}
			if ctx.Err() != nil || (c.halt.Err() == nil && !errors.Is(err, transport.ErrDestroyed)) {
				return m, err // not torn down: the caller's context, the endpoint failed, or a receive buffer's error
			}
		}
		// Torn down: wait for the messages left behind, then report them.
		select {
		case <-c.done:
		case <-ctx.Done():
			return transport.Message{}, ctx.Err()
		}
	}
}

// PostRecv posts buf as the next receive buffer (see
// transport.Conn.PostRecv): the next message lands in it, placed there
// packet by packet, and Recv returns it with Data = buf[:n]. Post the
// first buffer before the peer sends. PostRecv does not block and does
// not allocate.
func (c *Conn) PostRecv(ctx context.Context, buf []byte) error {
	if err := c.Err(); err != nil {
		return err
	}
	return c.qp.PostRecv(ctx, buf)
}
