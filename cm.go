package spray

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// handshakeTimeout bounds a connection setup whose context has no deadline,
// and every setup on the listening side.
const handshakeTimeout = 10 * time.Second

// Backlog is the number of set-up connections a Listener holds for Accept;
// a request beyond it is rejected.
const Backlog = 64

// Listener accepts connections for one service of an Endpoint. It is safe
// for concurrent use; Close is idempotent and makes pending and later
// Accepts return an error wrapping net.ErrClosed.
type Listener struct {
	ep      *Endpoint
	service string
	q       chan *Conn
	done    chan struct{}
	once    sync.Once
}

// Listen starts accepting connections for service (1 to MaxService bytes)
// on the endpoint's connection manager, which the first Listen starts on
// Options.CMAddr (TCP). One Listener per service.
func (ep *Endpoint) Listen(service string) (*Listener, error) {
	if len(service) == 0 || len(service) > MaxService {
		return nil, fmt.Errorf("%w: service name of %d bytes (1 to %d)", ErrOptions, len(service), MaxService)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return nil, ErrClosed
	}
	if ep.listeners[service] != nil {
		return nil, fmt.Errorf("%w: service %q already has a Listener", ErrOptions, service)
	}
	if ep.ln == nil {
		ln, err := net.Listen("tcp", ep.opts.CMAddr)
		if err != nil {
			return nil, fmt.Errorf("spray: connection manager on %s: %w (set Options.CMAddr)", ep.opts.CMAddr, err)
		}
		ep.ln = ln
		ep.wg.Go(func() { ep.serve(ln) })
	}
	l := &Listener{ep: ep, service: service, q: make(chan *Conn, Backlog), done: make(chan struct{})}
	ep.listeners[service] = l
	return l, nil
}

// Addr returns the connection manager's address, for a peer's Dial.
func (l *Listener) Addr() string { return l.ep.CMAddr() }

// Accept returns the next connection, set up and connected.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.q:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting and closes the connections set up but not yet
// accepted.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.ep.mu.Lock()
		if l.ep.listeners[l.service] == l {
			delete(l.ep.listeners, l.service)
		}
		close(l.done)
		l.ep.mu.Unlock()
		for {
			select {
			case c := <-l.q:
				c.Close()
				continue
			default:
			}
			break
		}
	})
	return nil
}

// push hands a set-up connection to Accept; false when the listener is
// closed or its backlog full.
func (l *Listener) push(c *Conn) bool {
	l.ep.mu.Lock()
	defer l.ep.mu.Unlock()
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.q <- c:
		return true
	default:
		return false
	}
}

func (ep *Endpoint) serve(ln net.Listener) {
	for {
		tc, err := ln.Accept()
		if err != nil {
			return
		}
		ep.wg.Go(func() { ep.handle(tc) })
	}
}

// handle answers one connection request (REQ, REP, RTU).
func (ep *Endpoint) handle(tc net.Conn) {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		tc.Close()
		return
	}
	ep.hs[tc] = struct{}{}
	ep.mu.Unlock()
	ok := false
	defer func() {
		ep.mu.Lock()
		delete(ep.hs, tc)
		ep.mu.Unlock()
		if !ok {
			tc.Close()
		}
	}()
	tc.SetDeadline(time.Now().Add(handshakeTimeout))
	// Answer in the request's version when this side speaks it, so that a
	// version-1 dialer reads every message as it always has.
	top := ep.cmTop()
	ver := top
	reject := func(reason uint8, format string, args ...any) {
		r := rejection{reason: reason, version: top, text: fmt.Sprintf(format, args...)}
		tc.Write(appendMsgV(nil, ver, msgREJ, r.marshal()))
	}
	m, err := readMsg(tc)
	switch {
	case errors.Is(err, errBadMessage):
		reject(rejBadRequest, "%v", err)
		return
	case err != nil:
		return
	case m.version < cmVersion1 || m.version > top:
		reject(rejVersion, "version %d not supported", m.version)
		return
	}
	ver = m.version
	if m.typ != msgREQ {
		reject(rejBadRequest, "message type %d where a request was expected", m.typ)
		return
	}
	req, err := parseReq(m.body, ver)
	if err != nil {
		reject(rejBadRequest, "%v", err)
		return
	}
	if req.profile != ep.opts.Profile {
		reject(rejProfile, "profile %v asked, this endpoint runs %v", req.profile, ep.opts.Profile)
		return
	}
	ep.mu.Lock()
	l := ep.listeners[req.service]
	busy := l != nil && len(l.q) == cap(l.q)
	ep.mu.Unlock()
	switch {
	case l == nil:
		reject(rejService, "no Listener for service %q at %s", req.service, tc.LocalAddr())
		return
	case busy:
		reject(rejBusy, "backlog of service %q full", req.service)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	// A dialer that sent its steering gets a QP whose entropies its RSS
	// delivers to its QP's engine (TestCMSteering).
	var qc *transport.Conn
	if req.steer != nil {
		qc, err = ep.CreateQPSteered(ctx, *req.steer)
		if errors.Is(err, transport.ErrInvalidRequest) {
			reject(rejBadRequest, "%v", err)
			return
		}
	} else {
		qc, err = ep.CreateQP(ctx)
	}
	if err != nil {
		reject(rejInternal, "creating a QP: %v", err)
		return
	}
	destroy := func() { qc.Destroy(ctx) }
	if err := qc.Connect(ctx, req.qp); err != nil {
		destroy()
		reject(rejBadRequest, "connecting to QP %#x at %s: %v", req.qp.QPN, req.qp.IP, err)
		return
	}
	rep := connRep{qp: qc.Info(), steer: ep.steering(qc)}
	if _, err := tc.Write(appendMsgV(nil, ver, msgREP, rep.marshalV(ver))); err != nil {
		destroy()
		return
	}
	if m, err := readMsg(tc); err != nil || m.typ != msgRTU {
		destroy()
		return
	}
	tc.SetDeadline(time.Time{})
	c, err := ep.newConn(qc, tc, ver, req.service, req.qp)
	if err != nil {
		destroy()
		return
	}
	ok = true
	if !l.push(c) {
		c.Close()
	}
}

// Dial sets up a connection to the service at addr ("host:port" of the
// peer's connection manager, or "host" for port CMPort): it creates a QP,
// exchanges QP information with the peer and connects both sides. A
// refused TCP connection returns ErrRefused at once; a rejection returns
// ErrUnknownService, ErrVersion or ErrRejected with the peer's reason.
// It speaks version 2 of the protocol, which steers both QPs' entropies
// to the peer's queues, and dials again in version 1, without steering,
// when the peer rejects version 2 (TestCMVersion1Peer).
func (ep *Endpoint) Dial(ctx context.Context, addr, service string) (*Conn, error) {
	if len(service) == 0 || len(service) > MaxService {
		return nil, fmt.Errorf("%w: service name of %d bytes (1 to %d)", ErrOptions, len(service), MaxService)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, strconv.Itoa(CMPort))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
	}
	qc, err := ep.CreateQP(ctx)
	if err != nil {
		return nil, err
	}
	ver := ep.cmTop()
	for {
		c, retry, err := ep.dialOnce(ctx, qc, ver, addr, service)
		if retry && ver > cmVersion1 {
			ver = cmVersion1
			continue
		}
		if err != nil {
			qc.Destroy(context.Background())
			if ctx.Err() != nil {
				return nil, fmt.Errorf("spray: dial %s: %w", addr, ctx.Err())
			}
			return nil, err
		}
		return c, nil
	}
}

// dialOnce runs one handshake in version ver on a new TCP connection
// for qc. retry reports a rejection by a listener that speaks version 1
// only: the caller may dial again in version 1.
func (ep *Endpoint) dialOnce(ctx context.Context, qc *transport.Conn, ver uint8, addr, service string) (_ *Conn, retry bool, _ error) {
	var d net.Dialer
	tc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, false, fmt.Errorf("%w: nothing listens at %s (the peer must call Listen(%q))", ErrRefused, addr, service)
		}
		return nil, false, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	ok := false
	defer func() {
		if !ok {
			tc.Close()
		}
	}()
	dl, _ := ctx.Deadline()
	tc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := connReq{profile: ep.opts.Profile, qp: qc.Info(), service: service, steer: ep.steering(qc)}
	if _, err := tc.Write(appendMsgV(nil, ver, msgREQ, req.marshalV(ver))); err != nil {
		return nil, false, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	m, err := readMsg(tc)
	if err != nil {
		return nil, false, fmt.Errorf("spray: dial %s: no reply: %w", addr, err)
	}
	switch {
	case m.typ == msgREJ:
		r, err := parseRej(m.body)
		if err != nil {
			return nil, false, fmt.Errorf("spray: dial %s: %w", addr, err)
		}
		// A version-1 listener refuses every later request before it
		// reads it: as another version (rejVersion), or as malformed
		// when the body exceeds version 1's bound (a large RSS table).
		// Either way its REJ names version 1 (TestCMVersion1Peer).
		retry = r.version == cmVersion1 && ver > cmVersion1
		return nil, retry, fmt.Errorf("dial %s: %w", addr, r.err())
	case m.version != ver:
		return nil, false, fmt.Errorf("%w: the peer at %s answered version %d in version %d", ErrVersion, addr, ver, m.version)
	case m.typ != msgREP:
		return nil, false, fmt.Errorf("spray: dial %s: %w: type %d where a reply was expected", addr, errBadMessage, m.typ)
	}
	rep, err := parseRep(m.body, ver)
	if err != nil {
		return nil, false, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	// The QP was created before the listener's steering was known: steer
	// it now, before its first packet (TestCMSteering).
	if rep.steer != nil {
		if err := qc.Steer(ctx, *rep.steer); err != nil {
			return nil, false, fmt.Errorf("spray: dial %s: the peer's steering: %w", addr, err)
		}
	}
	if err := qc.Connect(ctx, rep.qp); err != nil {
		return nil, false, err
	}
	if _, err := tc.Write(appendMsgV(nil, ver, msgRTU, nil)); err != nil {
		return nil, false, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	if !stop() {
		return nil, false, ctx.Err()
	}
	tc.SetDeadline(time.Time{})
	c, err := ep.newConn(qc, tc, ver, service, rep.qp)
	if err != nil {
		return nil, false, err
	}
	ok = true
	return c, false, nil
}

// steering returns the steering of qc's frames to send the peer, or nil
// when the endpoint has none (one engine, a device without RSS).
func (ep *Endpoint) steering(qc *transport.Conn) *transport.Steering {
	st, ok := ep.Endpoint.Steering(qc)
	if !ok {
		return nil
	}
	return &st
}

// cmTop returns the highest version of the connection protocol this
// endpoint speaks: cmVersion, unless a test made it a version-1 peer.
func (ep *Endpoint) cmTop() uint8 {
	if ep.cmv != 0 {
		return ep.cmv
	}
	return cmVersion
}
