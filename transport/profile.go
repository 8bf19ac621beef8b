package transport

import (
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// A QP is a shell (qp.go: state, posting, the send queue, the scoreboard,
// the path policy, the controller, transmit arbitration, timers and
// completions) around one profile's protocol, split like gVisor's TCP
// splits its sender and receiver: a sender and a receiver per profile,
// each holding only its own state and reaching the shell through its QP.
//
//	Spray: spraySender (spray_send.go), sprayReceiver (spray_recv.go)
//	RoCE:  classicSender (classic_send.go), classicReceiver (classic_recv.go)
//
// The loss recovery (selective repeat or Go-Back-N) is the scoreboard's
// mode, chosen by Config.Recovery whatever the profile.

// sender is a profile's requester side.
type sender interface {
	// takes reports whether op is the profile's acknowledgement opcode.
	takes(op wire.Opcode) bool
	// encode sets the opcode, the BTH AckReq bit and the profile's
	// headers of the data packet of message m at offset off (first and
	// last: the message's first and last packet) with PSN p; the shell
	// has set the addresses, the PSN, RETH and the immediate.
	encode(now clock.Time, pk *wire.Packet, m *sendMsg, off uint32, first, last bool, p psn.PSN)
	// onAck acts on an acknowledgement the profile's receiver sent, once
	// it checked that what it acknowledges or names is outstanding.
	onAck(now clock.Time, pk *wire.Packet)
	// onCNP acts on a congestion notification and reports whether it
	// took it (the profile's receivers send them, about data in flight).
	onCNP(now clock.Time) bool
	// resent is told of the retransmission of p (scoreboard tag tag).
	resent(p psn.PSN, tag uint64)
	// pollCopy encodes a packet the sender owes beyond the scoreboard's
	// (Spray: the second copy of a resend in timeout backoff) into buf,
	// or returns 0.
	pollCopy(now clock.Time, buf []byte, rate float64) (int, error)
	// readPSNs is the number of PSNs a READ of length bytes takes in
	// the requester's sequence (Spray: its request; RoCE: one per
	// response packet).
	readPSNs(length uint32) uint32
	// span is the number of PSNs the packet of m at offset off takes:
	// 1, but for a RoCE READ request, which takes one per response
	// packet it asks for.
	span(m *sendMsg, off uint32) uint32
	// covered reports whether the PSN of m at offset off, due for a
	// resend, is asked for by the request resent for the packets before
	// it (RoCE READ), and the entropy that request took.
	covered(m *sendMsg, off uint32) (uint16, bool)
}

// receiver is a profile's responder side.
type receiver interface {
	// connect readies the receiver for the peer's first PSN.
	connect(peer QPInfo) error
	// takes reports whether op is one of the profile's data opcodes.
	takes(op wire.Opcode) bool
	// recv takes a data packet of the profile.
	recv(now clock.Time, pk *wire.Packet)
	// onCE is told of a CE-marked data packet.
	onCE(now clock.Time)
	// fillAck fills pk, whose addresses are set, as the acknowledgement
	// owed, and reports whether it is a NAK; ackSent follows once it is
	// encoded.
	fillAck(now clock.Time, pk *wire.Packet) bool
	ackSent()
	// held is the number of data packets held ahead of a hole.
	held() uint64
	// deliver moves the messages the receiver finished while the QP's
	// receive queue was full into the room the reader has made since
	// (popRecv calls it): they hold the receiver's message slots, so
	// waiting for the next packet would wait forever, every later
	// packet being refused for want of a slot (TestSlowReaderResumes).
	deliver()
	// posted is told that a receive buffer was posted on a connected QP.
	posted()
	// responding reports whether READ responses wait to be sent outside
	// the send queue (RoCE: they carry the requester's PSNs, and an
	// acknowledgement waits behind them).
	responding() bool
	// pollResponse encodes the next of those responses into buf and
	// returns its length, entropy and whether it was sent before, or 0.
	pollResponse(now clock.Time, buf []byte) (n int, entropy uint16, resent bool, err error)
	// trimmable reports whether the receiver holds rings or slots with
	// nothing in them, which trim gives back (QP.trim).
	trimmable() bool
	trim()
}

// inWindow reports whether p lies in [una-window, una+hi]: the PSNs an
// acknowledgement may name, RFC 5961's SND.UNA - MAX.SND.WND <= SEG.ACK <=
// SND.NXT with hi the PSNs outstanding (a cumulative PSN, at most Next) or
// one less (a PSN sent, below Next).
func inWindow(p, una psn.PSN, window int, hi int32) bool {
	d := p.Diff(una)
	return d >= -int32(window) && d <= hi
}
