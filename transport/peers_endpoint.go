package transport

import (
	"context"
	"errors"
	"net/netip"
	"sync"

	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/transport/wire"
)

// epPeers is an Endpoint's view of its on-demand Conns.
type epPeers struct {
	mu   sync.Mutex
	byIP map[netip.Addr]*Conn // the Conn that sends to each peer
	// accepted are the Conns peers made, for AcceptPeer; ready holds a
	// token while one waits.
	accepted []*Conn
	ready    chan struct{}
}

func (p *epPeers) init() {
	if p.byIP == nil {
		p.byIP = map[netip.Addr]*Conn{}
		p.ready = make(chan struct{}, 1)
	}
}

// initPeers gives the shard's engine its on-demand hooks; under s.st.
func (s *epShard) initPeers() {
	t := s.eng.peers()
	if t.onClose != nil {
		return
	}
	t.onAccept = s.accepted
	t.onClose = s.peerClosed
}

// wrap makes the Conn of q, a new QP of the shard's engine; under s.st.
func (s *epShard) wrap(q *QP) *Conn {
	c := &Conn{ep: s.ep, s: s, qp: q, info: q.Info(), gone: make(chan struct{})}
	c.rx.ready = make(chan struct{}, 1)
	q.owner = c
	s.conns[q.qpn] = c
	return c
}

// accepted is the engine's hook for a QP a peer's first packet made.
func (s *epShard) accepted(q *QP) {
	c := s.wrap(q)
	p := &s.ep.od
	p.mu.Lock()
	p.init()
	if cur := p.byIP[q.rip]; cur == nil || cur.isGone() {
		p.byIP[q.rip] = c
	}
	p.accepted = append(p.accepted, c)
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// peerClosed is the engine's hook for an on-demand QP it closed: its
// waiters learn why, and its Conn is gone (Recv returns what it holds,
// then ErrDestroyed).
func (s *epShard) peerClosed(q *QP, _ error) {
	c := s.conns[q.qpn]
	if c == nil || c.qp != q {
		return
	}
	s.deliver(c)
	delete(s.conns, q.qpn)
	close(c.gone)
	p := &s.ep.od
	p.mu.Lock()
	if p.byIP[q.rip] == c {
		delete(p.byIP, q.rip)
	}
	p.mu.Unlock()
}

func (c *Conn) isGone() bool {
	select {
	case <-c.gone:
		return true
	default:
		return false
	}
}

// Peer returns the on-demand Conn to the peer at to: the one the endpoint
// holds (made by an earlier Peer, or by the peer's first packet), or a new
// one, made without a round trip: its first message leaves at once and
// completes one round trip later. The peer must accept on-demand QPs
// (Config.Peers.Accept). A Conn closed for idleness, or whose QP failed,
// is replaced by the next call (the failed one destroyed).
func (ep *Endpoint) Peer(ctx context.Context, to PeerAddr) (*Conn, error) {
	p := &ep.od
	p.mu.Lock()
	p.init()
	c := p.byIP[to.IP]
	p.mu.Unlock()
	if c != nil && !c.isGone() {
		var failed bool
		if err := c.s.view(ctx, func() error { failed = c.qp.state == stateError; return nil }); err != nil {
			return nil, err
		}
		if !failed {
			return c, nil
		}
		_, _ = c.Destroy(ctx) // a failed QP (peer unreachable): make another
	}
	s := ep.shards[int(ep.next.Add(1)-1)%len(ep.shards)]
	err := s.do(ctx, func() error {
		s.initPeers()
		q, err := s.eng.createPeerQP(to, ep.replyPorts(s, to.IP))
		if err != nil {
			return err
		}
		c = s.wrap(q)
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if cur := p.byIP[to.IP]; cur != nil && !cur.isGone() {
		p.mu.Unlock()
		_, _ = c.Destroy(ctx) // another call made one first
		return cur, nil
	}
	p.byIP[to.IP] = c
	p.mu.Unlock()
	return c, nil
}

// SendTo sends msg to the peer at to on its on-demand Conn (Peer) and
// returns when the peer has acknowledged all of it. When the Conn closed
// for idleness as the message was posted (this side's timer, or the
// peer's close notice, which says the peer took none of it), SendTo sends
// it once more on a new Conn.
func (ep *Endpoint) SendTo(ctx context.Context, to PeerAddr, msg []byte) error {
	for try := 0; ; try++ {
		c, err := ep.Peer(ctx, to)
		if err != nil {
			return err
		}
		err = c.Send(ctx, msg)
		if err == nil || try > 0 || !errors.Is(err, ErrIdleClosed) {
			return err
		}
	}
}

// replyPorts returns entropies for the peer at ip to send from that this
// endpoint's RSS delivers to the queue of s, the engine of the QP: the
// acceptor sends from them when its link may (TestPeerSteered). Zero
// when the endpoint runs one engine or its link does not know its RSS.
// Under s.st (it draws from the engine's random source).
func (ep *Endpoint) replyPorts(s *epShard, ip netip.Addr) [wire.ConnPorts]uint16 {
	var out [wire.ConnPorts]uint16
	r, ok := ep.link.(RSSReader)
	if !ok || ep.sh == nil {
		return out
	}
	t := r.RSS()
	if len(t.Indir) == 0 || len(t.Key) == 0 {
		return out
	}
	tp := rss.Tuple{Src: ip, Dst: s.eng.info.IP, DstPort: roceUDPPort}
	const lo, span = 49152, 1 << 14 // the dynamic ports
	start, n := s.eng.rng.Uint32N(span), 0
	for i := range uint32(span) {
		tp.SrcPort = uint16(lo + (start+i)%span)
		if t.QueueOf(tp) == s.idx {
			out[n] = tp.SrcPort
			if n++; n == len(out) {
				break
			}
		}
	}
	return out
}

// AcceptPeer returns the next Conn that a peer made on demand, with
// Config.Peers.Accept; messages reach its Recv from its first packet on,
// whether or not AcceptPeer has returned it. It returns the Conns in the
// order their first packets came, closed ones included (their Recv
// returns what they hold, then ErrDestroyed).
func (ep *Endpoint) AcceptPeer(ctx context.Context) (*Conn, error) {
	p := &ep.od
	p.mu.Lock()
	p.init()
	ready := p.ready
	p.mu.Unlock()
	for {
		p.mu.Lock()
		if len(p.accepted) > 0 {
			c := p.accepted[0]
			p.accepted[0] = nil
			p.accepted = p.accepted[1:]
			more := len(p.accepted) > 0
			p.mu.Unlock()
			if more {
				select {
				case ready <- struct{}{}:
				default:
				}
			}
			return c, nil
		}
		p.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ep.done:
			return nil, ep.closedErr()
		}
	}
}

// PeerStats returns the on-demand counters of the endpoint's engines,
// summed.
func (ep *Endpoint) PeerStats(ctx context.Context) (PeerStats, error) {
	var st PeerStats
	for _, s := range ep.shards {
		if err := s.view(ctx, func() error { st.add(s.eng.PeerStats()); return nil }); err != nil {
			return st, err
		}
	}
	return st, nil
}

// RemoteIP returns the address of the Conn's peer (the zero Addr before
// Connect).
func (c *Conn) RemoteIP() netip.Addr { return c.qp.rip }
