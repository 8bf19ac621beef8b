package cm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// Dial sets up a connection to the service at addr ("host:port" of the
// peer's connection manager, or "host" for port Port): it creates a QP,
// exchanges QP information with the peer and connects both sides. A
// refused TCP connection returns ErrRefused at once; a rejection returns
// ErrUnknownService, ErrVersion, ErrIncompatible, ErrPeerAddr or
// ErrRejected with the peer's reason. It speaks version 5 of the
// protocol, and dials again in the version an older listener's rejection
// names (TestCMVersion1Peer, TestCMSteering, TestCMOlderDataPath); a
// listener that was
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

// The dialer's side of a handshake is a state machine like the
// listener's (lstate): one function per state, each waiting for its
// event and returning the next state. Its timer is the TCP connection's
// deadline, Dial's context's (Config.HandshakeTimeout when it has none),
// which a cancelled context moves into the past. A final state other
// than dsConnected carries Dial's error and how Dial may try again
// (dialRetry). The table is in docs/design.md.
type dstate uint8

const (
	dsConnect   dstate = iota // open the TCP connection from this endpoint's address
	dsTLS                     // with security: the TLS handshake
	dsRequest                 // send REQ
	dsReply                   // REQ sent: waiting for REP or REJ
	dsCheck                   // REP read: check the listener's address, link and proof
	dsSetUp                   // REP accepted: secure, steer and connect the QP
	dsReady                   // QP connected: send RTU
	dsConnected               // RTU sent (final)
	dsRefused                 // this side refused the reply with a REJ (final)
	dsFailed                  // refused, rejected, or the channel failed (final)
)

var dstateNames = [...]string{"connect", "tls", "request", "reply", "check", "set-up", "ready", "connected", "refused", "failed"}

func (s dstate) String() string { return dstateNames[s] }

// dhs is one handshake on the dialer's side, for the QP qc, in version
// ver, inside TLS when sec is set.
type dhs struct {
	ep      *Endpoint
	ctx     context.Context
	qc      *transport.Conn
	ver     uint8
	sec     *security
	addr    string
	service string

	raw, tc   net.Conn // the TCP connection; the channel (raw or its TLS session)
	ts        *tls.Conn
	recording *recConn // what the listener sent in clear after the TLS handshake
	ends      *endConn
	req       connReq
	rep       connRep
	prot      Protection
	err       error     // Dial's error, in a final state other than dsConnected
	next      dialRetry // how Dial may try again
}

// dialOnce runs one handshake in version ver on a new TCP connection
// for qc, inside TLS when sec is set.
func (ep *Endpoint) dialOnce(ctx context.Context, qc *transport.Conn, ver uint8, sec *security, addr, service string) (*Conn, dialRetry, error) {
	x := &dhs{ep: ep, ctx: ctx, qc: qc, ver: ver, sec: sec, addr: addr, service: service}
	s := dsConnect
	var stop func() bool
	for s < dsConnected {
		next := x.step(s)
		if s == dsConnect && next != dsFailed {
			// The handshake's timer: the context's deadline, and its
			// cancellation.
			dl, _ := ctx.Deadline()
			x.raw.SetDeadline(dl)
			raw := x.raw
			stop = context.AfterFunc(ctx, func() { raw.SetDeadline(time.Unix(1, 0)) })
		}
		if ep.trace != nil {
			ep.trace(x, "dialer", s.String(), next.String())
		}
		s = next
	}
	if stop != nil && !stop() && s == dsConnected {
		s, x.err = dsFailed, ctx.Err()
	}
	if s != dsConnected {
		if x.tc != nil {
			x.tc.Close()
		}
		return nil, x.next, x.err
	}
	x.raw.SetDeadline(time.Time{})
	c, err := ep.newConn(qc, x.tc, x.ends, ver, service, x.rep.qp, x.prot)
	if err != nil {
		x.tc.Close()
		return nil, dialRetry{}, err
	}
	return c, dialRetry{}, nil
}

// step runs the transition out of s.
func (x *dhs) step(s dstate) dstate {
	switch s {
	case dsConnect:
		return x.connect()
	case dsTLS:
		return x.tlsHandshake()
	case dsRequest:
		return x.request()
	case dsReply:
		return x.reply()
	case dsCheck:
		return x.check()
	case dsSetUp:
		return x.setUp()
	case dsReady:
		return x.ready()
	}
	panic("cm: no transition out of final state " + s.String())
}

// fail ends the handshake with err, and next for Dial.
func (x *dhs) fail(next dialRetry, err error) dstate {
	x.next, x.err = next, err
	return dsFailed
}

// failf ends the handshake with an error of Dial's form.
func (x *dhs) failf(err error) dstate {
	return x.fail(dialRetry{}, fmt.Errorf("spray: dial %s: %w", x.addr, err))
}

// connect opens the TCP connection: one refused fails at once with
// ErrRefused.
func (x *dhs) connect() dstate {
	raw, err := x.ep.dialTCP(x.ctx, x.addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return x.fail(dialRetry{}, fmt.Errorf("%w: nothing listens at %s (the peer must call Listen(%q))", ErrRefused, x.addr, x.service))
		}
		return x.failf(err)
	}
	x.raw, x.tc = raw, raw
	x.req = connReq{profile: x.ep.cfg.Profile, qp: x.qc.Info(), service: x.service, steer: x.ep.steering(x.qc), link: x.ep.linkInfo()}
	if x.sec != nil {
		return dsTLS
	}
	return dsRequest
}

// tlsHandshake: a listener in clear answers the ClientHello with a REJ
// in clear (ErrSecurityMismatch, or again in clear with AllowClear); a
// certificate either side refuses is ErrAuth. Then this side's proof of
// the pre-shared key goes into the request.
func (x *dhs) tlsHandshake() dstate {
	x.ends = &endConn{Conn: x.raw}
	rc := &recConn{Conn: x.ends}
	x.ts = tls.Client(rc, x.sec.clientConfig(x.addr))
	x.tc = x.ts
	if err := x.ts.HandshakeContext(x.ctx); err != nil {
		return x.fail(x.sec.tlsDialError(err, rc, x.addr))
	}
	// A listener that drops this request for a newer one answers in
	// clear from here on (a REJ of reason 9): record it afresh.
	rc.rec = rc.rec[:0]
	x.recording = rc
	if x.sec.integrityOnly {
		x.req.sec.flags = secIntegrityOnly
	}
	var err error
	if x.req.sec.proof, err = x.sec.proof(x.ts.ConnectionState(), "dialer"); err != nil {
		return x.failf(err)
	}
	return dsRequest
}

// request sends REQ in the handshake's version.
func (x *dhs) request() dstate {
	if _, err := x.tc.Write(appendMsgV(nil, x.ver, msgREQ, x.req.marshalV(x.ver))); err != nil {
		return x.failf(err)
	}
	return dsReply
}

// reply reads the listener's answer. A REJ ends the handshake with the
// error of its reason, and says whether to dial again: in an older
// version (an older listener refuses every later request, as another
// version or as malformed when the body exceeds its bound, naming its
// version: TestCMVersion1Peer), again (full), or in clear (a clear service
// behind a connection manager with TLS, and AllowClear). A channel closed
// unanswered is a full listener: again.
func (x *dhs) reply() dstate {
	m, err := readMsg(x.tc)
	if err != nil {
		// In TLS 1.3 a listener that refuses this side's certificate
		// says so after the dialer's handshake ended: on this read.
		if e := authError(err, x.addr); x.ts != nil && e != nil {
			return x.fail(dialRetry{}, e)
		}
		var rh tls.RecordHeaderError
		if x.ts != nil && errors.As(err, &rh) {
			return x.fail(x.sec.tlsDialError(err, x.recording, x.addr))
		}
		full := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
		return x.fail(dialRetry{again: full}, fmt.Errorf("spray: dial %s: no reply: %w", x.addr, err))
	}
	switch {
	case m.typ == msgREJ:
		r, err := parseRej(m.body)
		if err != nil {
			return x.failf(err)
		}
		var next dialRetry
		if r.version >= cmVersion1 && r.version < x.ver && (r.reason == rejVersion || r.reason == rejBadRequest) {
			next.ver = r.version
		}
		next.again = r.reason == rejFull
		next.clear = x.ts != nil && r.reason == rejSecurity && x.sec.allowClear
		return x.fail(next, fmt.Errorf("dial %s: %w", x.addr, r.err()))
	case m.version != x.ver:
		return x.fail(dialRetry{}, fmt.Errorf("%w: the peer at %s answered version %d in version %d", ErrVersion, x.addr, x.ver, m.version))
	case m.typ != msgREP:
		return x.failf(fmt.Errorf("%w: type %d where a reply was expected", errBadMessage, m.typ))
	}
	if x.rep, err = parseRep(m.body, x.ver); err != nil {
		return x.failf(err)
	}
	return dsCheck
}

// refuse answers a reply this side refuses with a REJ, so that the
// listener frees its QP at once, and waits for the listener to close the
// channel, so that no QP of the attempt is left on either side when Dial
// returns.
func (x *dhs) refuse(reason uint8, sentinel, err error) dstate {
	r := rejection{reason: reason, version: x.ep.cmTop(), text: err.Error()}
	x.tc.Write(appendMsgV(nil, x.ver, msgREJ, r.marshal()))
	io.Copy(io.Discard, io.LimitReader(x.tc, cmHdrLen+cmMaxBody4))
	x.err = fmt.Errorf("dial %s: %w: %w", x.addr, sentinel, err)
	return dsRefused
}

// check refuses a reply whose QP address is not the listener's
// (ErrPeerAddr), whose link cannot exchange frames with this side's
// (ErrIncompatible), or, inside TLS, without a valid proof of the
// pre-shared key (ErrAuth), unprotected, or integrity-only when this
// side did not ask.
func (x *dhs) check() dstate {
	rep := &x.rep
	if err := x.ep.checkPeerIP(rep.qp.IP, x.tc.RemoteAddr(), "listener", "was dialed"); err != nil {
		return x.refuse(rejAddr, ErrPeerAddr, err)
	}
	if x.ver >= cmVersion3 {
		if err := checkLink(x.ep.linkInfo(), rep.link); err != nil {
			return x.refuse(rejLink, ErrIncompatible, err)
		}
	}
	x.prot = ProtectionClear
	if x.ts == nil {
		return dsSetUp
	}
	if !x.sec.checkProof(rep.sec.proof, x.ts.ConnectionState(), "listener") {
		return x.refuse(rejAuth, ErrAuth, fmt.Errorf("the listener did not prove this side's pre-shared key (Security.PSK differs, or a man in the middle relays the connection)"))
	}
	x.prot = ProtectionEncrypted
	switch {
	case rep.sec.flags&secPackets == 0:
		return x.refuse(rejBadRequest, ErrRejected, fmt.Errorf("the listener did not protect its QP's packets"))
	case rep.sec.flags&secIntegrityOnly != 0 && !x.sec.integrityOnly:
		return x.refuse(rejBadRequest, ErrRejected, fmt.Errorf("the listener chose integrity only, which this side did not ask for"))
	case rep.sec.flags&secIntegrityOnly != 0:
		x.prot = ProtectionIntegrity
	}
	return dsSetUp
}

// setUp installs the QP's packet keys (inside TLS), steers it by the
// listener's steering, which was unknown when it was created
// (TestCMSteering), and connects it, all before its first packet.
func (x *dhs) setUp() dstate {
	if x.ts != nil {
		toListener, toDialer, err := qpSecrets(x.ts.ConnectionState(), x.qc.Info().QPN, x.rep.qp.QPN)
		if err == nil {
			err = secureQP(x.ctx, x.qc, toListener, toDialer, x.prot == ProtectionIntegrity)
		}
		if err != nil {
			return x.failf(fmt.Errorf("securing the QP: %w", err))
		}
	}
	if x.rep.steer != nil {
		if err := x.qc.Steer(x.ctx, *x.rep.steer); err != nil {
			return x.failf(fmt.Errorf("the peer's steering: %w", err))
		}
	}
	if err := x.qc.Connect(x.ctx, x.rep.qp); err != nil {
		return x.fail(dialRetry{}, err)
	}
	return dsReady
}

// ready sends RTU: the listener's Accept returns.
func (x *dhs) ready() dstate {
	if _, err := x.tc.Write(appendMsgV(nil, x.ver, msgRTU, nil)); err != nil {
		return x.failf(err)
	}
	return dsConnected
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
