package transport

import (
	"fmt"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/retransmit"
	"github.com/sprayfabric/spray/transport/wire"
)

// classicSender is the RoCE profile's requester: RC SEND, WRITE and READ
// request opcodes (first, middle, last, only), an ACK request every
// AckEvery packets and on a message's last, and ACKNOWLEDGE packets that
// are cumulative ACKs, NAK sequence errors (the scoreboard goes back to
// the PSN named) or fatal NAKs, and READ responses, which acknowledge too
// (read_classic.go).
type classicSender struct {
	q *QP
	// reqEntropy is the entropy of the latest READ request sent; reads
	// counts the READs sent whose responses have not all landed.
	reqEntropy uint16
	reads      int
}

func (s *classicSender) takes(op wire.Opcode) bool {
	return op == wire.OpAcknowledge || isReadResponse(op)
}

func (s *classicSender) encode(_ clock.Time, pk *wire.Packet, m *sendMsg, off uint32, first, last bool, p psn.PSN) {
	q := s.q
	write := m.wr.Op == OpWrite || m.wr.Op == OpWriteImm
	imm := m.wr.Op == OpSendImm || m.wr.Op == OpWriteImm
	pk.BTH.AckReq = last || (uint32(p)-uint32(q.startPSN))%uint32(q.cfg.AckEvery) == 0
	if m.wr.Op == OpRead {
		s.encodeRead(pk, m, off, p)
		return
	}
	pk.BTH.Opcode = classicOpcode(write, imm, first, last)
}

func readResponseOpcode(first, last bool) wire.Opcode {
	switch {
	case first && last:
		return wire.OpReadResponseOnly
	case first:
		return wire.OpReadResponseFirst
	case last:
		return wire.OpReadResponseLast
	}
	return wire.OpReadResponseMiddle
}

func classicOpcode(write, imm, first, last bool) wire.Opcode {
	op := wire.OpSendFirst
	if write {
		op = wire.OpWriteFirst
	}
	switch {
	case first && last:
		op += wire.OpSendOnly - wire.OpSendFirst
	case last:
		op += wire.OpSendLast - wire.OpSendFirst
	case !first:
		op += wire.OpSendMiddle - wire.OpSendFirst
	}
	if imm && last {
		op++ // the *Imm opcode follows its plain twin
	}
	return op
}

func (s *classicSender) resent(psn.PSN, uint64) {}

func (s *classicSender) pollCopy(clock.Time, []byte, float64) (int, error) { return 0, nil }

// onCNP takes a CNP while the QP has data in flight or sent some within
// a retransmission timeout: a CNP answers a CE-marked data packet, and may
// arrive after the ACK of that packet. Guarded by TestSpoofCNP.
func (s *classicSender) onCNP(now clock.Time) bool {
	q := s.q
	if q.sb.Outstanding() == 0 && (q.stats.TxPackets == 0 || now.Sub(q.lastSendAt) > q.sb.RTO()) {
		return false
	}
	q.stats.CNPsReceived++
	q.ctrl.OnCNP(now)
	return true
}

// valid reports whether the ACKNOWLEDGE names PSNs the QP sent (inWindow):
// an ACK's PSN (the last accepted) and a sequence NAK's (the expected one)
// up to the next PSN to send; a fatal NAK's (the refused request) only an
// outstanding PSN, at or after the oldest unacknowledged one, and not one
// a READ request took for a response packet that no request began at.
// Guarded by TestSpoofClassicAck and TestSpoofClassicNakInRead.
func (s *classicSender) valid(p psn.PSN, syn uint8) bool {
	q := s.q
	una := q.sb.Oldest()
	out := q.sb.Next().Diff(una)
	switch {
	case syn == wire.NakPSNSequenceError:
		return inWindow(p, una, q.cfg.Window, out)
	case wire.IsNak(syn), syn&0xE0 == wire.SyndromeRNR:
		return inWindow(p, una, 0, out-1) && !s.insideRead(p)
	}
	return inWindow(p.Next(), una, q.cfg.Window, out)
}

// onAck processes an ACKNOWLEDGE (ACK or NAK), or a READ response
// (onResponse). One that names a PSN the QP did not send, or a NAK that
// names no outstanding request, is dropped and counted
// (QPStats.RejectedAcks, RejectedNaks) before it touches anything.
func (s *classicSender) onAck(now clock.Time, pk *wire.Packet) {
	q := s.q
	if isReadResponse(pk.BTH.Opcode) {
		s.onResponse(now, pk)
		return
	}
	p := psn.New(pk.BTH.PSN)
	syn := pk.AETH.Syndrome
	rnr := syn&0xE0 == wire.SyndromeRNR
	if syn&0xE0 == wire.SyndromeAck || wire.IsNak(syn) || rnr {
		if !s.valid(p, syn) {
			if wire.IsNak(syn) || rnr {
				q.rareStats().RejectedNaks++
				if !rnr {
					q.foreign = foreignNak{syn: syn, at: uint32(p), psn: true}
				}
			} else {
				q.rareStats().RejectedAcks++
			}
			return
		}
	}
	q.stats.AcksReceived++
	// The responder sends a READ's responses before it acknowledges a
	// later PSN: an acknowledgement past a READ's first missing response
	// means the responses from there on were lost, and the READ is asked
	// for again from there (IBA's implied NAK).
	f, gap := s.firstMissing()
	var res retransmit.AckResult
	var ev []retransmit.Event
	switch {
	case syn == wire.NakPSNSequenceError:
		q.stats.NaksReceived++
		if gap && f.Less(p) {
			p = f
		}
		ev, res = q.sb.OnNak(now, p, q.scr.events[:0])
		q.takeEvents(ev)
	case wire.IsNak(syn):
		// Everything before p was accepted; p was refused.
		q.stats.NaksReceived++
		cum := p
		if gap && f.Less(cum) {
			cum = f
		}
		ev, _ := q.sb.OnAck(now, retransmit.Ack{Cum: cum}, q.scr.events[:0])
		q.takeEvents(ev)
		q.onEvents(now)
		q.completeSends()
		q.fail(nakError(syn, fmt.Sprintf("PSN %d", p)))
		return
	case rnr:
		// The responder refused p for lack of room and took everything
		// before it: it is alive, so the timeouts until it takes p do
		// not count against MaxRetries (IBA's rnr_retry 7: unlimited);
		// the retransmission timer brings p again.
		q.rareStats().RNRNaksReceived++
		cum := p
		if gap && f.Less(cum) {
			cum = f
		}
		ev, res = q.sb.OnAck(now, retransmit.Ack{Cum: cum}, q.scr.events[:0])
		q.takeEvents(ev)
		q.sb.PeerAlive()
	case syn&0xE0 == wire.SyndromeAck && gap && f.LessEq(p):
		ev, res = q.sb.OnNak(now, f, q.scr.events[:0])
		q.takeEvents(ev)
	case syn&0xE0 == wire.SyndromeAck:
		ev, res = q.sb.OnAck(now, retransmit.Ack{Cum: p.Next()}, q.scr.events[:0])
		q.takeEvents(ev)
	default:
		q.rareStats().BadPackets++ // a reserved syndrome
		return
	}
	q.onEvents(now)
	q.ctrl.OnAck(cc.Sample{Now: now, AckedBytes: res.AckedBytes, RTT: res.RTT})
	q.noteRTT(res.RTT)
	q.completeSends()
}
