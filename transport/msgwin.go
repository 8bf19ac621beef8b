package transport

import (
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/transport/wire"
)

// msgWin is a Spray QP's end-to-end flow control in messages, as IBA's
// AETH credit count and TCP's receive window: the receiver's plain ACKs
// carry its message limit (wire.AckMsgLimit), the ID of the first message
// its assembler has no room for (Config.MaxMessages past the oldest it has
// not handed to the application), and the sender starts no message at or
// beyond it. A reader that falls behind then holds its sender back instead
// of making it send packets that are refused (NoBuffer) and resent: a host
// too busy to read loses nothing (TestSlowReaderNoResends).
//
// When the reader makes room for a quarter of the window since the limit
// last advertised, the receiver sends an ACK at once (a window update). A
// sender held with nothing in flight, whose update may have been lost,
// sends the next message anyway once a retransmission timeout has passed
// since it last heard from its peer (TCP's persist probe): the receiver
// takes it if it has room, or refuses it with an RNR NAK, and the
// retransmission timer brings it again, as before the limit.
//
// A peer that sends no limit (the RoCE profile, an older peer) holds
// nothing back; a peer that takes none (QPInfo.NoMsgLimit: an older
// build, which drops such an ACK as a bad header) is sent none.
type msgWin struct {
	// lim is the peer's limit, ok whether one came; probe lets the next
	// message go past it (persist).
	lim   uint32
	ok    bool
	probe bool
	// adv is the limit this side's receiver last advertised, advOK
	// whether it advertised one; update that the ACK due is a window
	// update alone, with no data packet to report since the last ACK.
	advOK  bool
	update bool
	adv    uint32
	// off: the peer takes no limit (QPInfo.NoMsgLimit); none is sent.
	off bool
}

// winHolds reports whether the peer's message limit holds back the next
// new packet: the first of a message at or beyond the limit.
func (q *QP) winHolds() bool {
	w := &q.mwin
	return w.ok && !w.probe && q.curOff == 0 && int32(q.msg(q.cursor).id-w.lim) >= 0
}

// winProbeAt returns when a sender held by the limit with nothing in
// flight sends past it (persist), or clock.Never.
func (q *QP) winProbeAt() clock.Time {
	if !q.mwin.ok || q.cursor >= q.tail || q.sb.Outstanding() > 0 || !q.winHolds() {
		return clock.Never
	}
	return q.heardAt.Add(q.sb.RTO())
}

// winTimeout runs the persist timer at now.
func (q *QP) winTimeout(now clock.Time) {
	if now >= q.winProbeAt() {
		q.mwin.probe = true
	}
}

// winSent notes that a new packet left: a persist probe is spent.
func (q *QP) winSent() { q.mwin.probe = false }

// winAck takes the message limit of a plain spray ACK; a lower one than
// known (an ACK overtaken by a later one) changes nothing.
func (q *QP) winAck(a *wire.Ack) {
	w := &q.mwin
	if a.Flags&wire.AckMsgLimit == 0 || a.Syndrome&0xE0 != wire.SyndromeAck {
		return
	}
	if !w.ok || int32(a.MsgID-w.lim) > 0 {
		w.lim, w.ok = a.MsgID, true
	}
}

// winFill puts the receiver's message limit, lim, into a plain ACK,
// unless the peer takes none (TestNoMsgLimitPeer).
func (q *QP) winFill(a *wire.Ack, lim uint32) {
	if a.Syndrome != wire.SyndromeAck || q.mwin.off {
		return
	}
	a.Flags |= wire.AckMsgLimit
	a.MsgID = lim
	q.mwin.adv, q.mwin.advOK = lim, true
}

// winUpdate is told the receiver's limit, lim, after the reader made
// room: once it passed the limit last advertised by a quarter of the
// window, an ACK is due at once.
func (q *QP) winUpdate(lim uint32) {
	w := &q.mwin
	if !w.advOK || int32(lim-w.adv) < int32(max(q.cfg.MaxMessages/4, 1)) {
		return
	}
	if q.ackPending == 0 {
		q.ackPending, q.ackDue, w.update = 1, q.lastNow, true
	}
}

// winUpdateOnly reports whether the ACK being filled is a window update
// alone: it then echoes no packet, whose round trip would hold the time
// the reader took (noteData ends the update with a packet to report).
func (q *QP) winUpdateOnly() bool {
	u := q.mwin.update
	q.mwin.update = false
	return u
}
