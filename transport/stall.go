package transport

import (
	"time"

	"github.com/sprayfabric/spray/clock"
)

// restartTimers restarts from now the QP's loss timers that came due
// while its engine was not running (Scoreboard.Restart), once per word
// from the peer: a timer restarted that hears nothing from the peer by
// its next expiry fires then, so that no run of stalls defers recovery
// for ever. It reports whether it moved a timer.
func (q *QP) restartTimers(now clock.Time) bool {
	if q.state != stateReady || q.restarted {
		return false
	}
	if !q.sb.Restart(now) {
		return false
	}
	q.restarted = true
	return true
}

// noteHostDelay gives the scoreboard the longer of its engine's recent
// stalls (Engine.hostDelay) and its peer's (peerHold), which lengthen its
// retransmission and probe timers.
func (q *QP) noteHostDelay() {
	d := time.Duration(q.peerHold) * hostUnit
	if e := q.sch.eng; e != nil {
		d = max(d, e.hostDelay)
	}
	q.sb.NoteHostDelay(d)
}

// hostUnit is peerHold's unit (as the scoreboard's, a byte of it).
const hostUnit = 100 * time.Microsecond

// notePeerHold takes the hold time an ACK reported: the time the peer
// held the packet before acknowledging it, and the ACK waited here. One
// of stallMin or more is the peer's engine kept from running (a delayed
// ACK waits microseconds); the longest lately is kept, halved every 256
// ACKs, so that a peer that stalls does not have its ACKs called lost
// (TestPeerStallLengthensTimers).
func (q *QP) notePeerHold(hold time.Duration) {
	if q.peerHoldN++; q.peerHoldN == 0 {
		q.peerHold /= 2
	}
	if hold < stallMin {
		return
	}
	if u := uint8(min(hold/hostUnit, 255)); u > q.peerHold {
		q.peerHold = u
	}
}
