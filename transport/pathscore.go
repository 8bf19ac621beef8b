package transport

import (
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/psn"
)

// scorePaths reports to the path policy every packet in q.events that an
// ACK newly acknowledged, except the one the ACK was sent for (acked),
// which the spray sender's onAck reports itself with its ECN and INT. A
// receiver acknowledges several packets at once (AckEvery, SACK), and each
// says that its path delivers: without this a path whose packets always
// share an ACK with a later packet on another path would look dead, and a
// probe on a path out of the spray set would never be recognised. The RTT
// is the time since the packet was sent (none for a resend, by Karn's
// rule).
func (q *QP) scorePaths(now clock.Time, acked psn.PSN) {
	for i := range q.scr.cur {
		e := &q.scr.cur[i]
		if e.Lost || e.PSN == acked {
			continue
		}
		var rtt time.Duration
		if !e.Retransmitted {
			rtt = max(now.Sub(e.SentAt), 0)
		}
		q.paths.OnAck(now, e.Entropy, rtt, false)
	}
}

// nextEntropy picks the entropy of the packet being encoded: a
// retransmission (q.resending) from the policy's Resender when it has one,
// so that a resend does not become the probe of a path out of the spray
// set, and, after a retransmission timeout (q.inRTO) and until the
// cumulative ACK passes the PSNs outstanding when it fired
// (q.rtoRecovery), goes on the path with the freshest proof of delivery:
// when the round trip shows a queue the timeout resends the oldest packet
// alone (F-RTO), and the packets RACK declares lost once its ACK arrives
// are those of a dead path; resent on paths that lost nothing yet, they
// met the same dead spine and waited for another, doubled, timeout
// (TestSpineFailAllToAll).
func (q *QP) nextEntropy(now clock.Time) uint16 {
	if q.resending { // before the type assertion, which costs more
		if r, ok := q.paths.(multipath.Resender); ok {
			return r.NextResend(now, q.inRTO || q.rtoRecovery)
		}
	}
	return q.paths.Next(now)
}

// noteAckLost is called when a duplicate data packet arrives at now: the
// peer resent a packet that this receiver had acknowledged, so the last
// acknowledgement was probably lost, unless it went out too recently for
// the peer to have heard it (within the smoothed RTT). A policy that
// picks acknowledgement paths (multipath.AckPather) then passes over that
// path. It reports whether it judged the acknowledgement lost.
func (q *QP) noteAckLost(now clock.Time) bool {
	ap, ok := q.paths.(multipath.AckPather)
	if !ok || q.stats.AcksSent == 0 || now.Sub(q.lastAckAt) <= q.sb.SRTT() {
		return false
	}
	ap.AckLost(q.lastAckEntropy)
	return true
}
