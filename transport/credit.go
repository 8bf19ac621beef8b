package transport

import (
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/transport/wire"
)

// Receiver-paced credits (Config.Credits). A receiver's engine owns its
// link's rate: a creditPacer hands its senders credit, a few packets
// at a time, round robin over the QPs whose senders want some, at the
// rate the link has left after what else arrives on it (ACKs, grants,
// unsolicited data, data of senders without credits). A sender sends an
// unsolicited window at the start of a burst (no round trip lost when it
// is alone) and the rest against credit. Counts are cumulative packets
// (wire.Credit), so a lost grant or request is replaced by the next; a
// sender that waits creditRetry for credit asks again, and the receiver
// answers that at once (TestCreditLostGrant, TestCreditLostRequest). A
// sender whose peer's ACKs carry no credit, or that hears nothing for
// creditMaxMisses asks, sends without credits from then on
// (TestCreditPeerWithout).

// creditMode is what a sender knows of its peer's credits.
type creditMode uint8

const (
	creditUnknown creditMode = iota // no ACK or grant yet
	creditOn                        // the peer grants: send against credit
	creditOff                       // the peer does not: send freely
)

const (
	// creditGrantPkts is the packets one grant adds while few senders
	// share the link: a couple, so that their packets interleave finely
	// at the receiver's link.
	creditGrantPkts = 2
	// creditGrantMax is the most one grant adds. With many senders a
	// sender's turn comes more than a round trip after its last, no ACK
	// is due to carry the grant, and each grant is a frame of its own on
	// the sender's downlink: a grant then adds a packet per
	// creditSendersPerPkt senders waiting, up to this, so that grants
	// stay under 1 frame in 8 (TestCreditGrantGrows).
	creditGrantMax      = 8
	creditSendersPerPkt = 16
	// creditMaxOut bounds the credit a QP holds granted and not yet used
	// (by the receiver's count of credited packets that arrived, or the
	// sender's own count in a request): a sender that takes credit and
	// sends nothing cannot hoard it. 256 packets are several round trips
	// at 100 Gb/s.
	creditMaxOut = 256
	// creditMaxAhead bounds how far a grant may run ahead of the packets
	// a sender has sent, and a request ahead of the credit granted:
	// beyond it the packet is nonsense, dropped and counted
	// (QPStats.CreditRejected).
	creditMaxAhead = 1 << 24
	// creditRetryMin is the least creditRetry.
	creditRetryMin = 250 * time.Microsecond
	// creditRoundMax bounds the pacer's round that a sender's retry
	// waits for, so that a lost grant costs at most twice this.
	creditRoundMax = 2 * time.Millisecond
	// creditMaxMisses is the retries without an answer after which a
	// sender stops waiting for credit and sends freely (the peer is gone
	// or does not grant; the retransmission timer takes over).
	creditMaxMisses = 3
	// creditWireOverhead is what a frame takes on an Ethernet link beyond
	// its bytes: preamble and start delimiter (8), FCS (4), gap (12).
	creditWireOverhead = 24
	// creditOvercommit is how much faster than its link a pacer grants:
	// a granted sender whose link is busy with other receivers' credit
	// sends late, and a pacer at exactly the line rate leaves its link
	// idle for that, while much more than 5% fills the switch's queue
	// (docs/results.md#credits-overcommit). TestCreditHostileRequests
	// holds the pacer to it.
	creditOvercommit = 1.05
	// creditMaxBooked bounds how far ahead the pacer books its link, so
	// that a flood of arrivals delays grants by at most this much.
	creditMaxBooked = 200 * time.Microsecond
)

// DefaultCreditUnsolicited is Config.CreditUnsolicited's default.
const DefaultCreditUnsolicited = 16 << 10

// serialLess reports whether a comes before b in 32-bit serial order.
func serialLess(a, b uint32) bool { return int32(a-b) < 0 }

// creditSend is a QP's sender side of credits.
type creditSend struct {
	mode    creditMode
	limit   uint32 // the receiver's credit: packets that may be sent against it, in all
	used    uint32 // packets sent against credit, in all
	unsol   int    // packets left of the burst's unsolicited window; -1: not yet shared out
	backlog int    // new packets posted and not sent yet
	asked   uint32 // the count last requested
	reqDue  bool   // a request is owed
	retry   bool   // it is a retry: the receiver answers at once
	waiting bool   // the QP waits for credit (counted once per wait)
	misses  int    // retries since credit last came
	reqAt   clock.Time
	heardAt clock.Time
	grewAt  clock.Time    // when credit last grew in this burst; 0 before
	gap     time.Duration // between the last two grants of a burst
	round   time.Duration // the least of the last two gaps
	bit     uint8         // the wire.Data.Credit of the packet being encoded
}

// qpCredit is a QP's credit state, allocated with the QP only under
// Config.Credits: the million QPs of a simulation without credits hold
// none (TestQPSize).
type qpCredit struct {
	cs creditSend
	cr creditRecv
}

// creditBit returns the wire.Data.Credit of the data packet being
// encoded: 0 without credits.
func (q *QP) creditBit() uint8 {
	if q.cred == nil {
		return 0
	}
	return q.cred.cs.bit
}

// creditRecv is a QP's receiver side of credits.
type creditRecv struct {
	want   uint32 // the sender's latest requested count
	limit  uint32 // credit granted, in all
	told   uint32 // the limit last sent to the sender
	got    uint32 // credited packets arrived (or the sender's count of those sent)
	due    bool   // a grant is owed
	queued bool   // on the pacer's ring
}

// credits reports whether the QP's sender paces by its peer's credit.
func (q *QP) credits() bool { return q.cfg.Credits && q.cred.cs.mode != creditOff }

// creditUnsolPkts is the unsolicited window in packets.
func (q *QP) creditUnsolPkts() int {
	return (q.cfg.CreditUnsolicited + q.cfg.MTU - 1) / q.cfg.MTU
}

// creditPosted notes n new packets posted: a burst that starts on an idle
// sender gets a share of the unsolicited window, set at its first packet
// (creditShare).
func (q *QP) creditPosted(n int) {
	if !q.cfg.Credits {
		return
	}
	cs := &q.cred.cs
	if cs.backlog == 0 && q.sb.Outstanding() == 0 {
		cs.unsol = -1
		cs.grewAt, cs.gap, cs.round = 0, 0, 0 // an idle gap is no pacer's round
	}
	if cs.backlog == 0 && n > 0 {
		if e := q.sch.eng; e != nil {
			e.creditSenders++
		}
	}
	cs.backlog += n
}

// creditIdle notes that the QP has no new data left to send (or leaves
// its engine): it no longer shares the unsolicited window.
func (q *QP) creditIdle() {
	if q.cred == nil || q.cred.cs.backlog == 0 {
		return
	}
	q.cred.cs.backlog = 0
	if e := q.sch.eng; e != nil && e.creditSenders > 0 {
		e.creditSenders--
	}
}

// creditShare sets a new burst's unsolicited window when its first packet
// is about to go: CreditUnsolicited split evenly among the engine's QPs
// that have new data to send then, rounded up to whole packets. A lone sender sends
// the whole window before its first grant can come back; a host that
// starts an all-to-all sends about the window in all, and its receivers
// pace the rest (TestCreditUnsolicitedShared).
func (q *QP) creditShare() {
	cs := &q.cred.cs
	if cs.unsol >= 0 {
		return
	}
	n := 1
	if e := q.sch.eng; e != nil {
		n = max(e.creditSenders, 1)
	}
	w := q.creditUnsolPkts()
	cs.unsol = (w + n - 1) / n // rounded up: a packet each at least
}

// mayCredit reports whether credit lets the next data packet go.
func (q *QP) mayCredit() bool {
	if !q.credits() {
		return true
	}
	q.creditShare()
	cs := &q.cred.cs
	return cs.unsol > 0 || serialLess(cs.used, cs.limit)
}

// takeCredit spends the credit of a data packet about to be encoded and
// sets the bit it carries. A resend takes none and goes at once: losses
// are rare, the receiver books it as it arrives, and a tail probe or a
// timeout's resend that waited for credit would wait for a request's
// round trip, or for creditRetry, on top of the loss's detection.
func (q *QP) takeCredit(resend bool) {
	if !q.cfg.Credits {
		return
	}
	cs := &q.cred.cs
	cs.bit = 0
	if resend {
		return
	}
	q.creditShare()
	if cs.backlog == 1 {
		q.creditIdle()
	} else {
		cs.backlog = max(cs.backlog-1, 0)
	}
	if cs.mode == creditOff {
		return
	}
	cs.waiting = false
	if serialLess(cs.used, cs.limit) {
		cs.used++
		cs.bit = wire.DataCredited
		return
	}
	if cs.unsol > 0 {
		cs.unsol--
		cs.bit = wire.DataUnsolicited
		q.rareStats().UnsolicitedPackets++
	}
}

// creditWait notes that the sender has data that only credit holds back.
func (q *QP) creditWait() {
	if q.credits() && !q.cred.cs.waiting && q.cred.cs.backlog > 0 && !q.mayCredit() {
		q.cred.cs.waiting = true
		q.rareStats().CreditWaits++
	}
}

// creditWant is the count the sender wants credit up to: what it used,
// and what it has to send beyond the unsolicited window.
func (q *QP) creditWant() uint32 {
	q.creditShare()
	cs := &q.cred.cs
	return cs.used + uint32(max(cs.backlog-cs.unsol, 0))
}

// creditRequestDue reports whether a credit request is owed.
func (q *QP) creditRequestDue() bool {
	if !q.credits() {
		return false
	}
	return q.cred.cs.reqDue || serialLess(q.cred.cs.asked, q.creditWant())
}

// creditDeadline is when a sender that waits for credit asks again.
func (q *QP) creditDeadline() clock.Time {
	if !q.credits() || q.mayCredit() || q.cred.cs.backlog == 0 {
		return clock.Never
	}
	return max(q.cred.cs.reqAt, q.cred.cs.heardAt).Add(q.creditRetry())
}

// creditRetry is how long a sender waits for credit before it asks
// again: four round trips, at least creditRetryMin, and twice the pacer's
// round: the lesser of the last two gaps between its grants (a lost grant
// lengthens one). A receiver shared by many senders grants each in turn
// (1,023 senders of 8 packets at 100 Gb/s: a round of about 1 ms), and
// only a grant lost after the last, with every ACK after it, leaves a
// sender waiting: a retry within the round would only cost the receiver a
// grant frame (TestCreditGrantGrows counts the requests).
func (q *QP) creditRetry() time.Duration {
	return max(4*q.sb.SRTT(), creditRetryMin, 2*q.cred.cs.round)
}

// creditTimeout runs the credit timer: ask again, or after
// creditMaxMisses asks without an answer, send without credits.
func (q *QP) creditTimeout(now clock.Time) {
	if now < q.creditDeadline() {
		return
	}
	cs := &q.cred.cs
	cs.misses++
	if cs.misses > creditMaxMisses {
		cs.mode = creditOff
		q.rareStats().CreditFallbacks++
		return
	}
	cs.reqDue, cs.retry = true, true
	cs.reqAt = now // the next retry counts from this one
}

// creditHeard takes the receiver's credit count, from a grant or an ACK.
func (q *QP) creditHeard(now clock.Time, count uint32) {
	cs := &q.cred.cs
	if cs.mode == creditOff {
		return
	}
	if d := count - cs.used; int32(d) > 0 && d > creditMaxAhead {
		q.rareStats().CreditRejected++
		return
	}
	cs.mode = creditOn
	if serialLess(cs.limit, count) {
		cs.limit = count
		if cs.grewAt != 0 && now > cs.grewAt {
			g := min(now.Sub(cs.grewAt), creditRoundMax)
			cs.round, cs.gap = min(g, cs.gap), g
		}
		cs.grewAt = now
	}
	cs.heardAt, cs.misses = now, 0
}

// creditAck takes the credit field of a spray ACK: one without it says
// the peer does not pace its senders.
func (q *QP) creditAck(now clock.Time, a *wire.Ack) {
	if !q.cfg.Credits {
		return
	}
	if a.Flags&wire.AckCredit == 0 {
		if q.cred.cs.mode != creditOff {
			q.cred.cs.mode = creditOff
			q.rareStats().CreditFallbacks++
		}
		return
	}
	q.creditHeard(now, a.Credit)
}

// onGrant takes a credit grant.
func (q *QP) onGrant(now clock.Time, pk *wire.Packet) {
	if q.cfg.Profile != Spray {
		q.rareStats().BadPackets++
		return
	}
	q.rareStats().CreditGrantsReceived++
	if q.cfg.Credits {
		q.creditHeard(now, pk.Credit.Count)
	}
}

// onCreditRequest takes a sender's request. A receiver without credits
// ignores it: its ACKs, without credit, tell the sender.
func (q *QP) onCreditRequest(pk *wire.Packet) {
	if q.cfg.Profile != Spray {
		q.rareStats().BadPackets++
		return
	}
	q.rareStats().CreditRequestsReceived++
	e := q.sch.eng
	if !q.cfg.Credits || e == nil || e.credit == nil {
		return
	}
	cr, c := &q.cred.cr, &pk.Credit
	if serialLess(cr.limit, c.Used) || c.Count-cr.limit > creditMaxAhead && serialLess(cr.limit, c.Count) {
		q.rareStats().CreditRejected++
		return
	}
	if serialLess(cr.want, c.Count) {
		cr.want = c.Count
	}
	if serialLess(cr.got, c.Used) {
		cr.got = c.Used
	}
	if c.Flags&wire.CreditRetry != 0 {
		cr.due = true
	}
	e.credit.add(q)
}

// creditArrived notes a data packet sent against credit.
func (q *QP) creditArrived(pk *wire.Packet) {
	if pk.Data.Credit != wire.DataCredited || !q.cfg.Credits {
		return
	}
	cr := &q.cred.cr
	if !serialLess(cr.got, cr.limit) {
		return // more than was granted: the sender's count will say
	}
	cr.got++
	if e := q.sch.eng; e != nil && e.credit != nil && serialLess(cr.limit, cr.want) {
		e.credit.add(q)
	}
}

// grantable returns the packets the pacer may grant the QP now.
func (q *QP) grantable(pkts int) int {
	cr := &q.cred.cr
	if q.state != stateReady || !serialLess(cr.limit, cr.want) {
		return 0
	}
	out := int(int32(cr.limit - cr.got))
	return int(min(int64(pkts), int64(cr.want-cr.limit), int64(creditMaxOut-out)))
}

// granted notes credit the pacer just added. While the sender has at
// least AckEvery packets of the credit it was told still to arrive, the
// ACK those packets bring carries the new credit: no grant packet of its
// own (TestCreditGrantsRideAcks).
func (q *QP) granted() {
	if int32(q.cred.cr.told-q.cred.cr.got) < int32(q.cfg.AckEvery) {
		q.cred.cr.due = true
		q.touch()
	}
}

// fillCredit puts the receiver's credit into an ACK.
func (q *QP) fillCredit(a *wire.Ack) {
	if !q.cfg.Credits {
		return
	}
	a.Flags |= wire.AckCredit
	a.Credit = q.cred.cr.limit
	q.cred.cr.told, q.cred.cr.due = q.cred.cr.limit, false
}

// encodeGrant builds a credit grant.
func (q *QP) encodeGrant(buf []byte) (int, error) {
	pk := &q.scr.pkt
	q.headers(pk, q.nextAckEntropy())
	pk.BTH.Opcode = wire.OpCreditGrant
	pk.Credit = wire.Credit{Count: q.cred.cr.limit}
	n, err := wire.Encode(buf, pk, nil)
	if err != nil {
		return 0, err
	}
	q.cred.cr.told, q.cred.cr.due = q.cred.cr.limit, false
	q.rareStats().CreditGrantsSent++
	return n, nil
}

// encodeCreditRequest builds a credit request.
func (q *QP) encodeCreditRequest(now clock.Time, buf []byte) (int, error) {
	cs := &q.cred.cs
	pk := &q.scr.pkt
	q.headers(pk, q.nextAckEntropy())
	pk.BTH.Opcode = wire.OpCreditRequest
	want := q.creditWant()
	pk.Credit = wire.Credit{Count: want, Used: cs.used}
	if cs.retry {
		pk.Credit.Flags = wire.CreditRetry
	}
	n, err := wire.Encode(buf, pk, nil)
	if err != nil {
		return 0, err
	}
	cs.asked, cs.reqDue, cs.retry, cs.reqAt = want, false, false, now
	q.rareStats().CreditRequestsSent++
	return n, nil
}

// creditPacer is an engine's pacer of credit: it owns the rate of the
// engine's link towards the host and shares it among the QPs whose
// senders want credit.
type creditPacer struct {
	perNs float64 // the link's bytes per nanosecond
	// cost is what a granted packet takes on the link: the largest
	// credited data frame that arrived (a full one), MTU before the first.
	cost int
	next clock.Time // the link is booked until then
	seen bool       // cost is from a frame that arrived
	ring []*QP      // QPs whose senders want credit, round robin
	head int
}

func newCreditPacer(c *Config) *creditPacer {
	return &creditPacer{perNs: c.LineRate * creditOvercommit / 1e9, cost: c.MTU + creditWireOverhead}
}

// book books bytes of the link from now (or from when it is free).
func (p *creditPacer) book(now clock.Time, bytes int) {
	p.next = max(p.next, now).Add(time.Duration(float64(bytes) / p.perNs))
	p.next = min(p.next, now.Add(creditMaxBooked))
}

// arrived books a frame that arrived and that no grant booked.
func (p *creditPacer) arrived(now clock.Time, frameLen int) {
	p.book(now, max(frameLen, 60)+creditWireOverhead) // padded to Ethernet's least
}

// credited notes the length of a data frame that credit booked.
func (p *creditPacer) credited(frameLen int) {
	if !p.seen || frameLen+creditWireOverhead > p.cost {
		p.cost, p.seen = frameLen+creditWireOverhead, true
	}
}

// add puts q on the ring if it is not there.
func (p *creditPacer) add(q *QP) {
	if !q.cred.cr.queued {
		q.cred.cr.queued = true
		p.ring = append(p.ring, q)
	}
}

// fanIn reports whether more than one QP's sender waits for credit. Only
// then does an unsolicited data frame book the link: a lone sender's
// unsolicited window arrives while the pacer grants its first credit,
// and booked, it would hold those grants back until the window had
// arrived, so the sender would wait a round trip for them after its
// window; several senders' windows arrive together and are booked. A
// lone sender keeps its line-rate start (the simulator's
// TestOneFlowLineRate, with credits).
func (p *creditPacer) fanIn() bool { return len(p.ring)-p.head > 1 }

// grantPkts is the packets a grant adds, from the senders waiting.
func (p *creditPacer) grantPkts() int {
	return min(max(creditGrantPkts, (len(p.ring)-p.head+creditSendersPerPkt-1)/creditSendersPerPkt), creditGrantMax)
}

// deadline is when the pacer next grants, or clock.Never.
func (p *creditPacer) deadline() clock.Time {
	if len(p.ring) == p.head {
		return clock.Never
	}
	return p.next
}

// run grants what the link has room for at now, a QP at a time.
func (p *creditPacer) run(e *Engine, now clock.Time) {
	for p.head < len(p.ring) && p.next <= now {
		q := p.ring[p.head]
		p.ring[p.head] = nil
		p.head++
		n := 0
		if q.sch.eng == e {
			n = q.grantable(p.grantPkts())
		}
		if n <= 0 {
			q.cred.cr.queued = false
		} else {
			q.cred.cr.limit += uint32(n)
			q.granted()
			e.noteCtrl(q, now)
			p.book(now, n*p.cost)
			p.ring = append(p.ring, q)
		}
		if p.head >= 64 && 2*p.head >= len(p.ring) {
			k := copy(p.ring, p.ring[p.head:])
			clear(p.ring[k:])
			p.ring, p.head = p.ring[:k], 0
		}
	}
	if p.head == len(p.ring) {
		p.ring, p.head = p.ring[:0], 0
	}
}
