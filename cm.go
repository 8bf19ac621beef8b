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
	reject := func(reason uint8, format string, args ...any) {
		r := rejection{reason: reason, version: cmVersion, text: fmt.Sprintf(format, args...)}
		tc.Write(appendMsg(nil, msgREJ, r.marshal()))
	}
	m, err := readMsg(tc)
	switch {
	case errors.Is(err, errBadMessage):
		reject(rejBadRequest, "%v", err)
		return
	case err != nil:
		return
	case m.version != cmVersion:
		reject(rejVersion, "version %d not supported", m.version)
		return
	case m.typ != msgREQ:
		reject(rejBadRequest, "message type %d where a request was expected", m.typ)
		return
	}
	req, err := parseReq(m.body)
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
	qc, err := ep.CreateQP(ctx)
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
	if _, err := tc.Write(appendMsg(nil, msgREP, appendQPInfo(nil, qc.Info()))); err != nil {
		destroy()
		return
	}
	if m, err := readMsg(tc); err != nil || m.typ != msgRTU {
		destroy()
		return
	}
	tc.SetDeadline(time.Time{})
	c, err := ep.newConn(qc, tc, req.service, req.qp)
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
	var d net.Dialer
	tc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: nothing listens at %s (the peer must call Listen(%q))", ErrRefused, addr, service)
		}
		return nil, fmt.Errorf("spray: dial %s: %w", addr, err)
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
	qc, err := ep.CreateQP(ctx)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Conn, error) {
		qc.Destroy(context.Background())
		if ctx.Err() != nil {
			return nil, fmt.Errorf("spray: dial %s: %w", addr, ctx.Err())
		}
		return nil, err
	}
	req := connReq{profile: ep.opts.Profile, qp: qc.Info(), service: service}
	if _, err := tc.Write(appendMsg(nil, msgREQ, req.marshal())); err != nil {
		return fail(fmt.Errorf("spray: dial %s: %w", addr, err))
	}
	m, err := readMsg(tc)
	if err != nil {
		return fail(fmt.Errorf("spray: dial %s: no reply: %w", addr, err))
	}
	var remote transport.QPInfo
	switch {
	case m.typ == msgREJ:
		r, err := parseRej(m.body)
		if err != nil {
			return fail(fmt.Errorf("spray: dial %s: %w", addr, err))
		}
		return fail(fmt.Errorf("dial %s: %w", addr, r.err()))
	case m.version != cmVersion:
		return fail(fmt.Errorf("%w: the peer at %s answered in version %d", ErrVersion, addr, m.version))
	case m.typ != msgREP:
		return fail(fmt.Errorf("spray: dial %s: %w: type %d where a reply was expected", addr, errBadMessage, m.typ))
	}
	if remote, err = parseRep(m.body); err != nil {
		return fail(fmt.Errorf("spray: dial %s: %w", addr, err))
	}
	if err := qc.Connect(ctx, remote); err != nil {
		return fail(err)
	}
	if _, err := tc.Write(appendMsg(nil, msgRTU, nil)); err != nil {
		return fail(fmt.Errorf("spray: dial %s: %w", addr, err))
	}
	if !stop() {
		return fail(ctx.Err())
	}
	tc.SetDeadline(time.Time{})
	c, err := ep.newConn(qc, tc, service, remote)
	if err != nil {
		return fail(err)
	}
	ok = true
	return c, nil
}
