package cm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sprayfabric/spray/internal/peek"
	"github.com/sprayfabric/spray/transport"
)

// The listener's side of a handshake is a state machine: one state per
// step, and per state one function that waits for that step's event (a
// message read, a write, the TLS handshake, or their failure) and
// returns the next state. Its timer is the TCP connection's deadline:
// Config.HandshakeTimeout from the accept (admit), moved into the past
// when a newer request evicts this one, cleared once connected. A read or
// write that fails on it is the event "timeout" or "evicted". The table
// of transitions, each with its test, is in docs/design.md ("The
// handshake's states").
type lstate uint8

const (
	lsFirstByte lstate = iota // accepted: the first byte tells TLS from clear
	lsTLS                     // a ClientHello came: the TLS handshake
	lsRequest                 // waiting for REQ
	lsCheck                   // REQ read: check it against the service and this side
	lsCreate                  // REQ accepted: create, secure and connect the QP
	lsReply                   // QP connected: send REP
	lsReady                   // REP sent: waiting for RTU
	lsConnected               // RTU read: hand the Conn to the Listener (final)
	lsRejected                // a REJ was sent (final)
	lsFailed                  // the channel failed, timed out or was evicted (final)
)

var lstateNames = [...]string{"first-byte", "tls", "request", "check", "create", "reply", "ready", "connected", "rejected", "failed"}

func (s lstate) String() string { return lstateNames[s] }

// lhs is one handshake on the listener's side.
type lhs struct {
	ep  *Endpoint
	h   *handshake
	tc  net.Conn // the channel: h.tc, then its TLS session
	top uint8    // the highest version this side speaks
	ver uint8    // the version of the answers: the request's once read

	ts      *tls.Conn // the TLS session, when the dialer has security
	ends    *endConn
	req     connReq
	l       *Listener
	sec     *security // the service's
	prot    Protection
	qc      *transport.Conn // the QP, while the handshake owns it
	ctx     context.Context // bounds the QP's creation and connection
	ioErr   error           // the read or write that failed
	repSent bool
}

// handle answers one connection request by running its state machine to
// a final state. However it ends short of a connection, it destroys the
// QP it created, on a context of its own (the handshake's may be spent:
// TestCMHalfOpenTimeout), before it closes the TCP connection.
func (ep *Endpoint) handle(h *handshake) {
	if h.refuse {
		ep.refuse(h.tc)
		return
	}
	top := ep.cmTop()
	x := &lhs{ep: ep, h: h, tc: h.tc, top: top, ver: top}
	var cancel context.CancelFunc
	x.ctx, cancel = context.WithTimeout(context.Background(), ep.cfg.HandshakeTimeout)
	defer cancel()
	s := lsFirstByte
	for s < lsConnected {
		next := x.step(s)
		if ep.trace != nil {
			ep.trace(h, "listener", s.String(), next.String())
		}
		s = next
	}
	x.end(s)
}

// step runs the transition out of s.
func (x *lhs) step(s lstate) lstate {
	switch s {
	case lsFirstByte:
		return x.firstByte()
	case lsTLS:
		return x.tlsHandshake()
	case lsRequest:
		return x.request()
	case lsCheck:
		return x.check()
	case lsCreate:
		return x.create()
	case lsReply:
		return x.reply()
	case lsReady:
		return x.ready()
	}
	panic("cm: no transition out of final state " + s.String())
}

// reject answers a REJ for reason in the answers' version: the final
// state lsRejected.
func (x *lhs) reject(reason uint8, format string, args ...any) lstate {
	r := rejection{reason: reason, version: x.top, text: fmt.Sprintf(format, args...)}
	x.tc.Write(appendMsgV(nil, x.ver, msgREJ, r.marshal()))
	return lsRejected
}

// fail notes the read or write that failed: the final state lsFailed.
func (x *lhs) fail(err error) lstate {
	x.ioErr = err
	return lsFailed
}

// firstByte: a TLS ClientHello (0x16) starts the TLS handshake, anything
// else is a clear request ("SPCM"), so that one port serves both. A
// listener without security refuses TLS in clear (reason 10), which the
// dialer reads as a record that is not TLS.
func (x *lhs) firstByte() lstate {
	var first [1]byte
	if _, err := io.ReadFull(x.tc, first[:]); err != nil {
		return x.fail(err)
	}
	x.tc = peek.Prefixed(x.tc, first[:])
	if first[0] != peek.TLSHandshake {
		return lsRequest
	}
	x.ep.mu.Lock()
	cmSec := x.ep.cmSec
	x.ep.mu.Unlock()
	if cmSec == nil {
		s := x.reject(rejSecurity, "the listener at %s has no security (Options.Security, ListenOptions.Security): its connection manager runs in clear", x.tc.LocalAddr())
		lingerClose(x.tc)
		return s
	}
	x.ends = &endConn{Conn: x.tc}
	x.ts = tls.Server(x.ends, cmSec.server)
	return lsTLS
}

// tlsHandshake: a TLS handshake that fails (a certificate either side
// refuses, a dialer that sent none) is counted in Stats.AuthFailed, one
// cut short by the timer as a timeout.
func (x *lhs) tlsHandshake() lstate {
	if err := x.ts.Handshake(); err != nil {
		if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
			x.ep.count(func(s *Stats) { s.AuthFailed++ })
		}
		return x.fail(err)
	}
	x.tc = x.ts
	return lsRequest
}

// request reads REQ: a malformed message, another version, another type,
// a version without the security block inside TLS, or a body that does
// not parse is refused.
func (x *lhs) request() lstate {
	m, err := readMsg(x.tc)
	switch {
	case errors.Is(err, errBadMessage):
		return x.reject(rejBadRequest, "%v", err)
	case err != nil:
		return x.fail(err)
	case m.version < cmVersion1 || m.version > x.top:
		return x.reject(rejVersion, "version %d not supported", m.version)
	}
	// Answer in the request's version, so that an older dialer reads
	// every message as it always has.
	x.ver = m.version
	switch {
	case m.typ != msgREQ:
		return x.reject(rejBadRequest, "message type %d where a request was expected", m.typ)
	case x.ts != nil && x.ver < cmVersion4:
		return x.reject(rejBadRequest, "version %d inside TLS (only version %d and later carry the security block)", x.ver, cmVersion4)
	}
	if x.req, err = parseReq(m.body, x.ver); err != nil {
		return x.reject(rejBadRequest, "%v", err)
	}
	return lsCheck
}

// check refuses a request the service's Listener or this side cannot
// serve, in this order: security that does not match the service's
// (each Listener has its own: TestSecurePerListener), a pre-shared key
// not proven, another profile, a QP address that is not the dialer's, a
// link that cannot exchange frames, no Listener for the service, a full
// backlog.
func (x *lhs) check() lstate {
	ep, req, tc := x.ep, &x.req, x.tc
	ep.mu.Lock()
	x.l = ep.listeners[req.service]
	busy := x.l != nil && len(x.l.q) == cap(x.l.q)
	ep.mu.Unlock()
	if x.l != nil {
		x.sec = x.l.sec
	}
	switch {
	case x.l == nil:
	case x.ts == nil && x.sec != nil && !x.sec.allowClear:
		return x.reject(rejSecurity, "service %q at %s requires security (TLS): set Options.Security or DialOptions.Security on the dialer", req.service, tc.LocalAddr())
	case x.ts != nil && x.sec == nil:
		return x.reject(rejSecurity, "service %q at %s has no security: it runs in clear", req.service, tc.LocalAddr())
	case x.ts != nil && !x.sec.checkProof(req.sec.proof, x.ts.ConnectionState(), "dialer"):
		ep.count(func(s *Stats) { s.AuthFailed++ })
		return x.reject(rejAuth, "the dialer did not prove the listener's pre-shared key (Security.PSK differs)")
	}
	if req.profile != ep.cfg.Profile {
		return x.reject(rejProfile, "profile %v asked, this endpoint runs %v", req.profile, ep.cfg.Profile)
	}
	if err := ep.checkPeerIP(req.qp.IP, tc.RemoteAddr(), "dialer", "came from"); err != nil {
		return x.reject(rejAddr, "%v", err)
	}
	if x.ver >= cmVersion3 {
		if err := checkLink(req.link, ep.linkInfo()); err != nil {
			return x.reject(rejLink, "%v", err)
		}
	}
	switch {
	case x.l == nil:
		return x.reject(rejService, "no Listener for service %q at %s", req.service, tc.LocalAddr())
	case busy:
		return x.reject(rejBusy, "backlog of service %q full", req.service)
	}
	return lsCreate
}

// create makes the QP, steered for a dialer that sent its steering
// (TestCMSteering), installs its packet keys before its first packet when
// the channel is TLS (encrypted unless both sides ask for integrity
// only), and connects it to the dialer's.
func (x *lhs) create() lstate {
	ep, req := x.ep, &x.req
	var err error
	if req.steer != nil {
		x.qc, err = ep.CreateQPSteered(x.ctx, *req.steer)
		if errors.Is(err, transport.ErrInvalidRequest) {
			x.qc = nil
			return x.reject(rejBadRequest, "%v", err)
		}
	} else {
		x.qc, err = ep.CreateQP(x.ctx)
	}
	if err != nil {
		x.qc = nil
		return x.reject(rejInternal, "creating a QP: %v", err)
	}
	x.prot = ProtectionClear
	if x.ts != nil {
		x.prot = ProtectionEncrypted
		if x.sec.integrityOnly && req.sec.flags&secIntegrityOnly != 0 {
			x.prot = ProtectionIntegrity
		}
		toListener, toDialer, err := qpSecrets(x.ts.ConnectionState(), req.qp.QPN, x.qc.Info().QPN)
		if err == nil {
			err = secureQP(x.ctx, x.qc, toDialer, toListener, x.prot == ProtectionIntegrity)
		}
		if err != nil {
			return x.reject(rejInternal, "securing the QP: %v", err)
		}
	}
	if err := x.qc.Connect(x.ctx, req.qp); err != nil {
		return x.reject(rejBadRequest, "connecting to QP %#x at %s: %v", req.qp.QPN, req.qp.IP, err)
	}
	return lsReply
}

// reply sends REP: the QP, steering, link and, inside TLS, the protection
// chosen and this side's proof of the pre-shared key.
func (x *lhs) reply() lstate {
	rep := connRep{qp: x.qc.Info(), steer: x.ep.steering(x.qc), link: x.ep.linkInfo()}
	if x.ts != nil {
		rep.sec.flags = secPackets
		if x.prot == ProtectionIntegrity {
			rep.sec.flags |= secIntegrityOnly
		}
		var err error
		if rep.sec.proof, err = x.sec.proof(x.ts.ConnectionState(), "listener"); err != nil {
			return x.reject(rejInternal, "securing the QP: %v", err)
		}
	}
	if _, err := x.tc.Write(appendMsgV(nil, x.ver, msgREP, rep.marshalV(x.ver))); err != nil {
		return x.fail(err)
	}
	x.repSent = true
	return lsReady
}

// ready waits for RTU. Anything else, the dialer's own REJ (it refused
// the reply), the channel's end or the timer fails the handshake.
func (x *lhs) ready() lstate {
	m, err := readMsg(x.tc)
	if err != nil {
		return x.fail(err)
	}
	if m.typ != msgRTU {
		return x.fail(fmt.Errorf("%w: message type %d where RTU was expected", errBadMessage, m.typ))
	}
	// The dialer is connected: the handshake is over even if an eviction
	// came meanwhile (whose deadline is cleared here).
	ep, h := x.ep, x.h
	ep.mu.Lock()
	if h.elem != nil {
		ep.hs.Remove(h.elem)
		h.elem = nil
	}
	if h.evicted {
		h.evicted = false
		ep.dropping--
	}
	h.tc.SetDeadline(time.Time{})
	ep.mu.Unlock()
	return lsConnected
}

// end leaves final state s: a connection is handed to its Listener (and
// closed if the Listener is gone or full); a handshake that ends short of
// one tells an evicted dialer why, destroys its QP, gives up its place,
// counts how it ended and closes the channel.
func (x *lhs) end(s lstate) {
	ep, h := x.ep, x.h
	if s == lsConnected {
		c, err := ep.newConn(x.qc, x.tc, x.ends, x.ver, x.req.service, x.req.qp, x.prot)
		if err == nil {
			ep.count(func(s *Stats) { s.Accepted++ })
			if !x.l.push(c) {
				c.Close()
			}
			return
		}
		s = lsFailed
	}
	ep.mu.Lock()
	evicted := h.evicted
	ep.mu.Unlock()
	if evicted && !x.repSent {
		h.tc.SetWriteDeadline(time.Now().Add(time.Second))
		x.reject(rejFull, "%d connection requests in progress at %s: this one was dropped for a newer one; try again", ep.cfg.MaxHandshakes, h.tc.LocalAddr())
		s = lsRejected
	}
	if x.qc != nil {
		x.qc.Destroy(context.Background())
	}
	// The handshake holds its place (or its place among those dropped)
	// until its QP is gone, so that the QPs of requests never exceed
	// twice MaxHandshakes; the dialer sees the channel close after both.
	var ne net.Error
	ep.mu.Lock()
	if h.elem != nil {
		ep.hs.Remove(h.elem)
		h.elem = nil
	}
	switch {
	case h.evicted:
		ep.dropping--
		ep.cm.Evicted++
	case s == lsRejected:
		ep.cm.Rejected++
	case errors.As(x.ioErr, &ne) && ne.Timeout():
		ep.cm.TimedOut++
	}
	ep.mu.Unlock()
	x.tc.Close()
}
