package transport

import (
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// classicReceiver is the RoCE profile's responder: it takes data packets
// in PSN order only, assembles one message at a time from the RC SEND and
// WRITE opcodes, answers a gap with one NAK sequence error, and sends
// rate-limited CNPs for CE-marked packets (DCQCN's notification point).
type classicReceiver struct {
	q      *QP
	exp    psn.PSN // next expected PSN
	nakSeq bool    // a sequence NAK was sent for exp: no second one until exp arrives
	nakDue bool    // a sequence NAK is due
	rnrDue bool    // exp was refused for lack of room: an RNR NAK is due
	cmsg   classicMsg
	msn    uint32
	// resp holds the READs being answered, in PSN order (read_classic.go).
	resp []readResp

	rxErr    uint8   // sticky responder error: NAK syndrome answered to every packet
	rxErrPSN psn.PSN // the PSN that caused it

	cnp cc.CNPGenerator
}

// classicMsg is the message a Go-Back-N receiver is assembling.
type classicMsg struct {
	active bool
	write  bool
	posted bool // buf is the head posted receive buffer
	buf    []byte
	va     uint64
	rkey   uint32
	length uint32
	off    uint32
}

func (r *classicReceiver) connect(peer QPInfo) error {
	r.exp = psn.New(peer.PSN)
	return nil
}

func (r *classicReceiver) takes(op wire.Opcode) bool {
	return op <= wire.OpWriteOnlyImm || op == wire.OpReadRequest
}

func (r *classicReceiver) held() uint64 { return 0 }

// deliver has nothing to do: a message completes into the receive queue or
// its first packet is refused.
func (r *classicReceiver) deliver() {}

// posted: a message without a posted buffer was dropped at its first
// packet, and the sender's retransmission brings it again.
func (r *classicReceiver) posted() {}

// synLocalLength is place's answer to a SEND longer than its posted
// buffer: a NAK invalid request that is not a bad packet.
const synLocalLength = 0xFF

// onCE owes the sender a CNP, at most one per the generator's interval.
func (r *classicReceiver) onCE(now clock.Time) {
	if r.cnp.OnCE(now) {
		r.q.cnpDue = true
	}
}

// recv is the Go-Back-N responder: it takes packets in PSN order only.
func (r *classicReceiver) recv(now clock.Time, pk *wire.Packet) {
	q := r.q
	if r.rxErr != 0 {
		q.ackNow = true
		return
	}
	p := psn.New(pk.BTH.PSN)
	d := p.Diff(r.exp)
	if w := int32(q.cfg.Window); d >= w || d < -w {
		// No sender has that PSN outstanding or recently acknowledged:
		// dropped unanswered (TestSpoofClassicData).
		q.rareStats().OutOfWindow++
		return
	}
	if d < 0 {
		if pk.BTH.Opcode == wire.OpReadRequest {
			r.dupRead(pk, p)
			return
		}
		q.stats.Duplicates++
		q.ackNow = true
		return
	}
	if d > 0 {
		q.stats.OutOfOrderDrops++
		if !r.nakSeq {
			r.nakSeq, r.nakDue, q.ackNow = true, true, true
		}
		return
	}
	op := pk.BTH.Opcode
	if op == wire.OpReadRequest {
		r.readRequest(now, pk, p)
		return
	}
	first := op == wire.OpSendFirst || op == wire.OpSendOnly || op == wire.OpSendOnlyImm ||
		op == wire.OpWriteFirst || op == wire.OpWriteOnly || op == wire.OpWriteOnlyImm
	if first && q.recvFull() || first && q.rq != nil && q.rq.on && q.rq.n == 0 && (op == wire.OpSendFirst || op == wire.OpSendOnly || op == wire.OpSendOnlyImm) {
		// No room to complete another message, or no receive buffer
		// posted: dropped and answered with an RNR NAK (IBA's receiver
		// not ready); the sender's timer brings it again
		// (TestSlowReaderOutlastsRetries).
		q.rareStats().NoBuffer++
		r.rnrDue, q.ackNow = true, true
		return
	}
	if syn := r.place(op, pk); syn != 0 {
		switch syn {
		case wire.NakInvalidRequest:
			q.rareStats().BadPackets++
		case synLocalLength:
			syn = wire.NakInvalidRequest
		}
		r.rxErr, r.rxErrPSN, q.ackNow = syn, p, true
		return
	}
	r.accept(now, pk)
}

// accept takes the in-order packet pk, placed: it moves the expected PSN
// on and owes its acknowledgement.
func (r *classicReceiver) accept(now clock.Time, pk *wire.Packet) {
	q := r.q
	r.nakSeq = false
	r.exp = r.exp.Next()
	q.stats.RxPackets++
	q.stats.RxBytes += uint64(len(pk.Payload))
	q.noteData(now, pk)
	if pk.BTH.AckReq {
		q.ackNow = true
	}
}

// place applies one in-order packet and returns a NAK syndrome, or 0.
func (r *classicReceiver) place(op wire.Opcode, pk *wire.Packet) uint8 {
	q := r.q
	c := &r.cmsg
	var write, first, last, imm bool
	switch op {
	case wire.OpSendFirst:
		first = true
	case wire.OpSendMiddle:
	case wire.OpSendLast:
		last = true
	case wire.OpSendLastImm:
		last, imm = true, true
	case wire.OpSendOnly:
		first, last = true, true
	case wire.OpSendOnlyImm:
		first, last, imm = true, true, true
	case wire.OpWriteFirst:
		write, first = true, true
	case wire.OpWriteMiddle:
		write = true
	case wire.OpWriteLast:
		write, last = true, true
	case wire.OpWriteLastImm:
		write, last, imm = true, true, true
	case wire.OpWriteOnly:
		write, first, last = true, true, true
	case wire.OpWriteOnlyImm:
		write, first, last, imm = true, true, true, true
	default:
		return wire.NakInvalidRequest
	}
	if first == c.active || (!first && c.write != write) {
		*c = classicMsg{}
		return wire.NakInvalidRequest // opcode sequence error
	}
	if first {
		*c = classicMsg{active: true, write: write}
		if write {
			c.va, c.rkey, c.length = pk.RETH.VA, pk.RETH.RKey, pk.RETH.Len
		} else if q.rq != nil && q.rq.on {
			c.posted, c.buf = true, q.rq.at(0).buf
		}
	}
	n := len(pk.Payload)
	if write {
		dst, ok := q.mrs.target(c.rkey, c.va, c.length, c.off, n)
		if !ok {
			*c = classicMsg{}
			q.rareStats().RemoteAccessErrors++
			return wire.NakRemoteAccessError
		}
		copy(dst, pk.Payload)
	} else if c.posted {
		if int64(c.off)+int64(n) > int64(len(c.buf)) {
			q.localLength(0, c.off+uint32(n))
			*c = classicMsg{}
			return synLocalLength
		}
		copy(c.buf[c.off:], pk.Payload)
	} else {
		if int64(len(c.buf))+int64(n) > q.cfg.MaxMessageSize {
			*c = classicMsg{}
			return wire.NakInvalidRequest
		}
		c.buf = poolAppend(c.buf, pk.Payload)
	}
	c.off += uint32(n)
	if last {
		r.msn++
		op, immv := OpRecv, uint32(0)
		if imm {
			op, immv = OpRecvImm, pk.Imm
		}
		switch {
		case write && imm:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecvImm, Len: int(c.off), Imm: pk.Imm})
		case c.posted:
			b := q.rq.pop()
			q.pushRecv(Completion{ID: b.id, QPN: q.qpn, Op: op, Data: b.buf[:c.off], Len: int(c.off), Imm: immv})
		case !write:
			if c.buf == nil {
				c.buf = []byte{}
			}
			q.pushRecv(Completion{QPN: q.qpn, Op: op, Data: c.buf, Len: len(c.buf), Imm: immv, pooled: true})
		}
		*c = classicMsg{}
	}
	return 0
}

// fillAck fills pk (headers set) as the ACKNOWLEDGE the responder owes:
// the sticky error's NAK, a sequence NAK for the expected PSN, or an ACK
// of the PSN before it. It reports whether it is a NAK.
func (r *classicReceiver) fillAck(_ clock.Time, pk *wire.Packet) bool {
	pk.BTH.Opcode = wire.OpAcknowledge
	pk.BTH.PSN = uint32(r.exp.Prev())
	pk.AETH = wire.AETH{Syndrome: wire.SyndromeAck | 0x1F, MSN: r.msn & psn.Mask}
	switch {
	case r.rxErr != 0:
		pk.AETH.Syndrome = r.rxErr
		pk.BTH.PSN = uint32(r.rxErrPSN)
	case r.nakDue:
		pk.AETH.Syndrome = wire.NakPSNSequenceError
		pk.BTH.PSN = uint32(r.exp)
	case r.rnrDue:
		pk.AETH.Syndrome = wire.SyndromeRNR | rnrTimer
		pk.BTH.PSN = uint32(r.exp)
		r.q.rareStats().RNRNaksSent++
	}
	return r.nakDue || r.rxErr != 0
}

func (r *classicReceiver) ackSent() { r.nakDue, r.rnrDue = false, false }
