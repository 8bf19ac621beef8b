package cm

import (
	"container/list"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// Port is the default TCP port of the connection manager: the RoCEv2
// port number, over TCP.
const Port = 4791

// DefaultMaxHandshakes is Config.MaxHandshakes when 0.
const DefaultMaxHandshakes = 128

// LinkKind is the kind of link an endpoint runs over, as the link block
// carries it; the root package's LinkKind has the same values.
type LinkKind uint8

const (
	LinkAuto LinkKind = iota // a caller's link: kind unknown
	LinkXDP
	LinkUDP
	LinkRaw
)

func (k LinkKind) String() string {
	switch k {
	case LinkAuto:
		return "auto"
	case LinkXDP:
		return "xdp"
	case LinkUDP:
		return "udp"
	case LinkRaw:
		return "raw"
	}
	return fmt.Sprintf("LinkKind(%d)", uint8(k))
}

// Errors. The root package exports the same values; its doc says when
// each is returned.
var (
	ErrOptions          = errors.New("spray: invalid options")
	ErrRefused          = errors.New("spray: connection refused")
	ErrUnknownService   = errors.New("spray: unknown service")
	ErrVersion          = errors.New("spray: connection protocol version mismatch")
	ErrRejected         = errors.New("spray: connection rejected")
	ErrIncompatible     = errors.New("spray: the peers' links cannot talk")
	ErrPeerAddr         = errors.New("spray: the peer's QP address is not its own")
	ErrSecurityMismatch = errors.New("spray: one side requires security, the other has none")
	ErrAuth             = errors.New("spray: peer not authenticated")
	ErrPeerClosed       = fmt.Errorf("spray: peer closed the connection: %w", net.ErrClosed)
	ErrPeerGone         = fmt.Errorf("spray: peer went away: %w", net.ErrClosed)
	ErrClosed           = fmt.Errorf("spray: closed: %w", net.ErrClosed)
)

// Config configures an Endpoint's connection manager. The zero value of
// a field selects the default in its comment.
type Config struct {
	// CMAddr is the TCP address Listen binds. Empty: the link's IP, port
	// Port.
	CMAddr string
	// Profile is the transport profile a request names.
	Profile transport.Profile
	// Kind, MTU and DataPort make the link block: the link's kind
	// (LinkAuto for a caller's link, which then sends no ports), its IP
	// MTU, and for LinkUDP the UDP port data is received on and sent to
	// (0: 4791).
	Kind     LinkKind
	MTU      int
	DataPort uint16
	// CloseTimeout bounds Conn.Close. 0: 5 s.
	CloseTimeout time.Duration
	// HandshakeTimeout bounds each handshake, and a Dial whose context
	// has no deadline. 0: 10 s.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the requests answered at once. 0:
	// DefaultMaxHandshakes.
	MaxHandshakes int
	// TrustPeerIP accepts a QP address other than the peer's TCP address.
	TrustPeerIP bool
	// Security protects every connection; nil: in clear.
	Security *Security
	// Logf receives the few log lines. nil: log/slog at Info.
	Logf func(format string, args ...any)
}

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
		return
	}
	slog.Info(fmt.Sprintf(format, args...))
}

// Endpoint is a transport endpoint with its connection manager. It is
// safe for concurrent use; Close is idempotent.
type Endpoint struct {
	*transport.Endpoint
	cfg  Config
	sec  *security // nil: in clear
	kind LinkKind  // Config.Kind; tests change it

	mu        sync.Mutex
	closed    bool
	ln        net.Listener // the connection manager's, once Listen was called
	listeners map[string]*Listener
	cmSec     *security // the connection manager's TLS identity, once a secured Listen set it
	conns     map[*Conn]struct{}
	hs        list.List      // *handshake answered now, oldest first
	wg        sync.WaitGroup // the connection manager's goroutines
	cm        Stats          // under mu
	refusing  int            // refusals being written, under mu
	dropping  int            // evicted handshakes not yet cleaned up, under mu

	// cmv, when set (by tests, before Listen and Dial), is the highest
	// version of the connection protocol the endpoint speaks: 1 makes
	// it a version-1 peer (TestCMVersion1Peer, TestCMSteering).
	cmv uint8
	// trace, when set (by tests, before Listen and Dial), sees every
	// transition of every handshake: which handshake, its role
	// ("listener", "dialer") and the states left and entered.
	trace func(hs any, role, from, to string)
}

// New starts a connection manager for te. Its Close closes te.
func New(te *transport.Endpoint, cfg Config) (*Endpoint, error) {
	if cfg.CloseTimeout < 0 || cfg.HandshakeTimeout < 0 || cfg.MaxHandshakes < 0 {
		return nil, fmt.Errorf("%w: negative CloseTimeout, HandshakeTimeout or MaxHandshakes", ErrOptions)
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = 5 * time.Second
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.MaxHandshakes == 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.CMAddr == "" {
		cfg.CMAddr = netip.AddrPortFrom(te.LinkInfo().IP, Port).String()
	}
	sec, err := newSecurity(cfg.Security)
	if err != nil {
		return nil, err
	}
	return &Endpoint{Endpoint: te, cfg: cfg, sec: sec, kind: cfg.Kind,
		listeners: map[string]*Listener{}, conns: map[*Conn]struct{}{}}, nil
}

// Addr returns the endpoint's IP address.
func (ep *Endpoint) Addr() netip.Addr { return ep.Endpoint.LinkInfo().IP }

// CMAddr returns the address the connection manager listens on, or would.
func (ep *Endpoint) CMAddr() string {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.ln != nil {
		return ep.ln.Addr().String()
	}
	return ep.cfg.CMAddr
}

// Close closes every connection (telling the peers), every Listener and
// the connection manager, then the transport endpoint. It is idempotent.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return nil
	}
	ep.closed = true
	ln := ep.ln
	var lss []*Listener
	for _, l := range ep.listeners {
		lss = append(lss, l)
	}
	var cs []*Conn
	for c := range ep.conns {
		cs = append(cs, c)
	}
	for e := ep.hs.Front(); e != nil; e = e.Next() {
		e.Value.(*handshake).tc.Close()
	}
	ep.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, l := range lss {
		l.Close()
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
	ep.wg.Wait()
	return ep.Endpoint.Close()
}
