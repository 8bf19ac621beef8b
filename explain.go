package spray

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// explain adds the QP's counters to an error that they explain: a peer
// that stopped answering, or a context that ended while the peer had not
// acknowledged anything. A bare "context deadline exceeded" or "peer
// unreachable" leaves a user with nothing to look at; the counters say
// whether frames left, whether any ACK came back and what the local engine
// dropped (TestExplainUnreachable).
func (c *Conn) explain(ctx context.Context, err error) error {
	unreachable := errors.Is(err, transport.ErrPeerUnreachable)
	if !unreachable && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, serr := c.qp.Stats(sctx)
	if serr != nil {
		return err
	}
	e, _ := c.ep.Endpoint.Stats(sctx)
	return explainStats(err, c.remote, s, e, unreachable)
}

func explainStats(err error, remote transport.QPInfo, s transport.QPStats, e transport.EngineStats, unreachable bool) error {
	what := "no answer"
	if unreachable {
		what = fmt.Sprintf("peer unreachable after %d timeouts", s.Timeouts)
	} else if s.AcksReceived > 0 {
		return err // the peer answers: the transfer was only slow
	}
	hint := ""
	if s.AcksReceived == 0 {
		hint = "; the peer never acknowledged: check that it runs, that its QP is connected to this one, " +
			"that it receives at this address and port, and its endpoint's BadICRC and UnknownQP counters"
	}
	return fmt.Errorf("%w (%s from QP %#x at %s: %d ACKs received, %d packets sent, %d retransmitted, %d timeouts; "+
		"this endpoint dropped %d malformed frames and %d for unknown QPs%s)",
		err, what, remote.QPN, remote.IP, s.AcksReceived, s.TxPackets, s.Retransmits, s.Timeouts,
		e.Malformed(), e.UnknownQP, hint)
}
