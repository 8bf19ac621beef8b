package transport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/reorder"
	"github.com/sprayfabric/spray/retransmit"
	"github.com/sprayfabric/spray/transport/wire"
)

// Op is the kind of a work request or completion.
type Op uint8

const (
	// OpSend sends a message that the peer receives whole (two-sided).
	OpSend Op = iota + 1
	// OpSendImm sends a message with a 32-bit immediate.
	OpSendImm
	// OpWrite writes bytes into the peer's registered region (one-sided);
	// the peer sees no completion.
	OpWrite
	// OpWriteImm writes and then gives the peer a completion with the
	// immediate.
	OpWriteImm
	// OpRecv completes a received message.
	OpRecv
	// OpRecvImm completes a received message that carried an immediate, or
	// a WRITE with immediate (then Data is nil and Len the bytes written).
	OpRecvImm
)

var opNames = [...]string{"?", "send", "send-imm", "write", "write-imm", "recv", "recv-imm"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// WorkRequest is one operation posted to a QP. The QP reads Data until the
// request completes: do not change it before then.
type WorkRequest struct {
	ID     uint64 // echoed in the completion
	Op     Op     // OpSend, OpSendImm, OpWrite or OpWriteImm
	Data   []byte
	Remote Remote // target of a WRITE: the peer's region and address
	Imm    uint32
}

// Completion reports a finished work request or a received message.
type Completion struct {
	ID   uint64 // the work request's ID; 0 for receives
	QPN  uint32
	Op   Op
	Err  error  // nil on success
	Data []byte // the message of OpRecv/OpRecvImm after a SEND; owned by the receiver
	Len  int    // bytes sent, written or received
	Imm  uint32 // valid for OpRecvImm
}

// QPInfo is what peers exchange out of band to connect two QPs.
type QPInfo struct {
	QPN uint32
	PSN uint32 // first PSN the QP sends
	MAC [6]byte
	IP  netip.Addr
}

// Errors of QPs. errors.Is works on every error a QP returns.
var (
	// ErrPeerUnreachable fails a QP whose peer stopped acknowledging: the
	// retransmission timeout fired MaxRetries times in a row.
	ErrPeerUnreachable = errors.New("transport: peer unreachable")
	// ErrQueueFull is returned by Post when the send queue is full.
	ErrQueueFull = errors.New("transport: send queue full")
	// ErrNotConnected is returned for operations on a QP before Connect.
	ErrNotConnected = errors.New("transport: QP not connected")
	// ErrQPFailed wraps the error that moved a QP to the error state.
	ErrQPFailed = errors.New("transport: QP failed")
	// ErrInvalidRequest is a request the peer refused as malformed (NAK
	// invalid request), or one that Post refuses.
	ErrInvalidRequest = errors.New("transport: invalid request")
	// ErrRemoteOperational is a NAK remote operational error.
	ErrRemoteOperational = errors.New("transport: remote operational error")
)

type qpState uint8

const (
	stateInit qpState = iota
	stateReady
	stateError
)

// QPStats are a QP's counters.
type QPStats struct {
	TxPackets, TxBytes     uint64 // data packets sent (first transmissions and retransmissions)
	Retransmits            uint64
	RxPackets, RxBytes     uint64 // data packets accepted
	Duplicates             uint64 // data packets received twice
	OutOfWindow            uint64 // data packets beyond the receive window, dropped
	OutOfOrderDrops        uint64 // Go-Back-N: packets after a gap, dropped
	NoBuffer               uint64 // data packets dropped for lack of room (message bounds, receive queue)
	AcksSent, AcksReceived uint64
	NaksSent, NaksReceived uint64
	RemoteAccessErrors     uint64 // WRITEs refused by this receiver
	BadPackets             uint64 // wrong source, wrong profile, bad opcode sequence
	ECNMarked              uint64 // CE-marked data packets received
	CNPsSent, CNPsReceived uint64 // RoCEv2 congestion notifications (classic profile)
	MessagesSent           uint64
	MessagesReceived       uint64
	Timeouts               uint64

	// RTTSamples counts round-trip samples: acknowledgements that timed a
	// packet (Spray: every ACK, by its echoed timestamp less the time the
	// receiver held the packet before acknowledging it; RoCE: those the
	// scoreboard timed, the receiver's acknowledgement delay included).
	// SRTT is their smoothed value (EWMA, gain 1/8), MinRTT the smallest;
	// both 0 before the first sample.
	RTTSamples   uint64
	SRTT, MinRTT time.Duration
	// INTAcks counts acknowledgements that carried INT records (Spray with
	// Config.INTHops and a fabric that fills them). INTQueueDelay is the
	// smoothed (EWMA, gain 1/8) queue delay they report, summed over the
	// hops; MaxINTQueueDelay the largest.
	INTAcks                         uint64
	INTQueueDelay, MaxINTQueueDelay time.Duration
	// Microbursts counts microburst events: on one path, an acknowledgement
	// whose INT queue delay exceeds Config.MicroburstThreshold after one
	// that did not (or as the path's first); MicroburstAcks counts every
	// acknowledgement above the threshold.
	Microbursts, MicroburstAcks uint64
	// ReorderHeld is the number of data packets received ahead of a hole
	// (Spray), at the time Stats was called; MaxReorderHeld the most at once.
	ReorderHeld, MaxReorderHeld uint64
}

type sendMsg struct {
	wr     WorkRequest
	id     uint32
	length uint32
	npkts  uint32
	acked  uint32
	err    error
}

// QP is the sans-IO state machine of one reliable queue pair: a connection
// between a local and a remote QP. It does no I/O, starts no goroutines,
// reads no clock and draws randomness only from its seeded source.
//
// Calling order, for a driver: Handle every packet addressed to the QP; then
// HandleTimeout if NextTimeout has passed; then PollTransmit until it returns
// 0; then wait until NextTimeout or the next packet. Post and Connect may be
// called between those steps.
//
// A QP is not safe for concurrent use; an Engine owns its QPs.
type QP struct {
	cfg   *Config
	mrs   *mrTable
	qpn   uint32
	state qpState
	err   error

	lmac, rmac [6]byte
	lip, rip   netip.Addr
	rqpn       uint32
	spray      bool
	gbn        bool

	// sender
	startPSN psn.PSN
	ackTurn  int // acknowledgements rotate over the QP's entropies
	sb       *retransmit.Scoreboard
	paths    multipath.Policy
	ctrl     cc.Controller
	pacer    *cc.Pacer
	seg      int // payload bytes per data packet
	msgs     []sendMsg
	head     uint64 // oldest incomplete message
	cursor   uint64 // next message to segment
	tail     uint64 // next free slot
	curOff   uint32
	nextID   uint32
	events   []retransmit.Event
	// resending: encodeData is encoding a retransmission (see nextEntropy)
	resending bool
	// inRTO: a retransmission timeout fired and no ACK made progress since
	inRTO bool
	// copyDue: a second copy of the oldest packet, resent in RTO backoff,
	// is due on another path (see sendCopy)
	copyDue bool
	copyPSN psn.PSN
	copyTag uint64

	// receiver
	win      *reorder.Window
	asm      *reorder.Assembler
	exp      psn.PSN // Go-Back-N receiver: next expected PSN
	nakSeq   bool    // a sequence NAK was sent for exp: no second one until exp arrives
	cmsg     classicMsg
	msn      uint32
	recvq    []Completion
	recvHead int
	recvLen  int

	ackPending int
	ackDue     clock.Time
	ackNow     bool
	nakDue     bool    // a sequence NAK is due (Go-Back-N)
	rxErr      uint8   // sticky responder error: NAK syndrome answered to every packet
	rxErrPSN   psn.PSN // the PSN that caused it (classic)
	rxErrMsg   uint32  // the message that caused it (spray)
	// last is the latest data packet received; echo the latest that
	// carried INT records, echoSet whether it came since the last ACK:
	// the ACK then reports that one (PSN, send time, entropy, hold time
	// and records), else last without records.
	last      lastData
	echo      lastData
	echoSet   bool
	ackedHigh psn.PSN // the highest PSN received when the last ACK left
	ackedSet  bool    // an ACK left: ackedHigh is set
	highTx    uint64  // send time of the highest PSN received (spray)
	ecnCount  uint16
	cnp       cc.CNPGenerator // classic receiver: CNPs for CE marks, rate-limited
	cnpDue    bool

	// ackDup: the due ACK answers a duplicate, and an earlier ACK was
	// probably lost (noteAckLost). lastAckEntropy and lastAckAt are the
	// entropy and time of the last ACK sent.
	ackDup         bool
	lastAckEntropy uint16
	lastAckAt      clock.Time

	lastNow clock.Time // the latest time the QP was handed
	// reqPSN is the latest new data packet sent with AckReq, intPSN the
	// latest with an INT region (reqSet, intSet: there was one).
	reqPSN psn.PSN
	reqSet bool
	intPSN psn.PSN
	intSet bool
	pkt    wire.Packet
	comps  []Completion
	stats  QPStats
	pstats pathTable // per-path counters: stats_telemetry.go
}

// lastData is what an ACK reports of one data packet.
type lastData struct {
	psn     psn.PSN
	tx      uint64
	arrive  clock.Time
	entropy uint16
	intLen  int
	intBuf  [wire.MaxINTHops * wire.HopLen]byte
}

// classicMsg is the message a Go-Back-N receiver is assembling.
type classicMsg struct {
	active bool
	write  bool
	buf    []byte
	va     uint64
	rkey   uint32
	length uint32
	off    uint32
}

func newQP(cfg *Config, qpn uint32, startPSN uint32, lmac [6]byte, lip netip.Addr, ports []uint16, rng *rand.Rand) (*QP, error) {
	q := &QP{cfg: cfg, qpn: qpn, lmac: lmac, lip: lip, startPSN: psn.New(startPSN)}
	q.spray = cfg.Profile == Spray
	q.gbn = cfg.Recovery == GoBackN
	mode := retransmit.SelectiveRepeat
	if q.gbn {
		mode = retransmit.GoBackN
	}
	rc := retransmit.Config{
		Mode: mode, Capacity: cfg.Window, MinRTO: cfg.MinRTO, MaxRTO: cfg.MaxRTO, MaxRetries: cfg.MaxRetries,
		MaxAckDelay: cfg.AckDelay, AckEvery: cfg.AckEvery,
	}
	// A sprayed QP's packets overtake each other by up to the difference
	// of their paths' queues: RACK waits that long before it calls one lost.
	rc.QueueingReorder = q.spray && cfg.Paths != PathsECMP
	if cfg.Profile == RoCE && cfg.LocalAckTimeout > 0 {
		// A RoCE NIC's transport timer: the QP's Local ACK Timeout, fixed.
		rc.FixedRTO = AckTimeout(cfg.LocalAckTimeout)
	}
	sb, err := retransmit.New(rc, q.startPSN)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	q.sb = sb
	set := ports // the link sends only from these
	if len(set) == 0 {
		set = multipath.Entropies(rng.Uint64(), cfg.Entropies)
	}
	switch set = set[:min(len(set), cfg.Entropies)]; cfg.Paths {
	case PathsECMP:
		q.paths = multipath.NewECMP(set[rng.IntN(len(set))])
	case PathsAdaptive:
		q.paths = multipath.NewAdaptive(set, rng.Uint64(), multipath.AdaptiveConfig{})
	default:
		q.paths = multipath.NewSpray(set, rng.Uint64())
	}
	q.seg = payloadSize(cfg, lip.Is6())
	q.ctrl = newController(cfg, q.seg)
	q.pacer = cc.NewPacer(cfg.PacingBurst)
	q.msgs = make([]sendMsg, cfg.SendQueue)
	q.events = make([]retransmit.Event, 0, cfg.Window)
	q.recvq = make([]Completion, cfg.MaxMessages)
	q.pstats.init(q.paths.Paths())
	return q, nil
}

// payloadSize is the payload of every full data packet: what is left of the
// MTU after the largest header stack the profile can send, rounded down to
// 64 bytes (Spray) or to a power of two, the path MTU of classic RoCE.
func payloadSize(cfg *Config, v6 bool) int {
	hdr := wire.EthLen + wire.IPv4Len + wire.UDPLen + wire.BTHLen + wire.RETHLen + wire.ImmLen + wire.ICRCLen
	if v6 {
		hdr += wire.IPv6Len - wire.IPv4Len
	}
	if cfg.Profile == Spray {
		hdr += wire.DataHdrLen
		if cfg.INTHops > 0 {
			hdr += wire.INTShimLen + cfg.INTHops*wire.HopLen
		}
		return (cfg.MTU - hdr) &^ 63
	}
	n := 256
	for n*2 <= cfg.MTU-hdr {
		n *= 2
	}
	return n
}

// QPN returns the QP's number.
func (q *QP) QPN() uint32 { return q.qpn }

// Info returns what the peer needs to connect to this QP.
func (q *QP) Info() QPInfo {
	return QPInfo{QPN: q.qpn, PSN: uint32(q.startPSN), MAC: q.lmac, IP: q.lip}
}

// Err returns the error that failed the QP, or nil.
func (q *QP) Err() error { return q.err }

// Stats returns the QP's counters.
func (q *QP) Stats() QPStats {
	s := q.stats
	if q.win != nil {
		s.ReorderHeld = uint64(q.win.Pending())
	}
	return s
}

// PathStats returns the per-path (per-entropy) counters of the QP's path
// policy: packets, ACKs, losses, RTT and, for adaptive spraying, the INT
// queue delay and weight.
func (q *QP) PathStats() []multipath.PathStats { return q.paths.Stats() }

// RetransmitStats returns the retransmit counters of the QP's sender.
func (q *QP) RetransmitStats() retransmit.Stats { return q.sb.Stats() }

// Connect makes the QP ready to exchange packets with the remote QP.
func (q *QP) Connect(r QPInfo) error {
	if q.state != stateInit {
		return fmt.Errorf("transport: QP %#x already connected", q.qpn)
	}
	if !r.IP.IsValid() || r.IP.Is4() != q.lip.Is4() {
		return fmt.Errorf("%w: remote address %v does not match local %v", ErrInvalidRequest, r.IP, q.lip)
	}
	win, err := reorder.NewWindow(psn.New(r.PSN), q.cfg.Window)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	asm, err := reorder.NewAssembler(reorder.Config{
		MaxMessages: q.cfg.MaxMessages, MaxMessageSize: q.cfg.MaxMessageSize, MaxBytes: q.cfg.MaxRecvBytes,
	}, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	q.win, q.asm = win, asm
	q.exp = psn.New(r.PSN)
	q.rqpn, q.rmac, q.rip = r.QPN&psn.Mask, r.MAC, r.IP
	q.state = stateReady
	return nil
}

// Post queues a work request.
func (q *QP) Post(wr WorkRequest) error {
	switch {
	case q.state == stateError:
		return fmt.Errorf("%w: %w", ErrQPFailed, q.err)
	case q.state != stateReady:
		return ErrNotConnected
	case wr.Op < OpSend || wr.Op > OpWriteImm:
		return fmt.Errorf("%w: cannot post %v", ErrInvalidRequest, wr.Op)
	case int64(len(wr.Data)) > q.cfg.MaxMessageSize:
		return fmt.Errorf("%w: %d bytes is more than MaxMessageSize %d", ErrInvalidRequest, len(wr.Data), q.cfg.MaxMessageSize)
	case q.tail-q.head >= uint64(len(q.msgs)):
		return ErrQueueFull
	}
	n := (len(wr.Data) + q.seg - 1) / q.seg
	if n == 0 {
		n = 1
	}
	q.msgs[q.tail%uint64(len(q.msgs))] = sendMsg{wr: wr, id: q.nextID, length: uint32(len(wr.Data)), npkts: uint32(n)}
	q.nextID++
	q.tail++
	return nil
}

// Pending reports the work requests posted and not yet completed.
func (q *QP) Pending() int { return int(q.tail - q.head) }

// fail moves the QP to the error state and completes everything pending
// with err.
func (q *QP) fail(err error) {
	if q.state == stateError {
		return
	}
	q.state = stateError
	q.err = err
	for ; q.head < q.tail; q.head++ {
		m := &q.msgs[q.head%uint64(len(q.msgs))]
		q.comps = append(q.comps, Completion{ID: m.wr.ID, QPN: q.qpn, Op: m.wr.Op, Err: fmt.Errorf("%w: %w", ErrQPFailed, err)})
		*m = sendMsg{}
	}
	q.cursor = q.tail
}

// PollCompletion returns the next completion of a posted request or of a
// received message.
func (q *QP) PollCompletion() (Completion, bool) {
	if len(q.comps) > 0 {
		c := q.comps[0]
		copy(q.comps, q.comps[1:])
		q.comps[len(q.comps)-1] = Completion{}
		q.comps = q.comps[:len(q.comps)-1]
		return c, true
	}
	return q.popRecv()
}

func (q *QP) popRecv() (Completion, bool) {
	if q.recvLen == 0 {
		return Completion{}, false
	}
	c := q.recvq[q.recvHead]
	q.recvq[q.recvHead] = Completion{}
	q.recvHead = (q.recvHead + 1) % len(q.recvq)
	q.recvLen--
	return c, true
}

func (q *QP) pushRecv(c Completion) {
	q.recvq[(q.recvHead+q.recvLen)%len(q.recvq)] = c
	q.recvLen++
	q.stats.MessagesReceived++
}

func (q *QP) recvFull() bool { return q.recvLen == len(q.recvq) }

// NextTimeout returns when HandleTimeout (or PollTransmit, for pacing and
// delayed acknowledgements) next has work, or clock.Never.
func (q *QP) NextTimeout() clock.Time {
	if q.state != stateReady {
		return clock.Never
	}
	t := clock.Min(q.sb.NextTimeout(), q.ctrl.NextTimer())
	if q.ackPending > 0 {
		t = clock.Min(t, q.ackDue)
	}
	if q.hasData() {
		if r := q.ctrl.Rate(); r > 0 {
			t = clock.Min(t, q.pacer.Next(q.lastNow, r))
		}
	}
	return t
}

// hasData reports whether the sender has packets waiting to go that only
// pacing may hold back.
func (q *QP) hasData() bool {
	return q.sb.HasLost() || q.canSendNew()
}

func (q *QP) canSendNew() bool {
	if q.cursor >= q.tail || q.sb.Full() {
		return false
	}
	if q.cursor-q.head >= uint64(q.cfg.MaxMessages) {
		return false
	}
	if w := q.ctrl.Window(); w > 0 {
		if _, b := q.sb.InFlight(); b > 0 && b+q.seg > w { // a window below a packet still lets one out
			return false
		}
	}
	return true
}

// HandleTimeout runs the timers that expired at or before now.
func (q *QP) HandleTimeout(now clock.Time) {
	if q.state != stateReady {
		return
	}
	q.lastNow = now
	if now >= q.ctrl.NextTimer() {
		q.ctrl.OnTimer(now)
	}
	// Each call runs one scoreboard timer; a few may be due at once.
	for i := 0; i < 4 && now >= q.sb.NextTimeout(); i++ {
		ev, kind, err := q.sb.OnTimeout(now, q.events[:0])
		q.events = ev
		q.onEvents(now)
		if kind == retransmit.RTO {
			q.inRTO = true
			q.stats.Timeouts++
			q.ctrl.OnTimeout(now)
		}
		if err != nil {
			q.fail(fmt.Errorf("%w: %w", ErrPeerUnreachable, err))
			return
		}
		q.completeSends()
	}
}

// PollTransmit encodes the next packet the QP has to send at now into buf,
// which must hold an MTU, and returns its length, or 0 when nothing is due.
func (q *QP) PollTransmit(now clock.Time, buf []byte) (int, error) {
	if q.state != stateReady {
		return 0, nil
	}
	q.lastNow = now
	if q.cnpDue {
		return q.encodeCNP(buf)
	}
	if q.nakDue || q.ackNow || q.ackPending >= q.cfg.AckEvery || (q.ackPending > 0 && now >= q.ackDue) {
		return q.encodeAck(now, buf)
	}
	rate := q.ctrl.Rate()
	if rate > 0 && q.pacer.Next(now, rate) > now {
		return 0, nil
	}
	if q.copyDue {
		if n, err := q.sendCopy(now, buf, rate); n > 0 || err != nil {
			return n, err
		}
	}
	if q.sb.HasLost() {
		p, tag, _ := q.sb.PopLost()
		slot := tag >> 32
		off := uint32(tag)
		m := &q.msgs[slot]
		q.resending = true
		n, entropy, err := q.encodeData(now, buf, m, off, p)
		q.resending = false
		if err != nil {
			return 0, err
		}
		if err := q.sb.OnSend(now, p, n, tag, entropy); err != nil && !errors.Is(err, retransmit.ErrUnexpectedPSN) {
			return 0, err
		}
		q.sent(now, n, rate)
		q.stats.Retransmits++
		q.pstats.onSend(entropy, n, true)
		if q.inRTO && q.spray && p == q.sb.Oldest() {
			q.copyDue, q.copyPSN, q.copyTag = true, p, tag
		}
		return n, nil
	}
	if !q.canSendNew() {
		return 0, nil
	}
	slot := q.cursor % uint64(len(q.msgs))
	m := &q.msgs[slot]
	off := q.curOff
	p := q.sb.Next()
	n, entropy, err := q.encodeData(now, buf, m, off, p)
	if err != nil {
		return 0, err
	}
	tag := slot<<32 | uint64(off)
	if err := q.sb.OnSend(now, p, n, tag, entropy); err != nil {
		return 0, err
	}
	q.curOff += uint32(q.seg)
	if q.curOff >= m.length {
		q.cursor++
		q.curOff = 0
	}
	q.sent(now, n, rate)
	q.pstats.onSend(entropy, n, false)
	return n, nil
}

func (q *QP) sent(now clock.Time, n int, rate float64) {
	q.stats.TxPackets++
	q.stats.TxBytes += uint64(n)
	q.ctrl.OnSend(now, n)
	if rate > 0 {
		q.pacer.OnSend(now, n, rate)
	}
}

func (q *QP) headers(pk *wire.Packet, entropy uint16) {
	pk.Eth = wire.Eth{Dst: q.rmac, Src: q.lmac}
	pk.IP = wire.IP{Src: q.lip, Dst: q.rip, TTL: 64}
	pk.UDP = wire.UDP{Src: entropy, Dst: wire.UDPPort}
	pk.BTH = wire.BTH{PKey: 0xFFFF, DestQP: q.rqpn}
	pk.INT = nil
}

// encodeData builds the data packet of message m at offset off with PSN p.
func (q *QP) encodeData(now clock.Time, buf []byte, m *sendMsg, off uint32, p psn.PSN) (int, uint16, error) {
	entropy := q.nextEntropy(now)
	pk := &q.pkt
	q.headers(pk, entropy)
	if q.cfg.ECN {
		pk.IP.TOS = wire.ECNECT0
	}
	end := off + uint32(q.seg)
	if end > m.length || end < off {
		end = m.length
	}
	payload := m.wr.Data[off:end]
	first, last := off == 0, end == m.length
	pk.BTH.PSN = uint32(p)
	pk.BTH.AckReq = last || q.windowFull(p)
	if pk.BTH.AckReq && !q.resending {
		q.reqPSN, q.reqSet = p, true
	}
	write := m.wr.Op == OpWrite || m.wr.Op == OpWriteImm
	imm := m.wr.Op == OpSendImm || m.wr.Op == OpWriteImm
	if write {
		pk.RETH = wire.RETH{VA: m.wr.Remote.Addr, RKey: m.wr.Remote.RKey, Len: m.length}
	}
	pk.Imm = m.wr.Imm
	if q.spray {
		pk.BTH.Opcode = wire.OpSprayData
		pk.Data = wire.Data{MsgID: m.id, Offset: off, MsgLen: m.length, TxTime: uint64(now)}
		switch m.wr.Op {
		case OpSend:
			pk.Data.Kind = wire.KindSend
		case OpSendImm:
			pk.Data.Kind = wire.KindSendImm
		case OpWrite:
			pk.Data.Kind = wire.KindWrite
		case OpWriteImm:
			pk.Data.Kind = wire.KindWriteImm
		}
		if q.cfg.INTHops > 0 && q.wantINT(p, pk.BTH.AckReq) {
			pk.Data.Flags = wire.FlagINT
			pk.Data.INTMax = uint8(q.cfg.INTHops)
		}
	} else {
		pk.BTH.Opcode = classicOpcode(write, imm, first, last)
		pk.BTH.AckReq = last || (uint32(p)-uint32(q.startPSN))%uint32(q.cfg.AckEvery) == 0
	}
	n, err := wire.Encode(buf, pk, payload)
	if err != nil {
		return 0, 0, fmt.Errorf("transport: encoding data packet: %w", err)
	}
	return n, entropy, nil
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

// encodeAck builds the acknowledgement (or NAK) the receiver owes.
func (q *QP) encodeAck(now clock.Time, buf []byte) (int, error) {
	pk := &q.pkt
	q.headers(pk, q.nextAckEntropy())
	if q.spray {
		pk.BTH.Opcode = wire.OpSprayAck
		a := &pk.Ack
		e := &q.last
		if q.echoSet {
			e = &q.echo
		}
		*a = wire.Ack{
			CumPSN: uint32(q.win.Cum()), AckedPSN: uint32(e.psn), EchoTime: e.tx,
			ECNCount: q.ecnCount, Entropy: e.entropy, SackWords: wire.MaxSackWords,
			Syndrome: q.rxErr, MsgID: q.rxErrMsg,
		}
		if hold := now.Sub(e.arrive); hold > 0 && hold < time.Second {
			a.HoldNs = uint32(hold)
		}
		a.SackBase = uint32(q.win.Sack(q.last.psn, a.Sack[:]))
		// Trailing zero words say nothing: an ACK of packets that arrived
		// in order carries one word, not four (24 bytes less on links
		// that ACKs share with the other direction's data).
		for a.SackWords > 1 && a.Sack[a.SackWords-1] == 0 {
			a.SackWords--
		}
		if q.echoSet {
			a.INTHops = uint8(e.intLen / wire.HopLen)
			pk.INT = e.intBuf[:e.intLen]
			q.echoSet = false
		}
		pk.BTH.PSN = a.CumPSN
	} else {
		pk.BTH.Opcode = wire.OpAcknowledge
		pk.BTH.PSN = uint32(q.exp.Prev())
		pk.AETH = wire.AETH{Syndrome: wire.SyndromeAck | 0x1F, MSN: q.msn & psn.Mask}
		switch {
		case q.rxErr != 0:
			pk.AETH.Syndrome = q.rxErr
			pk.BTH.PSN = uint32(q.rxErrPSN)
		case q.nakDue:
			pk.AETH.Syndrome = wire.NakPSNSequenceError
			pk.BTH.PSN = uint32(q.exp)
		}
	}
	n, err := wire.Encode(buf, pk, nil)
	if err != nil {
		return 0, fmt.Errorf("transport: encoding ack: %w", err)
	}
	if q.nakDue || q.rxErr != 0 {
		q.stats.NaksSent++
	}
	q.stats.AcksSent++
	// An ACK that answers a lost one goes out twice: on the path most
	// likely to deliver, then on the next of the rotation.
	q.nakDue, q.ackNow, q.ackDup, q.ackPending, q.ecnCount = false, q.ackDup, false, 0, 0
	q.lastAckAt = now
	if q.spray {
		q.ackedHigh, q.ackedSet = q.win.Highest(), true
	}
	return n, nil
}

// nextAckEntropy returns the source port of the next acknowledgement: the
// QP's entropies in turn, so that one dead path loses only a share of the
// acknowledgements (they are cumulative) and never all of them. ACKs do not
// go through the path policy (nothing acknowledges an ACK), but they leave
// on the paths of the QP's own data: a policy that knows which of those
// are dead (multipath.AckPather) passes over them. Blind rotation lost
// every ACK that landed on a dead spine, and a sender whose tail was
// acknowledged only there failed after MaxRetries timeouts.
func (q *QP) nextAckEntropy() uint16 {
	if ap, ok := q.paths.(multipath.AckPather); ok {
		q.lastAckEntropy = ap.NextAck(q.ackDup)
		return q.lastAckEntropy
	}
	set := q.paths.Paths()
	q.ackTurn = (q.ackTurn + 1) % len(set)
	return set[q.ackTurn]
}

// encodeCNP builds a RoCEv2 congestion notification packet for the peer.
func (q *QP) encodeCNP(buf []byte) (int, error) {
	pk := &q.pkt
	q.headers(pk, q.nextAckEntropy())
	pk.BTH.Opcode = wire.OpCNP
	pk.BTH.BECN = true
	n, err := wire.Encode(buf, pk, nil)
	if err != nil {
		return 0, fmt.Errorf("transport: encoding CNP: %w", err)
	}
	q.cnpDue = false
	q.stats.CNPsSent++
	return n, nil
}

// Handle processes one decoded packet addressed to this QP, received at now.
// The packet's slices must stay valid only during the call.
func (q *QP) Handle(now clock.Time, pk *wire.Packet) {
	if q.state != stateReady {
		return
	}
	if pk.IP.Src != q.rip {
		q.stats.BadPackets++
		return
	}
	switch op := pk.BTH.Opcode; {
	case op == wire.OpSprayData && q.spray:
		q.recvSpray(now, pk)
	case op == wire.OpSprayAck && q.spray:
		q.onSprayAck(now, pk)
	case op == wire.OpAcknowledge && !q.spray:
		q.onClassicAck(now, pk)
	case op <= wire.OpWriteOnlyImm && !q.spray:
		q.recvClassic(now, pk)
	case op == wire.OpCNP:
		q.stats.CNPsReceived++
		q.ctrl.OnCNP(now)
	default:
		q.stats.BadPackets++
	}
}

func (q *QP) noteData(now clock.Time, pk *wire.Packet, p psn.PSN, tx uint64) {
	if pk.IP.TOS&3 == wire.ECNCE {
		q.ecnCount++
		q.stats.ECNMarked++
		if q.spray {
			q.ackNow = true // the ACK echoes the mark
		} else if q.cnp.OnCE(now) {
			q.cnpDue = true // DCQCN's notification point
		}
	}
	q.last.psn, q.last.tx, q.last.arrive, q.last.entropy = p, tx, now, pk.UDP.Src
	if len(pk.INT) > 0 {
		q.echo.psn, q.echo.tx, q.echo.arrive, q.echo.entropy = p, tx, now, pk.UDP.Src
		q.echo.intLen = copy(q.echo.intBuf[:], pk.INT)
		q.echoSet = true
	}
	if q.ackPending == 0 {
		q.ackDue = now.Add(q.cfg.AckDelay)
	}
	q.ackPending++
}

// recvSpray places a spray data packet.
func (q *QP) recvSpray(now clock.Time, pk *wire.Packet) {
	if q.rxErr != 0 {
		q.ackNow = true // answer with the NAK until the sender gives up
		return
	}
	p := psn.New(pk.BTH.PSN)
	d := p.Diff(q.win.Cum())
	switch {
	case d < 0 || q.win.Has(p):
		q.stats.Duplicates++
		q.noteData(now, pk, p, pk.Data.TxTime)
		q.ackNow = true
		q.ackDup = q.noteAckLost(now) || q.ackDup
		return
	case d >= int32(q.win.Size()):
		q.stats.OutOfWindow++
		q.ackNow = true
		return
	}
	h := &pk.Data
	write := h.Kind == wire.KindWrite || h.Kind == wire.KindWriteImm
	if !write && h.Kind != wire.KindSend && h.Kind != wire.KindSendImm {
		q.stats.BadPackets++
		return
	}
	m, err := q.asm.Message(h.MsgID, h.MsgLen, !write)
	if err != nil {
		// Too many messages in progress, or not ours to take: drop
		// without marking, so that the sender retransmits later.
		q.stats.NoBuffer++
		return
	}
	var dst []byte
	if write {
		var ok bool
		dst, ok = q.mrs.target(pk.RETH.RKey, pk.RETH.VA, pk.RETH.Len, h.Offset, len(pk.Payload))
		if !ok || pk.RETH.Len != h.MsgLen {
			q.stats.RemoteAccessErrors++
			q.rxErr, q.rxErrMsg, q.ackNow = wire.NakRemoteAccessError, h.MsgID, true
			return
		}
	}
	m.Kind = uint8(h.Kind)
	if h.Kind == wire.KindSendImm || h.Kind == wire.KindWriteImm {
		m.Imm, m.HasImm = pk.Imm, true
	}
	if _, err := q.asm.Place(m, h.Offset, pk.Payload); err != nil {
		q.stats.BadPackets++
		return
	}
	copy(dst, pk.Payload)
	// A packet sent before the highest PSN received (or in the same
	// engine step: TxTime is the step's time), which overtook it:
	// reordering, not a resend (a resend leaves after the originals).
	above := q.win.Highest().Diff(p)
	late := above > 0 && h.TxTime <= q.highTx
	// Only one whose overtaker an ACK already reported needs an ACK of
	// its own (see below); the others join the ACK that reports both.
	late = late && q.ackedSet && q.ackedHigh.Diff(p) > 0
	if above < 0 {
		q.highTx = h.TxTime
	}
	q.win.Mark(p)
	q.noteReorder()
	q.stats.RxPackets++
	q.stats.RxBytes += uint64(len(pk.Payload))
	q.noteData(now, pk, p, h.TxTime)
	if pk.BTH.AckReq || late {
		// The last packet of a message, or a sender waiting on a small
		// window: tell the sender now. A packet beyond a hole waits for
		// AckEvery or AckDelay like any other: sprayed packets arrive
		// beyond holes most of the time, and RACK finds losses by time,
		// not by counting acknowledgements. A packet overtaken by one
		// sent after it, where an ACK already sent reported the later
		// one, is acknowledged at once (as RFC 5681 4.2 does for any
		// that fills a hole): the sender has seen the later one
		// acknowledged, and its RACK and probe timers run from this
		// one's transmission; held for AckDelay behind a later AckReq,
		// 358 of them were declared lost in spray compare's all-to-all
		// with HPCC keeping 2 frames in flight. One whose overtaker is
		// still waiting for its ACK here waits with it: the sender
		// learns of both at once. (Every overtaken packet acknowledged
		// at once was a third of the ACKs in spray compare's lossless
		// all-to-all, 0.18 per data packet.) Resends that fill holes
		// wait like others: acknowledged at once, they had the sender
		// find losses sooner and resend into the queue that had dropped
		// them (cc's TestTransferOverBottleneck, a window four times the
		// queue: 20 of 60 runs took 3 RTOs instead of 0-1).
		q.ackNow = true
	}
	q.deliverSpray()
}

func (q *QP) deliverSpray() {
	for !q.recvFull() {
		m, ok := q.asm.Pop()
		if !ok {
			return
		}
		switch wire.OpKind(m.Kind) {
		case wire.KindSend:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecv, Data: m.Buf, Len: int(m.Len)})
		case wire.KindSendImm:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecvImm, Data: m.Buf, Len: int(m.Len), Imm: m.Imm})
		case wire.KindWriteImm:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecvImm, Len: int(m.Len), Imm: m.Imm})
		}
	}
}

// recvClassic is the Go-Back-N receiver: it takes packets in PSN order only.
func (q *QP) recvClassic(now clock.Time, pk *wire.Packet) {
	if q.rxErr != 0 {
		q.ackNow = true
		return
	}
	p := psn.New(pk.BTH.PSN)
	d := p.Diff(q.exp)
	if d < 0 {
		q.stats.Duplicates++
		q.ackNow = true
		return
	}
	if d > 0 {
		q.stats.OutOfOrderDrops++
		if !q.nakSeq {
			q.nakSeq, q.nakDue = true, true
		}
		return
	}
	op := pk.BTH.Opcode
	first := op == wire.OpSendFirst || op == wire.OpSendOnly || op == wire.OpSendOnlyImm ||
		op == wire.OpWriteFirst || op == wire.OpWriteOnly || op == wire.OpWriteOnlyImm
	if first && q.recvFull() {
		q.stats.NoBuffer++ // no room to complete another message: the sender will time out and resend
		return
	}
	if syn := q.placeClassic(op, pk); syn != 0 {
		if syn == wire.NakInvalidRequest {
			q.stats.BadPackets++
		}
		q.rxErr, q.rxErrPSN, q.ackNow = syn, p, true
		return
	}
	q.nakSeq = false
	q.exp = q.exp.Next()
	q.stats.RxPackets++
	q.stats.RxBytes += uint64(len(pk.Payload))
	q.noteData(now, pk, p, 0)
	if pk.BTH.AckReq {
		q.ackNow = true
	}
}

// placeClassic applies one in-order classic packet and returns a NAK
// syndrome, or 0.
func (q *QP) placeClassic(op wire.Opcode, pk *wire.Packet) uint8 {
	c := &q.cmsg
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
		}
	}
	n := len(pk.Payload)
	if write {
		dst, ok := q.mrs.target(c.rkey, c.va, c.length, c.off, n)
		if !ok {
			*c = classicMsg{}
			q.stats.RemoteAccessErrors++
			return wire.NakRemoteAccessError
		}
		copy(dst, pk.Payload)
	} else {
		if int64(len(c.buf))+int64(n) > q.cfg.MaxMessageSize {
			*c = classicMsg{}
			return wire.NakInvalidRequest
		}
		c.buf = append(c.buf, pk.Payload...)
	}
	c.off += uint32(n)
	if last {
		q.msn++
		switch {
		case write && imm:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecvImm, Len: int(c.off), Imm: pk.Imm})
		case !write && imm:
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecvImm, Data: c.buf, Len: len(c.buf), Imm: pk.Imm})
		case !write:
			if c.buf == nil {
				c.buf = []byte{}
			}
			q.pushRecv(Completion{QPN: q.qpn, Op: OpRecv, Data: c.buf, Len: len(c.buf)})
		}
		*c = classicMsg{}
	}
	return 0
}

// onSprayAck processes a spray acknowledgement at the sender.
func (q *QP) onSprayAck(now clock.Time, pk *wire.Packet) {
	a := &pk.Ack
	q.stats.AcksReceived++
	ev, res := q.sb.OnAck(now, retransmit.Ack{
		Cum: psn.New(a.CumPSN), SackBase: psn.New(a.SackBase), Sack: a.Sack[:a.SackWords],
		Acked: psn.New(a.AckedPSN), HasAcked: true, AckedSentAt: clock.Time(a.EchoTime),
	}, q.events[:0])
	q.events = ev
	if res.Progress {
		q.inRTO = false
	}
	q.onEvents(now)
	q.scorePaths(now, psn.New(a.AckedPSN))
	// The echoed timestamp gives the full round trip of the acknowledged
	// packet (cc.Sample.RTT includes the receiver's hold time); paths are
	// scored on the fabric part alone.
	rtt, hold := res.RTT, time.Duration(a.HoldNs)
	if a.EchoTime != 0 {
		if r := now.Sub(clock.Time(a.EchoTime)); r > 0 {
			rtt = r
		}
	}
	q.ctrl.OnAck(cc.Sample{Now: now, AckedBytes: res.AckedBytes, RTT: rtt, HoldTime: hold, ECNCount: int(a.ECNCount), INT: pk.INT, Entropy: a.Entropy})
	q.noteRTT(rtt - hold) // the fabric's part, as the paths see it
	if a.Entropy != 0 {
		if len(pk.INT) > 0 {
			qd := intQueueDelay(pk.INT)
			q.noteINT(a.Entropy, qd)
			if obs, ok := q.paths.(multipath.INTObserver); ok {
				obs.OnINT(now, a.Entropy, qd)
			}
			if obs, ok := q.paths.(multipath.PathObserver); ok {
				obs.OnPath(now, a.Entropy, intPathSignature(pk.INT))
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

// intQueueDelay is the queueing delay along a path: the sum over the hop
// records of each queue's bytes drained at its link's rate.
func intQueueDelay(records []byte) time.Duration {
	var d time.Duration
	for i := range len(records) / wire.HopLen {
		h := wire.HopAt(records, i)
		if h.RateMbps > 0 {
			d += time.Duration(uint64(h.QLen) * 8000 / uint64(h.RateMbps))
		}
	}
	return d
}

// intPathSignature names the path a packet took by the switches and egress
// ports in its INT records (FNV-1a over them; never 0).
func intPathSignature(records []byte) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(records) / wire.HopLen {
		hop := wire.HopAt(records, i)
		h = (h ^ uint64(hop.Switch)<<16 ^ uint64(hop.Port)) * 1099511628211
	}
	return max(h, 1)
}

// nakError is the error of a fatal NAK from the responder: like IBA, the
// QP moves to the error state and every pending request fails with it.
func nakError(syn uint8, where string) error {
	switch syn {
	case wire.NakRemoteAccessError:
		return fmt.Errorf("%w (%s)", ErrRemoteAccess, where)
	case wire.NakRemoteOperational:
		return fmt.Errorf("%w (%s)", ErrRemoteOperational, where)
	}
	return fmt.Errorf("%w: NAK syndrome %#x (%s)", ErrInvalidRequest, syn, where)
}

// onClassicAck processes an ACKNOWLEDGE (ACK or NAK) at a classic sender.
func (q *QP) onClassicAck(now clock.Time, pk *wire.Packet) {
	q.stats.AcksReceived++
	p := psn.New(pk.BTH.PSN)
	syn := pk.AETH.Syndrome
	var res retransmit.AckResult
	switch {
	case syn == wire.NakPSNSequenceError:
		q.stats.NaksReceived++
		q.events, res = q.sb.OnNak(now, p, q.events[:0])
	case wire.IsNak(syn):
		// Everything before p was accepted; p was refused.
		q.stats.NaksReceived++
		q.events, _ = q.sb.OnAck(now, retransmit.Ack{Cum: p}, q.events[:0])
		q.onEvents(now)
		q.completeSends()
		q.fail(nakError(syn, fmt.Sprintf("PSN %d", p)))
		return
	case syn&0xE0 == wire.SyndromeAck:
		q.events, res = q.sb.OnAck(now, retransmit.Ack{Cum: p.Next()}, q.events[:0])
	default:
		q.stats.BadPackets++ // RNR NAK: not generated by spray
		return
	}
	q.onEvents(now)
	q.ctrl.OnAck(cc.Sample{Now: now, AckedBytes: res.AckedBytes, RTT: res.RTT})
	q.noteRTT(res.RTT)
	q.completeSends()
}

// onEvents applies the scoreboard's acked and lost events.
func (q *QP) onEvents(now clock.Time) {
	for i := range q.events {
		e := &q.events[i]
		if e.Lost {
			q.paths.OnLoss(now, e.Entropy)
			q.ctrl.OnLoss(now, e.Bytes)
			continue
		}
		q.msgs[e.Tag>>32].acked++
	}
}

// completeSends completes, in order, the messages whose packets are all
// acknowledged.
func (q *QP) completeSends() {
	for q.head < q.cursor {
		m := &q.msgs[q.head%uint64(len(q.msgs))]
		if m.acked < m.npkts {
			return
		}
		q.comps = append(q.comps, Completion{ID: m.wr.ID, QPN: q.qpn, Op: m.wr.Op, Err: m.err, Len: int(m.length)})
		q.stats.MessagesSent++
		*m = sendMsg{}
		q.head++
	}
}
