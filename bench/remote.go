package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/route"
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
	// Wrap, when set, wraps the local link (a capture, say).
	Wrap func(link.Link) link.Link
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// hello opens a run on the control connection.
type hello struct {
	Kind    string            `json:"kind"`
	Profile string            `json:"profile"`
	MTU     int               `json:"mtu"`
	Seed    uint64            `json:"seed"`
	QP      *transport.QPInfo `json:"qp,omitempty"`
	Err     string            `json:"error,omitempty"`
}

// localEndpoint resolves the route to peer, opens a link of kind on the
// egress interface and starts an endpoint on it. It returns the next hop's
// MAC, which replaces the peer's own MAC when the peer is behind a router.
func localEndpoint(ctx context.Context, run RemoteRun, peer netip.Addr) (*transport.Endpoint, [6]byte, error) {
	path, err := route.Resolve(ctx, peer)
	if err != nil {
		return nil, [6]byte{}, err
	}
	spec := LinkSpec{Kind: run.Kind, Ifindex: path.Ifindex, MAC: path.SrcMAC, IP: path.Src,
		Ports: multipath.Entropies(run.Transport.Seed^0x706f727473, max(run.Transport.Entropies, 8)), Logf: run.Logf}
	if path.MTU > 0 {
		spec.FrameSize = path.MTU + 14
	}
	l, err := OpenLink(spec)
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

// ServePerf answers perf clients on ln, one at a time, until ctx ends. The
// run's Kind and profile come from each client.
func ServePerf(ctx context.Context, ln net.Listener, run RemoteRun) error {
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := serveOne(ctx, c, run); err != nil {
			logf(run, "perf client %v: %v", c.RemoteAddr(), err)
		}
		c.Close()
	}
}

func serveOne(ctx context.Context, c net.Conn, run RemoteRun) error {
	dec, enc := json.NewDecoder(c), json.NewEncoder(c)
	var h hello
	if err := dec.Decode(&h); err != nil {
		return err
	}
	logf(run, "perf client %v: link %s, profile %s", c.RemoteAddr(), h.Kind, h.Profile)
	if h.Kind == KindTCP {
		if err := enc.Encode(hello{Kind: KindTCP}); err != nil {
			return err
		}
		return PerfServer(ctx, NewTCPConn(c))
	}
	prof, err := transport.ParseProfile(h.Profile)
	if err != nil {
		enc.Encode(hello{Err: err.Error()})
		return err
	}
	run.Kind = h.Kind
	run.Transport.Profile, run.Transport.MTU, run.Transport.Seed = prof, h.MTU, h.Seed
	if h.Seed != 0 { // 0: unpredictable on both sides
		run.Transport.Seed++
	}
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	ep, nextHop, err := localEndpoint(ctx, run, peer)
	if err != nil {
		enc.Encode(hello{Err: err.Error()})
		return err
	}
	defer ep.Close()
	qp, err := ep.CreateQP(ctx)
	if err != nil {
		return err
	}
	if h.QP == nil {
		return fmt.Errorf("bench: client sent no QP")
	}
	remote := *h.QP
	remote.MAC = nextHop
	// Connect before answering, so that the client's first packets find
	// the QP ready.
	if err := qp.Connect(ctx, remote); err != nil {
		return err
	}
	info := qp.Info()
	if err := enc.Encode(hello{Kind: h.Kind, QP: &info}); err != nil {
		return err
	}
	return PerfServer(ctx, &SprayConn{C: qp, CQ: ep.CQ()})
}

// DialPerf runs the client half against a ServePerf at addr (host:port).
func DialPerf(ctx context.Context, addr string, run RemoteRun) (PerfResult, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return PerfResult{}, err
	}
	defer c.Close()
	dec, enc := json.NewDecoder(c), json.NewEncoder(c)
	h := hello{Kind: run.Kind, Profile: run.Transport.Profile.String(), MTU: run.Transport.MTU, Seed: run.Transport.Seed}
	if run.Kind == KindTCP {
		if err := enc.Encode(h); err != nil {
			return PerfResult{}, err
		}
		var ack hello
		if err := dec.Decode(&ack); err != nil {
			return PerfResult{}, err
		}
		res, err := PerfClient(ctx, NewTCPConn(c), run.Perf)
		res.Link, res.Profile = KindTCP, "kernel"
		return res, err
	}
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	ep, nextHop, err := localEndpoint(ctx, run, peer)
	if err != nil {
		return PerfResult{}, err
	}
	defer ep.Close()
	qp, err := ep.CreateQP(ctx)
	if err != nil {
		return PerfResult{}, err
	}
	info := qp.Info()
	h.QP = &info
	if err := enc.Encode(h); err != nil {
		return PerfResult{}, err
	}
	var resp hello
	if err := dec.Decode(&resp); err != nil {
		return PerfResult{}, err
	}
	if resp.Err != "" || resp.QP == nil {
		return PerfResult{}, fmt.Errorf("bench: server refused: %s", resp.Err)
	}
	remote := *resp.QP
	remote.MAC = nextHop
	if err := qp.Connect(ctx, remote); err != nil {
		return PerfResult{}, err
	}
	res, err := PerfClient(ctx, &SprayConn{C: qp, CQ: ep.CQ()}, run.Perf)
	res.Link, res.Profile = run.Kind, run.Transport.Profile.String()
	if st, serr := qp.Stats(ctx); serr == nil {
		res.Retransmits = st.Retransmits
	}
	return res, err
}
