package spray

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sprayfabric/spray/internal/cm"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/telemetry"
	"github.com/sprayfabric/spray/transport"
)

// LinkKind selects the link an Endpoint runs over.
type LinkKind uint8

const (
	// LinkAuto opens AF_XDP with the steering program when the process may
	// and the device supports it, else kernel UDP; the reason for the
	// choice goes to Options.Logf.
	LinkAuto LinkKind = iota
	// LinkXDP is AF_XDP (package xdp) fed by the steering program (package
	// ebpf): root, or CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_PERFMON (the
	// verifier refuses the program's packet arithmetic without it) and
	// CAP_IPC_LOCK or a memlock limit above the UMEM (32 MiB a queue).
	LinkXDP
	// LinkUDP is kernel UDP sockets (package link/udp): unprivileged.
	LinkUDP
	// LinkRaw is an AF_PACKET socket (package link/raw): CAP_NET_RAW.
	LinkRaw
)

func (k LinkKind) String() string { return cm.LinkKind(k).String() }

// CMPort is the default TCP port of the connection manager: the RoCEv2
// port number, over TCP.
const CMPort = 4791

// DefaultMaxHandshakes is Options.MaxHandshakes when 0.
const DefaultMaxHandshakes = 128

// DefaultMTU is the IP MTU of an Endpoint whose Options.MTU is 0, or the
// interface's MTU when that is smaller.
const DefaultMTU = 1500

// Errors. errors.Is works on every error of this package with these, with
// the transport's sentinels (transport.ErrPeerUnreachable, ...) and with
// net.ErrClosed for calls on a closed Conn, Listener or Endpoint.
var (
	// ErrOptions is returned by Open for options that cannot work.
	ErrOptions = cm.ErrOptions
	// ErrRefused is returned by Dial when nothing listens at the address.
	ErrRefused = cm.ErrRefused
	// ErrUnknownService is returned by Dial when the peer has no Listener
	// for the service.
	ErrUnknownService = cm.ErrUnknownService
	// ErrVersion is returned by Dial when the peer speaks another version
	// of the connection protocol.
	ErrVersion = cm.ErrVersion
	// ErrRejected is returned by Dial when the peer refused the connection
	// for another reason, given in the message.
	ErrRejected = cm.ErrRejected
	// ErrIncompatible is returned by Dial when the two endpoints' links
	// cannot exchange frames: their kinds, MTUs or UDP data ports differ.
	// The message names both sides' values.
	ErrIncompatible = cm.ErrIncompatible
	// ErrPeerAddr is returned by Dial when one side gave its QP an address
	// other than the one its connection manager's TCP connection has (see
	// Options.TrustPeerIP).
	ErrPeerAddr = cm.ErrPeerAddr
	// ErrSecurityMismatch is returned by Dial when one side runs its
	// connection manager in TLS (Options.Security) and the other in clear,
	// and the side that has security does not allow clear peers
	// (Security.AllowClear). The message says which side has none.
	ErrSecurityMismatch = cm.ErrSecurityMismatch
	// ErrAuth is returned by Dial when a peer is not who it should be: its
	// certificate does not verify against this side's CAs (or this
	// side's against its), or it does not hold the same pre-shared key.
	// The message names the cause.
	ErrAuth = cm.ErrAuth
	// ErrPeerClosed is returned by calls on a Conn whose peer closed it.
	ErrPeerClosed = cm.ErrPeerClosed
	// ErrPeerGone is returned by calls on a Conn whose peer went away
	// without closing it (its connection manager channel broke).
	ErrPeerGone = cm.ErrPeerGone
	// ErrClosed is returned by calls on a Conn or Listener closed locally.
	ErrClosed = cm.ErrClosed
)

// Options configure Open. The zero value of every field selects the
// default in its comment; Interface or Addr is required.
type Options struct {
	// Interface is the network interface to run on, e.g. "eth0". Empty:
	// the interface that holds Addr.
	Interface string
	// Addr is the local IPv4 address. Invalid (zero): the first IPv4
	// address of Interface.
	Addr netip.Addr
	// Link is the link kind. LinkAuto (zero) prefers AF_XDP and falls back
	// to kernel UDP.
	Link LinkKind
	// Profile is the transport profile, copied into Transport.Profile.
	// Zero: transport.Spray.
	Profile transport.Profile
	// Queues is the number of device queues AF_XDP serves, from queue 0.
	// 0: every RX queue of the device (xdp.OpenLink).
	Queues int
	// MTU is the IP MTU (as `ip link` shows it). 0: DefaultMTU, or the
	// interface's MTU when smaller. Frames are MTU+14 bytes.
	MTU int
	// Port is the UDP port RoCE frames are received on (and sent to).
	// 0: 4791. Endpoints that share an address need different ports
	// (link/udp; with AF_XDP the steering program takes one port).
	Port uint16
	// CMAddr is the TCP address the connection manager listens on for
	// Listen. Empty: Addr, port CMPort.
	CMAddr string
	// Transport is the rest of the transport's configuration; Profile and
	// MTU above override its fields of the same names.
	Transport transport.Config
	// Metrics, when set, instruments the endpoint on this meter provider
	// (package telemetry) for as long as it is open.
	Metrics metric.MeterProvider
	// CloseTimeout bounds how long Conn.Close waits for posted work to
	// complete and for the peer to confirm; both QPs are freed within it,
	// over the QP itself for a secured connection whose channel was cut.
	// 0: 5 s.
	CloseTimeout time.Duration
	// HandshakeTimeout bounds a connection's setup: each one the
	// connection manager answers, and a Dial whose context has no
	// deadline. 0: 10 s.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the connection requests the connection manager
	// holds at once, from the TCP connection's accept to the dialer's
	// RTU; each holds one goroutine, one request (at most 8.8 KB) and,
	// once its request is read, one QP. When all are taken, a new request
	// drops the oldest one if that has waited a twentieth of
	// HandshakeTimeout, and is refused otherwise (as many refusals again
	// are written at once, the rest closed unanswered); Dial tries again
	// on either, so that requests that never complete cannot lock
	// legitimate dialers out. Requests hold at most twice MaxHandshakes
	// QPs: those answered and those being dropped. 0:
	// DefaultMaxHandshakes.
	MaxHandshakes int
	// TrustPeerIP makes the connection manager accept a peer whose QP
	// address differs from the address its TCP connection came from (or,
	// for Dial, went to): for a connection manager on another network
	// than the data path, or a link whose addresses are not the host's
	// (link/mem). false (the default) refuses such a peer, so that a
	// dialer cannot aim this endpoint's traffic at a third host; Dial
	// sends from the endpoint's address when the host has it. Multicast
	// and broadcast addresses are refused either way.
	TrustPeerIP bool
	// Security, when set, protects every connection of the endpoint: the
	// connection manager's messages travel inside TLS 1.3, authenticated
	// by certificates or a pre-shared key, and each QP's packets are
	// authenticated (and their payloads encrypted) with keys derived from
	// that TLS session. Security is on for a connection when both sides
	// set it; a side that sets it refuses a peer that has none unless
	// Security.AllowClear. nil (the default): every connection in clear,
	// and a peer that requires security is refused with
	// ErrSecurityMismatch. ListenOptions and DialOptions override it for
	// one service or one connection.
	Security *Security
	// Logf receives the endpoint's few log lines (the link chosen and why).
	// nil: log/slog's default logger at Info.
	Logf func(format string, args ...any)
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
		return
	}
	slog.Info(fmt.Sprintf(format, args...))
}

// Endpoint is a transport endpoint (every method of transport.Endpoint
// works on it) with a connection manager: Listen, Accept and Dial set up
// connected QPs given an address. Make one with Open or NewEndpoint. It is
// safe for concurrent use; Close is idempotent.
type Endpoint struct {
	*transport.Endpoint
	cm     *cm.Endpoint
	opts   Options
	kind   LinkKind
	reason string
	stop   func() // metrics
	once   sync.Once
}

// Open resolves the interface and address, opens the best link on it and
// starts a transport endpoint: it is LookupInterface, OpenLink and
// NewEndpoint in one call. ctx bounds the opening only.
func Open(ctx context.Context, opts Options) (*Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ifc, err := LookupInterface(opts.Interface, opts.Addr)
	if err != nil {
		return nil, err
	}
	mtu := opts.MTU
	if mtu == 0 {
		mtu = min(DefaultMTU, ifc.MTU)
	}
	if mtu < 576 || mtu > 65535-14 || (ifc.MTU > 0 && mtu > ifc.MTU) {
		return nil, fmt.Errorf("%w: MTU %d (the interface %s has %d)", ErrOptions, mtu, ifc.Name, ifc.MTU)
	}
	opts.MTU = mtu
	l, kind, reason, err := OpenLink(LinkConfig{Kind: opts.Link, Interface: ifc, MTU: mtu, Queues: opts.Queues,
		Port: opts.Port, PeerPort: opts.Port, Logf: opts.Logf})
	if err != nil {
		return nil, err
	}
	opts.Interface, opts.Addr = ifc.Name, ifc.IP
	ep, err := newEndpoint(l, opts, kind, reason)
	if err != nil {
		return nil, err
	}
	ep.opts.logf("spray: %s on %s (%s): %s link, %s", ep.Endpoint.LinkInfo().Name, ifc.Name, ifc.IP, kind, reason)
	return ep, nil
}

// NewEndpoint starts an endpoint over a link the caller opened (link/mem in
// tests, a link of its own). It owns l from then on, even on error. Of
// opts it uses Profile, MTU, Transport, CMAddr, CloseTimeout,
// HandshakeTimeout, MaxHandshakes, TrustPeerIP, Security, Metrics and Logf; CMAddr
// is required unless the link's IP can be listened on. Its handshakes
// send no link kind nor UDP ports (the link is the caller's), only the
// MTU.
func NewEndpoint(l link.Link, opts Options) (*Endpoint, error) {
	return newEndpoint(l, opts, LinkAuto, "caller's link")
}

func newEndpoint(l link.Link, opts Options, kind LinkKind, reason string) (*Endpoint, error) {
	cfg := opts.Transport
	cfg.Profile = opts.Profile
	if opts.MTU != 0 {
		cfg.MTU = opts.MTU + 14
	}
	// The transport's default frame (transport.Config.MTU): the link's,
	// at most 1514 bytes.
	frame := cfg.MTU
	if frame == 0 {
		frame = 1514
		if fs := l.Info().FrameSize; fs > 0 {
			frame = min(fs, frame)
		}
	}
	te, err := transport.NewEndpoint(l, cfg)
	if err != nil {
		l.Close()
		return nil, err
	}
	c, err := cm.New(te, cm.Config{CMAddr: opts.CMAddr, Profile: opts.Profile, Kind: cm.LinkKind(kind), MTU: frame - 14,
		DataPort: opts.Port, CloseTimeout: opts.CloseTimeout, HandshakeTimeout: opts.HandshakeTimeout,
		MaxHandshakes: opts.MaxHandshakes, TrustPeerIP: opts.TrustPeerIP, Security: (*cm.Security)(opts.Security),
		Logf: opts.Logf})
	if err != nil {
		te.Close()
		return nil, err
	}
	ep := &Endpoint{Endpoint: te, cm: c, opts: opts, kind: kind, reason: reason}
	if opts.Metrics != nil {
		name := l.Info().Name
		if ep.stop, err = telemetry.InstrumentWith(opts.Metrics, te, name); err != nil {
			c.Close()
			return nil, fmt.Errorf("spray: metrics: %w", err)
		}
	}
	return ep, nil
}

// Link returns the kind of link the endpoint runs over and why it was
// chosen (LinkAuto for a caller's link).
func (ep *Endpoint) Link() (LinkKind, string) { return ep.kind, ep.reason }

// Addr returns the endpoint's IP address.
func (ep *Endpoint) Addr() netip.Addr { return ep.cm.Addr() }

// CMAddr returns the address the connection manager listens on, or would.
func (ep *Endpoint) CMAddr() string { return ep.cm.CMAddr() }

// CMStats returns the connection manager's counters.
func (ep *Endpoint) CMStats() CMStats { return CMStats(ep.cm.CMStats()) }

// Close closes every connection (telling the peers), every Listener and
// the connection manager, then the transport endpoint and its link. It is
// idempotent.
func (ep *Endpoint) Close() error {
	ep.once.Do(func() {
		if ep.stop != nil {
			ep.stop()
		}
	})
	return ep.cm.Close()
}

// firstLast shortens a multi-line error (a verifier log) to its first and
// last lines, which say what failed and why.
func firstLast(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) <= 2 {
		return strings.Join(lines, " ")
	}
	return strings.TrimSuffix(lines[0], ":") + ": ... " + strings.TrimSpace(lines[len(lines)-1])
}
