package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/sprayfabric/spray/link/rss"
)

// roceUDPPort is RoCEv2's UDP destination port, which RSS hashes.
const roceUDPPort = 4791

// RSSReader is implemented by multi-queue links that know how their device
// spreads received frames over the queues (link/mem's MultiPort).
type RSSReader interface {
	RSS() rss.Table
}

// Steering describes where a QP's frames should arrive: the address of the
// QP, the RSS configuration of the device that receives them and the queue
// of the engine that owns the QP. A peer that creates its QP with
// Endpoint.CreateQPSteered picks entropies (UDP source ports) that this
// device's RSS hash delivers to that queue, so that the QP's engine gets
// its frames without a hand-over, while the fabric's ECMP hash still
// spreads them over its paths (the ports differ). Exchange it out of band
// with QPInfo.
type Steering struct {
	IP    netip.Addr
	Table rss.Table
	Queue int
}

// Steering returns the steering of c's frames: ok is false when the
// endpoint runs one engine (every queue reaches it) or its link does not
// know its RSS configuration.
func (ep *Endpoint) Steering(c *Conn) (Steering, bool) {
	r, ok := ep.link.(RSSReader)
	if !ok || ep.sh == nil {
		return Steering{}, false
	}
	t := r.RSS()
	if len(t.Indir) == 0 || len(t.Key) == 0 {
		return Steering{}, false
	}
	return Steering{IP: c.info.IP, Table: t, Queue: c.s.idx}, true
}

// CreateQPSteered creates a QP, like CreateQP, whose entropies the peer
// described by to receives on the queue of the engine that owns its QP.
// When fewer entropies than Config.Entropies can be found (a link that
// sends from a fixed set of ports), it uses those it found, and when none,
// any, as CreateQP does. A Steering that cannot be steered to (see
// Conn.Steer) is an error wrapping ErrInvalidRequest.
func (ep *Endpoint) CreateQPSteered(ctx context.Context, to Steering) (*Conn, error) {
	if err := to.check(ep.link.Info().IP); err != nil {
		return nil, err
	}
	return ep.createQP(ctx, func(e *Engine) []uint16 {
		return steeredPorts(e, to)
	})
}

// Steer re-chooses the entropies of c's QP so that the peer described by
// to receives them on the queue of the engine that owns its QP, as
// CreateQPSteered does at creation: for a QP created before its peer's
// steering was known (a dialer learns the listener's in its reply). It
// may be called before or after Connect, while messages are in flight:
// the QP's path policy starts afresh over the new entropies (their
// per-path counters from zero), packets sent on the old ones are still
// acknowledged and retransmitted (on the new ones), and their
// acknowledgements no longer score a path (TestSteer). When no entropy of
// the link (a fixed set of ports) reaches the peer's queue, the QP keeps
// the entropies it has. A Steering without an address or table, of
// another address family, for a queue its table never names, or for
// another address than the connected peer's is an error wrapping
// ErrInvalidRequest; a destroyed Conn gives ErrDestroyed.
func (c *Conn) Steer(ctx context.Context, to Steering) error {
	if err := to.check(c.info.IP); err != nil {
		return err
	}
	return c.s.do(ctx, func() error {
		if c.s.conns[c.qp.qpn] != c {
			return ErrDestroyed
		}
		if c.qp.state != stateInit && to.IP != c.qp.rip {
			return fmt.Errorf("%w: steering for %v, the QP is connected to %v", ErrInvalidRequest, to.IP, c.qp.rip)
		}
		if ports := findSteered(c.s.eng, to); len(ports) > 0 {
			c.qp.setPaths(ports, c.s.eng.rng)
		}
		return nil
	})
}

// setPaths replaces the QP's entropies with set (non-empty) under a fresh
// path policy of the configured kind. Policies and the per-path counters
// ignore entropies outside their set, so the reports about packets sent
// on the old ones (in flight, acknowledged later) fall away harmlessly;
// ackTurn is taken modulo the new set.
func (q *QP) setPaths(set []uint16, rng *rand.Rand) {
	q.paths = newPolicy(q.cfg, set, rng)
	if q.sch.eng != nil {
		q.setRuns(q.sch.eng.info.Segments)
	}
	q.pstats.init(q.paths.Paths())
	q.ackTurn = 0
}

// check reports why to cannot steer the frames of a QP at local.
func (to Steering) check(local netip.Addr) error {
	switch {
	case !to.IP.IsValid() || len(to.Table.Indir) == 0 || len(to.Table.Key) == 0:
		return fmt.Errorf("%w: steering without an address or RSS table", ErrInvalidRequest)
	case to.IP.Is4() != local.Is4():
		return fmt.Errorf("%w: steering for %v from %v", ErrInvalidRequest, to.IP, local)
	case to.Queue < 0 || !slices.Contains(to.Table.Indir, uint32(to.Queue)):
		return fmt.Errorf("%w: steering to queue %d, which the RSS table never names", ErrInvalidRequest, to.Queue)
	}
	return nil
}

// steeredPorts returns up to Config.Entropies source ports from e's link
// that to's table delivers to to.Queue (findSteered); when none, the
// link's fixed ports, or nil (any) for a link without.
func steeredPorts(e *Engine, to Steering) []uint16 {
	if out := findSteered(e, to); len(out) > 0 {
		return out
	}
	return e.info.Ports
}

// findSteered returns up to Config.Entropies source ports from e's link
// that to's table delivers to to.Queue, starting the search at a random
// port so that the set is as unpredictable as CreateQP's; nil when none.
func findSteered(e *Engine, to Steering) []uint16 {
	tp := rss.Tuple{Src: e.info.IP, Dst: to.IP, DstPort: roceUDPPort}
	var out []uint16
	want := e.cfg.Entropies
	if len(e.info.Ports) > 0 {
		for _, p := range e.info.Ports {
			tp.SrcPort = p
			if to.Table.QueueOf(tp) == to.Queue {
				if out = append(out, p); len(out) == want {
					break
				}
			}
		}
		return out
	}
	const lo, span = 49152, 1 << 14 // the dynamic ports
	start := e.rng.Uint32N(span)
	for i := range uint32(span) {
		tp.SrcPort = uint16(lo + (start+i)%span)
		if to.Table.QueueOf(tp) == to.Queue {
			if out = append(out, tp.SrcPort); len(out) == want {
				break
			}
		}
	}
	return out
}
