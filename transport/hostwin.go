package transport

import "github.com/sprayfabric/spray/clock"

// The host window (Config.HostWindow) bounds the data bytes an engine
// keeps in flight over all its QPs. The engine keeps the sum of its QPs'
// flight (the scoreboard's: sent, neither acknowledged nor found lost),
// recounted for a QP after each change it drives: a packet handled, a
// packet sent, a timer run, the QP destroyed. A QP whose next new packet
// does not fit stops output at its turn: it stays at the head of the
// ready list, so the round robin resumes where it stopped once an
// acknowledgement or a loss found makes room, and the QPs behind it wait
// with it (TestHostWindowBounds). Resends, READ responses and control
// frames go before that check. With nothing in flight a packet always
// goes, so a bound below a packet still sends one at a time.
//
// The host rate (Config.HostRate) holds new data the same way, on a
// pacer of the engine's own that every new packet of every QP draws on;
// the engine's deadline includes when the pacer lets the next one go
// (TestHostRateBounds).

// hostFlight recounts q's flight into the engine's total.
func (e *Engine) hostFlight(q *QP) {
	if e.cfg.HostWindow == 0 {
		return
	}
	b := 0
	if q.state == stateReady && q.sch.eng == e {
		_, b = q.sb.InFlight()
	}
	e.inflight += b - q.hostIn
	q.hostIn = b
}

// hostHold reports whether the host rate or the host window holds q's
// next new packet at now, and notes it for output.
func (q *QP) hostHold(now clock.Time) bool {
	e := q.sch.eng
	if e != nil && q.cfg.HostRate > 0 {
		if t := e.hostPace.Next(now, q.cfg.HostRate); t > now {
			e.hostHeld, e.hostWake = true, t
			return true
		}
	}
	if e == nil || q.cfg.HostWindow == 0 || e.inflight == 0 || e.inflight+q.cfg.MTU <= q.cfg.HostWindow { // the largest frame: the flight counts frames
		return false
	}
	e.hostHeld = true
	return true
}

// hostFull reports whether the new data packet about to be sent may leave
// the host window no room for another full frame (both counted at MTU): the QPs then wait for
// acknowledgements, and with many QPs each holds fewer than AckEvery
// packets in flight, which its receiver would hold for AckDelay; so the
// packet asks for an ACK at once (BTH AckReq), as a QP's own full window
// does (spraySender.windowFull). Guarded by TestHostWindowAsksAck.
func (q *QP) hostFull() bool {
	e := q.sch.eng
	if e == nil || q.cfg.HostWindow == 0 || q.resending {
		return false
	}
	return e.inflight+2*q.cfg.MTU > q.cfg.HostWindow
}
