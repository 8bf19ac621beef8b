package transport

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/retransmit"
	"github.com/sprayfabric/spray/transport/wire"
)

// spraySender is the Spray profile's sender: spray data packets (message
// ID, offset and send time in every packet, so that each can be placed on
// its own), the selective acknowledgements that drive the scoreboard, the
// path policy and the controller, and the second copy of the oldest packet
// in timeout backoff.
type spraySender struct {
	q *QP
	// reqPSN is the latest new data packet sent with AckReq, intPSN the
	// latest with an INT region (reqSet, intSet: there was one).
	reqPSN psn.PSN
	reqSet bool
	intPSN psn.PSN
	intSet bool
	// copyDue: a second copy of the oldest packet, resent in RTO backoff,
	// is due on another path (see pollCopy).
	copyDue bool
	copyPSN psn.PSN
	copyTag uint64
}

func (s *spraySender) takes(op wire.Opcode) bool { return op == wire.OpSprayAck }

// A spray READ request is one packet and one PSN; its response is a
// message of the responder's own send queue and PSN sequence.
func (s *spraySender) readPSNs(uint32) uint32                  { return 1 }
func (s *spraySender) span(*sendMsg, uint32) uint32            { return 1 }
func (s *spraySender) covered(*sendMsg, uint32) (uint16, bool) { return 0, false }

// encode sets the spray data header of the packet of message m at off.
func (s *spraySender) encode(now clock.Time, pk *wire.Packet, m *sendMsg, off uint32, _, last bool, p psn.PSN) {
	q := s.q
	pk.BTH.AckReq = last || s.windowFull(p) || q.hostFull()
	if pk.BTH.AckReq && !q.resending {
		s.reqPSN, s.reqSet = p, true
	}
	pk.BTH.Opcode = wire.OpSprayData
	pk.Data = wire.Data{MsgID: m.id, Offset: off, MsgLen: m.length, TxTime: uint64(now), Credit: q.creditBit()}
	switch m.wr.Op {
	case OpSend:
		pk.Data.Kind = wire.KindSend
	case OpSendImm:
		pk.Data.Kind = wire.KindSendImm
	case OpWrite:
		pk.Data.Kind = wire.KindWrite
	case OpWriteImm:
		pk.Data.Kind = wire.KindWriteImm
	case OpRead:
		pk.Data.Kind, pk.Data.MsgLen = wire.KindReadReq, 0 // RETH has the length
	case opReadResp:
		pk.Data.Kind = wire.KindReadResp // ImmDt: the request's MsgID
	}
	if q.cfg.INTHops > 0 && s.wantINT(p, pk.BTH.AckReq) {
		pk.Data.Flags = wire.FlagINT
		pk.Data.INTMax = uint8(q.cfg.INTHops)
	}
}

// windowFull reports whether the data packet p about to be sent leaves no
// room in the controller's window for another, in a window too small for
// the receiver's AckEvery to keep acknowledgements coming (less than
// 2*AckEvery packets): the sender then waits for an ACK, so the packet
// asks the receiver to acknowledge at once (BTH AckReq) rather than after
// its delayed-ACK timer, which would pace a window of a packet or two at
// one window per timer. A window that holds AckEvery full frames asks at
// most once per AckEvery new packets: the packets in flight sent since the
// latest that asked are then at least AckEvery (acknowledged by count) or
// include it (acknowledged on arrival). Resends ask too. Guarded by
// TestSprayAcksCoalesce and TestSprayDelayedAckNoResends.
func (s *spraySender) windowFull(p psn.PSN) bool {
	q := s.q
	w := q.ctrl.Window()
	if w <= 0 || w >= 2*q.cfg.AckEvery*q.seg {
		return false
	}
	_, b := q.sb.InFlight()
	if b+2*q.seg <= w {
		return false
	}
	if !q.resending && s.reqSet && w >= (q.cfg.AckEvery-1)*q.cfg.MTU+q.seg && p.Diff(s.reqPSN) < int32(q.cfg.AckEvery) {
		return false // the window holds AckEvery frames; one of the last AckEvery asked
	}
	return true
}

// wantINT reports whether data packet p (asking for an ACK or not) carries
// an INT region (Config.INTHops), and notes it. An ACK echoes the records
// of one packet (the latest with records since the previous ACK), so with
// AckEvery above 1 only the packets likely to be echoed carry the region:
// those that ask for an ACK, resends, and a new packet once AckEvery have
// gone without one; the others are shorter by the region, with the same
// payload. With AckEvery 1 every packet carries it. Guarded by
// TestSprayINTThinning.
func (s *spraySender) wantINT(p psn.PSN, ackReq bool) bool {
	q := s.q
	if q.cfg.AckEvery <= 1 || q.resending {
		return true
	}
	if s.intSet && !ackReq && p.Diff(s.intPSN) < int32(q.cfg.AckEvery) {
		return false
	}
	s.intPSN, s.intSet = p, true
	return true
}

// resent is told of the resend of p (tag): the oldest packet resent in
// timeout backoff gets a second copy on another path (pollCopy).
func (s *spraySender) resent(p psn.PSN, tag uint64) {
	q := s.q
	if q.inRTO && p == q.sb.Oldest() {
		s.copyDue, s.copyPSN, s.copyTag = true, p, tag
	}
}

// pollCopy encodes a second copy of the oldest unacknowledged packet, just
// resent in retransmission timeout backoff on the path with the freshest
// proof of delivery, on the next path of the spray round instead. After a
// link failure that proof may predate it, and the acknowledgements of a
// QP that only receives go on paths it knows nothing about: each timeout
// then gives the packet and its acknowledgement two chances instead of
// one, before MaxRetries timeouts fail the QP. The scoreboard does not
// see the copy (its send time is the first copy's); it counts in
// Retransmits. Nothing is sent when the packet was acknowledged since.
func (s *spraySender) pollCopy(now clock.Time, buf []byte, rate float64) (int, error) {
	if !s.copyDue {
		return 0, nil
	}
	q := s.q
	s.copyDue = false
	if s.copyPSN != q.sb.Oldest() || q.sb.Outstanding() == 0 {
		return 0, nil
	}
	m := q.msgTag(s.copyTag)
	q.resending = true
	rec := q.rtoRecovery
	if q.cred != nil {
		q.cred.cs.bit = 0 // a copy takes no credit: the receiver books it as it arrives
	}
	q.inRTO, q.rtoRecovery = false, false // the next path of the round, not the freshest again
	n, entropy, err := q.encodeData(now, buf, m, uint32(s.copyTag), s.copyPSN)
	q.inRTO, q.rtoRecovery, q.resending = true, rec, false
	if err != nil {
		return 0, err
	}
	q.sent(now, n, rate)
	q.stats.Retransmits++
	q.pstats.onSend(entropy, n, true)
	return n, nil
}

// onCNP: a spray receiver echoes CE marks in its ACKs and sends no CNP.
func (s *spraySender) onCNP(clock.Time) bool { return false }

// valid reports whether every PSN ack names lies among those the QP sent
// and has not long had acknowledged (inWindow): the cumulative PSN, the
// echoed PSN and every SACK bit. Guarded by TestSpoofSprayAck.
func (s *spraySender) valid(a *wire.Ack) bool {
	q := s.q
	una, w := q.sb.Oldest(), q.cfg.Window
	out := q.sb.Next().Diff(una)
	if !inWindow(psn.New(a.CumPSN), una, w, out) || !inWindow(psn.New(a.AckedPSN), una, w, out-1) {
		return false
	}
	base := psn.New(a.SackBase)
	for i, word := range a.Sack[:min(int(a.SackWords), len(a.Sack))] {
		for ; word != 0; word &= word - 1 {
			p := base.Add(uint32(64*i + bits.TrailingZeros64(word)))
			if !inWindow(p, una, w, out-1) {
				return false
			}
		}
	}
	return true
}

// names reports whether a NAK for message id with cumulative PSN cum
// refers to an outstanding request: a message the sender began and has not
// completed, and a cumulative PSN not before the oldest unacknowledged
// PSN (the responder's cumulative PSN stops at the refused packet, which
// the sender cannot have seen acknowledged). Guarded by TestSpoofSprayNak.
func (s *spraySender) names(id uint32, cum psn.PSN) bool {
	q := s.q
	if cum.Diff(q.sb.Oldest()) < 0 {
		return false
	}
	end := q.cursor
	if q.curOff > 0 {
		end++ // the message being segmented
	}
	for i := q.head; i < end; i++ {
		if q.msg(i).id == id {
			return true
		}
	}
	return false
}

// onAck processes a spray acknowledgement. One that names a PSN the QP did
// not send, or a NAK that names no outstanding request, is dropped and
// counted (QPStats.RejectedAcks, RejectedNaks) before it touches the
// scoreboard, the paths, the controller or the QP's state.
func (s *spraySender) onAck(now clock.Time, pk *wire.Packet) {
	q := s.q
	a := &pk.Ack
	if !s.valid(a) {
		q.rareStats().RejectedAcks++
		return
	}
	rnr := a.Syndrome&0xE0 == wire.SyndromeRNR
	trim := a.Syndrome == wire.NakPSNSequenceError
	if (wire.IsNak(a.Syndrome) || rnr) && !s.names(a.MsgID, psn.New(a.CumPSN)) {
		q.rareStats().RejectedNaks++
		if !rnr {
			q.foreign = foreignNak{syn: a.Syndrome, at: a.MsgID}
		}
		return
	}
	q.stats.AcksReceived++
	q.creditAck(now, a)
	q.winAck(a)
	if rnr {
		// The receiver refused data for lack of room: it is alive, so
		// the timeouts until it takes more do not count against
		// MaxRetries (IBA's rnr_retry 7: unlimited). The refused
		// packets come again on the retransmission timer.
		q.rareStats().RNRNaksReceived++
		q.sb.PeerAlive()
	}
	ev, res := q.sb.OnAck(now, retransmit.Ack{
		Cum: psn.New(a.CumPSN), SackBase: psn.New(a.SackBase), Sack: a.Sack[:a.SackWords],
		Acked: psn.New(a.AckedPSN), HasAcked: !trim, AckedSentAt: clock.Time(a.EchoTime),
	}, q.scr.events[:0])
	if trim {
		// A switch trimmed AckedPSN (the receiver's onTrimmed): resend it
		// alone, now. The NAK carries no sample of a delivery.
		var ok bool
		n := len(ev)
		if ev, ok = q.sb.OnTrim(now, psn.New(a.AckedPSN), clock.Time(a.EchoTime), ev); ok {
			q.stats.TrimNaksReceived++
			q.trimDue = true
		}
		q.takeEvents(ev)
		if res.Progress {
			q.inRTO = false
		}
		q.onTrimEvents(now, n)
		q.onEvents(now)
		if len(pk.INT) > 0 || res.AckedBytes > 0 {
			// The last arrival's records: the controller's view of the
			// queues, and what the NAK's cumulative PSN and SACK
			// acknowledged (under a stream of trims, most of what is
			// delivered: TestTrimNakAcksBytes); no RTT to sample.
			q.ctrl.OnAck(cc.Sample{Now: now, AckedBytes: res.AckedBytes, INT: decodeHops(pk.INT, q.scr.hops[:0])})
		}
		q.completeSends()
		return
	}
	q.takeEvents(ev)
	if res.Progress {
		q.inRTO = false
		if q.rtoRecovery && !q.sb.Oldest().Less(q.rtoEnd) {
			q.rtoRecovery = false
		}
	}
	q.onEvents(now)
	q.scorePaths(now, psn.New(a.AckedPSN))
	// The echoed timestamp gives the full round trip of the acknowledged
	// packet (cc.Sample.RTT includes the receiver's hold time); paths are
	// scored on the fabric part alone.
	// The hold adds the ACK's own wait at this host, from its arrival
	// stamp to now: both are endpoint delay (TestHoldCountsRingWait).
	rtt, hold := res.RTT, time.Duration(a.HoldNs&wire.HoldMask)+now.Sub(q.rxAt)
	if a.EchoTime != 0 {
		if r := now.Sub(clock.Time(a.EchoTime)); r > 0 {
			rtt = r
		}
	}
	hops := decodeHops(pk.INT, q.scr.hops[:0])
	q.ctrl.OnAck(cc.Sample{Now: now, AckedBytes: res.AckedBytes, RTT: rtt, HoldTime: hold,
		HostHold: a.HoldNs&wire.HoldFromArrival != 0, ECNCount: int(a.ECNCount), INT: hops, Entropy: a.Entropy})
	q.noteRTT(rtt - hold) // the fabric's part, as the paths see it
	q.notePeerHold(hold)
	if a.Entropy != 0 {
		if len(hops) > 0 {
			qd := intQueueDelay(hops)
			q.sb.NoteQueueDelay(qd)
			q.sb.NoteFabricQueue(q.scr.noteFabricQueue(now, qd))
			q.noteINT(a.Entropy, qd)
			if obs, ok := q.paths.(multipath.INTObserver); ok {
				obs.OnINT(now, a.Entropy, qd)
			}
			sig := intPathSignature(hops)
			q.sb.SetPath(a.Entropy, sig)
			if obs, ok := q.paths.(multipath.PathObserver); ok {
				obs.OnPath(now, a.Entropy, sig)
			}
		}
		q.paths.OnAck(now, a.Entropy, max(rtt-hold, 0), a.ECNCount > 0)
	}
	q.completeSends()
	if wire.IsNak(a.Syndrome) {
		q.stats.NaksReceived++
		q.fail(nakError(a.Syndrome, fmt.Sprintf("message %d", a.MsgID)))
	}
}

// decodeHops appends to dst the hop records of an ACK's INT region (whole
// records only, at most wire.MaxINTHops), as the controllers take them.
func decodeHops(records []byte, dst []cc.Hop) []cc.Hop {
	for i := range min(len(records)/wire.HopLen, wire.MaxINTHops) {
		h := wire.HopAt(records, i)
		dst = append(dst, cc.Hop{Switch: h.Switch, Port: h.Port, RateMbps: h.RateMbps, TS: h.TS, QLen: h.QLen, TxBytes: h.TxBytes})
	}
	return dst
}

// intQueueDelay is the queueing delay along a path: the sum over the hop
// records of each queue's bytes drained at its link's rate.
func intQueueDelay(hops []cc.Hop) time.Duration {
	var d time.Duration
	for _, h := range hops {
		if h.RateMbps > 0 {
			d += time.Duration(uint64(h.QLen) * 8000 / uint64(h.RateMbps))
		}
	}
	return d
}

// intPathSignature names the path a packet took by the switches and egress
// ports in its INT records (FNV-1a over them; never 0).
func intPathSignature(hops []cc.Hop) uint64 {
	h := uint64(14695981039346656037)
	for _, hop := range hops {
		h = (h ^ uint64(hop.Switch)<<16 ^ uint64(hop.Port)) * 1099511628211
	}
	return max(h, 1)
}
