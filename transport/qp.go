package transport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/psn"
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
	// OpRead reads len(Data) bytes of the peer's registered region at
	// Remote into Data (one-sided RDMA READ); the peer sees no completion.
	OpRead

	// opReadResp is the Spray responder's answer to a READ, queued by
	// the QP itself behind the requests posted before it; it completes
	// nothing. (RoCE answers outside the send queue: read_classic.go.)
	opReadResp
)

var opNames = [...]string{"?", "send", "send-imm", "write", "write-imm", "recv", "recv-imm", "read", "read-resp"}

func (o Op) String() string {
	if o == OpPostRecv {
		return "post-recv"
	}
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// WorkRequest is one operation posted to a QP. The QP reads Data until the
// request completes: do not change it before then, unless it is a SEND or
// a WRITE of at most MaxInline bytes, which Post copies.
type WorkRequest struct {
	ID     uint64 // echoed in the completion
	Op     Op     // OpSend, OpSendImm, OpWrite, OpWriteImm or OpRead
	Data   []byte // the bytes sent or written; for OpRead, where the bytes read land
	Remote Remote // target of a WRITE, source of a READ: the peer's region and address
	Imm    uint32
}

// Completion reports a finished work request or a received message.
type Completion struct {
	ID  uint64 // the work request's ID; for a receive, the posted buffer's (0 without)
	QPN uint32
	Op  Op
	Err error // nil on success
	// Data is the message of OpRecv/OpRecvImm after a SEND, owned by the
	// receiver: the posted buffer's first Len bytes when the QP has posted
	// buffers (the whole buffer, length 0, when Err is set), else a buffer
	// of the transport's pool (see Message.Release).
	Data []byte
	Len  int    // bytes sent, written, read or received
	Imm  uint32 // valid for OpRecvImm

	pooled bool // Data came from the pool
}

// QPInfo is what peers exchange out of band to connect two QPs.
type QPInfo struct {
	QPN uint32
	PSN uint32 // first PSN the QP sends
	MAC [6]byte
	IP  netip.Addr
	// NoMsgLimit says the peer's data path predates the message limit
	// (wire.AckMsgLimit) and drops an ACK that carries it as a bad
	// header: this QP's ACKs to it carry none, and its sender is held
	// back by nothing (TestNoMsgLimitPeer). The connection manager sets
	// it for a peer of its version 4 or earlier; peers exchanging QPInfo
	// out of band leave it false unless one side runs an older build.
	NoMsgLimit bool
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
	// RNRNaksSent counts receiver-not-ready NAKs: answers to data dropped
	// for lack of room (NoBuffer). RNRNaksReceived counts those taken by
	// the sender, which then starts its count of timeouts over: a peer
	// that is alive but slow to take messages never fails the QP.
	RNRNaksSent, RNRNaksReceived uint64
	// TrimsReceived counts trimmed data packets (a switch cut them to
	// their headers rather than drop them: wire.Trim), TrimNaksSent the
	// NAKs that asked the sender for such a packet's PSN again, and
	// TrimNaksReceived those that the sender acted on by resending it.
	TrimsReceived, TrimNaksSent, TrimNaksReceived uint64
	RemoteAccessErrors                            uint64 // WRITEs and READs refused by this receiver
	BadPackets                                    uint64 // wrong source, wrong profile, bad opcode sequence
	ECNMarked                                     uint64 // CE-marked data packets received
	CNPsSent, CNPsReceived                        uint64 // RoCEv2 congestion notifications (classic profile)
	MessagesSent                                  uint64
	MessagesReceived                              uint64
	Timeouts                                      uint64
	// RejectedAcks counts acknowledgements (ACK, SACK) dropped whole
	// because what they acknowledge is not what the QP sent: a cumulative
	// PSN, echoed PSN or SACK bit beyond the last PSN sent or more than a
	// Window before the oldest unacknowledged one. RejectedNaks counts NAKs
	// dropped because they name no outstanding request, RejectedCNPs
	// CNPs dropped because the QP sent no data they could be about. None
	// of them changes the QP's state: they are what a blind spoofer sends.
	RejectedAcks, RejectedNaks, RejectedCNPs uint64
	// RejectedReadResponses counts READ responses dropped because they
	// answer no READ this QP has outstanding (RoCE: a PSN no outstanding
	// READ asked for), or do not fit the one they name (its length, or
	// the RoCE opcode for their place).
	RejectedReadResponses uint64

	// RTTSamples counts round-trip samples: acknowledgements that timed a
	// packet (Spray: every ACK, by its echoed timestamp less the time the
	// receiver held the packet before acknowledging it and, on a link that
	// stamps arrivals, the time the ACK waited here; RoCE: those the
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
	// RecvCopied counts messages copied into their posted receive buffer
	// at delivery: they arrived before the receiver knew their buffer
	// (Spray; see Conn.PostRecv). The others were placed straight there.
	RecvCopied uint64

	// Receiver-paced credits (Config.Credits). A sender counts the
	// requests it sent, the grants it received (ACKs that carried credit
	// not included), the packets it sent unsolicited, the times it had
	// data that only credit held back (CreditWaits) and the times it gave
	// up on its peer's credit and sent freely (CreditFallbacks: the
	// peer's ACKs carry none, or it answered no request); a receiver the
	// grants it sent and the requests it received. CreditRejected counts
	// grants and requests dropped as nonsense (far beyond what was sent
	// or granted).
	CreditRequestsSent, CreditGrantsReceived uint64
	CreditGrantsSent, CreditRequestsReceived uint64
	UnsolicitedPackets, CreditWaits          uint64
	CreditFallbacks, CreditRejected          uint64

	// Security counts a secured QP's dropped packets and key rotations
	// (QP.Secure); zero for a clear QP.
	Security SecurityStats
}

// qpCounters are the QPStats counters a busy QP moves, held in the QP;
// the others wait in rareStats until their first count, so that each of
// a simulator's million QPs holds only these (TestQPSize). Stats copies
// both (TestStatsCopiesEveryCounter).
type qpCounters struct {
	TxPackets        uint64
	TxBytes          uint64
	Retransmits      uint64
	RxPackets        uint64
	RxBytes          uint64
	Duplicates       uint64
	OutOfOrderDrops  uint64
	AcksSent         uint64
	AcksReceived     uint64
	NaksSent         uint64
	NaksReceived     uint64
	TrimsReceived    uint64
	TrimNaksSent     uint64
	TrimNaksReceived uint64
	ECNMarked        uint64
	CNPsSent         uint64
	CNPsReceived     uint64
	MessagesSent     uint64
	MessagesReceived uint64
	Timeouts         uint64
	RTTSamples       uint64
	SRTT             time.Duration
	MinRTT           time.Duration
	INTAcks          uint64
	INTQueueDelay    time.Duration
	MaxINTQueueDelay time.Duration
	Microbursts      uint64
	MicroburstAcks   uint64
	MaxReorderHeld   uint64
}

// rareStats are the QPStats counters of errors, refusals and credits:
// zero on most QPs, allocated at the first count (QP.rareStats).
type rareStats struct {
	OutOfWindow            uint64
	NoBuffer               uint64
	RNRNaksSent            uint64
	RNRNaksReceived        uint64
	RemoteAccessErrors     uint64
	BadPackets             uint64
	RejectedAcks           uint64
	RejectedNaks           uint64
	RejectedCNPs           uint64
	RejectedReadResponses  uint64
	RecvCopied             uint64
	CreditRequestsSent     uint64
	CreditGrantsReceived   uint64
	CreditGrantsSent       uint64
	CreditRequestsReceived uint64
	UnsolicitedPackets     uint64
	CreditWaits            uint64
	CreditFallbacks        uint64
	CreditRejected         uint64
}

// rareStats returns the QP's rare counters, allocating them on first use.
func (q *QP) rareStats() *rareStats {
	if q.rare == nil {
		q.rare = new(rareStats)
	}
	return q.rare
}

type sendMsg struct {
	wr     WorkRequest
	id     uint32
	length uint32
	npkts  uint32
	acked  uint32
	err    error
	// readDone: every byte of this READ's response has landed in wr.Data.
	readDone bool
	// inline: wr.Data is the message's copy in the QP's inline ring
	// (MaxInline).
	inline bool
	// A RoCE READ numbers its response packets with its own PSNs: psn is
	// that of its first response packet, landed the packets landed, in
	// order (read_classic.go).
	psn    psn.PSN
	landed uint32
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
	cfg  *Config
	mrs  *mrTable
	qpn  uint32
	rqpn uint32
	err  error
	// foreign is the last fatal NAK dropped because it named no request
	// of this QP: the error that fails the QP says so.
	foreign foreignNak

	lmac, rmac [6]byte
	lip, rip   netip.Addr

	// The profile's protocol: snd fills in data packets and acts on
	// acknowledgements, rcv takes data packets and fills in the
	// acknowledgements it owes.
	snd sender
	rcv receiver

	// scr is the scratch space of the engine's QPs (Config.scratch):
	// reset on every use, so one engine's QPs share it.
	scr *qpScratch

	// send queue and scoreboard
	startPSN psn.PSN
	// readsOut counts the Spray profile's READs posted whose response has
	// not all landed (readDeadline, with readSince and heardAt).
	readsOut int32
	sb       *retransmit.Scoreboard
	paths    multipath.Policy
	// ctrl is the congestion controller, noController until the QP first
	// has data to send (activate): a QP that only listens holds none.
	ctrl  cc.Controller
	pacer cc.Pacer
	seg   int // payload bytes per data packet
	// msgs is the ring of work requests: message i (counting from the
	// first ever posted) at msgs[i%len(msgs)], from head to tail. It
	// grows with them up to SendQueue (growSend) and is given back when
	// idle (trim); scoreboard tags name a message by the low 32 bits of
	// its number (msgTag), which survive the growth.
	msgs []sendMsg
	// inl holds MaxInline bytes per slot of msgs, for the copies of the
	// small messages posted (MaxInline): made by the first, grown with
	// msgs and given back with it, behind a pointer, as a QP that sends
	// no small message holds none (TestQPSize).
	inl    *[]byte
	head   uint64 // oldest incomplete message
	cursor uint64 // next message to segment
	tail   uint64 // next free slot
	// readSlots are slots reserved for the responses to READs received
	// and not yet answered.
	readSlots uint64
	curOff    uint32
	nextID    uint32
	// resending: encodeData is encoding a retransmission (see nextEntropy)
	resending bool
	// trimDue: a trimmed packet's NAK queued its resend, which the engine
	// sends ahead of new data (repairDue, Engine.outputRepair).
	trimDue bool
	// inRTO: a retransmission timeout fired and no ACK made progress since
	inRTO bool
	// rtoRecovery: a retransmission timeout fired and the cumulative ACK
	// has not yet passed rtoEnd, the next PSN at the time (see nextEntropy)
	rtoRecovery bool
	rtoEnd      psn.PSN

	// received messages and the acknowledgement owed; recvq grows with
	// them (pushRecv) and is given back when idle (trim)
	recvq    []Completion
	recvHead int32 // int32: the QP fits its size class (TestQPSize)
	recvLen  int32
	rq       *recvQueue // posted receive buffers: recvbuf.go; nil until used

	ackPending int
	ackDue     clock.Time
	ackNow     bool
	ecnCount   uint16
	cnpDue     bool // a CNP is owed (the RoCE receiver's CE marks)

	// ackDup: the due ACK answers a duplicate, and an earlier ACK was
	// probably lost (noteAckLost). lastAckEntropy and lastAckAt are the
	// entropy and time of the last ACK sent.
	ackDup         bool
	lastAckEntropy uint16
	lastAckAt      clock.Time

	hostIn     int        // bytes in flight counted in the engine's (hostwin.go)
	lastNow    clock.Time // the latest time the QP was handed
	rxAt       clock.Time // when the packet being handled reached the host
	lastSendAt clock.Time // when the latest data packet left
	// activeAt is when the QP last received, sent or was posted to:
	// trimAfter later, it gives back the buffers it holds empty.
	activeAt clock.Time
	// readSince is when the first READ of readsOut was posted, heardAt
	// when the latest packet from the peer came: readDeadline.
	readSince, heardAt clock.Time
	// owner, when set, trims its own buffers when the QP trims (a Conn).
	owner  *Conn
	comps  []Completion
	stats  qpCounters
	rare   *rareStats // nil until the first rare count
	pstats pathTable  // per-path counters: stats_telemetry.go; from activate
	sch    qpSched    // place in the engine's schedule: sched.go
	// sec holds a secured QP's keys and counters (secure.go); nil: clear.
	sec *secState
	// od is the state of a QP made on demand (peers.go); nil for others.
	od *peerQP
	// cred is the sender's and the receiver's credit state, nil without
	// Config.Credits (credit.go).
	cred *qpCredit
	// mwin is the flow control in messages (msgwin.go).
	mwin msgWin
	// restarted: the engine restarted the loss timers, found due while it
	// did not run, and nothing came from the peer since (restartTimers).
	restarted bool
	// peerHold is the longest hold of stallMin or more that the peer's
	// ACKs reported lately, in hostUnits; peerHoldN counts the ACKs
	// towards its halving (notePeerHold).
	peerHold, peerHoldN uint8
	state               qpState
	// ackTurn: acknowledgements rotate over the QP's entropies (at most
	// 1,024, so 16 bits).
	ackTurn uint16
}

// qpScratch is what QPs compute in and throw away on every use: one per
// engine, shared by its QPs (Config.scratch), so that a QP holds only its
// state. The events array grows to the most events one call returned.
type qpScratch struct {
	events []retransmit.Event
	// cur are the scoreboard's events the QP being handled applies
	// (takeEvents), in events' array.
	cur   []retransmit.Event
	pkt   wire.Packet
	hops  [wire.MaxINTHops]cc.Hop // the INT records of the ACK being handled
	paths multipath.Scratch
	// adaptive is the configuration the engine's adaptive policies share.
	adaptive multipath.AdaptiveConfig
	// fabQ is the largest queueing delay the INT records of any ACK of
	// the engine's QPs reported in the current window (fabQ[0], since
	// fabQAt) and in the previous one (noteFabricQueue).
	fabQ   [2]time.Duration
	fabQAt clock.Time
}

// fabQWindow is the window of qpScratch.fabQ.
const fabQWindow = 250 * time.Microsecond

// noteFabricQueue records an ACK's INT queueing delay d at now and returns
// the largest of this window's and the previous one's: the queues the
// engine's traffic meets anywhere in the fabric lately, which a QP's packet
// on a path it has not measured may meet too.
func (sc *qpScratch) noteFabricQueue(now clock.Time, d time.Duration) time.Duration {
	if el := now.Sub(sc.fabQAt); el >= fabQWindow {
		sc.fabQ[1] = sc.fabQ[0]
		if el >= 2*fabQWindow {
			sc.fabQ[1] = 0
		}
		sc.fabQ[0], sc.fabQAt = 0, now
	}
	sc.fabQ[0] = max(sc.fabQ[0], d)
	return max(sc.fabQ[0], sc.fabQ[1])
}

// scratchSpace returns the scratch space of the QPs that use c, allocated
// at the first.
func (c *Config) scratchSpace() *qpScratch {
	if c.scratch == nil {
		c.scratch = new(qpScratch)
	}
	return c.scratch
}

// trimAfter is how long a QP stays idle (nothing received, sent or posted)
// before it gives back the rings it holds empty: long enough that a QP
// that talks in bursts keeps them from one to the next (a ping-pong or a
// collective's rounds allocate nothing per message), short enough that
// thousands of QPs that went quiet cost what an idle QP costs
// (TestIdleQPMemory).
const trimAfter = 100 * time.Millisecond

// noController stands in for a QP's congestion controller until the QP
// first has data to send (activate): it allows nothing it is asked about
// and arms no timer.
type noController struct{}

func (noController) OnSend(clock.Time, int) {}
func (noController) OnAck(cc.Sample)        {}
func (noController) OnLoss(clock.Time, int) {}
func (noController) OnTimeout(clock.Time)   {}
func (noController) OnCNP(clock.Time)       {}
func (noController) NextTimer() clock.Time  { return clock.Never }
func (noController) OnTimer(clock.Time)     {}
func (noController) Window() int            { return 0 }
func (noController) Rate() float64          { return 0 }

// activate gives the QP its congestion controller and its per-path
// counters when it first has data to send: a message posted, a READ to
// answer. Until then PathCounters is empty.
func (q *QP) activate() {
	if _, idle := q.ctrl.(noController); idle {
		q.ctrl = newController(q.cfg, q.seg)
		if q.pstats.ents == nil {
			q.pstats.init(q.paths.Paths())
		}
	}
}

func newQP(cfg *Config, qpn uint32, startPSN uint32, lmac [6]byte, lip netip.Addr, ports []uint16, rng *rand.Rand) (*QP, error) {
	q := &QP{cfg: cfg, qpn: qpn, lmac: lmac, lip: lip, startPSN: psn.New(startPSN), scr: cfg.scratchSpace()}
	if cfg.Credits {
		q.cred = new(qpCredit)
	}
	if cfg.Profile == Spray {
		q.snd, q.rcv = &spraySender{q: q}, &sprayReceiver{q: q}
	} else {
		q.snd, q.rcv = &classicSender{q: q}, &classicReceiver{q: q}
	}
	mode := retransmit.SelectiveRepeat
	if cfg.Recovery == GoBackN {
		mode = retransmit.GoBackN
	}
	rc := retransmit.Config{
		Mode: mode, Capacity: cfg.Window, MinRTO: cfg.MinRTO, MaxRTO: cfg.MaxRTO, MaxRetries: cfg.MaxRetries,
		MaxAckDelay: cfg.AckDelay, AckEvery: cfg.AckEvery,
	}
	// A sprayed QP's packets overtake each other by up to the difference
	// of their paths' queues: RACK waits that long before it calls one lost.
	rc.QueueingReorder = cfg.Profile == Spray && cfg.Paths != PathsECMP
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
	q.paths = newPolicy(cfg, set, rng)
	q.seg = payloadSize(cfg, lip.Is6())
	q.ctrl = noController{}
	q.pacer = *cc.NewPacer(cfg.PacingBurst)
	return q, nil
}

// runFrames is the most packets a QP sends in a row on one entropy on a
// link that segments (link.Info.Segments): a run is one UDP_SEGMENT
// message (18 frames of 3.5 KB fill its 64 KiB), and shorter runs cost
// more per byte (docs/design.md, "Run length and Step budget"); 32 keeps
// 1.5 KB frames' runs to 48 KB, so that a 1 MiB message still crosses
// every one of 8 entropies (TestRunsPerEntropy).
const runFrames = 32

// setRuns makes the QP send its packets in runs on one entropy of
// runFrames, or the segments the link sends as one message if fewer.
func (q *QP) setRuns(segments int) {
	if r, ok := q.paths.(multipath.Runner); ok && segments > 1 {
		r.SetRun(min(runFrames, segments))
	}
}

// newPolicy returns the path policy of cfg.Paths over the first
// cfg.Entropies entropies of set (non-empty).
func newPolicy(cfg *Config, set []uint16, rng *rand.Rand) multipath.Policy {
	switch set = set[:min(len(set), cfg.Entropies)]; cfg.Paths {
	case PathsECMP:
		return multipath.NewECMP(set[rng.IntN(len(set))])
	case PathsAdaptive:
		scr := cfg.scratchSpace()
		if scr.adaptive.Scratch == nil {
			scr.adaptive.Scratch = &scr.paths
		}
		return multipath.NewAdaptiveShared(set, rng.Uint64(), &scr.adaptive)
	default:
		return multipath.NewSpray(set, rng.Uint64())
	}
}

// payloadSize is the payload of every full data packet: what is left of the
// MTU after the largest header stack the profile can send and extra bytes
// (a secured QP's header and tag), rounded down to 64 bytes (Spray) or to
// a power of two, the path MTU of classic RoCE.
func payloadSize(cfg *Config, v6 bool) int { return payloadSizeOver(cfg, v6, 0) }

// payloadSizeOver is payloadSize with extra bytes of headers per packet.
func payloadSizeOver(cfg *Config, v6 bool, extra int) int {
	hdr := wire.EthLen + wire.IPv4Len + wire.UDPLen + wire.BTHLen + wire.RETHLen + wire.ImmLen + wire.ICRCLen + extra
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
	c := &q.stats
	s := QPStats{
		TxPackets:        c.TxPackets,
		TxBytes:          c.TxBytes,
		Retransmits:      c.Retransmits,
		RxPackets:        c.RxPackets,
		RxBytes:          c.RxBytes,
		Duplicates:       c.Duplicates,
		OutOfOrderDrops:  c.OutOfOrderDrops,
		AcksSent:         c.AcksSent,
		AcksReceived:     c.AcksReceived,
		NaksSent:         c.NaksSent,
		NaksReceived:     c.NaksReceived,
		TrimsReceived:    c.TrimsReceived,
		TrimNaksSent:     c.TrimNaksSent,
		TrimNaksReceived: c.TrimNaksReceived,
		ECNMarked:        c.ECNMarked,
		CNPsSent:         c.CNPsSent,
		CNPsReceived:     c.CNPsReceived,
		MessagesSent:     c.MessagesSent,
		MessagesReceived: c.MessagesReceived,
		Timeouts:         c.Timeouts,
		RTTSamples:       c.RTTSamples,
		SRTT:             c.SRTT,
		MinRTT:           c.MinRTT,
		INTAcks:          c.INTAcks,
		INTQueueDelay:    c.INTQueueDelay,
		MaxINTQueueDelay: c.MaxINTQueueDelay,
		Microbursts:      c.Microbursts,
		MicroburstAcks:   c.MicroburstAcks,
		MaxReorderHeld:   c.MaxReorderHeld,
	}
	if r := q.rare; r != nil {
		s.OutOfWindow = r.OutOfWindow
		s.NoBuffer = r.NoBuffer
		s.RNRNaksSent = r.RNRNaksSent
		s.RNRNaksReceived = r.RNRNaksReceived
		s.RemoteAccessErrors = r.RemoteAccessErrors
		s.BadPackets = r.BadPackets
		s.RejectedAcks = r.RejectedAcks
		s.RejectedNaks = r.RejectedNaks
		s.RejectedCNPs = r.RejectedCNPs
		s.RejectedReadResponses = r.RejectedReadResponses
		s.RecvCopied = r.RecvCopied
		s.CreditRequestsSent = r.CreditRequestsSent
		s.CreditGrantsReceived = r.CreditGrantsReceived
		s.CreditGrantsSent = r.CreditGrantsSent
		s.CreditRequestsReceived = r.CreditRequestsReceived
		s.UnsolicitedPackets = r.UnsolicitedPackets
		s.CreditWaits = r.CreditWaits
		s.CreditFallbacks = r.CreditFallbacks
		s.CreditRejected = r.CreditRejected
	}
	s.ReorderHeld = q.rcv.held()
	if q.sec != nil {
		s.Security = q.sec.stats
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
	if err := q.rcv.connect(r); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	q.rqpn, q.rmac, q.rip = r.QPN&psn.Mask, r.MAC, r.IP
	q.mwin.off = r.NoMsgLimit
	q.state = stateReady
	q.touch()
	return nil
}

// Post queues a work request; OpPostRecv posts a receive buffer (PostRecv).
func (q *QP) Post(wr WorkRequest) error {
	if wr.Op == OpPostRecv {
		return q.PostRecv(wr.ID, wr.Data)
	}
	switch {
	case q.state == stateError:
		return fmt.Errorf("%w: %w", ErrQPFailed, q.err)
	case q.state != stateReady:
		return ErrNotConnected
	case (wr.Op < OpSend || wr.Op > OpWriteImm) && wr.Op != OpRead:
		return fmt.Errorf("%w: cannot post %v", ErrInvalidRequest, wr.Op)
	case int64(len(wr.Data)) > q.cfg.MaxMessageSize:
		return fmt.Errorf("%w: %d bytes is more than MaxMessageSize %d", ErrInvalidRequest, len(wr.Data), q.cfg.MaxMessageSize)
	case q.tail-q.head+q.readSlots >= uint64(q.cfg.SendQueue):
		return ErrQueueFull
	}
	if wr.Op == OpRead && q.cfg.Profile == Spray {
		if q.readsOut == 0 {
			q.readSince = q.lastNow
		}
		q.readsOut++
	}
	q.push(wr)
	q.touch()
	return nil
}

// push queues wr, for which there is room.
func (q *QP) push(wr WorkRequest) {
	n := (len(wr.Data) + q.seg - 1) / q.seg
	if wr.Op == OpRead {
		n = int(q.snd.readPSNs(uint32(len(wr.Data))))
	}
	n = max(n, 1)
	q.activate()
	q.activeAt = q.lastNow
	if q.tail-q.head >= uint64(len(q.msgs)) {
		q.growSend()
	}
	inline := len(wr.Data) > 0 && len(wr.Data) <= MaxInline && wr.Op != OpRead && wr.Op != opReadResp
	if inline {
		if q.inl == nil {
			b := make([]byte, len(q.msgs)*MaxInline)
			q.inl = &b
		}
		wr.Data = q.inlineCopy(q.tail, wr.Data)
	}
	*q.msg(q.tail) = sendMsg{wr: wr, id: q.nextID, length: uint32(len(wr.Data)), npkts: uint32(n), inline: inline}
	q.creditPosted(n)
	q.nextID++
	q.tail++
}

// minSendRing is the send ring's first size: one message, as a QP of a
// collective holds one at a time (a slot is 112 bytes, held by every busy
// QP); more double it (TestSendRingGrowsFromOne).
const minSendRing = 1

// growSend doubles the send ring (from minSendRing, up to SendQueue),
// keeping every message at its number.
func (q *QP) growSend() {
	old := q.msgs
	q.msgs = make([]sendMsg, min(max(minSendRing, 2*len(old)), q.cfg.SendQueue))
	if q.inl != nil {
		b := make([]byte, len(q.msgs)*MaxInline)
		q.inl = &b
	}
	for i := q.head; i < q.tail; i++ {
		m := q.msg(i)
		*m = old[i%uint64(len(old))]
		if m.inline {
			m.wr.Data = q.inlineCopy(i, m.wr.Data)
		}
	}
}

// inlineCopy copies data into message i's slot of the inline ring and
// returns the copy.
func (q *QP) inlineCopy(i uint64, data []byte) []byte {
	at := int(i%uint64(len(q.msgs))) * MaxInline
	b := (*q.inl)[at : at+len(data) : at+len(data)]
	copy(b, data)
	return b
}

// MaxInline is the largest SEND or WRITE whose bytes Post copies into the
// QP (as a verbs send with IBV_SEND_INLINE): the caller may reuse its
// buffer as soon as Post returns (TestInlineSmallSend). A larger one's
// bytes are read until the work request completes.
const MaxInline = 64

// msg returns message number i, which is in the ring.
func (q *QP) msg(i uint64) *sendMsg { return &q.msgs[i%uint64(len(q.msgs))] }

// msgTag returns the message that a scoreboard tag names: one between head
// and tail, whose number's low 32 bits are the tag's high ones.
func (q *QP) msgTag(tag uint64) *sendMsg {
	return q.msg(q.head + uint64(uint32(tag>>32)-uint32(q.head)))
}

// tagOf is the scoreboard tag of the packet of message number i at
// offset off.
func tagOf(i uint64, off uint32) uint64 { return uint64(uint32(i))<<32 | uint64(off) }

// reserveRead reserves a send queue slot for the response to a READ
// request, or reports false when the queue has none: the responder then
// drops the request, and the requester sends it again.
func (q *QP) reserveRead() bool {
	if q.tail-q.head+q.readSlots >= uint64(q.cfg.SendQueue) {
		return false
	}
	q.readSlots++
	return true
}

// answerRead queues the response to a READ of src, for which reserveRead
// reserved a slot, in the QP's own send sequence behind the messages
// posted before it (Spray); tag is what the response carries to name its
// request: the request's message ID.
func (q *QP) answerRead(src []byte, tag uint32) {
	q.readSlots--
	q.push(WorkRequest{Op: opReadResp, Data: src, Imm: tag})
}

// readFor returns the READ with message ID id whose request has been sent
// and whose response has not all landed, or nil.
func (q *QP) readFor(id uint32) *sendMsg {
	// IDs and slots advance together (push): the message pushed back
	// pushes ago holds ID nextID-back.
	back := uint64(q.nextID - id)
	if back == 0 || back > q.tail-q.head || q.tail-back >= q.cursor {
		return nil
	}
	m := q.msg(q.tail - back)
	if m.wr.Op != OpRead || m.id != id || m.readDone {
		return nil
	}
	return m
}

// readLanded completes READ m once its request is acknowledged too.
func (q *QP) readLanded(m *sendMsg) {
	m.readDone = true
	q.readsOut--
	q.completeSends()
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
		m := q.msg(q.head)
		if m.wr.Op != opReadResp {
			q.comps = append(q.comps, Completion{ID: m.wr.ID, QPN: q.qpn, Op: m.wr.Op, Err: fmt.Errorf("%w: %w", ErrQPFailed, err)})
		}
		*m = sendMsg{}
	}
	q.cursor = q.tail
	q.creditIdle()
	q.failRecv(-1, err)
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
	q.recvHead = (q.recvHead + 1) % int32(len(q.recvq))
	q.recvLen--
	q.rcv.deliver() // room for a held message, credit for the sender
	q.touch()
	return c, true
}

func (q *QP) pushRecv(c Completion) {
	q.pushComp(c)
	q.stats.MessagesReceived++
}

// minRecvRing is the receive ring's first size.
const minRecvRing = 4

// growRecv doubles the receive ring (from minRecvRing), keeping its
// completions in order. It holds at most MaxMessages messages and the
// error completions of as many posted buffers (failRecv).
func (q *QP) growRecv() {
	r := make([]Completion, max(minRecvRing, 2*len(q.recvq)))
	for i := range q.recvLen {
		r[i] = q.recvq[(q.recvHead+i)%int32(len(q.recvq))]
	}
	q.recvq, q.recvHead = r, 0
}

func (q *QP) recvFull() bool { return int(q.recvLen) >= q.cfg.MaxMessages }

// peekRecv returns the completion popRecv would return.
func (q *QP) peekRecv() (Completion, bool) {
	if q.recvLen == 0 {
		return Completion{}, false
	}
	return q.recvq[q.recvHead], true
}

// NextTimeout returns when HandleTimeout (or PollTransmit, for pacing and
// delayed acknowledgements) next has work, or clock.Never.
func (q *QP) NextTimeout() clock.Time {
	if q.state != stateReady {
		return clock.Never
	}
	t := q.timerDeadline()
	if q.ackPending > 0 && !q.rcv.responding() {
		t = clock.Min(t, q.ackDue)
	}
	if q.hasData() {
		// The controller's timers change only its rate, which matters to
		// a sender that waits on its pacing; PollTransmit runs them first
		// (TestLazyCCTimers).
		t = clock.Min(t, q.ctrl.NextTimer())
		if r := q.ctrl.Rate(); r > 0 {
			t = clock.Min(t, q.pacer.Next(q.lastNow, r))
		}
	}
	return t
}

// timerDeadline returns when HandleTimeout next has work (a retransmission
// timer, trimming, a READ's deadline), or clock.Never: the part of
// NextTimeout that does not depend on PollTransmit's turn, which is what
// the engine waits on for a QP already on its ready list (sched.go).
// Congestion control's timers are not in it: they move the pacing rate
// only, which PollTransmit brings up to date before it reads it.
func (q *QP) timerDeadline() clock.Time {
	if q.state != stateReady {
		return clock.Never
	}
	t := clock.Min(clock.Min(q.sb.NextTimeout(), q.creditDeadline()), q.winProbeAt())
	if q.ackPending > 0 && !q.ackNow && !q.rcv.responding() {
		t = clock.Min(t, q.ackDue) // an ACK held AckDelay goes ahead of the data
	}
	if q.trimmable() {
		t = clock.Min(t, q.activeAt.Add(trimAfter))
	}
	return clock.Min(t, q.readDeadline())
}

// readDeadline is when a Spray READ waiting for its response fails the
// QP: once the peer has sent nothing for as long as its own retries of
// the response would last (MaxRetries x MaxRTO). A Spray READ's request
// is acknowledged like any packet, so no retransmission timer covers a
// response that never arrives (larger than this side's MTU, or lost with
// a peer that gave up): without this deadline the READ would wait forever
// (TestReadResponseNeverArrives). A RoCE READ's PSNs stay outstanding
// until their responses land: its timer covers them.
func (q *QP) readDeadline() clock.Time {
	if q.readsOut == 0 {
		return clock.Never
	}
	return max(q.readSince, q.heardAt).Add(q.readPatience())
}

// readPatience is MaxRetries x MaxRTO, with the retransmit package's
// defaults for zero values.
func (q *QP) readPatience() time.Duration {
	rto := q.cfg.MaxRTO
	if rto == 0 {
		rto = retransmit.DefaultMaxRTO
	}
	return time.Duration(max(q.cfg.MaxRetries, 1)) * rto
}

// trimmable reports whether the QP holds a ring, slot array or buffer
// that is empty: what trim gives back.
func (q *QP) trimmable() bool {
	return (q.msgs != nil && q.head == q.tail && q.readSlots == 0) || q.sb.Trimmable() ||
		(q.recvq != nil && q.recvLen == 0) || (q.rq != nil && q.rq.bufs != nil && q.rq.n == 0) ||
		len(q.comps) == 0 && cap(q.comps) > 0 || q.rcv.trimmable()
}

// trim gives back the rings, slot arrays and buffers the QP holds empty,
// and its owner's; the next message allocates them again. An
// idle QP holds its state and counters only (TestIdleQPMemory,
// TestIdleQPTrims).
func (q *QP) trim() {
	if q.head == q.tail && q.readSlots == 0 {
		q.msgs, q.inl = nil, nil
	}
	q.sb.Trim()
	if q.recvLen == 0 {
		q.recvq, q.recvHead = nil, 0
	}
	if q.rq != nil && q.rq.n == 0 {
		q.rq.bufs, q.rq.head = nil, 0
	}
	if len(q.comps) == 0 {
		q.comps = nil
	}
	q.rcv.trim()
	if q.owner != nil {
		q.owner.trimBuffers()
	}
}

// hasData reports whether the sender has packets waiting to go that only
// pacing may hold back.
func (q *QP) hasData() bool {
	return q.sb.HasLost() || q.canSendNew() || q.rcv.responding()
}

func (q *QP) canSendNew() bool {
	if q.cursor >= q.tail || q.sb.Full() {
		return false
	}
	if q.cursor-q.head >= uint64(q.cfg.MaxMessages) || !q.mayCredit() || q.winHolds() {
		return false
	}
	if n := q.snd.span(q.msg(q.cursor), q.curOff); n > 1 && q.sb.Outstanding()+int(n) > q.cfg.Window {
		return false // a RoCE READ request takes a PSN per response packet
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
	q.touch()
	if q.state != stateReady {
		return
	}
	q.lastNow = now
	if now >= q.activeAt.Add(trimAfter) && q.trimmable() {
		q.trim()
	}
	if now >= q.ctrl.NextTimer() {
		q.ctrl.OnTimer(now)
	}
	q.creditTimeout(now)
	q.winTimeout(now)
	if now >= q.readDeadline() {
		q.fail(fmt.Errorf("%w: a READ's response did not arrive: nothing from the peer for %v (a response in frames larger than this side's MTU never arrives: check that both sides' MTUs match)",
			ErrPeerUnreachable, q.readPatience()))
		return
	}
	// Each call runs one scoreboard timer; a few may be due at once.
	for i := 0; i < 4 && now >= q.sb.NextTimeout(); i++ {
		ev, kind, err := q.sb.OnTimeout(now, q.scr.events[:0])
		q.takeEvents(ev)
		q.onEvents(now)
		if kind == retransmit.RTO {
			q.inRTO = true
			q.rtoRecovery, q.rtoEnd = true, q.sb.Next()
			q.stats.Timeouts++
			q.ctrl.OnTimeout(now)
		}
		if err != nil {
			q.fail(q.foreign.explain(fmt.Errorf("%w: %w", ErrPeerUnreachable, err)))
			return
		}
		q.completeSends()
	}
}

// ackDueNow reports whether an acknowledgement is due at now: an urgent
// one, or AckEvery packets pending.
func (q *QP) ackDueNow(now clock.Time) bool {
	return q.ackUrgent(now) || q.ackPending >= q.cfg.AckEvery && !q.rcv.responding()
}

// ackUrgent reports whether an acknowledgement due at now may not wait
// for the QP's turn to send: one the sender asked for or that reports a
// duplicate or an overtaken packet (ackNow), or one held AckDelay. An ACK
// due only because AckEvery packets arrived rides the QP's turn and takes
// in what arrives meanwhile. Acknowledgements wait behind the READ
// responses being sent: both answer the requester's PSNs, in order
// (read_classic.go).
func (q *QP) ackUrgent(now clock.Time) bool {
	return (q.ackNow || q.ackPending > 0 && now >= q.ackDue) && !q.rcv.responding()
}

// controlDue reports whether the QP has a control frame to send at now
// ahead of the engine's data: a CNP, an urgent acknowledgement, a credit
// grant or a credit request.
func (q *QP) controlDue(now clock.Time) bool {
	return q.state == stateReady && (q.cnpDue || q.ackUrgent(now) || q.cred != nil && q.cred.cr.due || q.creditRequestDue())
}

// pollControl encodes the QP's next control frame due at now into buf, if
// any (0 bytes: none).
func (q *QP) pollControl(now clock.Time, buf []byte) (int, error) {
	if q.state != stateReady {
		return 0, nil
	}
	switch {
	case q.cnpDue:
		return q.encodeCNP(buf)
	case q.ackUrgent(now):
		return q.encodeAck(now, buf)
	case q.cred != nil && q.cred.cr.due:
		return q.encodeGrant(buf)
	case q.creditRequestDue():
		return q.encodeCreditRequest(now, buf)
	}
	return 0, nil
}

// PollTransmit encodes the next packet the QP has to send at now into buf,
// which must hold an MTU, and returns its length, or 0 when nothing is due.
func (q *QP) PollTransmit(now clock.Time, buf []byte) (int, error) {
	if q.state != stateReady {
		return 0, nil
	}
	q.lastNow = now
	q.noteHostDelay()
	if n, err := q.pollControl(now, buf); n > 0 || err != nil {
		return n, err
	}
	if q.ackDueNow(now) {
		return q.encodeAck(now, buf)
	}
	q.creditWait()
	q.ctrl.OnTimer(now) // the rate timers that expired while the QP waited its turn
	rate := q.ctrl.Rate()
	if rate > 0 && q.pacer.Next(now, rate) > now {
		return 0, nil
	}
	if n, entropy, resent, err := q.rcv.pollResponse(now, buf); n > 0 || err != nil {
		if err != nil {
			return 0, err
		}
		q.sent(now, n, rate)
		q.pstats.onSend(entropy, n, resent)
		if resent {
			q.stats.Retransmits++
		}
		return n, nil
	}
	if n, err := q.snd.pollCopy(now, buf, rate); n > 0 || err != nil {
		return n, err
	}
	if n, err := q.pollLost(now, buf, rate); n > 0 || err != nil {
		return n, err
	}
	if !q.canSendNew() || q.hostHold(now) {
		return 0, nil
	}
	m := q.msg(q.cursor)
	off := q.curOff
	p := q.sb.Next()
	span := q.snd.span(m, off)
	q.takeCredit(false)
	n, entropy, err := q.encodeData(now, buf, m, off, p)
	if err != nil {
		return 0, err
	}
	tag := tagOf(q.cursor, off)
	if err := q.sb.OnSend(now, p, n, tag, entropy); err != nil {
		return 0, err
	}
	// The further PSNs a RoCE READ request takes, one per response packet.
	for i := uint32(1); i < span; i++ {
		if err := q.sb.OnSend(now, p.Add(i), 0, tag+uint64(i)*uint64(q.seg), entropy); err != nil {
			return 0, err
		}
	}
	q.curOff += span * uint32(q.seg)
	if q.curOff/uint32(q.seg) >= m.npkts {
		q.cursor++
		q.curOff = 0
	}
	q.winSent()
	q.sent(now, n, rate)
	if e := q.sch.eng; e != nil && q.cfg.HostRate > 0 {
		e.hostPace.OnSend(now, n, q.cfg.HostRate)
	}
	q.pstats.onSend(entropy, n, false)
	return n, nil
}

// pollLost encodes into buf the resend of the lowest PSN declared lost, if
// any (0 bytes: none), at rate (the controller's, which the caller's
// pacer let through).
func (q *QP) pollLost(now clock.Time, buf []byte, rate float64) (int, error) {
	for q.sb.HasLost() {
		p, tag, _ := q.sb.PopLost()
		off := uint32(tag)
		m := q.msgTag(tag)
		if e, ok := q.snd.covered(m, off); ok {
			// Asked for again by the request resent for the packets
			// before it: recorded as resent, not sent.
			if err := q.sb.OnSend(now, p, 0, tag, e); err != nil && !errors.Is(err, retransmit.ErrUnexpectedPSN) {
				return 0, err
			}
			continue
		}
		q.takeCredit(true)
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
		q.snd.resent(p, tag)
		return n, nil
	}
	return 0, nil
}

// repairDue reports whether the QP has the resend of a trimmed packet
// queued: the engine sends it ahead of the other QPs' new data
// (Engine.outputRepair). Only a trim's: its NAK proves the path works and
// names exactly the packet to resend, while a loss found by RACK or a
// timer may be a path that failed, which a resend at once would feed.
func (q *QP) repairDue() bool {
	if q.trimDue && !q.sb.HasLost() {
		q.trimDue = false
	}
	return q.trimDue && q.state == stateReady
}

// pollRepair encodes into buf the QP's next resend, if its pacer lets it
// go at now (0 bytes: none). Control frames went before it
// (Engine.outputCtrl); new data waits for the QP's turn.
func (q *QP) pollRepair(now clock.Time, buf []byte) (int, error) {
	if !q.repairDue() {
		return 0, nil
	}
	q.lastNow = now
	q.creditWait()
	q.ctrl.OnTimer(now)
	rate := q.ctrl.Rate()
	if rate > 0 && q.pacer.Next(now, rate) > now {
		return 0, nil
	}
	return q.pollLost(now, buf, rate)
}

func (q *QP) sent(now clock.Time, n int, rate float64) {
	q.activeAt = now
	q.stats.TxPackets++
	q.stats.TxBytes += uint64(n)
	q.lastSendAt = now
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
	if q.od != nil {
		q.stampConn(pk)
	}
	q.seal(pk)
}

// encodeData builds the data packet of message m at offset off with PSN p.
func (q *QP) encodeData(now clock.Time, buf []byte, m *sendMsg, off uint32, p psn.PSN) (int, uint16, error) {
	entropy := q.nextEntropy(now)
	pk := &q.scr.pkt
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
	switch m.wr.Op {
	case OpWrite, OpWriteImm:
		pk.RETH = wire.RETH{VA: m.wr.Remote.Addr, RKey: m.wr.Remote.RKey, Len: m.length}
	case OpRead:
		// The request names the range; the bytes come back in the response.
		pk.RETH = wire.RETH{VA: m.wr.Remote.Addr, RKey: m.wr.Remote.RKey, Len: m.length}
		payload, first, last = nil, true, true
	}
	pk.Imm = m.wr.Imm
	q.snd.encode(now, pk, m, off, first, last, p)
	n, err := wire.Encode(buf, pk, payload)
	if err != nil {
		return 0, 0, fmt.Errorf("transport: encoding data packet: %w", err)
	}
	return n, entropy, nil
}

// encodeAck builds the acknowledgement (or NAK) the receiver owes.
func (q *QP) encodeAck(now clock.Time, buf []byte) (int, error) {
	pk := &q.scr.pkt
	q.headers(pk, q.nextAckEntropy())
	nak := q.rcv.fillAck(now, pk)
	n, err := wire.Encode(buf, pk, nil)
	if err != nil {
		return 0, fmt.Errorf("transport: encoding ack: %w", err)
	}
	if nak {
		q.stats.NaksSent++
	}
	q.stats.AcksSent++
	// An ACK that answers a lost one goes out twice: on the path most
	// likely to deliver, then on the next of the rotation.
	q.ackNow, q.ackDup, q.ackPending, q.ecnCount = q.ackDup, false, 0, 0
	q.lastAckAt = now
	q.rcv.ackSent()
	return n, nil
}

// nextAckEntropy returns the source port of the next acknowledgement: the
// QP's entropies in turn, so that one dead path loses only a share of the
// acknowledgements (they are cumulative) and never all of them. ACKs do not
// go through the path policy (nothing acknowledges an ACK), but they leave
// on the paths of the QP's own data: a policy that knows which of those
// are dead (multipath.AckPather) passes over them, so that a dead spine
// does not take the ACKs of a sender's tail (TestSpineFailOneWay).
func (q *QP) nextAckEntropy() uint16 {
	if ap, ok := q.paths.(multipath.AckPather); ok {
		q.lastAckEntropy = ap.NextAck(q.ackDup)
		return q.lastAckEntropy
	}
	set := q.paths.Paths()
	q.ackTurn = uint16((int(q.ackTurn) + 1) % len(set))
	return set[q.ackTurn]
}

// encodeCNP builds a RoCEv2 congestion notification packet for the peer.
func (q *QP) encodeCNP(buf []byte) (int, error) {
	pk := &q.scr.pkt
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
	q.handle(now, now, pk)
	q.touch()
}

// handle is Handle for a packet that reached the host at at, before now
// when the link stamped its arrival (Engine.SetRxClock): a data packet's
// hold time then counts from at, and an ACK's wait from at to now is
// endpoint delay, not fabric delay.
func (q *QP) handle(now, at clock.Time, pk *wire.Packet) {
	if q.state != stateReady {
		return
	}
	q.rxAt, q.activeAt = at, now
	q.noteHostDelay()
	if pk.IP.Src != q.rip {
		q.rareStats().BadPackets++
		return
	}
	q.heardAt, q.restarted = now, false
	switch op := pk.BTH.Opcode; {
	case q.rcv.takes(op):
		q.rcv.recv(now, pk)
	case q.snd.takes(op):
		q.snd.onAck(now, pk)
	case op == wire.OpCNP:
		if !q.snd.onCNP(now) {
			q.rareStats().RejectedCNPs++
		}
	case op == wire.OpCreditGrant:
		q.onGrant(now, pk)
	case op == wire.OpCreditRequest:
		q.onCreditRequest(pk)
	default:
		q.rareStats().BadPackets++
	}
}

// noteData counts an accepted or duplicate data packet towards the
// acknowledgement owed: AckEvery of them, or AckDelay after the first.
func (q *QP) noteData(now clock.Time, pk *wire.Packet) {
	if pk.IP.TOS&3 == wire.ECNCE {
		q.ecnCount++
		q.stats.ECNMarked++
		q.rcv.onCE(now)
	}
	if q.ackPending == 0 {
		q.ackDue = now.Add(q.cfg.AckDelay)
	}
	q.mwin.update = false // the ACK due reports this packet
	q.ackPending++
}

// foreignNak is a fatal NAK that named no request of the QP: the message
// (spray) or PSN (classic) it named, and its syndrome (0: none seen).
type foreignNak struct {
	syn uint8
	at  uint32
	psn bool
}

// explain adds to err, the QP's failure for lack of acknowledgements, the
// fatal NAK the peer kept sending about a request this QP never sent: the
// peer's QP failed on a packet sent in this QP's name, which is why it
// acknowledges nothing. The NAK fails none of this QP's requests (they
// caused nothing), but the error names the cause (TestSpoofSprayWriteKey).
func (f foreignNak) explain(err error) error {
	if f.syn == 0 {
		return err
	}
	where := fmt.Sprintf("message %d", f.at)
	if f.psn {
		where = fmt.Sprintf("PSN %d", f.at)
	}
	nak := strings.TrimPrefix(nakError(f.syn, where).Error(), "transport: ")
	return fmt.Errorf("%w; NAKs came for a request this QP never sent (%s): the peer's QP failed on a packet another host sent in this QP's name (or an earlier connection did), and acknowledges nothing since", err, nak)
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

// onTrimEvents applies the trimmed packet's loss, the events from n on,
// and leaves the others to onEvents. A trim is its path's congestion mark,
// not its loss: the headers crossed the path, so it works, and its queue
// is full. Scored as a loss, the paths that trim lose their share to those
// whose losses are not yet found, such as one into a failed link
// (TestTrimMarksPath).
func (q *QP) onTrimEvents(now clock.Time, n int) {
	for i := n; i < len(q.scr.cur); i++ {
		if e := &q.scr.cur[i]; e.Lost {
			q.paths.OnAck(now, e.Entropy, 0, true)
			q.ctrl.OnLoss(now, e.Bytes)
		}
	}
	q.scr.cur = q.scr.cur[:n]
}

// onEvents applies the scoreboard's acked and lost events.
func (q *QP) onEvents(now clock.Time) {
	for i := range q.scr.cur {
		e := &q.scr.cur[i]
		if e.Lost {
			q.paths.OnLoss(now, e.Entropy)
			q.ctrl.OnLoss(now, e.Bytes)
			continue
		}
		q.msgTag(e.Tag).acked++
	}
}

// takeEvents makes ev, returned by the scoreboard into the scratch
// space's array, the events to apply, and keeps the array's growth.
func (q *QP) takeEvents(ev []retransmit.Event) {
	q.scr.cur, q.scr.events = ev, ev[:0]
}

// completeSends completes, in order, the messages whose packets are all
// acknowledged.
func (q *QP) completeSends() {
	for q.head < q.cursor {
		m := q.msg(q.head)
		if m.acked < m.npkts || (m.wr.Op == OpRead && !m.readDone) {
			return
		}
		if m.wr.Op != opReadResp {
			q.comps = append(q.comps, Completion{ID: m.wr.ID, QPN: q.qpn, Op: m.wr.Op, Err: m.err, Len: int(m.length)})
			q.stats.MessagesSent++
		}
		*m = sendMsg{}
		q.head++
	}
}
