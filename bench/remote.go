package bench

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/route"
	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/link/udp"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/transport"
)

// DefaultControlPort is the TCP port perf's server listens on for clients
// (perftest's port).
const DefaultControlPort = 18515

// RemoteRun describes a perf run between two real hosts. Client and server
// must agree on Kind and Transport.Profile; the client tells the server.
type RemoteRun struct {
	Kind      string
	Transport transport.Config
	Perf      PerfConfig
	// TLS, when set, runs the control connection inside TLS 1.3 with
	// this configuration (the server's certificate, or the client's CAs;
	// either side's ClientCAs, Certificates for clients' certificates), and
	// secures the spray QP with keys exported from the session: payloads
	// encrypted unless Perf.IntegrityOnly; a kernel TCP run then travels
	// inside the session. A server with TLS refuses clear clients and a
	// server without it TLS ones. Not with Perf.PSK.
	TLS *tls.Config
	// Wrap, when set, wraps the local link (a capture, say).
	Wrap func(link.Link) link.Link
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// ErrPeerGone is wrapped by the error of a perf run whose peer went away
// in the middle: its control connection closed, was reset, or stopped
// answering TCP keepalives.
var ErrPeerGone = errors.New("bench: perf peer gone")

// Control-connection timing: a client must say hello within helloTimeout
// of connecting; keepalives probe an idle control connection after
// keepIdle, every keepInterval, and give up after keepCount unanswered
// (a peer whose host vanished is noticed within about 7 s).
const (
	helloTimeout = 10 * time.Second
	keepIdle     = 2 * time.Second
	keepInterval = time.Second
	keepCount    = 5
)

// maxUDPRuns bounds the udp runs a perf server serves at once, each on
// its own RoCE port from udp.RoCEPort up.
const maxUDPRuns = 32

// hello is a control message. The client opens with Kind, Profile, MTU and
// Seed; for a spray link the server answers with its QP, its steering and
// the UDP port it receives on (Port, udp links), the client with its QP
// (created steered to the server's queue) and its steering, the server
// steers its QP and answers Ready; the run follows, and the server ends
// it with Done. Err refuses. A side without steering (one engine, a
// device without RSS) leaves Steer out, and a peer that predates it
// ignores it: JSON drops unknown fields, so both kinds of peer work
// together, unsteered (TestPerfHelloSteering).
type hello struct {
	Kind    string            `json:"kind,omitempty"`
	Profile string            `json:"profile,omitempty"`
	MTU     int               `json:"mtu,omitempty"`
	Seed    uint64            `json:"seed,omitempty"`
	QP      *transport.QPInfo `json:"qp,omitempty"`
	Steer   *helloSteering    `json:"steer,omitempty"`
	Port    uint16            `json:"port,omitempty"`
	// ClientPort is the UDP port a udp client receives on (0: 4791).
	ClientPort uint16 `json:"client_port,omitempty"`
	// Protection is what the client asks for its spray QP (clear when
	// empty); Nonce and Proof secure it: each side's fresh nonce, and its
	// proof that it holds the pre-shared key (perfProof over both nonces,
	// the server's in its QP's hello, the client's in its own).
	Protection string `json:"protection,omitempty"`
	Nonce      []byte `json:"nonce,omitempty"`
	Proof      []byte `json:"proof,omitempty"`
	Ready      bool   `json:"ready,omitempty"`
	Done       bool   `json:"done,omitempty"`
	Err        string `json:"error,omitempty"`
}

// helloSteering is the steering of the QP a hello carries: the queue of
// its engine and the RSS table of its device, in rss.Table's encoding
// (base64 in JSON); the address is the QP's.
type helloSteering struct {
	Queue int    `json:"queue"`
	RSS   []byte `json:"rss"`
}

// helloSteeringOf returns the steering of qp's frames to send the peer, or
// nil when ep has none or it does not encode.
func helloSteeringOf(ep *transport.Endpoint, qp *transport.Conn) *helloSteering {
	st, ok := ep.Steering(qp)
	if !ok || st.Queue < 0 || st.Queue > rss.MaxQueue {
		return nil
	}
	b, err := st.Table.MarshalBinary()
	if err != nil {
		return nil
	}
	return &helloSteering{Queue: st.Queue, RSS: b}
}

// steering decodes h for the QP described by qp; a nil h is no steering.
func (h *helloSteering) steering(qp transport.QPInfo) (*transport.Steering, error) {
	if h == nil {
		return nil, nil
	}
	t, err := rss.ParseTable(h.RSS)
	if err != nil {
		return nil, fmt.Errorf("bench: the peer's steering: %w", err)
	}
	if h.Queue < 0 || h.Queue > rss.MaxQueue {
		return nil, fmt.Errorf("bench: the peer's steering names queue %d", h.Queue)
	}
	return &transport.Steering{IP: qp.IP, Table: t, Queue: h.Queue}, nil
}

// control is one side's control connection: JSON messages, every blocking
// read and write tied to the run's context (its end sets a past deadline),
// and TCP keepalives.
type control struct {
	c    net.Conn
	dec  *json.Decoder
	enc  *json.Encoder
	stop func() bool
}

func newControl(ctx context.Context, c net.Conn) *control {
	setKeepAlive(c)
	return &control{c: c, dec: json.NewDecoder(c), enc: json.NewEncoder(c),
		stop: context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })}
}

// setKeepAlive turns on c's TCP keepalives (a control connection's), when
// it is TCP.
func setKeepAlive(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepIdle, Interval: keepInterval, Count: keepCount})
	}
}

// recv decodes the next message, refusing an Err one.
func (k *control) recv(ctx context.Context, what string) (hello, error) {
	var h hello
	if err := k.dec.Decode(&h); err != nil {
		return h, fmt.Errorf("bench: reading the %s: %w", what, runErr(ctx, err))
	}
	if h.Err != "" {
		return h, fmt.Errorf("bench: peer refused: %s", h.Err)
	}
	return h, nil
}

// refuse tells the peer why the run cannot go on and returns err.
func (k *control) refuse(ctx context.Context, err error) error {
	_ = k.send(ctx, hello{Err: err.Error()})
	return err
}

func (k *control) send(ctx context.Context, h hello) error {
	if err := k.enc.Encode(h); err != nil {
		return fmt.Errorf("bench: control connection: %w", runErr(ctx, err))
	}
	return nil
}

// runErr is err, or why the run's context ended when it did (the peer is
// gone, the caller gave up): the deadline that ending set is not the
// cause.
func runErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// watch reads the peer's next control message in the background while
// the run goes on: Done closes the returned channel; anything else (the
// connection closed, reset or timed out by keepalives) cancels the run
// with ErrPeerGone. The returned function closes the connection and waits
// for the reader to end.
func (k *control) watch(cancel context.CancelCauseFunc, who string) (<-chan struct{}, func()) {
	done, fin := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(fin)
		var h hello
		err := k.dec.Decode(&h)
		if err == nil && h.Done {
			close(done)
			return
		}
		if err == nil {
			err = fmt.Errorf("unexpected message %+v", h)
		}
		cancel(fmt.Errorf("%w: %s: %v", ErrPeerGone, who, err))
	}()
	return done, func() { k.c.Close(); <-fin }
}

// localEndpoint resolves the route to peer, opens a link of kind on the
// egress interface (a udp link receiving on port and sending to peerPort;
// 0: 4791) and starts an endpoint on it. It returns the next hop's MAC,
// which replaces the peer's own MAC when the peer is behind a router.
func localEndpoint(ctx context.Context, run RemoteRun, peer netip.Addr, port, peerPort uint16) (*transport.Endpoint, [6]byte, error) {
	path, err := route.Resolve(ctx, peer)
	if err != nil {
		return nil, [6]byte{}, err
	}
	spec := LinkSpec{Kind: run.Kind, Ifindex: path.Ifindex, MAC: path.SrcMAC, IP: path.Src, Port: port, PeerPort: peerPort,
		Ports: multipath.Entropies(run.Transport.Seed^0x706f727473, max(run.Transport.Entropies, 8)), Logf: run.Logf}
	if path.MTU > 0 {
		spec.FrameSize = path.MTU + 14
	}
	l, err := OpenLink(spec)
	// Entropy ports drawn for another run on this host may be taken.
	for try := uint64(1); errors.Is(err, syscall.EADDRINUSE) && run.Kind == KindUDP && try < 8; try++ {
		spec.Ports = multipath.Entropies(run.Transport.Seed^0x706f727473^try<<40, max(run.Transport.Entropies, 8))
		l, err = OpenLink(spec)
	}
	if err != nil {
		return nil, [6]byte{}, err
	}
	if run.Wrap != nil {
		l = run.Wrap(l)
	}
	ep, err := transport.NewEndpoint(l, run.Transport)
	if err != nil {
		l.Close()
		return nil, [6]byte{}, err
	}
	return ep, path.DstMAC, nil
}

func logf(run RemoteRun, format string, args ...any) {
	if run.Logf != nil {
		run.Logf(format, args...)
	}
}

// ServePerf answers perf clients on ln until ctx ends, each in its own
// goroutine, and returns once every run has ended. The run's Kind and
// profile come from each client. Clients run at once: kernel TCP ones
// freely, udp ones on their own RoCE ports (from 4791 up), xdp and raw ones
// one at a time per link kind (one steering program per interface), the
// others waiting their turn. A run ends, its QP, endpoint, link and eBPF
// attachment freed, when it completes, when its client goes away (the
// control connection closes, is reset or stops answering keepalives: the
// run ends with ErrPeerGone), when its QP fails, and when ctx ends.
// Client goroutines open their links in the network namespace of the
// thread that called ServePerf.
func ServePerf(ctx context.Context, ln net.Listener, run RemoteRun) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	ns, nsErr := netns.Get()
	if nsErr == nil {
		defer ns.Close()
	}
	s := &perfServer{run: run, busy: map[string]chan struct{}{}, ports: map[uint16]bool{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			defer c.Close()
			if nsErr == nil {
				if err := enterNS(ns); err != nil {
					logf(run, "perf client %v: %v", c.RemoteAddr(), err)
					return
				}
			}
			if err := s.serveOne(ctx, c); err != nil {
				logf(run, "perf client %v: %v", c.RemoteAddr(), err)
				return
			}
			logf(run, "perf client %v: done", c.RemoteAddr())
		})
	}
}

// enterNS moves the calling goroutine, locked to its thread, into ns when
// its thread is elsewhere; the thread then ends with the goroutine.
func enterNS(ns netns.NsHandle) error {
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err == nil && cur.Equal(ns) {
		cur.Close()
		runtime.UnlockOSThread()
		return nil
	}
	if err == nil {
		cur.Close()
	}
	if err := netns.Set(ns); err != nil {
		return fmt.Errorf("bench: entering the server's network namespace: %w", err)
	}
	return nil
}

// perfServer is ServePerf's shared state: which link kinds are taken and
// which udp ports are in use.
type perfServer struct {
	run   RemoteRun
	mu    sync.Mutex
	busy  map[string]chan struct{} // xdp, raw: closed when the run ends
	ports map[uint16]bool
}

// acquire waits for kind's turn and returns the udp port of the run (0
// for other kinds) and the function that releases them.
func (s *perfServer) acquire(ctx context.Context, kind string) (uint16, func(), error) {
	for {
		s.mu.Lock()
		if kind == KindUDP {
			for p := uint16(udp.RoCEPort); p < udp.RoCEPort+maxUDPRuns; p++ {
				if !s.ports[p] {
					s.ports[p] = true
					s.mu.Unlock()
					return p, func() { s.mu.Lock(); delete(s.ports, p); s.mu.Unlock() }, nil
				}
			}
			s.mu.Unlock()
			return 0, nil, fmt.Errorf("bench: %d udp runs already", maxUDPRuns)
		}
		wait, taken := s.busy[kind]
		if !taken {
			ch := make(chan struct{})
			s.busy[kind] = ch
			s.mu.Unlock()
			return 0, func() { s.mu.Lock(); delete(s.busy, kind); close(ch); s.mu.Unlock() }, nil
		}
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, nil, context.Cause(ctx)
		}
	}
}

func (s *perfServer) serveOne(ctx context.Context, c net.Conn) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	setKeepAlive(c)
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	// The raw connection, not c: acceptTLS replaces c (nil on an error)
	// while this may still run.
	raw := c
	stopTLS := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	c, cs, err := acceptTLS(ctx, c, s.run.TLS)
	stopTLS()
	if err != nil {
		return err
	}
	k := newControl(ctx, c)
	defer k.stop()
	h, err := k.recv(ctx, "client's hello")
	if err != nil {
		return err
	}
	if s.run.TLS != nil && cs == nil {
		return k.refuse(ctx, fmt.Errorf("%w: the perf server requires TLS: give the client --ca (and --cert, --key when the server checks clients)", ErrPerfAuth))
	}
	_ = c.SetReadDeadline(time.Time{})
	if ctx.Err() != nil { // its deadline may just have been cleared
		return context.Cause(ctx)
	}
	run := s.run
	logf(run, "perf client %v: link %s, profile %s", c.RemoteAddr(), h.Kind, h.Profile)
	ta, isTCP := c.RemoteAddr().(*net.TCPAddr)
	refuse := func(err error) error { return k.refuse(ctx, err) }
	switch h.Kind {
	case KindTCP:
		if err := k.send(ctx, hello{Kind: KindTCP}); err != nil {
			return err
		}
		return runErr(ctx, PerfServer(ctx, NewTCPConn(c)))
	case KindUDP, KindXDP, KindRaw:
	default:
		return refuse(fmt.Errorf("bench: unknown link kind %q", h.Kind))
	}
	prof, err := transport.ParseProfile(h.Profile)
	if err != nil {
		return refuse(err)
	}
	if !isTCP {
		return refuse(fmt.Errorf("bench: the control connection is not TCP (%v)", c.RemoteAddr()))
	}
	port, release, err := s.acquire(ctx, h.Kind)
	if err != nil {
		return refuse(err)
	}
	defer release()
	run.Kind = h.Kind
	run.Transport.Profile, run.Transport.MTU = prof, h.MTU
	if h.Seed != 0 { // 0: unpredictable on both sides
		run.Transport.Seed = h.Seed + 1 + uint64(max(port, udp.RoCEPort)-udp.RoCEPort)<<32
	}
	sec, err := serverSecurity(run.Perf, h, cs)
	if err != nil {
		return refuse(err)
	}
	peer := ta.AddrPort().Addr().Unmap()
	ep, nextHop, err := localEndpoint(ctx, run, peer, port, h.ClientPort)
	if err != nil {
		return refuse(err)
	}
	defer ep.Close()
	qp, err := serverQP(ctx, k, ep, h.Kind, port, nextHop, sec)
	if err != nil {
		return err
	}
	logf(run, "perf client %v: running", c.RemoteAddr())
	_, closeWatch := k.watch(cancel, "perf client")
	defer closeWatch()
	if err := PerfServer(ctx, &SprayConn{C: qp, CQ: ep.CQ()}); err != nil {
		return runErr(ctx, err)
	}
	return k.send(ctx, hello{Done: true})
}

// serverQP is the server's half of the QP exchange on k, after the
// client's first hello: it creates a QP on ep, sends it with its steering
// (and port, udp links), reads the client's QP, steers its own to the
// client's queue when the client sent its steering, connects it (through
// nextHop) and answers Ready.
func serverQP(ctx context.Context, k *control, ep *transport.Endpoint, kind string, port uint16, nextHop [6]byte, sec *runSecurity) (*transport.Conn, error) {
	qp, err := ep.CreateQP(ctx)
	if err != nil {
		return nil, k.refuse(ctx, err)
	}
	info := qp.Info()
	sh := hello{Kind: kind, QP: &info, Steer: helloSteeringOf(ep, qp), Port: port}
	if sec != nil && sec.cs == nil {
		sh.Nonce, sh.Proof = sec.salt[perfNonceLen:], perfProof(sec.cfg.PSK, sec.salt, "server")
	}
	if err := k.send(ctx, sh); err != nil {
		return nil, err
	}
	ch, err := k.recv(ctx, "client's QP")
	if err != nil {
		return nil, err
	}
	if ch.QP == nil {
		return nil, k.refuse(ctx, fmt.Errorf("bench: client sent no QP"))
	}
	remote := *ch.QP
	remote.MAC = nextHop
	if sec != nil {
		if sec.cs == nil && !hmac.Equal(ch.Proof, perfProof(sec.cfg.PSK, sec.salt, "client")) {
			return nil, k.refuse(ctx, fmt.Errorf("%w: the client did not prove the server's pre-shared key (--psk differs)", ErrPerfAuth))
		}
		if err := sec.secure(ctx, qp, remote.QPN, info.QPN, false); err != nil {
			return nil, k.refuse(ctx, err)
		}
	}
	st, err := ch.Steer.steering(remote)
	if err == nil && st != nil {
		err = qp.Steer(ctx, *st)
	}
	if err != nil {
		return nil, k.refuse(ctx, err)
	}
	// Connect before answering, so that the client's first packets find
	// the QP ready.
	if err := qp.Connect(ctx, remote); err != nil {
		return nil, k.refuse(ctx, err)
	}
	if err := k.send(ctx, hello{Ready: true}); err != nil {
		return nil, err
	}
	return qp, nil
}

// clientQP is the client's half of the QP exchange on k, given the
// server's answer sh: it creates a QP on ep steered to the server's queue
// when sh has the server's steering, connects it (through nextHop), sends
// it with its own steering and waits for Ready.
func clientQP(ctx context.Context, k *control, ep *transport.Endpoint, sh hello, nextHop [6]byte, sec *runSecurity) (*transport.Conn, error) {
	if sh.QP == nil {
		return nil, fmt.Errorf("bench: server sent no QP")
	}
	if sec != nil && sec.cs == nil {
		if len(sh.Nonce) != perfNonceLen {
			return nil, fmt.Errorf("%w: the server did not secure its QP (a server without --psk support)", ErrPerfAuth)
		}
		copy(sec.salt[perfNonceLen:], sh.Nonce)
		if !hmac.Equal(sh.Proof, perfProof(sec.cfg.PSK, sec.salt, "server")) {
			return nil, fmt.Errorf("%w: the server did not prove this side's pre-shared key (--psk differs)", ErrPerfAuth)
		}
	}
	remote := *sh.QP
	remote.MAC = nextHop
	st, err := sh.Steer.steering(remote)
	if err != nil {
		return nil, err
	}
	var qp *transport.Conn
	if st != nil {
		qp, err = ep.CreateQPSteered(ctx, *st)
	} else {
		qp, err = ep.CreateQP(ctx)
	}
	if err != nil {
		return nil, err
	}
	info := qp.Info()
	ch := hello{QP: &info, Steer: helloSteeringOf(ep, qp)}
	if sec != nil {
		if err := sec.secure(ctx, qp, info.QPN, remote.QPN, true); err != nil {
			return nil, err
		}
		if sec.cs == nil {
			ch.Proof = perfProof(sec.cfg.PSK, sec.salt, "client")
		}
	}
	if err := qp.Connect(ctx, remote); err != nil {
		return nil, err
	}
	if err := k.send(ctx, ch); err != nil {
		return nil, err
	}
	if _, err := k.recv(ctx, "server's ready"); err != nil {
		return nil, err
	}
	return qp, nil
}

// clientPorts are the udp ports this process's perf clients hold, so
// that clients that start at once do not pick the same.
var clientPorts struct {
	sync.Mutex
	used map[netip.AddrPort]bool
}

// freeUDPPort returns the first RoCE port from 4791 up that is free on the
// source address towards peer, and the function that releases it.
func freeUDPPort(ctx context.Context, peer netip.Addr) (uint16, func(), error) {
	path, err := route.Resolve(ctx, peer)
	if err != nil {
		return 0, nil, err
	}
	clientPorts.Lock()
	defer clientPorts.Unlock()
	if clientPorts.used == nil {
		clientPorts.used = map[netip.AddrPort]bool{}
	}
	for p := uint16(udp.RoCEPort); p < udp.RoCEPort+maxUDPRuns; p++ {
		ap := netip.AddrPortFrom(path.Src, p)
		if clientPorts.used[ap] {
			continue
		}
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err == nil {
			c.Close()
			clientPorts.used[ap] = true
			return p, func() { clientPorts.Lock(); delete(clientPorts.used, ap); clientPorts.Unlock() }, nil
		}
	}
	return 0, nil, fmt.Errorf("bench: no free udp port from %d on %v", udp.RoCEPort, path.Src)
}

// DialPerf runs the client half against a ServePerf at addr (host:port).
// Every wait, the control connection's included, ends with ctx; a server
// that goes away in the middle (its control connection closes or stops
// answering keepalives) ends the run with ErrPeerGone.
func DialPerf(ctx context.Context, addr string, run RemoteRun) (PerfResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return PerfResult{}, err
	}
	defer c.Close()
	if run.TLS != nil && run.Perf.PSK != nil {
		return PerfResult{}, fmt.Errorf("bench: a pre-shared key or TLS, not both")
	}
	var cs *tls.ConnectionState
	if run.TLS != nil {
		setKeepAlive(c)
		raw := c // c is replaced below, maybe while this runs
		stopTLS := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
		ts, err := dialTLS(ctx, c, run.TLS, addr)
		stopTLS()
		if err != nil {
			return PerfResult{}, err
		}
		st := ts.ConnectionState()
		c, cs = ts, &st
	}
	k := newControl(ctx, c)
	defer k.stop()
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return PerfResult{}, fmt.Errorf("bench: %s is not a TCP address", addr)
	}
	peer := ta.AddrPort().Addr().Unmap()
	h := hello{Kind: run.Kind, Profile: run.Transport.Profile.String(), MTU: run.Transport.MTU, Seed: run.Transport.Seed}
	var sec *runSecurity
	if run.Kind != KindTCP && cs != nil {
		sec = &runSecurity{cfg: PerfConfig{IntegrityOnly: run.Perf.IntegrityOnly}, cs: cs}
		h.Protection = sec.protection()
	}
	if run.Kind != KindTCP && run.Perf.PSK != nil {
		sec = &runSecurity{cfg: run.Perf, salt: make([]byte, 2*perfNonceLen)}
		rand.Read(sec.salt[:perfNonceLen])
		h.Protection, h.Nonce = run.Perf.protection(), sec.salt[:perfNonceLen]
	}
	if run.Kind == KindUDP {
		// Another client on this host may hold the RoCE port.
		var release func()
		if h.ClientPort, release, err = freeUDPPort(ctx, peer); err != nil {
			return PerfResult{}, err
		}
		defer release()
	}
	if err := k.send(ctx, h); err != nil {
		return PerfResult{}, err
	}
	sh, err := k.recv(ctx, "server's answer")
	if err != nil {
		return PerfResult{}, tlsRefusal(err, addr)
	}
	if run.Kind == KindTCP {
		res, err := PerfClient(ctx, NewTCPConn(c), run.Perf)
		res.Link, res.Profile = KindTCP, "kernel"
		if cs != nil {
			res.Protection = ProtectionTLS
		}
		if err != nil {
			err = runErr(ctx, err)
		}
		return res, err
	}
	if sh.QP == nil {
		return PerfResult{}, fmt.Errorf("bench: server sent no QP")
	}
	ep, nextHop, err := localEndpoint(ctx, run, peer, h.ClientPort, sh.Port)
	if err != nil {
		return PerfResult{}, err
	}
	defer ep.Close()
	qp, err := clientQP(ctx, k, ep, sh, nextHop, sec)
	if err != nil {
		return PerfResult{}, err
	}
	done, closeWatch := k.watch(cancel, "perf server")
	defer closeWatch()
	res, err := PerfClient(ctx, &SprayConn{C: qp, CQ: ep.CQ()}, run.Perf)
	res.Link, res.Profile, res.Protection = run.Kind, run.Transport.Profile.String(), run.Perf.protection()
	if sec != nil {
		res.Protection = sec.protection()
	}
	if err != nil {
		return res, runErr(ctx, err)
	}
	if st, serr := qp.Stats(ctx); serr == nil {
		res.Retransmits = st.Retransmits
	}
	select {
	case <-done:
	case <-ctx.Done():
		return res, context.Cause(ctx)
	}
	return res, nil
}
