package transport

import (
	"context"
	"fmt"
	"net/netip"

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
// any, as CreateQP does.
func (ep *Endpoint) CreateQPSteered(ctx context.Context, to Steering) (*Conn, error) {
	if !to.IP.IsValid() || len(to.Table.Indir) == 0 {
		return nil, fmt.Errorf("%w: steering without an address or RSS table", ErrInvalidRequest)
	}
	return ep.createQP(ctx, func(e *Engine) []uint16 {
		return steeredPorts(e, to)
	})
}

// steeredPorts returns up to Config.Entropies source ports from e's link
// that to's table delivers to to.Queue, starting the search at a random
// port so that the set is as unpredictable as CreateQP's.
func steeredPorts(e *Engine, to Steering) []uint16 {
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
		if len(out) == 0 {
			return e.info.Ports
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
