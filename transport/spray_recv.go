package transport

import (
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/reorder"
	"github.com/sprayfabric/spray/transport/wire"
)

// sprayReceiver is the Spray profile's receiver: it places data packets
// out of order into their messages (reorder.Window, reorder.Assembler) and
// acknowledges selectively (cumulative PSN, SACK bitmap, the echo of one
// packet's send time, entropy and INT records).
type sprayReceiver struct {
	q   *QP
	win *reorder.Window
	asm *reorder.Assembler

	rxErr    uint8  // sticky responder error: NAK syndrome answered to every packet
	rxErrMsg uint32 // the message that caused it
	// rxErrAny: the error came after the sender completed the message that
	// caused it (a message longer than its receive buffer, found when the
	// buffer was posted), so the NAK names the message of the packet it
	// answers: the sender takes a NAK only for a request it has outstanding.
	rxErrAny bool

	// rnrMsg is the message of a data packet refused for lack of room
	// since the last ACK, rnr whether there is one: the next ACK is an
	// RNR NAK naming it, so that the sender knows this QP is alive.
	rnrMsg uint32
	rnr    bool

	// reads holds the region bytes of each READ request received and
	// not yet answered, at its message ID modulo its length (MaxMessages,
	// the assembler's span of live IDs); allocated at the first READ
	// request, given back when none waits (trim).
	reads [][]byte

	// last is the latest data packet received; echo the latest that
	// carried INT records, echoSet whether it came since the last ACK:
	// the ACK then reports that one (PSN, send time, entropy, hold time
	// and records), else last without records.
	last    lastData
	lastSet bool // a data packet was received: last is set
	echo    lastData
	echoSet bool
	// echoINT holds echo's INT records, allocated at the first.
	echoINT []byte

	// trims are the trimmed packets whose PSNs the next ACKs ask for
	// again, one per ACK, oldest first: at most maxTrimNotes, allocated
	// at the first trim (an idle QP holds none: TestIdleQPMemory).
	trims []trimNote

	ackedHigh psn.PSN // the highest PSN received when the last ACK left
	ackedSet  bool    // an ACK left: ackedHigh is set
	highTx    uint64  // send time of the highest PSN received
}

// lastData is what an ACK reports of one data packet.
type lastData struct {
	psn     psn.PSN
	tx      uint64
	arrive  clock.Time
	stamped bool // arrive is the host's arrival stamp, not the engine's time
	entropy uint16
}

func (r *sprayReceiver) connect(peer QPInfo) error {
	cfg := r.q.cfg
	win, err := reorder.NewWindow(psn.New(peer.PSN), cfg.Window)
	if err != nil {
		return err
	}
	asm, err := reorder.NewAssembler(reorder.Config{
		MaxMessages: cfg.MaxMessages, MaxMessageSize: cfg.MaxMessageSize, MaxBytes: cfg.MaxRecvBytes,
		Alloc: recvPool.get,
	}, 0)
	if err != nil {
		return err
	}
	r.win, r.asm = win, asm
	return nil
}

// trimmable reports whether the window, the assembler or the READ table
// holds memory with nothing in it.
func (r *sprayReceiver) trimmable() bool {
	if r.win == nil {
		return false
	}
	return r.win.Trimmable() || r.asm.Trimmable() || r.reads != nil && r.q.readSlots == 0
}

func (r *sprayReceiver) trim() {
	if r.win == nil {
		return
	}
	r.win.Trim()
	r.asm.Trim()
	if r.q.readSlots == 0 {
		r.reads = nil // every entry is nil: each READ waiting holds a slot
	}
}

func (r *sprayReceiver) takes(op wire.Opcode) bool { return op == wire.OpSprayData }

// held is the number of packets received ahead of a hole.
func (r *sprayReceiver) held() uint64 {
	if r.win == nil {
		return 0
	}
	return uint64(r.win.Pending())
}

// onCE: a CE-marked packet is acknowledged at once, and the ACK echoes
// the count of marks.
func (r *sprayReceiver) onCE(clock.Time) { r.q.ackNow = true }

func (r *sprayReceiver) note(now clock.Time, pk *wire.Packet, p psn.PSN, tx uint64) {
	at, stamped := r.q.rxAt, r.q.rxAt < now
	r.last.psn, r.last.tx, r.last.arrive, r.last.stamped, r.last.entropy = p, tx, at, stamped, pk.UDP.Src
	r.lastSet = true
	if len(pk.INT) > 0 {
		r.echo.psn, r.echo.tx, r.echo.arrive, r.echo.stamped, r.echo.entropy = p, tx, at, stamped, pk.UDP.Src
		if r.echoINT == nil {
			r.echoINT = make([]byte, 0, wire.MaxINTHops*wire.HopLen)
		}
		r.echoINT = append(r.echoINT[:0], pk.INT[:min(len(pk.INT), cap(r.echoINT))]...)
		r.echoSet = true
	}
}

// maxTrimNotes bounds the trimmed packets awaiting their NAK: more at
// once are left to the sender's loss detection, as drops would be.
const maxTrimNotes = 16

// trimNote is a trimmed packet the receiver has yet to ask for again.
type trimNote struct {
	psn psn.PSN
	tx  uint64
	msg uint32
}

// onTrimmed takes a trimmed data packet (wire.Trim): its payload never
// came, so the receiver asks for its PSN at once, with a NAK PSN sequence
// error that names it (fillAck), rather than let the sender wait for a
// timer; a PSN it holds already, or outside its window, gets nothing.
// Guarded by TestTrimToNak.
func (r *sprayReceiver) onTrimmed(pk *wire.Packet) {
	q := r.q
	q.stats.TrimsReceived++
	p := psn.New(pk.BTH.PSN)
	if d := p.Diff(r.win.Cum()); r.rxErr != 0 || d < 0 || d >= int32(r.win.Size()) || r.win.Has(p) {
		return
	}
	for i := range r.trims {
		if r.trims[i].psn == p {
			r.trims[i].tx = pk.Data.TxTime // a later copy, trimmed too
			return
		}
	}
	if len(r.trims) == maxTrimNotes {
		return
	}
	r.trims = append(r.trims, trimNote{psn: p, tx: pk.Data.TxTime, msg: pk.Data.MsgID})
	q.ackNow = true
}

// recv places a spray data packet.
func (r *sprayReceiver) recv(now clock.Time, pk *wire.Packet) {
	q := r.q
	if pk.BTH.Trimmed {
		r.onTrimmed(pk)
		return
	}
	if r.rxErr != 0 {
		q.ackNow = true // answer with the NAK until the sender gives up
		if r.rxErrAny {
			r.rxErrMsg = pk.Data.MsgID
		}
		return
	}
	q.creditArrived(pk)
	p := psn.New(pk.BTH.PSN)
	d := p.Diff(r.win.Cum())
	switch {
	case d < -int32(r.win.Size()):
		// Long acknowledged, or never sent: dropped unanswered
		// (TestSpoofSprayData).
		q.rareStats().OutOfWindow++
		return
	case d < 0 || r.win.Has(p):
		q.stats.Duplicates++
		q.noteData(now, pk)
		if !r.lastSet || r.last.psn != p {
			// A second copy of the packet noted last keeps the first's
			// echo: the ACK then shows the sender that its original
			// arrived, so that its probe or resend counts as spurious
			// and backs off (TestDupKeepsFirstEcho).
			r.note(now, pk, p, pk.Data.TxTime)
		}
		q.ackNow = true
		q.ackDup = q.noteAckLost(now) || q.ackDup
		return
	case d >= int32(r.win.Size()):
		q.rareStats().OutOfWindow++
		q.ackNow = true
		return
	}
	h := &pk.Data
	write := h.Kind == wire.KindWrite || h.Kind == wire.KindWriteImm
	var dst []byte
	switch h.Kind {
	case wire.KindSend, wire.KindSendImm, wire.KindWrite, wire.KindWriteImm:
	case wire.KindReadReq:
		if h.MsgLen != 0 || h.Offset != 0 || len(pk.Payload) != 0 {
			q.rareStats().BadPackets++
			return
		}
	case wire.KindReadResp:
		// Placed straight into the buffer of the READ it names, which
		// must be outstanding and of its length (TestReadSpoofedResponse).
		rd := q.readFor(pk.Imm)
		if rd == nil || rd.length != h.MsgLen || uint64(h.Offset)+uint64(len(pk.Payload)) > uint64(h.MsgLen) {
			q.rareStats().RejectedReadResponses++
			return
		}
		dst = rd.wr.Data[h.Offset : h.Offset+uint32(len(pk.Payload))]
	default:
		q.rareStats().BadPackets++
		return
	}
	m, err := r.message(h)
	if err != nil {
		if r.rxErr != 0 {
			return // ErrLocalLength: answered with the NAK
		}
		// Too many messages in progress (the application has not
		// taken them), or not ours to take: dropped without marking,
		// so that the sender retransmits later, and answered with an
		// RNR NAK so that it does not count the wait against the peer's
		// life (TestSlowReaderOutlastsRetries).
		q.rareStats().NoBuffer++
		r.rnr, r.rnrMsg, q.ackNow = true, h.MsgID, true
		return
	}
	// A message keeps the kind of its first packet: which posted buffer
	// each message takes depends on it.
	if m.Tag&tagKind == 0 {
		m.Kind, m.Tag = uint8(h.Kind), m.Tag|tagKind
	} else if m.Kind != uint8(h.Kind) {
		q.rareStats().BadPackets++
		return
	}
	if write {
		var ok bool
		dst, ok = q.mrs.target(pk.RETH.RKey, pk.RETH.VA, pk.RETH.Len, h.Offset, len(pk.Payload))
		if !ok || pk.RETH.Len != h.MsgLen {
			q.rareStats().RemoteAccessErrors++
			r.rxErr, r.rxErrMsg, q.ackNow = wire.NakRemoteAccessError, h.MsgID, true
			return
		}
	}
	if h.Kind == wire.KindReadReq && !r.readReq(pk, h.MsgID) {
		return
	}
	if h.Kind.HasImm() {
		m.Imm, m.HasImm = pk.Imm, true
	}
	if _, err := r.asm.Place(m, h.Offset, pk.Payload); err != nil {
		if h.Kind == wire.KindReadReq {
			r.reads[h.MsgID%uint32(len(r.reads))] = nil
			q.readSlots--
		}
		q.rareStats().BadPackets++
		return
	}
	copy(dst, pk.Payload)
	// A packet sent before the highest PSN received (or in the same
	// engine step: TxTime is the step's time), which overtook it:
	// reordering, not a resend (a resend leaves after the originals).
	above := r.win.Highest().Diff(p)
	late := above > 0 && h.TxTime <= r.highTx
	// Only one whose overtaker an ACK already reported needs an ACK of
	// its own (see below); the others join the ACK that reports both.
	late = late && r.ackedSet && r.ackedHigh.Diff(p) > 0
	if above < 0 {
		r.highTx = h.TxTime
	}
	r.win.Mark(p)
	q.stats.MaxReorderHeld = max(q.stats.MaxReorderHeld, uint64(r.win.Pending()))
	q.stats.RxPackets++
	q.stats.RxBytes += uint64(len(pk.Payload))
	q.noteData(now, pk)
	r.note(now, pk, p, h.TxTime)
	if pk.BTH.AckReq || late {
		// Acknowledged at once: the last packet of a message, a packet
		// of a sender waiting on a small window (AckReq), and a packet
		// overtaken by one sent after it that an ACK already reported
		// (as RFC 5681 4.2 does for one that fills a hole): the sender's
		// RACK and probe timers run from this one's transmission, and
		// held for AckDelay it would be declared lost. Every other packet,
		// beyond a hole or filling one, resends included, waits for
		// AckEvery or AckDelay: sprayed packets arrive beyond holes most
		// of the time, and RACK finds losses by time, not by counting
		// acknowledgements. Guarded by TestSprayAckOvertaken and
		// TestSprayDelayedAckNoResends.
		q.ackNow = true
	}
	r.deliver()
}

// readReq takes a new READ request (message id): it checks the region (a
// refusal is the sticky NAK remote access error, as for a WRITE) and
// reserves a send queue slot for the response, or reports false when the
// request must be dropped (no slot: the requester resends it). The
// response is queued when the request's turn comes (deliver), after every
// message sent before it has landed, so that a READ sees the WRITEs posted
// before it, as in RC (TestReadAfterWrite).
func (r *sprayReceiver) readReq(pk *wire.Packet, id uint32) bool {
	q := r.q
	src, ok := q.mrs.source(pk.RETH.RKey, pk.RETH.VA, pk.RETH.Len)
	if !ok || int64(pk.RETH.Len) > q.cfg.MaxMessageSize {
		q.rareStats().RemoteAccessErrors++
		r.rxErr, r.rxErrMsg, q.ackNow = wire.NakRemoteAccessError, id, true
		return false
	}
	if r.reads == nil {
		r.reads = make([][]byte, q.cfg.MaxMessages)
	}
	i := id % uint32(len(r.reads))
	if r.reads[i] != nil {
		// A second request under a message ID already taken, at another
		// PSN: not what a sender does. One reservation per ID, so that
		// such packets cannot shrink the send queue.
		q.rareStats().BadPackets++
		return false
	}
	if !q.reserveRead() {
		q.rareStats().NoBuffer++
		return false
	}
	r.reads[i] = src
	return true
}

// Msg.Tag bits: the message is placed straight into its posted buffer;
// its Kind is set.
const (
	tagPosted = 1 << iota
	tagKind
)

// message returns the message of data packet h, creating it on first
// sight. Only a SEND has a buffer (a WRITE's bytes go to the region, a
// READ response's to the READ's buffer, a READ request has none). A SEND on a
// QP with posted buffers goes straight into its buffer when that buffer is
// known and posted: the message takes the buffer after those of the
// earlier outstanding SENDs, known once every earlier message has started
// (a WRITE takes none). Otherwise, and on a QP without posted buffers, it
// goes into a pooled buffer, counted against MaxRecvBytes, and deliver
// copies it into its posted buffer. A SEND longer than its posted buffer
// fails the receiving side (ErrLocalLength) and is refused.
func (r *sprayReceiver) message(h *wire.Data) (*reorder.Msg, error) {
	send := h.Kind == wire.KindSend || h.Kind == wire.KindSendImm
	if m := r.asm.Lookup(h.MsgID); m != nil || !send || r.q.rq == nil || !r.q.rq.on {
		return r.asm.Message(h.MsgID, h.MsgLen, send)
	}
	q := r.q
	i := 0
	for id := r.asm.Next(); id != h.MsgID && i < q.rq.n; id++ {
		m := r.asm.Lookup(id)
		if m == nil {
			i = q.rq.n // unknown: stage the message
			break
		}
		if consumes(wire.OpKind(m.Kind)) {
			i++
		}
	}
	if i >= q.rq.n {
		return r.asm.Message(h.MsgID, h.MsgLen, true)
	}
	b := q.rq.at(i)
	if int64(h.MsgLen) > int64(len(b.buf)) {
		q.localLength(i, h.MsgLen)
		r.rxErr, r.rxErrMsg, q.ackNow = wire.NakInvalidRequest, h.MsgID, true
		return nil, ErrLocalLength
	}
	m, err := r.asm.MessageInto(h.MsgID, h.MsgLen, b.buf)
	if err == nil {
		m.Tag |= tagPosted
	}
	return m, err
}

// posted delivers the messages that waited for a receive buffer.
func (r *sprayReceiver) posted() { r.deliver() }

// A spray READ response is a message of the QP's own send queue
// (answerRead): nothing waits outside it.
func (r *sprayReceiver) responding() bool { return false }
func (r *sprayReceiver) pollResponse(clock.Time, []byte) (int, uint16, bool, error) {
	return 0, 0, false, nil
}

// limit is the receiver's message limit (msgwin.go): the first message
// ID past the assembler's span.
func (r *sprayReceiver) limit() uint32 { return r.asm.Next() + uint32(r.q.cfg.MaxMessages) }

// deliver completes, in order, the messages the assembler finished. With
// posted buffers, a SEND waits at the head until its buffer is posted.
// The room it makes may owe the sender a window update (msgwin.go).
func (r *sprayReceiver) deliver() {
	if r.asm == nil {
		return
	}
	next := r.asm.Next()
	r.deliverFinished()
	if r.asm.Next() != next {
		r.q.winUpdate(r.limit())
	}
}

func (r *sprayReceiver) deliverFinished() {
	q := r.q
	for !q.recvFull() {
		m, ok := r.asm.Peek()
		if !ok {
			return
		}
		kind := wire.OpKind(m.Kind)
		if q.rq != nil && q.rq.on && consumes(kind) {
			if q.rq.n == 0 {
				return
			}
			b := q.rq.at(0)
			if int64(m.Len) > int64(len(b.buf)) {
				q.localLength(0, m.Len)
				r.rxErr, r.rxErrMsg, q.ackNow = wire.NakInvalidRequest, m.ID, true
				r.rxErrAny = m.Tag&tagPosted == 0
				return
			}
			if m.Tag&tagPosted == 0 { // staged: copy it over
				q.rareStats().RecvCopied++
				copy(b.buf, m.Buf)
				recvPool.put(m.Buf)
			}
			r.asm.Pop()
			pb := q.rq.pop()
			op := OpRecv
			if kind == wire.KindSendImm {
				op = OpRecvImm
			}
			q.pushRecv(Completion{ID: pb.id, QPN: q.qpn, Op: op, Data: pb.buf[:m.Len], Len: int(m.Len), Imm: m.Imm})
			continue
		}
		r.asm.Pop()
		switch kind {
		case wire.KindSend:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecv, Data: m.Buf, Len: int(m.Len), pooled: true})
		case wire.KindSendImm:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecvImm, Data: m.Buf, Len: int(m.Len), Imm: m.Imm, pooled: true})
		case wire.KindWriteImm:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecvImm, Len: int(m.Len), Imm: m.Imm})
		case wire.KindReadResp:
			if rd := q.readFor(m.Imm); rd != nil {
				q.readLanded(rd)
			}
		case wire.KindReadReq:
			i := m.ID % uint32(len(r.reads))
			q.answerRead(r.reads[i], m.ID)
			r.reads[i] = nil
		}
	}
}

// fillAck fills pk (headers set) as the spray ACK the receiver owes and
// reports whether it is a NAK.
func (r *sprayReceiver) fillAck(now clock.Time, pk *wire.Packet) bool {
	pk.BTH.Opcode = wire.OpSprayAck
	a := &pk.Ack
	e := &r.last
	if r.echoSet {
		e = &r.echo
	}
	*a = wire.Ack{
		CumPSN: uint32(r.win.Cum()), AckedPSN: uint32(e.psn), EchoTime: e.tx,
		ECNCount: r.q.ecnCount, Entropy: e.entropy, SackWords: wire.MaxSackWords,
		Syndrome: r.rxErr, MsgID: r.rxErrMsg,
	}
	if !r.lastSet {
		// Nothing received yet (a NAK of the very first packet): echo
		// the PSN before the first, which the sender's checks accept and
		// its scoreboard ignores; not the refused packet, which would
		// acknowledge it (TestReadRefused).
		a.AckedPSN, a.EchoTime = uint32(r.win.Cum().Prev()), 0
	}
	if hold := now.Sub(e.arrive); hold > 0 && hold < time.Second {
		a.HoldNs = uint32(hold)
		if e.stamped {
			a.HoldNs |= wire.HoldFromArrival
		}
	}
	a.SackBase = uint32(r.win.Sack(r.last.psn, a.Sack[:]))
	// Trailing zero words say nothing: an ACK of packets that arrived in
	// order carries one word, not four.
	for a.SackWords > 1 && a.Sack[a.SackWords-1] == 0 {
		a.SackWords--
	}
	if r.echoSet {
		a.INTHops = uint8(len(r.echoINT) / wire.HopLen)
		pk.INT = r.echoINT
		r.echoSet = false
	}
	if r.rnr && r.rxErr == 0 {
		a.Syndrome, a.MsgID = wire.SyndromeRNR|rnrTimer, r.rnrMsg
		r.q.rareStats().RNRNaksSent++
	} else if len(r.trims) > 0 && r.rxErr == 0 {
		// A trimmed packet's NAK names its PSN and send time where an ACK
		// echoes a packet's; its hold and entropy are not an arrival's,
		// so they stay for the next ACK. The INT records go in the NAK
		// as well: under a stream of trims every ACK is a NAK, and the
		// sender's controller would hear of no queue (TestTrimFeedsINT).
		t := r.trims[0]
		r.trims = r.trims[:copy(r.trims, r.trims[1:])]
		if r.win.Has(t.psn) || t.psn.Diff(r.win.Cum()) < 0 {
			a.Syndrome = r.rxErr // arrived since (a resend): a plain ACK
		} else {
			a.Syndrome, a.MsgID = wire.NakPSNSequenceError, t.msg
			a.AckedPSN, a.EchoTime, a.HoldNs, a.Entropy = uint32(t.psn), t.tx, 0, 0
			if a.INTHops > 0 {
				r.echoSet = true
			}
			r.q.stats.TrimNaksSent++
		}
	}
	r.rnr = false
	if r.q.winUpdateOnly() && a.Syndrome == wire.SyndromeAck {
		// A window update alone reports no packet (winUpdateOnly).
		a.AckedPSN, a.EchoTime, a.HoldNs, a.Entropy = uint32(r.win.Cum().Prev()), 0, 0, 0
	}
	r.q.winFill(a, r.limit())
	r.q.fillCredit(a)
	pk.BTH.PSN = a.CumPSN
	return r.rxErr != 0
}

// rnrTimer is the RNR NAK's timer field: IBA's code 0 (655.36 ms), which
// spray's senders do not use (they retry on their own timer, backed off up
// to MaxRTO); it is set for a reader of the wire.
const rnrTimer = 0

// ackSent notes the highest PSN the ACK just sent reported.
// A trimmed packet still to be asked for gets the next ACK at once.
func (r *sprayReceiver) ackSent() {
	r.ackedHigh, r.ackedSet = r.win.Highest(), true
	if len(r.trims) > 0 {
		r.q.ackNow = true
	}
}
