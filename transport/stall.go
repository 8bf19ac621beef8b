package transport

import "github.com/sprayfabric/spray/clock"

// restartTimers restarts from now the QP's loss timers that came due
// while its engine was not running (Scoreboard.Restart), once per word
// from the peer: a timer restarted that hears nothing from the peer by
// its next expiry fires then, so that no run of stalls defers recovery
// for ever. It reports whether it moved a timer.
func (q *QP) restartTimers(now clock.Time) bool {
	if q.state != stateReady || q.restarted && q.restartAt >= q.heardAt {
		return false
	}
	if !q.sb.Restart(now) {
		return false
	}
	q.restarted, q.restartAt = true, now
	return true
}

// noteHostDelay gives the scoreboard its engine's recent stalls
// (Engine.hostDelay), which lengthen its retransmission and probe timers.
func (q *QP) noteHostDelay() {
	if e := q.sch.eng; e != nil {
		q.sb.NoteHostDelay(e.hostDelay)
	}
}
