package cm

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sprayfabric/spray/internal/peek"
)

// Backlog is the number of set-up connections a Listener holds for Accept;
// a request beyond it is rejected.
const Backlog = 64

// Listener accepts connections for one service of an Endpoint. It is safe
// for concurrent use; Close is idempotent and makes pending and later
// Accepts return an error wrapping net.ErrClosed.
type Listener struct {
	ep      *Endpoint
	service string
	sec     *security // nil: in clear
	q       chan *Conn
	done    chan struct{}
	once    sync.Once
}

// Listen starts accepting connections for service (1 to MaxService bytes)
// on the endpoint's connection manager, which the first Listen starts on
// Options.CMAddr (TCP). One Listener per service. Its security is the
// endpoint's (Options.Security); ListenWith sets another.
func (ep *Endpoint) Listen(service string) (*Listener, error) {
	return ep.ListenWith(service, ListenOptions{})
}

// ListenOptions configure one Listener.
type ListenOptions struct {
	// Security, when set, protects this service's connections in place
	// of Options.Security: a dialer with security connects inside TLS,
	// one without is refused unless Security.AllowClear. nil: the
	// endpoint's. The connection manager presents one TLS identity for
	// every service, set by the first Listener whose Security has
	// certificates (Security.TLS; a pre-shared key alone needs none),
	// whose ClientAuth then applies to every secured dialer: another
	// Listener's Security.TLS must be nil or the same *tls.Config.
	Security *Security
	// Clear runs this service in clear whatever Options.Security says: a
	// dialer with security is refused with ErrSecurityMismatch (it dials
	// again in clear when it allows it). Clear with Security is invalid.
	Clear bool
}

// ListenWith is Listen with options for this service
// (TestSecurePerListener).
func (ep *Endpoint) ListenWith(service string, o ListenOptions) (*Listener, error) {
	if len(service) == 0 || len(service) > MaxService {
		return nil, fmt.Errorf("%w: service name of %d bytes (1 to %d)", ErrOptions, len(service), MaxService)
	}
	sec, err := ep.securityFor(o.Security, o.Clear)
	if err != nil {
		return nil, err
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return nil, ErrClosed
	}
	if ep.listeners[service] != nil {
		return nil, fmt.Errorf("%w: service %q already has a Listener", ErrOptions, service)
	}
	if sec != nil && !sec.canServe {
		return nil, fmt.Errorf("%w: Security.TLS has no certificate to present as listener (set Certificates, or a PSK for a throwaway one)", ErrOptions)
	}
	cmSec := ep.cmSec
	if sec != nil {
		switch {
		case cmSec == nil || (cmSec.tlsFrom == nil && sec.tlsFrom != nil):
			// The first certificates replace a throwaway identity,
			// which no dialer verifies.
			cmSec = sec
		case sec.tlsFrom != nil && sec.tlsFrom != cmSec.tlsFrom:
			return nil, fmt.Errorf("%w: service %q: the connection manager presents one TLS identity, another Listener's Security.TLS; give the same *tls.Config, or none (a pre-shared key alone)", ErrOptions, service)
		}
	}
	if ep.ln == nil {
		ln, err := net.Listen("tcp", ep.cfg.CMAddr)
		if err != nil {
			return nil, fmt.Errorf("spray: connection manager on %s: %w (set Options.CMAddr)", ep.cfg.CMAddr, err)
		}
		ep.ln = ln
		ep.wg.Go(func() { ep.serve(ln) })
	}
	ep.cmSec = cmSec
	l := &Listener{ep: ep, service: service, sec: sec, q: make(chan *Conn, Backlog), done: make(chan struct{})}
	ep.listeners[service] = l
	return l, nil
}

// securityFor returns the security of one Listen or Dial: s checked, nil
// when clear, else the endpoint's.
func (ep *Endpoint) securityFor(s *Security, clear bool) (*security, error) {
	switch {
	case clear && s != nil:
		return nil, fmt.Errorf("%w: both Security and Clear set", ErrOptions)
	case clear:
		return nil, nil
	case s != nil:
		return newSecurity(s)
	}
	return ep.sec, nil
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

// handshake is one connection request the connection manager answers,
// from the TCP connection's accept to the dialer's RTU.
type handshake struct {
	tc      net.Conn
	start   time.Time
	refuse  bool          // refused at once: the listener is full
	elem    *list.Element // in Endpoint.hs; nil once out (under Endpoint.mu)
	evicted bool          // dropped for a newer request (under Endpoint.mu)
}

// Stats counts the connection manager's work: as listener, and, for
// ChannelsCut, for every connection.
type Stats struct {
	// HalfOpen is the number of requests being answered now, from the
	// TCP accept to the dialer's RTU: at most Options.MaxHandshakes.
	HalfOpen int
	// Accepted counts connections set up and handed to a Listener.
	Accepted uint64
	// Rejected counts requests answered with a rejection (REJ) for what
	// they asked.
	Rejected uint64
	// Evicted counts requests dropped for newer ones, and Refused those
	// refused at once, when Options.MaxHandshakes were being answered.
	Evicted, Refused uint64
	// TimedOut counts requests whose dialer said nothing more for
	// Options.HandshakeTimeout.
	TimedOut uint64
	// AcceptErrors counts TCP accepts that failed (out of file
	// descriptors); the connection manager keeps serving.
	AcceptErrors uint64
	// AuthFailed counts requests that failed for their security: a TLS
	// handshake that failed (either side refused the other's
	// certificate, or the dialer sent none), or a dialer that did not
	// prove the pre-shared key.
	AuthFailed uint64
	// ChannelsCut counts secured connections, of either role, whose
	// channel ended without the peer's TLS close_notify: a FIN or reset
	// (forged on the path, or a peer gone), or a record that failed TLS.
	// They carry on, their packets authenticated (Conn.read).
	ChannelsCut uint64
	// ClosesOverQP counts secured connections whose close went over the
	// QP (a close marker sent, asking or answering) because their
	// channel had ended or stayed silent.
	ClosesOverQP uint64
	// CloseUnconfirmed counts Closes that freed the QP without the
	// peer's confirmation within Options.CloseTimeout (a peer gone, or
	// one that does not receive).
	CloseUnconfirmed uint64
}

// count changes the counters under the endpoint's lock.
func (ep *Endpoint) count(f func(*Stats)) {
	ep.mu.Lock()
	f(&ep.cm)
	ep.mu.Unlock()
}

// CMStats returns the connection manager's counters.
func (ep *Endpoint) CMStats() Stats {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	s := ep.cm
	s.HalfOpen = ep.hs.Len()
	return s
}

func (ep *Endpoint) serve(ln net.Listener) {
	var wait time.Duration
	for {
		tc, err := ln.Accept()
		if err != nil {
			ep.mu.Lock()
			closed := ep.closed
			if !closed {
				ep.cm.AcceptErrors++
			}
			ep.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, or the like: it may pass, so
			// keep serving, backing off instead of spinning.
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			time.Sleep(wait)
			continue
		}
		wait = 0
		if h := ep.admit(tc); h != nil {
			ep.wg.Go(func() { ep.handle(h) })
		}
	}
}

// admit starts answering tc. With Options.MaxHandshakes requests being
// answered, it drops the oldest when that one has waited for more than a
// twentieth of the handshake timeout and fewer than MaxHandshakes are
// being dropped, and refuses tc otherwise (Dial tries again on either). Refusing only would let requests that never
// complete lock every legitimate dialer out for the handshake timeout;
// dropping only would let a fast flood drop a legitimate handshake
// between its REP and its RTU (TestCMFlood). At most MaxHandshakes
// refusals are written at once; beyond them a connection is closed
// unanswered. Deadlines of handshakes are set under ep.mu, so that an
// eviction's cannot be undone by its handler.
func (ep *Endpoint) admit(tc net.Conn) *handshake {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		tc.Close()
		return nil
	}
	now := time.Now()
	h := &handshake{tc: tc, start: now}
	if ep.hs.Len() >= ep.cfg.MaxHandshakes {
		if now.Sub(ep.hs.Front().Value.(*handshake).start) < ep.cfg.HandshakeTimeout/20 || ep.dropping >= ep.cfg.MaxHandshakes {
			ep.cm.Refused++
			if ep.refusing >= ep.cfg.MaxHandshakes {
				tc.Close()
				return nil
			}
			ep.refusing++
			h.refuse = true
			tc.SetDeadline(now.Add(time.Second))
			return h
		}
		v := ep.hs.Remove(ep.hs.Front()).(*handshake)
		v.elem, v.evicted = nil, true
		ep.dropping++
		v.tc.SetReadDeadline(time.Unix(1, 0)) // its handler rejects it and cleans up
	}
	tc.SetDeadline(now.Add(ep.cfg.HandshakeTimeout))
	h.elem = ep.hs.PushBack(h)
	return h
}

// refuse tells the dialer on tc that the listener is full and closes tc
// after the dialer's request, read and dropped, so that the close does
// not reset the connection before the dialer reads the rejection.
func (ep *Endpoint) refuse(tc net.Conn) {
	r := rejection{reason: rejFull, version: ep.cmTop(),
		text: fmt.Sprintf("%d connection requests in progress at %s; try again", ep.cfg.MaxHandshakes, tc.LocalAddr())}
	tc.Write(appendMsgV(nil, ep.cmTop(), msgREJ, r.marshal()))
	if cw, ok := tc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(tc, cmHdrLen+cmMaxBody4))
	tc.Close()
	ep.mu.Lock()
	ep.refusing--
	ep.mu.Unlock()
}

// lingerClose closes the writing half of tc and reads what the peer
// still sends (bounded by tc's deadline and 16 KB), so that the close does
// not reset the connection before the peer read what was written.
func lingerClose(tc net.Conn) {
	if pc, ok := tc.(*peek.Conn); ok {
		tc = pc.Conn
	}
	if cw, ok := tc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(tc, 16<<10))
}
