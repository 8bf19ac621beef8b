package transport

import (
	"context"

	"github.com/sprayfabric/spray/retransmit"
)

// RetransmitStats returns the counters of the QP's send scoreboard (see
// QP.RetransmitStats): resends, spurious resends, probes and timeouts.
func (c *Conn) RetransmitStats(ctx context.Context) (retransmit.Stats, error) {
	var s retransmit.Stats
	err := c.s.view(ctx, func() error { s = c.qp.RetransmitStats(); return nil })
	return s, err
}
