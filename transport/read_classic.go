package transport

import (
	"fmt"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/retransmit"
	"github.com/sprayfabric/spray/transport/wire"
)

// RDMA READ in the RoCE profile follows IBA's RC rules (IBA 9.7.1,
// 9.7.5.1, 9.7.5.2):
//
//   - A READ request for n response packets takes n PSNs of the
//     requester's sequence: the next request's PSN is its PSN plus n. The
//     scoreboard records the request at its PSN and the n-1 PSNs after it
//     as sent with it.
//   - The responder answers with READ RESPONSE First/Middle/Last (or Only)
//     carrying those PSNs, an AETH (ACK syndrome, MSN) on First, Last and
//     Only, and moves its expected PSN on by n. It sends the responses
//     before any acknowledgement of a later PSN (responses and
//     acknowledgements answer the requester's PSNs in order).
//   - The requester takes the responses in PSN order, each straight into
//     the READ's buffer; a response with PSN p acknowledges every PSN up to
//     p (the requests before the READ included). It sends no ACK for them.
//   - A lost response is asked for again: a response past the first one
//     missing, or an acknowledgement past it (the responder sent it after
//     the READ's responses), is an implied NAK, and the scoreboard goes
//     back to the first missing PSN (Go-Back-N), as on a timeout; the
//     resend of that PSN is a READ request for the rest of the range (the
//     address and length moved on), at that PSN.
//   - The responder executes a duplicate READ request (a PSN it has
//     passed, within the window) again: it sends the responses anew from
//     the request's PSN, reading the memory again, and changes nothing
//     else (no NAK, no expected PSN). One whose range it may not read is
//     dropped and counted in RemoteAccessErrors, a duplicate changing no
//     state.
//   - A READ outside the region or with a wrong key, at the expected PSN,
//     is a NAK remote access error at the request's PSN (sticky, as for a
//     WRITE).
//
// A READ longer than readChunk response packets is asked for by several
// requests, each answered First..Last: each takes its PSNs from the
// requester's window, which must have room for them.

// isReadResponse reports whether op is an RC READ RESPONSE opcode.
func isReadResponse(op wire.Opcode) bool {
	return op >= wire.OpReadResponseFirst && op <= wire.OpReadResponseOnly
}

// readChunk is the most response packets one RoCE READ request asks for:
// a quarter of the window, since each takes a PSN of it, so that a request
// finds room among the packets in flight.
func (q *QP) readChunk() uint32 { return uint32(max(1, q.cfg.Window/4)) }

// chunkEnd is the packet index that ends the READ request asking for
// packet k of a READ of n packets.
func (q *QP) chunkEnd(k, n uint32) uint32 {
	c := q.readChunk()
	return min((k/c+1)*c, n)
}

// readPackets is the number of response packets of a READ of length bytes
// with payloads of seg bytes: at least one (a zero-length READ has an
// empty READ RESPONSE Only).
func readPackets(length uint32, seg int) uint32 {
	return uint32(max(1, (uint64(length)+uint64(seg)-1)/uint64(seg)))
}

func (s *classicSender) readPSNs(length uint32) uint32 { return readPackets(length, s.q.seg) }

func (s *classicSender) span(m *sendMsg, off uint32) uint32 {
	if m.wr.Op != OpRead {
		return 1
	}
	k := off / uint32(s.q.seg)
	return s.q.chunkEnd(k, m.npkts) - k
}

// covered: packet k of a READ, due again, is asked for by the request
// for the first packet of its chunk not landed, which was resent before it
// (the scoreboard resends in PSN order) or is still in flight.
func (s *classicSender) covered(m *sendMsg, off uint32) (uint16, bool) {
	if m.wr.Op != OpRead {
		return 0, false
	}
	k := off / uint32(s.q.seg)
	c := s.q.readChunk()
	return s.reqEntropy, k > max(m.landed, k/c*c)
}

// encodeRead makes the packet of READ m at offset off (PSN p) the READ
// request for the rest of its chunk: address and length from off on.
func (s *classicSender) encodeRead(pk *wire.Packet, m *sendMsg, off uint32, p psn.PSN) {
	q := s.q
	seg := uint32(q.seg)
	k := off / seg
	end := min(uint64(q.chunkEnd(k, m.npkts))*uint64(seg), uint64(m.length))
	pk.BTH.Opcode = wire.OpReadRequest
	pk.BTH.AckReq = false // the responses answer it
	pk.RETH = wire.RETH{VA: m.wr.Remote.Addr + uint64(off), RKey: m.wr.Remote.RKey, Len: uint32(end) - off}
	if k == 0 && !q.resending {
		s.reads++
	}
	m.psn = p.Add(^k + 1) // p - k
	s.reqEntropy = pk.UDP.Src
}

// pendingRead returns the oldest READ whose request went out and whose
// responses have not all landed, with the number of its packets asked
// for so far, or nil.
func (s *classicSender) pendingRead() (*sendMsg, uint32) {
	q := s.q
	if s.reads == 0 {
		return nil, 0
	}
	for i := q.head; i <= q.cursor && i < q.tail; i++ {
		m := q.msg(i)
		if m.wr.Op != OpRead || m.readDone {
			continue
		}
		if i == q.cursor {
			return m, q.curOff / uint32(q.seg)
		}
		return m, m.npkts
	}
	return nil, 0
}

// firstMissing returns the PSN of the first READ response not landed, if
// a READ awaits one.
func (s *classicSender) firstMissing() (psn.PSN, bool) {
	m, sent := s.pendingRead()
	if m == nil || sent == 0 {
		return 0, false
	}
	return m.psn.Add(m.landed), true
}

// inRead reports whether p is the PSN of a response packet asked for by a
// READ outstanding.
func (s *classicSender) inRead(p psn.PSN) bool {
	q := s.q
	for i := q.head; i <= q.cursor && i < q.tail; i++ {
		m := q.msg(i)
		if m.wr.Op != OpRead {
			continue
		}
		sent := m.npkts
		if i == q.cursor {
			sent = q.curOff / uint32(q.seg)
		}
		if k := p.Diff(m.psn); sent > 0 && k >= 0 && uint32(k) < sent {
			return true
		}
	}
	return false
}

// insideRead reports whether p is a PSN a READ took for one of its
// response packets and no request of it began at: the first of each
// chunk and the first missing are where requests begin, and so what a
// NAK may name.
func (s *classicSender) insideRead(p psn.PSN) bool {
	q := s.q
	if s.reads == 0 {
		return false
	}
	c := q.readChunk()
	for i := q.head; i <= q.cursor && i < q.tail; i++ {
		m := q.msg(i)
		if m.wr.Op != OpRead || m.readDone {
			continue
		}
		sent := m.npkts
		if i == q.cursor {
			sent = q.curOff / uint32(q.seg)
		}
		if k := p.Diff(m.psn); sent > 0 && k > 0 && uint32(k) < sent {
			return uint32(k)%c != 0 && uint32(k) != m.landed
		}
	}
	return false
}

// onResponse takes a READ response. The next one expected lands in the
// READ's buffer if it fits (opcode for its place, AETH syndrome, length);
// else it is dropped and counted in RejectedReadResponses. Of those not
// expected: one before the oldest PSN outstanding (within the window) or
// of packets landed is a duplicate (Duplicates); one later in an
// outstanding READ means those before it were lost, and the scoreboard
// goes back to the first missing (OutOfOrderDrops); any other answers no
// READ outstanding (RejectedReadResponses). Guarded by
// TestReadSpoofedResponse and TestClassicReadLostResponse.
func (s *classicSender) onResponse(now clock.Time, pk *wire.Packet) {
	q := s.q
	p := psn.New(pk.BTH.PSN)
	m, sent := s.pendingRead()
	if m != nil {
		if k := p.Diff(m.psn); k >= 0 && uint32(k) == m.landed && m.landed < sent {
			if !s.fits(m, uint32(k), pk) {
				q.rareStats().RejectedReadResponses++
				return
			}
			s.land(now, m, uint32(k), p, pk)
			return
		}
	}
	d := p.Diff(q.sb.Oldest())
	switch {
	case d < 0 && d >= -int32(q.cfg.Window):
		q.stats.Duplicates++
	case d < 0 || int(d) >= q.sb.Outstanding() || !s.inRead(p):
		q.rareStats().RejectedReadResponses++
	case m != nil && sent > 0 && m.psn.Add(m.landed).Less(p):
		q.stats.OutOfOrderDrops++
		ev, res := q.sb.OnNak(now, m.psn.Add(m.landed), q.scr.events[:0])
		q.takeEvents(ev)
		q.onEvents(now)
		q.ctrl.OnAck(cc.Sample{Now: now, AckedBytes: res.AckedBytes, RTT: res.RTT})
		q.noteRTT(res.RTT)
		q.completeSends()
	default:
		q.stats.Duplicates++
	}
}

// fits reports whether pk is a well-formed response packet k of READ m:
// READ RESPONSE Last or Only where a request's range ends, First or
// Middle elsewhere; an ACK syndrome in its AETH; a full payload but for
// the READ's last packet.
func (s *classicSender) fits(m *sendMsg, k uint32, pk *wire.Packet) bool {
	q := s.q
	op := pk.BTH.Opcode
	last := k+1 == q.chunkEnd(k, m.npkts)
	if last != (op == wire.OpReadResponseLast || op == wire.OpReadResponseOnly) {
		return false
	}
	if op != wire.OpReadResponseMiddle && pk.AETH.Syndrome&0xE0 != wire.SyndromeAck {
		return false
	}
	seg := uint32(q.seg)
	return uint32(len(pk.Payload)) == min(seg, m.length-k*seg)
}

// land places response packet k (PSN p) of READ m and acknowledges every
// PSN up to p.
func (s *classicSender) land(now clock.Time, m *sendMsg, k uint32, p psn.PSN, pk *wire.Packet) {
	q := s.q
	copy(m.wr.Data[k*uint32(q.seg):], pk.Payload)
	m.landed++
	q.stats.RxPackets++
	q.stats.RxBytes += uint64(len(pk.Payload))
	if pk.IP.TOS&3 == wire.ECNCE {
		// The requester is the notification point of the responses.
		q.stats.ECNMarked++
		q.rcv.onCE(now)
	}
	if m.landed == m.npkts {
		m.readDone = true
		s.reads--
	}
	ev, res := q.sb.OnAck(now, retransmit.Ack{Cum: p.Next()}, q.scr.events[:0])
	q.takeEvents(ev)
	q.onEvents(now)
	q.ctrl.OnAck(cc.Sample{Now: now, AckedBytes: res.AckedBytes, RTT: res.RTT})
	q.noteRTT(res.RTT)
	q.completeSends()
}

// readResp is a READ the RoCE responder answers: n response packets from
// PSN psn, reading src. first is the packet the request being answered
// asked from (its response starts with First there), next the next to
// send, hi the number sent at least once.
type readResp struct {
	psn             psn.PSN
	src             []byte
	n               uint32
	first, next, hi uint32
	msn             uint32
}

// maxReadPackets bounds the response packets of one READ request: a
// quarter of the PSN space, so that PSN arithmetic holds over it.
const maxReadPackets = psn.Half / 2

// readRequest executes the READ request pk at the expected PSN p: it
// checks the region (a refusal is the sticky NAK remote access error at p,
// as for a WRITE), queues the response and moves the expected PSN past the
// response's PSNs. A request that finds Config.MaxMessages READs being
// answered is dropped (NoBuffer) and asked again by the requester.
func (r *classicReceiver) readRequest(now clock.Time, pk *wire.Packet, p psn.PSN) {
	q := r.q
	if r.cmsg.active {
		r.cmsg = classicMsg{}
		q.rareStats().BadPackets++
		r.rxErr, r.rxErrPSN, q.ackNow = wire.NakInvalidRequest, p, true // opcode sequence error
		return
	}
	n := readPackets(pk.RETH.Len, q.seg)
	if n > maxReadPackets {
		q.rareStats().BadPackets++
		r.rxErr, r.rxErrPSN, q.ackNow = wire.NakInvalidRequest, p, true
		return
	}
	src, ok := q.mrs.source(pk.RETH.RKey, pk.RETH.VA, pk.RETH.Len)
	if !ok || int64(pk.RETH.Len) > q.cfg.MaxMessageSize {
		q.rareStats().RemoteAccessErrors++
		r.rxErr, r.rxErrPSN, q.ackNow = wire.NakRemoteAccessError, p, true
		return
	}
	if len(r.resp) >= r.q.cfg.MaxMessages {
		q.rareStats().NoBuffer++
		return
	}
	q.activate()
	r.msn++
	r.resp = append(r.resp, readResp{psn: p, src: src, n: n, msn: r.msn})
	r.exp = p.Add(n)
	r.nakSeq = false
	q.stats.RxPackets++
	if pk.IP.TOS&3 == wire.ECNCE {
		q.stats.ECNMarked++
		r.onCE(now)
	}
}

// dupRead executes again the duplicate READ request pk (PSN p, before the
// expected PSN): a READ still being answered is answered again from p;
// another is read again from the region, if it may be, and answered from
// p. A duplicate whose range reaches past the expected PSN is no request
// the responder took: dropped (BadPackets).
func (r *classicReceiver) dupRead(pk *wire.Packet, p psn.PSN) {
	q := r.q
	q.stats.Duplicates++
	n := readPackets(pk.RETH.Len, q.seg)
	if n > maxReadPackets || p.Add(n).Diff(r.exp) > 0 {
		q.rareStats().BadPackets++
		return
	}
	at := len(r.resp)
	for i := range r.resp {
		e := &r.resp[i]
		k := p.Diff(e.psn)
		if k >= 0 && uint32(k) < e.n {
			if uint32(k) < e.next {
				e.first, e.next = uint32(k), uint32(k)
			}
			return
		}
		if k < 0 && at == len(r.resp) {
			at = i
		}
	}
	src, ok := q.mrs.source(pk.RETH.RKey, pk.RETH.VA, pk.RETH.Len)
	if !ok {
		q.rareStats().RemoteAccessErrors++
		return
	}
	if len(r.resp) >= r.q.cfg.MaxMessages {
		q.rareStats().NoBuffer++
		return
	}
	q.activate()
	r.resp = append(r.resp, readResp{})
	copy(r.resp[at+1:], r.resp[at:])
	r.resp[at] = readResp{psn: p, src: src, n: n, hi: n, msn: r.msn}
}

func (r *classicReceiver) responding() bool { return len(r.resp) > 0 }

// trimmable: the READs answered are gone, their slice not.
func (r *classicReceiver) trimmable() bool { return len(r.resp) == 0 && cap(r.resp) > 0 }

func (r *classicReceiver) trim() {
	if len(r.resp) == 0 {
		r.resp = nil
	}
}

// pollResponse encodes the next READ response packet.
func (r *classicReceiver) pollResponse(now clock.Time, buf []byte) (int, uint16, bool, error) {
	if len(r.resp) == 0 {
		return 0, 0, false, nil
	}
	q := r.q
	e := &r.resp[0]
	k := e.next
	lo := min(uint64(k)*uint64(q.seg), uint64(len(e.src)))
	hi := min(lo+uint64(q.seg), uint64(len(e.src)))
	entropy := q.nextEntropy(now)
	pk := &q.scr.pkt
	q.headers(pk, entropy)
	if q.cfg.ECN {
		pk.IP.TOS = wire.ECNECT0
	}
	pk.BTH.PSN = uint32(e.psn.Add(k))
	pk.BTH.Opcode = readResponseOpcode(k == e.first, k+1 == e.n)
	pk.AETH = wire.AETH{Syndrome: wire.SyndromeAck | 0x1F, MSN: e.msn & psn.Mask}
	n, err := wire.Encode(buf, pk, e.src[lo:hi])
	if err != nil {
		return 0, 0, false, fmt.Errorf("transport: encoding READ response: %w", err)
	}
	resent := k < e.hi
	e.next++
	e.hi = max(e.hi, e.next)
	if e.next == e.n {
		copy(r.resp, r.resp[1:])
		r.resp[len(r.resp)-1] = readResp{}
		r.resp = r.resp[:len(r.resp)-1]
	}
	return n, entropy, resent, nil
}
