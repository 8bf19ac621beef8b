package cm

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sprayfabric/spray/internal/peek"
	"github.com/sprayfabric/spray/transport"
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

// handle answers one connection request (REQ, REP, RTU). However it ends
// short of a connection, it destroys the QP it created, on a context of
// its own (the handshake's may be spent: TestCMHalfOpenTimeout), before
// it closes the TCP connection.
func (ep *Endpoint) handle(h *handshake) {
	if h.refuse {
		ep.refuse(h.tc)
		return
	}
	tc := h.tc
	var (
		qc       *transport.Conn // the QP, while the handshake owns it
		repSent  bool
		rejected bool
		ioErr    error // the read or write that failed
	)
	// Answer in the request's version when this side speaks it, so that a
	// version-1 dialer reads every message as it always has.
	top := ep.cmTop()
	ver := top
	reject := func(reason uint8, format string, args ...any) {
		rejected = true
		r := rejection{reason: reason, version: top, text: fmt.Sprintf(format, args...)}
		tc.Write(appendMsgV(nil, ver, msgREJ, r.marshal()))
	}
	handed := false
	defer func() {
		if handed {
			return
		}
		ep.mu.Lock()
		evicted := h.evicted
		ep.mu.Unlock()
		if evicted && !repSent {
			tc.SetWriteDeadline(time.Now().Add(time.Second))
			reject(rejFull, "%d connection requests in progress at %s: this one was dropped for a newer one; try again", ep.cfg.MaxHandshakes, tc.LocalAddr())
		}
		if qc != nil {
			qc.Destroy(context.Background())
		}
		// The handshake holds its place (or its place among those
		// dropped) until its QP is gone, so that the QPs of requests
		// never exceed twice MaxHandshakes; the dialer sees the
		// channel close after both.
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
		case rejected:
			ep.cm.Rejected++
		case errors.As(ioErr, &ne) && ne.Timeout():
			ep.cm.TimedOut++
		}
		ep.mu.Unlock()
		tc.Close()
	}()
	// The first byte tells a TLS ClientHello from a clear request
	// ("SPCM"), so that one port serves both.
	var first [1]byte
	if _, err := io.ReadFull(tc, first[:]); err != nil {
		ioErr = err
		return
	}
	tc = peek.Prefixed(tc, first[:])
	var ts *tls.Conn // the TLS session, when the dialer has security
	var ends *endConn
	if first[0] == peek.TLSHandshake {
		ep.mu.Lock()
		cmSec := ep.cmSec
		ep.mu.Unlock()
		if cmSec == nil {
			// A dialer with security reads this REJ as a record that
			// is not TLS, and reports a listener in clear.
			reject(rejSecurity, "the listener at %s has no security (Options.Security, ListenOptions.Security): its connection manager runs in clear", tc.LocalAddr())
			lingerClose(tc)
			return
		}
		ends = &endConn{Conn: tc}
		ts = tls.Server(ends, cmSec.server)
		if err := ts.Handshake(); err != nil {
			ep.mu.Lock()
			ep.cm.AuthFailed++
			ep.mu.Unlock()
			ioErr = err
			return
		}
		tc = ts
	}
	m, err := readMsg(tc)
	switch {
	case errors.Is(err, errBadMessage):
		reject(rejBadRequest, "%v", err)
		return
	case err != nil:
		ioErr = err
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
	if ts != nil && ver < cmVersion {
		reject(rejBadRequest, "version %d inside TLS (only version %d and later carry the security block)", ver, cmVersion)
		return
	}
	req, err := parseReq(m.body, ver)
	if err != nil {
		reject(rejBadRequest, "%v", err)
		return
	}
	// The service's Listener decides the security: each one has its own
	// (TestSecurePerListener).
	ep.mu.Lock()
	l := ep.listeners[req.service]
	ep.mu.Unlock()
	var sec *security
	if l != nil {
		sec = l.sec
	}
	switch {
	case l == nil:
	case ts == nil && sec != nil && !sec.allowClear:
		reject(rejSecurity, "service %q at %s requires security (TLS): set Options.Security or DialOptions.Security on the dialer", req.service, tc.LocalAddr())
		return
	case ts != nil && sec == nil:
		reject(rejSecurity, "service %q at %s has no security: it runs in clear", req.service, tc.LocalAddr())
		return
	}
	var cs tls.ConnectionState
	if ts != nil && l != nil {
		cs = ts.ConnectionState()
		if !sec.checkProof(req.sec.proof, cs, "dialer") {
			ep.mu.Lock()
			ep.cm.AuthFailed++
			ep.mu.Unlock()
			reject(rejAuth, "the dialer did not prove the listener's pre-shared key (Security.PSK differs)")
			return
		}
	}
	if req.profile != ep.cfg.Profile {
		reject(rejProfile, "profile %v asked, this endpoint runs %v", req.profile, ep.cfg.Profile)
		return
	}
	if err := ep.checkPeerIP(req.qp.IP, tc.RemoteAddr(), "dialer", "came from"); err != nil {
		reject(rejAddr, "%v", err)
		return
	}
	if ver >= cmVersion3 {
		if err := checkLink(req.link, ep.linkInfo()); err != nil {
			reject(rejLink, "%v", err)
			return
		}
	}
	ep.mu.Lock()
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
	ctx, cancel := context.WithTimeout(context.Background(), ep.cfg.HandshakeTimeout)
	defer cancel()
	// A dialer that sent its steering gets a QP whose entropies its RSS
	// delivers to its QP's engine (TestCMSteering).
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
		qc = nil
		reject(rejInternal, "creating a QP: %v", err)
		return
	}
	rep := connRep{qp: qc.Info(), steer: ep.steering(qc), link: ep.linkInfo()}
	prot := ProtectionClear
	if ts != nil {
		// Encrypted unless both sides ask for integrity only; the keys
		// are in place before the QP's first packet.
		rep.sec.flags = secPackets
		prot = ProtectionEncrypted
		if sec.integrityOnly && req.sec.flags&secIntegrityOnly != 0 {
			rep.sec.flags |= secIntegrityOnly
			prot = ProtectionIntegrity
		}
		toListener, toDialer, err := qpSecrets(cs, req.qp.QPN, rep.qp.QPN)
		if err == nil {
			err = secureQP(ctx, qc, toDialer, toListener, prot == ProtectionIntegrity)
		}
		if err == nil {
			rep.sec.proof, err = sec.proof(cs, "listener")
		}
		if err != nil {
			reject(rejInternal, "securing the QP: %v", err)
			return
		}
	}
	if err := qc.Connect(ctx, req.qp); err != nil {
		reject(rejBadRequest, "connecting to QP %#x at %s: %v", req.qp.QPN, req.qp.IP, err)
		return
	}
	if _, err := tc.Write(appendMsgV(nil, ver, msgREP, rep.marshalV(ver))); err != nil {
		ioErr = err
		return
	}
	repSent = true
	if m, err = readMsg(tc); err != nil || m.typ != msgRTU {
		ioErr = err
		return
	}
	// The dialer is connected: the handshake is over even if an eviction
	// came meanwhile (whose deadline is cleared here).
	ep.mu.Lock()
	if h.elem != nil {
		ep.hs.Remove(h.elem)
		h.elem = nil
	}
	if h.evicted {
		h.evicted = false
		ep.dropping--
	}
	tc.SetDeadline(time.Time{})
	ep.mu.Unlock()
	c, err := ep.newConn(qc, tc, ends, ver, req.service, req.qp, prot)
	if err != nil {
		return
	}
	handed = true
	ep.mu.Lock()
	ep.cm.Accepted++
	ep.mu.Unlock()
	if !l.push(c) {
		c.Close()
	}
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

// linkInfo returns this endpoint's link block for REQ and REP: the UDP
// ports of a kernel UDP link only (AF_XDP and AF_PACKET take port 4791),
// nothing but the MTU for a caller's link.
func (ep *Endpoint) linkInfo() linkInfo {
	l := linkInfo{kind: ep.kind, mtu: uint16(ep.cfg.MTU)}
	if ep.kind == LinkUDP {
		p := ep.cfg.DataPort
		if p == 0 {
			p = 4791
		}
		l.port, l.peerPort = p, p
	}
	return l
}

// checkLink returns why the dialer's link and the listener's cannot
// exchange frames, or nil: kernel UDP against raw frames (AF_XDP,
// AF_PACKET; a UDP link's MAC is made up), different MTUs (the transport
// sizes its packets by its own), or one side sending to a UDP port the
// other does not receive on. A value of 0 (unknown) passes. Its text names
// both sides' values (TestCMLinkMismatch).
func checkLink(dialer, listener linkInfo) error {
	udp := func(k LinkKind) bool { return k == LinkUDP }
	if dialer.kind != LinkAuto && listener.kind != LinkAuto && udp(dialer.kind) != udp(listener.kind) {
		return fmt.Errorf("the dialer's link is %s, the listener's %s: kernel UDP cannot talk to AF_XDP or AF_PACKET (set the same Options.Link on both; LinkAuto picks udp where AF_XDP is not allowed)", dialer.kind, listener.kind)
	}
	if dialer.mtu != 0 && listener.mtu != 0 && dialer.mtu != listener.mtu {
		return fmt.Errorf("the dialer's MTU is %d, the listener's %d (set Options.MTU to %d on both)", dialer.mtu, listener.mtu, min(dialer.mtu, listener.mtu))
	}
	if dialer.peerPort != 0 && listener.port != 0 && dialer.peerPort != listener.port {
		return fmt.Errorf("the dialer sends data to UDP port %d, the listener receives on %d (set the same Options.Port on both)", dialer.peerPort, listener.port)
	}
	if listener.peerPort != 0 && dialer.port != 0 && listener.peerPort != dialer.port {
		return fmt.Errorf("the listener sends data to UDP port %d, the dialer receives on %d (set the same Options.Port on both)", listener.peerPort, dialer.port)
	}
	return nil
}

// checkPeerIP refuses the address a peer's QP claims in REQ or REP
// unless it is the address of the peer's end of the TCP connection, at,
// or Options.TrustPeerIP allows any: otherwise a peer could aim this
// endpoint's traffic at a third host. A multicast or broadcast address is
// refused either way (TestCMPeerAddr).
func (ep *Endpoint) checkPeerIP(claimed netip.Addr, at net.Addr, who, how string) error {
	if claimed.IsMulticast() || claimed == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("the %s's QP address %s is a multicast or broadcast address", who, claimed)
	}
	if ep.cfg.TrustPeerIP {
		return nil
	}
	ta, ok := at.(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("the %s's connection is not TCP (%v)", who, at)
	}
	if from := ta.AddrPort().Addr().Unmap(); from != claimed {
		return fmt.Errorf("the %s's QP address %s is not %s, where its connection %s (set Options.TrustPeerIP to allow)", who, claimed, from, how)
	}
	return nil
}

// Dial sets up a connection to the service at addr ("host:port" of the
// peer's connection manager, or "host" for port Port): it creates a QP,
// exchanges QP information with the peer and connects both sides. A
// refused TCP connection returns ErrRefused at once; a rejection returns
// ErrUnknownService, ErrVersion, ErrIncompatible, ErrPeerAddr or
// ErrRejected with the peer's reason. It speaks version 3 of the
// protocol, and dials again in the version an older listener's rejection
// names (TestCMVersion1Peer, TestCMSteering); a listener that was
// full is asked again, backing off up to 50 ms, until ctx ends
// (TestCMFlood). Its security is the endpoint's (Options.Security);
// DialWith sets another.
func (ep *Endpoint) Dial(ctx context.Context, addr, service string) (*Conn, error) {
	return ep.DialWith(ctx, addr, service, DialOptions{})
}

// DialOptions configure one Dial.
type DialOptions struct {
	// Security, when set, protects this connection in place of
	// Options.Security (TestSecurePerListener). nil: the endpoint's.
	Security *Security
	// Clear dials in clear whatever Options.Security says. Clear with
	// Security is invalid.
	Clear bool
}

// DialWith is Dial with options for this connection.
func (ep *Endpoint) DialWith(ctx context.Context, addr, service string, o DialOptions) (*Conn, error) {
	if len(service) == 0 || len(service) > MaxService {
		return nil, fmt.Errorf("%w: service name of %d bytes (1 to %d)", ErrOptions, len(service), MaxService)
	}
	sec, err := ep.securityFor(o.Security, o.Clear)
	if err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, strconv.Itoa(Port))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ep.cfg.HandshakeTimeout)
		defer cancel()
	}
	qc, err := ep.CreateQP(ctx)
	if err != nil {
		return nil, err
	}
	ver := ep.cmTop()
	wait := time.Millisecond
	for {
		c, next, err := ep.dialOnce(ctx, qc, ver, sec, addr, service)
		if err == nil {
			return c, nil
		}
		if next.clear && sec != nil {
			ep.cfg.logf("spray: dial %s: %v; dialing again in clear (Security.AllowClear)", addr, err)
			sec = nil
			continue
		}
		if next.ver != 0 {
			ver = next.ver
			continue
		}
		if next.again {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				wait = min(2*wait, 50*time.Millisecond)
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		qc.Destroy(context.Background())
		if ctx.Err() != nil {
			return nil, fmt.Errorf("spray: dial %s: %w (%v)", addr, ctx.Err(), err)
		}
		return nil, err
	}
}

// dialRetry says how Dial may try again after a failed handshake: in
// version ver (an older listener's rejection), again in the same one
// (the listener was full, or closed the connection unanswered), or in
// clear (a listener without security, and Security.AllowClear).
type dialRetry struct {
	ver   uint8
	again bool
	clear bool
}

// dialOnce runs one handshake in version ver on a new TCP connection
// for qc, inside TLS when sec is set.
func (ep *Endpoint) dialOnce(ctx context.Context, qc *transport.Conn, ver uint8, sec *security, addr, service string) (_ *Conn, _ dialRetry, _ error) {
	raw, err := ep.dialTCP(ctx, addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, dialRetry{}, fmt.Errorf("%w: nothing listens at %s (the peer must call Listen(%q))", ErrRefused, addr, service)
		}
		return nil, dialRetry{}, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	tc := raw
	ok := false
	defer func() {
		if !ok {
			tc.Close()
		}
	}()
	dl, _ := ctx.Deadline()
	raw.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := connReq{profile: ep.cfg.Profile, qp: qc.Info(), service: service, steer: ep.steering(qc), link: ep.linkInfo()}
	secure := sec != nil
	var ts *tls.Conn
	var recording *recConn
	var ends *endConn
	if secure {
		ends = &endConn{Conn: raw}
		rc := &recConn{Conn: ends}
		ts = tls.Client(rc, sec.clientConfig(addr))
		tc = ts
		if err := ts.HandshakeContext(ctx); err != nil {
			next, err := sec.tlsDialError(err, rc, addr)
			return nil, next, err
		}
		// A listener that drops this request for a newer one answers
		// in clear from here on (a REJ of reason 9): record it afresh.
		rc.rec = rc.rec[:0]
		recording = rc
		if sec.integrityOnly {
			req.sec.flags = secIntegrityOnly
		}
		if req.sec.proof, err = sec.proof(ts.ConnectionState(), "dialer"); err != nil {
			return nil, dialRetry{}, fmt.Errorf("spray: dial %s: %w", addr, err)
		}
	}
	if _, err := tc.Write(appendMsgV(nil, ver, msgREQ, req.marshalV(ver))); err != nil {
		return nil, dialRetry{}, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	m, err := readMsg(tc)
	if err != nil {
		// In TLS 1.3 a listener that refuses this side's certificate
		// says so after the dialer's handshake ended: on this read.
		if e := authError(err, addr); secure && e != nil {
			return nil, dialRetry{}, e
		}
		var rh tls.RecordHeaderError
		if secure && errors.As(err, &rh) {
			next, err := sec.tlsDialError(err, recording, addr)
			return nil, next, err
		}
		// A full listener closes a connection it has no room to answer.
		full := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
		return nil, dialRetry{again: full}, fmt.Errorf("spray: dial %s: no reply: %w", addr, err)
	}
	switch {
	case m.typ == msgREJ:
		r, err := parseRej(m.body)
		if err != nil {
			return nil, dialRetry{}, fmt.Errorf("spray: dial %s: %w", addr, err)
		}
		var next dialRetry
		// An older listener refuses every later request before it
		// reads it: as another version (rejVersion), or as malformed
		// when the body exceeds its version's bound (a large RSS table).
		// Either way its REJ names its version (TestCMVersion1Peer).
		if r.version >= cmVersion1 && r.version < ver && (r.reason == rejVersion || r.reason == rejBadRequest) {
			next.ver = r.version
		}
		next.again = r.reason == rejFull
		// A service in clear behind a connection manager that has
		// TLS for others refuses inside TLS.
		next.clear = secure && r.reason == rejSecurity && sec.allowClear
		return nil, next, fmt.Errorf("dial %s: %w", addr, r.err())
	case m.version != ver:
		return nil, dialRetry{}, fmt.Errorf("%w: the peer at %s answered version %d in version %d", ErrVersion, addr, ver, m.version)
	case m.typ != msgREP:
		return nil, dialRetry{}, fmt.Errorf("spray: dial %s: %w: type %d where a reply was expected", addr, errBadMessage, m.typ)
	}
	rep, err := parseRep(m.body, ver)
	if err != nil {
		return nil, dialRetry{}, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	// A reply this side refuses gets a REJ, so that the listener frees
	// its QP at once; Dial returns once it has (it closes the channel
	// after), so that no QP of the attempt is left on either side.
	refuse := func(reason uint8, sentinel, err error) (*Conn, dialRetry, error) {
		r := rejection{reason: reason, version: ep.cmTop(), text: err.Error()}
		tc.Write(appendMsgV(nil, ver, msgREJ, r.marshal()))
		io.Copy(io.Discard, io.LimitReader(tc, cmHdrLen+cmMaxBody4))
		return nil, dialRetry{}, fmt.Errorf("dial %s: %w: %w", addr, sentinel, err)
	}
	if err := ep.checkPeerIP(rep.qp.IP, tc.RemoteAddr(), "listener", "was dialed"); err != nil {
		return refuse(rejAddr, ErrPeerAddr, err)
	}
	if ver >= cmVersion3 {
		if err := checkLink(ep.linkInfo(), rep.link); err != nil {
			return refuse(rejLink, ErrIncompatible, err)
		}
	}
	prot := ProtectionClear
	if ts != nil {
		cs := ts.ConnectionState()
		if !sec.checkProof(rep.sec.proof, cs, "listener") {
			return refuse(rejAuth, ErrAuth, fmt.Errorf("the listener did not prove this side's pre-shared key (Security.PSK differs, or a man in the middle relays the connection)"))
		}
		prot = ProtectionEncrypted
		switch {
		case rep.sec.flags&secPackets == 0:
			return refuse(rejBadRequest, ErrRejected, fmt.Errorf("the listener did not protect its QP's packets"))
		case rep.sec.flags&secIntegrityOnly != 0 && !sec.integrityOnly:
			return refuse(rejBadRequest, ErrRejected, fmt.Errorf("the listener chose integrity only, which this side did not ask for"))
		case rep.sec.flags&secIntegrityOnly != 0:
			prot = ProtectionIntegrity
		}
		toListener, toDialer, err := qpSecrets(cs, qc.Info().QPN, rep.qp.QPN)
		if err == nil {
			err = secureQP(ctx, qc, toListener, toDialer, prot == ProtectionIntegrity)
		}
		if err != nil {
			return nil, dialRetry{}, fmt.Errorf("spray: dial %s: securing the QP: %w", addr, err)
		}
	}
	// The QP was created before the listener's steering was known: steer
	// it now, before its first packet (TestCMSteering).
	if rep.steer != nil {
		if err := qc.Steer(ctx, *rep.steer); err != nil {
			return nil, dialRetry{}, fmt.Errorf("spray: dial %s: the peer's steering: %w", addr, err)
		}
	}
	if err := qc.Connect(ctx, rep.qp); err != nil {
		return nil, dialRetry{}, err
	}
	if _, err := tc.Write(appendMsgV(nil, ver, msgRTU, nil)); err != nil {
		return nil, dialRetry{}, fmt.Errorf("spray: dial %s: %w", addr, err)
	}
	if !stop() {
		return nil, dialRetry{}, ctx.Err()
	}
	raw.SetDeadline(time.Time{})
	c, err := ep.newConn(qc, tc, ends, ver, service, rep.qp, prot)
	if err != nil {
		return nil, dialRetry{}, err
	}
	ok = true
	return c, dialRetry{}, nil
}

// dialTCP opens the connection manager's channel to addr from the
// endpoint's address, so that the listener sees the address the QP
// claims (checkPeerIP); from an address the kernel picks when the host
// does not have the endpoint's (a caller's link, link/mem).
func (ep *Endpoint) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	if ip := ep.Addr(); ip.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: ip.AsSlice()}
		tc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil || errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
			return tc, err
		}
		d.LocalAddr = nil
	}
	return d.DialContext(ctx, "tcp", addr)
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
