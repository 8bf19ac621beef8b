package transport

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/transport/wire"
)

// EngineStats are an engine's counters for frames that never reached a QP.
type EngineStats struct {
	RxFrames, TxFrames uint64
	RxBytes, TxBytes   uint64
	// Malformed counts frames that failed to decode, by reason.
	Truncated, NotRoCE, BadICRC, BadHeader, BadOpcode, OtherMalformed uint64
	// UnknownQP counts well-formed packets for a QP that does not exist.
	UnknownQP uint64
	// TxNoBuffer counts the times the link had no free transmit buffer.
	TxNoBuffer uint64
	// HandedOver counts frames this engine received for a QP that another
	// engine of the endpoint owns and passed to it over their hand-over
	// ring; HandoverDrops those it dropped instead because that ring was
	// full (or the frame longer than a ring slot). HandedIn counts the
	// frames it took from other engines' rings. Only sharded endpoints
	// (Shards) hand frames over.
	HandedOver, HandoverDrops, HandedIn uint64
	// HostWindowHeld counts the times output stopped because the next new
	// packet did not fit Config.HostWindow.
	HostWindowHeld uint64
	// HostRateHeld counts the times output stopped because the next new
	// packet would have gone faster than Config.HostRate.
	HostRateHeld uint64
	// TimersRestarted counts the QPs whose loss timers (retransmission,
	// reordering, probe) came due while the engine was not running
	// (descheduled, or busy) for at least stallMin, and restarted from the
	// time it ran again instead of resending (Engine.runTimers).
	TimersRestarted uint64
}

// add adds o's counters to s.
func (s *EngineStats) add(o EngineStats) {
	s.RxFrames += o.RxFrames
	s.TxFrames += o.TxFrames
	s.RxBytes += o.RxBytes
	s.TxBytes += o.TxBytes
	s.Truncated += o.Truncated
	s.NotRoCE += o.NotRoCE
	s.BadICRC += o.BadICRC
	s.BadHeader += o.BadHeader
	s.BadOpcode += o.BadOpcode
	s.OtherMalformed += o.OtherMalformed
	s.UnknownQP += o.UnknownQP
	s.HostWindowHeld += o.HostWindowHeld
	s.HostRateHeld += o.HostRateHeld
	s.TxNoBuffer += o.TxNoBuffer
	s.HandedOver += o.HandedOver
	s.HandoverDrops += o.HandoverDrops
	s.HandedIn += o.HandedIn
	s.TimersRestarted += o.TimersRestarted
}

// Malformed returns the sum of the malformed-frame counters.
func (s EngineStats) Malformed() uint64 {
	return s.Truncated + s.NotRoCE + s.BadICRC + s.BadHeader + s.BadOpcode + s.OtherMalformed
}

// Engine drives QPs over one link: it receives and decodes frames, hands
// them to their QPs, runs timers and transmits in batches. It reads no clock:
// every step takes the time, so a test can run engines under a simulated
// clock over link/mem, deterministically. Endpoint runs an Engine in a
// goroutine with the real clock.
//
// An Engine is not safe for concurrent use.
type Engine struct {
	cfg    Config
	link   link.Link
	info   link.Info
	rng    *rand.Rand
	seeded bool
	mrs    *mrTable
	qps    map[uint32]*QP
	// dense holds the QP numbered denseBase+i at i, for every QP in its
	// range (nil for none), beside qps: the QP of every packet received
	// is looked up, and a slice is cheaper than the map. A seeded engine
	// numbers its QPs in sequence, so they all land in it; it grows only
	// while it stays within a few slots per QP (TestEngineDenseLookup).
	dense     []*QP
	denseBase uint32
	nextQPN   uint32
	rx, tx    []link.Frame
	pkt       wire.Packet
	stats     EngineStats
	have      int // transmit buffers at the front of tx, lent by the link
	// stepBytes counts the bytes this Step transmitted, up to stepMax
	// (maxStepBytes, segStepBytes on a link that segments).
	stepBytes, stepMax int
	// inflight is the QPs' data bytes in flight, hostHeld whether the
	// last poll found no room for a new packet (hostwin.go).
	inflight int
	hostHeld bool
	// hostPace paces new data at Config.HostRate; hostWake is when it
	// lets the next packet go after it held one, 0 when it holds none.
	hostPace cc.Pacer
	hostWake clock.Time

	// The schedule (sched.go): the ready list is ready[readyHead:], turn
	// the packets its front QP sent in its current turn (output), timers
	// the heap of the QPs' deadlines, dirty the QPs whose key may be
	// stale, compl the QPs that may hold completions, order every QP in
	// creation order with holes for the destroyed ones, ctrl the QPs with
	// an acknowledgement or another control frame due, sent before any
	// data, repair the QPs with a trimmed packet's resend queued, sent
	// before new data.
	// visits counts the engine's calls into QPs (TestStepVisitsActiveQPs).
	ctrl       []*QP
	repair     []*QP
	ready      []*QP
	readyHead  int
	turn       int
	timers     []timerEntry
	dirty      []*QP
	compl      []*QP
	complSpare []*QP
	order      []*QP
	holes      int
	visits     uint64
	// check, when set, runs after every Step: tests that verify the
	// schedule against a pass over every QP (sched_test.go).
	check func(now clock.Time)

	// Set when the engine is one of Shards.
	sh       *Shards
	shard    int
	sleeping atomic.Bool // its driver is about to Wait or waiting
	woken    []bool      // engines this Step handed frames to

	// rxClock converts link.Frame.RxTime into the engine's time; nil:
	// frames arrive when Step runs.
	rxClock func(ns int64) clock.Time
	// clk, when set (setClock), is read again after each batch received.
	clk clock.Clock

	// credit paces the credit of the senders towards this engine's link
	// (Config.Credits; credit.go); nil without credits.
	credit *creditPacer
	// creditSenders is the engine's QPs with new data to send under
	// Credits, which share CreditUnsolicited (credit.go).
	creditSenders int

	// expect is when the engine asked to run next: the time of a Step
	// that reported work, or the deadline of one that did not (Never:
	// until a frame comes). A Step at now later than that, or than the
	// arrival of a frame it reads, finds that the engine did not run
	// meanwhile (stallMin; runTimers).
	expect clock.Time
	// hostDelay is the longest stall lately that found loss timers due
	// (a stall between bursts, with nothing in flight, is none), noted at
	// hostDelayAt and halved every hostDecay since: the QPs' retransmission
	// and probe timers wait that much longer (Scoreboard.NoteHostDelay).
	hostDelay   time.Duration
	hostDelayAt clock.Time

	// od is the on-demand QPs' state (peers.go); nil until the first.
	od *peerTable
}

// QP numbers are 24 bits; 0 and 1 are special in InfiniBand, 0xFFFFFF is
// the multicast QP.
const (
	minQPN = 0x100
	maxQPN = 0xFFFFFE
)

// NewEngine returns an engine that sends and receives on l.
func NewEngine(l link.Link, cfg Config) (*Engine, error) {
	c, err := cfg.withDefaults(l.Info().FrameSize)
	if err != nil {
		return nil, err
	}
	rng, seeded := newRand(c.Seed, 0)
	mrRng, _ := newRand(c.Seed, mrStream)
	return newEngine(l, c, rng, seeded, newMRTable(mrRng, seeded))
}

func newEngine(l link.Link, c Config, rng *rand.Rand, seeded bool, mrs *mrTable) (*Engine, error) {
	info := l.Info()
	if !info.IP.IsValid() {
		return nil, fmt.Errorf("%w: link %q has no IP address", ErrConfig, info.Name)
	}
	batch := max(info.BatchSize, 1)
	e := &Engine{
		cfg: c, link: l, info: info, rng: rng, seeded: seeded, mrs: mrs,
		qps: map[uint32]*QP{}, nextQPN: minQPN + rng.Uint32N(0x1000),
		rx: make([]link.Frame, batch), tx: make([]link.Frame, batch),
		expect: clock.Never, stepMax: maxStepBytes,
	}
	if info.Segments > 1 {
		e.stepMax = segStepBytes
	}
	if c.Credits {
		e.credit = newCreditPacer(&c)
	}
	if c.HostRate > 0 {
		e.hostPace = *cc.NewPacer(c.PacingBurst)
	}
	if checkEngines != nil {
		e.check = checkEngines(e)
	}
	return e, nil
}

// checkEngines, when set (by the package's tests only), gives every new
// engine its check (Engine.check).
var checkEngines func(e *Engine) func(now clock.Time)

// mrStream is the stream of the memory-region table's random source.
const mrStream = 1 << 32

// newRand returns the random source of stream (an engine's index, or
// mrStream) and whether it is seeded. With seed 0 it is ChaCha8 keyed from
// crypto/rand: QP numbers, start PSNs, rkeys and region addresses are then
// unpredictable to anyone who has not seen them. Otherwise it is a PCG
// seeded from seed and stream, the same on every run.
func newRand(seed, stream uint64) (*rand.Rand, bool) {
	if seed == 0 {
		var key [32]byte
		crand.Read(key[:])
		return rand.New(rand.NewChaCha8(key)), false
	}
	s := seed + stream*0x9E3779B97F4A7C15
	return rand.New(rand.NewPCG(s, s^0x5350_5241_5953_5052)), true
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Link returns the engine's link.
func (e *Engine) Link() link.Link { return e.link }

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats { return e.stats }

// allocQPN returns an unused QP number that this engine owns: with a seed,
// the next after the last one; without, a random one.
func (e *Engine) allocQPN() (uint32, error) {
	n, s := uint32(1), uint32(0)
	if e.sh != nil {
		n, s = uint32(len(e.sh.engs)), uint32(e.shard)
	}
	if len(e.qps) >= (maxQPN-minQPN)/int(n) {
		return 0, fmt.Errorf("%w: no free QP number", ErrConfig)
	}
	for {
		var q uint32
		if e.seeded {
			q = e.nextQPN
			e.nextQPN++
			if e.nextQPN > maxQPN {
				e.nextQPN = minQPN
			}
		} else {
			q = minQPN + e.rng.Uint32N(maxQPN-minQPN+1)
		}
		q = q - q%n + s
		if q >= minQPN && q <= maxQPN && e.qps[q] == nil {
			return q, nil
		}
	}
}

// CreateQP creates a QP; connect it with QP.Connect.
func (e *Engine) CreateQP() (*QP, error) { return e.createQP(e.info.Ports) }

// createQP creates a QP whose entropies come from ports (any when empty).
func (e *Engine) createQP(ports []uint16) (*QP, error) {
	qpn, err := e.allocQPN()
	if err != nil {
		return nil, err
	}
	start := e.rng.Uint32()
	if e.cfg.StartPSN != nil {
		start = e.cfg.StartPSN(qpn)
	}
	q, err := newQP(&e.cfg, qpn, start, e.info.MAC, e.info.IP, ports, e.rng)
	if err != nil {
		return nil, err
	}
	q.mrs = e.mrs
	q.setRuns(e.info.Segments)
	e.qps[qpn] = q
	e.addDense(q)
	e.schedInit(q)
	return q, nil
}

// DestroyQP removes a QP; its packets are then counted as UnknownQP.
func (e *Engine) DestroyQP(q *QP) {
	if e.qps[q.qpn] != q {
		return
	}
	delete(e.qps, q.qpn)
	if i := q.qpn - e.denseBase; i < uint32(len(e.dense)) {
		e.dense[i] = nil
	}
	e.schedRemove(q)
	e.hostFlight(q) // no longer on the engine: its flight leaves the total
	q.creditIdle()
	if q.od != nil {
		e.dropPeer(q) // peers.go
	}
}

// addDense puts q in the dense table when its number is in range, or can
// be brought in range with at most denseSlots slots per QP.
func (e *Engine) addDense(q *QP) {
	if e.dense == nil {
		e.denseBase = q.qpn
	}
	i := q.qpn - e.denseBase
	if i >= uint32(len(e.dense)) {
		stride := 1
		if e.sh != nil {
			stride = len(e.sh.engs)
		}
		limit := denseSlots * (len(e.qps) + 8) * stride
		if int64(i) >= int64(limit) {
			return
		}
		grown := make([]*QP, min(max(2*len(e.dense), int(i)+1, 16), limit))
		for qpn, p := range e.qps {
			if j := qpn - e.denseBase; j < uint32(len(grown)) {
				grown[j] = p
			}
		}
		e.dense = grown
	}
	e.dense[i] = q
}

// denseSlots bounds the dense table's slots per QP (per QP and shard, for
// an engine of Shards, whose QP numbers step by the number of shards).
const denseSlots = 4

// lookup returns the QP numbered qpn, or nil.
func (e *Engine) lookup(qpn uint32) *QP {
	if i := qpn - e.denseBase; i < uint32(len(e.dense)) {
		return e.dense[i]
	}
	if len(e.qps) == 0 {
		return nil
	}
	return e.qps[qpn]
}

// QP returns the QP numbered qpn, or nil.
func (e *Engine) QP(qpn uint32) *QP { return e.lookup(qpn) }

// Register registers buf as a memory region that peers may access as acc.
func (e *Engine) Register(buf []byte, acc Access) *MR { return e.mrs.register(buf, acc) }

// Deregister removes a region: later remote accesses to it fail.
func (e *Engine) Deregister(mr *MR) error { return e.mrs.deregister(mr) }

// Step does one round of work at now: receive a batch, run expired timers,
// transmit what is due. It reports whether it did anything; when it did not,
// the driver may wait until NextDeadline or the next frame.
func (e *Engine) Step(now clock.Time) (bool, error) {
	work, err := e.receive(now)
	if err != nil {
		return work, err
	}
	sent, err := e.transmit(now)
	if e.check != nil {
		e.check(now)
	}
	e.plan(now, work || sent)
	return work || sent, err
}

// plan notes when the engine asks to run next after a step at now that
// did work or not (Engine.expect).
func (e *Engine) plan(now clock.Time, work bool) {
	if work {
		e.expect = now
	} else {
		e.expect = e.NextDeadline()
	}
}

// stallMin is the shortest time an engine must have been kept from
// running for the loss timers that came due meanwhile to restart rather
// than fire: above the lateness of the Go runtime's timers (up to a
// millisecond), the time a loaded host's scheduler takes a thread away
// (TestStalledEngineNoResends).
const stallMin = time.Millisecond

// hostDecay is the half-life of an engine's hostDelay.
const hostDecay = 100 * time.Millisecond

// noteStall takes a stall of d found at now (0: none) into hostDelay.
func (e *Engine) noteStall(now clock.Time, d time.Duration) {
	if e.hostDelay > 0 {
		if k := now.Sub(e.hostDelayAt) / hostDecay; k >= 32 {
			e.hostDelay = 0
		} else if k > 0 {
			e.hostDelay >>= k
			e.hostDelayAt = e.hostDelayAt.Add(k * hostDecay)
		}
	}
	if d > 0 && d >= e.hostDelay {
		e.hostDelay, e.hostDelayAt = d, now
	}
}

// maxRxBatches bounds the link batches a step reads before it runs the
// timers: all that waited, as RACK reads every ACK before its timers,
// unless more keep coming.
const maxRxBatches = 16

// receive is the first half of Step: a batch received and the expired
// timers run. A busy-polling endpoint hands out what it completed before
// transmit, and a polling Recv runs receive alone (epShard.step, poll).
//
// Every batch waiting is read before the timers run (up to maxRxBatches),
// so that no timer fires for an acknowledgement that had arrived. A step
// that finds the engine did not run for stallMin since it asked to (or
// since the first frame it reads arrived) restarts the loss timers that
// came due meanwhile instead of running them: the peer may have been kept
// from running as well (two engines of one host, or of one machine), and
// its acknowledgements get the time their timer gives them from now.
func (e *Engine) receive(now clock.Time) (bool, error) {
	work := false
	since := e.expect
	for range maxRxBatches {
		n, err := e.link.Recv(e.rx)
		if err != nil {
			return false, err
		}
		if n == 0 {
			break
		}
		work = true
		if e.clk != nil {
			if t := e.clk.Now(); t > now {
				now = t
			}
		}
		for i := range n {
			e.stats.RxFrames++
			e.stats.RxBytes += uint64(len(e.rx[i].Buf))
			at := e.arrival(now, e.rx[i].RxTime)
			since = clock.Min(since, at)
			if e.sh != nil && e.handOver(e.rx[i].Buf, at) {
				continue
			}
			e.input(now, at, e.rx[i].Buf)
		}
		e.link.Release(e.rx[:n])
		if e.sh != nil {
			e.wakeOwners()
		}
		if n < len(e.rx) {
			break
		}
	}
	if e.sh != nil && e.takeHandedIn(now) {
		work = true
	}
	if since == clock.Never || now.Sub(since) < stallMin {
		since = now
	}
	if e.runTimers(now, since) > 0 {
		e.noteStall(now, now.Sub(since))
	} else {
		e.noteStall(now, 0)
	}
	return work, nil
}

// transmit is the second half of Step: what is due at now, up to
// maxStepBytes.
func (e *Engine) transmit(now clock.Time) (bool, error) {
	e.stepBytes = 0
	if e.od != nil {
		e.sweep(now)
	}
	sent, err := e.output(now)
	e.settle()
	return sent, err
}

// SetRxClock makes the engine take a received frame's arrival from its
// link.Frame.RxTime, converted by f into the engine's time, instead of the
// time of the Step that reads it: a packet's hold time, which its ACK
// reports, then counts the time the frame waited in the link's queues for
// the engine (TestHoldCountsRingWait). Endpoint sets it when it runs the
// system clock.
func (e *Engine) SetRxClock(f func(ns int64) clock.Time) { e.rxClock = f }

// setClock makes receive read clk after each batch it receives: the time a
// Step was given is when its driver read the clock, and a driver kept from
// running between that read and the link's then hands frames that arrived
// after it. Handled at that time, an ACK would time a round trip shorter
// than its path, down to nothing, and the loss timers armed from such
// samples would fire while the peer's answer was on its way
// (TestStaleStepTimesNoShortRTT).
func (e *Engine) setClock(clk clock.Clock) { e.clk = clk }

// maxRxAge bounds how far before the Step reading it a frame's stamp may
// lie; an older or a future stamp is a clock the engine does not share,
// and the Step's time stands instead.
const maxRxAge = time.Second

// arrival returns when a frame stamped rx (link.Frame.RxTime) arrived, in
// the engine's time, or now when the link did not stamp it.
func (e *Engine) arrival(now clock.Time, rx int64) clock.Time {
	if rx == 0 || e.rxClock == nil {
		return now
	}
	if at := e.rxClock(rx); at <= now && now.Sub(at) < maxRxAge {
		return at
	}
	return now
}

// input decodes a frame that arrived at at and hands it to its QP. The
// caller counts it in RxFrames: the engine whose link received it.
func (e *Engine) input(now, at clock.Time, frame []byte) {
	err := wire.DecodeOwned(frame, &e.pkt) // the link lent it until Release
	if e.credit != nil {
		// Every frame but the data that credit booked takes the link.
		switch {
		case err == nil && e.pkt.BTH.Opcode == wire.OpSprayData && e.pkt.Data.Credit == wire.DataCredited:
			e.credit.credited(len(frame))
		case err == nil && e.pkt.BTH.Opcode == wire.OpSprayData && e.pkt.Data.Credit == wire.DataUnsolicited && !e.credit.fanIn():
			// A lone sender's unsolicited window: see fanIn.
		default:
			e.credit.arrived(now, len(frame))
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, wire.ErrTruncated), errors.Is(err, wire.ErrBadLength):
			e.stats.Truncated++
		case errors.Is(err, wire.ErrNotRoCE):
			e.stats.NotRoCE++
		case errors.Is(err, wire.ErrBadICRC):
			e.stats.BadICRC++
		case errors.Is(err, wire.ErrBadOpcode):
			e.stats.BadOpcode++
		case errors.Is(err, wire.ErrBadHeader), errors.Is(err, wire.ErrIPChecksum):
			e.stats.BadHeader++
		default:
			e.stats.OtherMalformed++
		}
		return
	}
	q := e.lookup(e.pkt.BTH.DestQP)
	if e.pkt.BTH.Conn || q != nil && q.od != nil {
		// peers.go: checked, made or authenticated on demand
		if q = e.onDemand(now, q, frame); q == nil {
			return
		}
	} else {
		if q == nil {
			e.stats.UnknownQP++
			return
		}
		if !q.admit(frame, &e.pkt) { // secure.go: authenticated before any state
			return
		}
	}
	e.visits++
	q.handle(now, at, &e.pkt)
	e.hostFlight(q)
	q.touch()
	e.noteCtrl(q, now)
	e.noteRepair(q)
}

// maxStepBytes bounds what one Step transmits: the packets it encodes all
// carry its time as their send time, and a longer burst would make the
// last ones' RTT hold the time the first ones took to encode and send, a
// sender delay that delay-based control reads as fabric queueing. 64 KiB
// is a TSO segment's worth; the driver steps again at once, at a new time,
// while a Step reports work (TestStepBoundsOutput).
const maxStepBytes = 64 << 10

// segStepBytes is maxStepBytes on a link that segments (link.Info.Segments):
// its cost is per message, not per frame, and a Step of four full runs
// (runFrames) gives it four messages where 64 KiB would give one or two
// (docs/design.md, "Run length and Step budget"; TestRunsPerEntropy).
const segStepBytes = 256 << 10

// output transmits, round robin over the ready list, what is due at now,
// up to maxStepBytes (the link batch that crosses it goes whole). A QP
// sends up to burst packets before the next one's turn, counted across
// steps, so that a link that lends a few buffers per step still shares
// them among the QPs (TestBurstAcrossSteps), and leaves the list when it
// has nothing more. Without a transmit buffer, output returns at once:
// the timers due ran in runTimers. Transmit buffers that the link lent and
// no packet used stay with the engine for the next round.
func (e *Engine) output(now clock.Time) (bool, error) {
	const burst = 8 // packets a QP sends before the next QP's turn
	// The host rate's hold is over: no deadline is left for it.
	if e.hostWake <= now {
		e.hostWake = 0
	}
	any, err := e.outputCtrl(now)
	if err != nil || len(e.ctrl) > 0 {
		return any, err
	}
	sent, err := e.outputRepair(now)
	if any = any || sent; err != nil || len(e.repair) > 0 {
		return any, err
	}
	for e.readyLen() > 0 {
		if !e.borrow() {
			return any, nil
		}
		filled, held := 0, false
		for filled < e.have && e.readyLen() > 0 && e.stepBytes < e.stepMax {
			q := e.ready[e.readyHead]
			if q.sch.eng != e { // destroyed
				e.popReady()
				continue
			}
			e.visits++
			e.hostHeld = false
			m, err := q.PollTransmit(now, e.tx[filled].Buf)
			if err != nil {
				return any, err
			}
			if m == 0 && e.hostHeld { // hostwin.go: q keeps its turn
				if e.hostWake > now {
					e.stats.HostRateHeld++
				} else {
					e.stats.HostWindowHeld++
				}
				held = true
				break
			}
			if m == 0 {
				e.popReady()
				e.unready(q)
				continue
			}
			e.hostFlight(q)
			e.markDirty(q) // a packet sent arms its timers
			e.tx[filled].Buf = e.tx[filled].Buf[:m]
			e.stats.TxBytes += uint64(m)
			e.stepBytes += m
			filled++
			if e.turn++; e.turn == burst {
				e.popReady()
				e.ready = append(e.ready, q)
			}
		}
		if filled > 0 {
			any = true
			if err := e.flush(filled); err != nil {
				return any, err
			}
		}
		if held || e.stepBytes >= e.stepMax {
			break
		}
	}
	return any, nil
}

// outputCtrl sends the control frames due (acknowledgements, CNPs, credit
// grants and requests) before any data: an ACK that waited for its QP's
// turn among the engine's senders would wait a round of them (127 QPs of
// 8 packets at 100 Gb/s: about 125 µs), and its sender would read the
// wait as loss (TestAckAheadOfData).
func (e *Engine) outputCtrl(now clock.Time) (bool, error) {
	any := false
	for len(e.ctrl) > 0 {
		if !e.borrow() {
			return any, nil
		}
		filled, i := 0, 0
		for ; i < len(e.ctrl) && filled < e.have && e.stepBytes < e.stepMax; i++ {
			q := e.ctrl[i]
			e.ctrl[i] = nil
			q.sch.ctrl = false
			if q.sch.eng != e { // destroyed
				continue
			}
			e.visits++
			m, err := q.pollControl(now, e.tx[filled].Buf)
			if err != nil {
				e.ctrl = append(e.ctrl[:0], e.ctrl[i+1:]...)
				return any, err
			}
			if m == 0 {
				continue
			}
			e.markDirty(q)
			e.tx[filled].Buf = e.tx[filled].Buf[:m]
			e.stats.TxBytes += uint64(m)
			e.stepBytes += m
			filled++
			if q.controlDue(now) { // another: an ACK and a grant
				q.sch.ctrl = true
				e.ctrl[i] = q
				i--
			}
		}
		var sent bool
		var err error
		e.ctrl, sent, err = e.endPass(e.ctrl, i, filled)
		if any = any || sent; err != nil {
			return any, err
		}
		if e.stepBytes >= e.stepMax {
			break
		}
	}
	return any, nil
}

// outputRepair sends, after the control frames and before any new data,
// the resends of the QPs that took a trimmed packet's NAK (QP.repairDue),
// up to burst each: a resend that waited for its QP's turn among the
// engine's senders would wait a round of them (127 QPs of 8 packets at
// 100 Gb/s: about 125 µs) and meet its queue as full as when it was
// trimmed (TestRepairAheadOfData). A QP leaves the list after its share;
// what it has left to resend goes at its turn.
func (e *Engine) outputRepair(now clock.Time) (bool, error) {
	const burst = 8
	any := false
	for len(e.repair) > 0 {
		if !e.borrow() {
			return any, nil
		}
		filled, i := 0, 0
		for ; i < len(e.repair) && filled < e.have && e.stepBytes < e.stepMax; i++ {
			q := e.repair[i]
			if q.sch.eng != e { // destroyed
				e.repair[i], q.sch.repair = nil, false
				continue
			}
			e.visits++
			m, err := q.pollRepair(now, e.tx[filled].Buf)
			if err != nil {
				return any, err
			}
			if m > 0 {
				e.hostFlight(q)
				e.markDirty(q)
				e.tx[filled].Buf = e.tx[filled].Buf[:m]
				e.stats.TxBytes += uint64(m)
				e.stepBytes += m
				filled++
				if q.sch.repairSent++; q.sch.repairSent < burst && q.repairDue() {
					i-- // its next resend
					continue
				}
			}
			e.repair[i], q.sch.repair, q.sch.repairSent = nil, false, 0
		}
		var sent bool
		var err error
		e.repair, sent, err = e.endPass(e.repair, i, filled)
		if any = any || sent; err != nil {
			return any, err
		}
		if e.stepBytes >= e.stepMax {
			break
		}
	}
	return any, nil
}

// endPass drops from list the i entries a pass over it served and sends
// the frames the pass filled; it reports whether it sent any.
func (e *Engine) endPass(list []*QP, i, filled int) ([]*QP, bool, error) {
	k := copy(list, list[i:])
	clear(list[k:])
	list = list[:k]
	if filled == 0 {
		return list, false, nil
	}
	return list, true, e.flush(filled)
}

// noteRepair puts q on the repair list if it has a resend queued.
func (e *Engine) noteRepair(q *QP) {
	if !q.sch.repair && q.repairDue() {
		q.sch.repair = true
		e.repair = append(e.repair, q)
	}
}

// borrow tops up the engine's transmit buffers from the link; it reports
// false, and counts it, when the engine holds none.
func (e *Engine) borrow() bool {
	if e.have < len(e.tx) {
		e.have += e.link.Alloc(e.tx[e.have:])
	}
	if e.have == 0 {
		e.stats.TxNoBuffer++
		return false
	}
	return true
}

// flush sends the first filled transmit buffers and keeps the rest: the
// last of them fill the front that was sent, so that a flush moves at
// most filled entries, not every buffer the engine holds (a post that
// sends one frame moved the other 63).
func (e *Engine) flush(filled int) error {
	e.stats.TxFrames += uint64(filled)
	_, err := e.link.Send(e.tx[:filled])
	rest := e.have - filled
	if rest > filled {
		copy(e.tx[:filled], e.tx[rest:e.have])
	} else {
		copy(e.tx, e.tx[filled:e.have])
	}
	clear(e.tx[rest:e.have])
	e.have = rest
	return err
}

// noteCtrl puts q on the control list if it has a control frame due.
func (e *Engine) noteCtrl(q *QP, now clock.Time) {
	if !q.sch.ctrl && q.controlDue(now) {
		q.sch.ctrl = true
		e.ctrl = append(e.ctrl, q)
	}
}

// NextDeadline returns the engine's next deadline: the earliest expiry of
// the timers of the QPs on the ready list, and the earliest NextTimeout of
// the others. A QP left on the ready list by a Step is waiting for a
// transmit buffer, which wakes the link's Wait, or for the next Step of a
// Step that reported work.
func (e *Engine) NextDeadline() clock.Time {
	e.settle()
	t := clock.Never
	if len(e.timers) > 0 {
		t = e.timers[0].at
	}
	if e.credit != nil {
		t = clock.Min(t, e.credit.deadline())
	}
	if e.hostWake != 0 {
		t = clock.Min(t, e.hostWake)
	}
	if e.od != nil {
		t = clock.Min(t, e.peerDeadline())
	}
	return t
}

// Completions appends the completions of every QP to dst.
func (e *Engine) Completions(dst []Completion) []Completion {
	list := e.takeCompl()
	for _, q := range list {
		if q.sch.eng != e {
			continue
		}
		for {
			e.visits++
			c, ok := q.PollCompletion()
			if !ok {
				break
			}
			dst = append(dst, c)
		}
	}
	e.putCompl(list)
	if e.od != nil && len(e.od.comps) > 0 {
		dst = append(dst, e.od.comps...) // peers.go: of on-demand QPs closed
		clear(e.od.comps)
		e.od.comps = e.od.comps[:0]
	}
	return dst
}
