package spray

import (
	"context"

	"github.com/sprayfabric/spray/internal/cm"
	"github.com/sprayfabric/spray/transport"
)

// Backlog is the number of set-up connections a Listener holds for Accept;
// a request beyond it is rejected.
const Backlog = 64

// MaxService is the longest service name, in bytes.
const MaxService = 255

// Listener accepts connections for one service of an Endpoint. It is safe
// for concurrent use; Close is idempotent and makes pending and later
// Accepts return an error wrapping net.ErrClosed.
type Listener struct{ l *cm.Listener }

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

// ListenWith is Listen with options for this service.
func (ep *Endpoint) ListenWith(service string, o ListenOptions) (*Listener, error) {
	l, err := ep.cm.ListenWith(service, cm.ListenOptions{Security: (*cm.Security)(o.Security), Clear: o.Clear})
	if err != nil {
		return nil, err
	}
	return &Listener{l}, nil
}

// Addr returns the connection manager's address, for a peer's Dial.
func (l *Listener) Addr() string { return l.l.Addr() }

// Accept returns the next connection, set up and connected.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	c, err := l.l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &Conn{c}, nil
}

// Close stops accepting and closes the connections set up but not yet
// accepted.
func (l *Listener) Close() error { return l.l.Close() }

// Dial sets up a connection to the service at addr ("host:port" of the
// peer's connection manager, or "host" for port CMPort): it creates a QP,
// exchanges QP information with the peer and connects both sides. A
// refused TCP connection returns ErrRefused at once; a rejection returns
// ErrUnknownService, ErrVersion, ErrIncompatible, ErrPeerAddr,
// ErrSecurityMismatch, ErrAuth or ErrRejected with the peer's reason. A
// listener that was full is asked again, backing off up to 50 ms, until
// ctx ends; without a deadline, ctx is bounded by Options.HandshakeTimeout.
// Its security is the endpoint's (Options.Security); DialWith sets another.
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
	c, err := ep.cm.DialWith(ctx, addr, service, cm.DialOptions{Security: (*cm.Security)(o.Security), Clear: o.Clear})
	if err != nil {
		return nil, err
	}
	return &Conn{c}, nil
}

// CMStats counts the connection manager's work: as listener, and, for
// ChannelsCut, for every connection.
type CMStats struct {
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

// Conn is a connected QP set up by Dial or Accept, with the connection
// manager's channel to the peer. Its blocking calls take a context and
// return an error wrapping net.ErrClosed once the connection is closed
// (ErrClosed, ErrPeerClosed, ErrPeerGone). It is safe for concurrent use.
type Conn struct{ c *cm.Conn }

// Close drains the work posted on the connection (up to
// Options.CloseTimeout), tells the peer, waits for its confirmation and
// frees the QP on this side; the peer frees its own, and its Recv returns
// io.EOF after the messages sent before. A secured Conn whose channel was
// cut tells the peer over the QP (see the package doc). Close frees the QP
// after Options.CloseTimeout at the latest, confirmed or not. Calls pending
// on the Conn then return ErrClosed. Close is idempotent: every call waits
// for the teardown and returns nil.
func (c *Conn) Close() error { return c.c.Close() }

// Done is closed when the connection is torn down, by either side.
func (c *Conn) Done() <-chan struct{} { return c.c.Done() }

// Err returns why the connection closed (ErrClosed, ErrPeerClosed or an
// error wrapping ErrPeerGone), or nil while it is open.
func (c *Conn) Err() error { return c.c.Err() }

// Protection returns how the connection's traffic is protected: in clear,
// or, when both endpoints have Options.Security, authenticated and
// (unless both asked for integrity only) encrypted.
func (c *Conn) Protection() Protection { return Protection(c.c.Protection()) }

// Service returns the service the connection was set up for.
func (c *Conn) Service() string { return c.c.Service() }

// Info returns the local QP's information.
func (c *Conn) Info() transport.QPInfo { return c.c.Info() }

// Remote returns the peer QP's information.
func (c *Conn) Remote() transport.QPInfo { return c.c.Remote() }

// QP returns the underlying transport connection, for Post and the
// completion queue. Work posted there is drained by Close like the rest.
func (c *Conn) QP() *transport.Conn { return c.c.QP() }

// Stats returns the QP's counters.
func (c *Conn) Stats(ctx context.Context) (transport.QPStats, error) { return c.c.Stats(ctx) }

// Send sends msg and returns when the peer has acknowledged all of it.
func (c *Conn) Send(ctx context.Context, msg []byte) error { return c.c.Send(ctx, msg) }

// SendImm sends msg with an immediate value. On a secured Conn, an empty
// message with the immediate 0x53504305 or 0x53504306 is refused
// (transport.ErrInvalidRequest): it is the close marker.
func (c *Conn) SendImm(ctx context.Context, msg []byte, imm uint32) error {
	return c.c.SendImm(ctx, msg, imm)
}

// Write writes data into the peer's region at to (see transport.Conn.Write)
// and returns when the peer has acknowledged all of it.
func (c *Conn) Write(ctx context.Context, data []byte, to transport.Remote) error {
	return c.c.Write(ctx, data, to)
}

// WriteImm writes like Write, then gives the peer a completion with imm.
// As for SendImm, an empty write with a close marker's immediate is
// refused on a secured Conn.
func (c *Conn) WriteImm(ctx context.Context, data []byte, to transport.Remote, imm uint32) error {
	return c.c.WriteImm(ctx, data, to, imm)
}

// Read reads len(into) bytes of the peer's region at from into into (see
// transport.Conn.Read) and returns when they have all landed; a refused read
// returns an error wrapping transport.ErrRemoteAccess.
func (c *Conn) Read(ctx context.Context, into []byte, from transport.Remote) error {
	return c.c.Read(ctx, into, from)
}

// Recv returns the next received message. After the peer closed the
// connection it returns the messages that arrived before, then io.EOF.
func (c *Conn) Recv(ctx context.Context) (transport.Message, error) { return c.c.Recv(ctx) }

// PostRecv posts buf as the next receive buffer (see
// transport.Conn.PostRecv): the next message lands in it, placed there
// packet by packet, and Recv returns it with Data = buf[:n]. Post the
// first buffer before the peer sends. PostRecv does not block and does
// not allocate.
func (c *Conn) PostRecv(ctx context.Context, buf []byte) error { return c.c.PostRecv(ctx, buf) }
