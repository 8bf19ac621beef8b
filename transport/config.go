package transport

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
)

// Profile selects a coherent set of defaults: which path policy, which loss
// recovery, which wire opcodes. Every default can still be overridden one
// field at a time, so that ablations (spray + Go-Back-N, ECMP + selective
// repeat) are one setting away.
type Profile uint8

const (
	// Spray sprays every packet over all paths (per-packet entropy), places
	// out of order, acknowledges selectively and retransmits only what is
	// lost. It uses spray's own opcodes (0xE0-0xFF).
	Spray Profile = iota
	// RoCE is classic RoCEv2: one path (entropy) per QP, in-order reception
	// with Go-Back-N on a NAK sequence error, standard RC opcodes.
	RoCE
)

func (p Profile) String() string {
	switch p {
	case Spray:
		return "spray"
	case RoCE:
		return "roce"
	}
	return fmt.Sprintf("profile(%d)", uint8(p))
}

// ParseProfile returns the profile named s ("spray" or "roce").
func ParseProfile(s string) (Profile, error) {
	switch s {
	case "spray":
		return Spray, nil
	case "roce":
		return RoCE, nil
	}
	return 0, fmt.Errorf("transport: unknown profile %q (want spray or roce)", s)
}

// Recovery is the loss recovery scheme.
type Recovery uint8

const (
	// RecoveryDefault takes the profile's: selective repeat for Spray,
	// Go-Back-N for RoCE.
	RecoveryDefault Recovery = iota
	// SelectiveRepeat retransmits only packets detected lost (SACK, RACK-TLP).
	SelectiveRepeat
	// GoBackN resends everything from the first missing PSN on a NAK or RTO.
	GoBackN
)

// PathPolicy is how packets pick their entropy (UDP source port).
type PathPolicy uint8

const (
	// PathsDefault takes the profile's: adaptive spraying for Spray (a path
	// that loses packets or stalls leaves the spray set and is probed back;
	// losses that most paths share, a bottleneck they all cross, take none
	// out), ECMP for RoCE. Config.withDefaults is the one place that
	// decides it.
	PathsDefault PathPolicy = iota
	// PathsECMP gives each QP one entropy for its whole life.
	PathsECMP
	// PathsSpray sprays packets obliviously over Config.Entropies
	// entropies: every path the same share.
	PathsSpray
	// PathsAdaptive sprays over Config.Entropies entropies weighted by what
	// ACKs report of each path (RTT, INT queue delay, ECN, losses), takes
	// failing paths out and probes them back in (multipath.NewAdaptive).
	PathsAdaptive
)

// Config configures an Engine or Endpoint and the QPs it creates. The zero
// value is usable: every field documents its default. Both peers of a QP
// must use the same Profile, Recovery and MTU.
type Config struct {
	// Profile picks the defaults below; zero is Spray.
	Profile Profile
	// Recovery overrides the profile's loss recovery.
	Recovery Recovery
	// Paths overrides the profile's path policy.
	Paths PathPolicy
	// Entropies is the number of paths a spraying QP uses; 0 means 8.
	Entropies int
	// MTU is the largest frame in bytes, Ethernet header included (1514 for
	// a 1500-byte IP MTU). 0 means the link's frame size, at most 1514.
	MTU int
	// Window bounds the packets a QP has outstanding (sender) and the PSN
	// window it accepts (receiver); a multiple of 64, 0 means 4096.
	Window int
	// HostWindow bounds the bytes of data an Engine keeps in flight over
	// all its QPs; 0 means no bound. A QP's congestion controller bounds
	// its own flight, but a host with hundreds of peers whose messages fit
	// their first windows (an MoE all-to-all of a few packets per pair)
	// has no controller that ever hears of the fabric before the data is
	// out: once the ranks drift apart the fabric's queues overflow, and
	// every drop stays in flight until it is found, so the flight grows.
	// With a bound, a new packet waits for room; resends do not. The bound
	// is per engine; a few host bandwidth-delay products keep a lone
	// all-to-all at its pace (docs/results.md#host-window;
	// TestHostWindowBounds).
	HostWindow int
	// HostRate bounds the rate, in bytes per second, at which an Engine
	// sends new data over all its QPs; 0 means no bound. Resends, READ
	// responses and control frames are not held, and up to PacingBurst
	// bytes go back to back after a pause. In an all-to-all every
	// receiver's link is as loaded as every sender's: the last hops run
	// at exactly full load and their queues grow as a random walk, which
	// no QP's controller sees, for each QP sends less than its window
	// allows. Sending a few percent under the line rate drains them, for
	// as much more time (docs/results.md#host-rate; TestHostRateBounds).
	// Like HostWindow it is per engine.
	HostRate float64
	// MaxMessages bounds the messages a QP has in progress in each direction;
	// 0 means 256.
	MaxMessages int
	// MaxMessageSize bounds one message; 0 means 1 GiB.
	MaxMessageSize int64
	// MaxRecvBytes bounds the receive buffers a QP holds for messages in
	// progress; 0 means 4 GiB.
	MaxRecvBytes int64
	// SendQueue bounds the work requests a QP queues before PostSend
	// returns ErrQueueFull; 0 means 1024.
	SendQueue int
	// AckEvery is how many data packets a receiver acknowledges at once;
	// 0 means 2 (Spray) or 16 (RoCE). Both also acknowledge at once when
	// the sender asks with the BTH AckReq bit (the last packet of a
	// message; with Spray also a full window smaller than 2*AckEvery
	// packets, at most once per AckEvery packets when the window holds
	// AckEvery) and when a duplicate arrives; RoCE NAKs a gap at once,
	// while Spray, whose sprayed packets arrive beyond holes all the time,
	// treats a packet beyond a hole like any other and acknowledges at
	// once one that a packet sent after it overtook, when an earlier ACK
	// reported that later packet. The sender's tail
	// loss probe allows for AckDelay while fewer than AckEvery packets
	// are in flight.
	AckEvery int
	// AckDelay is how long a receiver holds an acknowledgement that has not
	// reached AckEvery; 0 means 20µs.
	AckDelay time.Duration
	// MinRTO, MaxRTO and MaxRetries bound retransmission timeouts: the QP
	// fails with ErrPeerUnreachable after MaxRetries consecutive timeouts
	// with no progress. Zero values take the retransmit package's defaults
	// (1 ms, 100 ms), and MaxRetries DefaultSprayMaxRetries in the Spray
	// profile, 7 (IBA's largest retry count) in the RoCE profile. MinRTO
	// and MaxRTO bound the Spray profile's
	// adaptive timer; the RoCE profile's timer is LocalAckTimeout's, fixed,
	// unless LocalAckTimeout is negative.
	MinRTO, MaxRTO time.Duration
	MaxRetries     int
	// LocalAckTimeout is the RoCE profile's retransmission timer, as a
	// RoCE NIC takes it: the exponent of IBA's Local ACK Timeout QP
	// attribute (ibv_qp_attr.timeout), a timer of 4.096µs x
	// 2^LocalAckTimeout (AckTimeout), the same after every timeout (no RTT
	// estimate, no backoff), so that a QP whose peer stops answering fails
	// (MaxRetries+1) timers after its last progress. 0 means
	// DefaultLocalAckTimeout (14: 67.1 ms); 1 to 29 set it; a negative
	// value gives the RoCE profile the Spray profile's adaptive timer
	// (RFC 6298 within MinRTO and MaxRTO, doubling on each timeout)
	// instead. The Spray profile ignores it.
	LocalAckTimeout int
	// INTHops reserves room for that many INT hop records in data packets
	// (Spray only) for switches to fill; 0 reserves none. With AckEvery 1
	// every data packet has the room; above 1, only those likely to have
	// their records echoed (an ACK echoes one packet's: the latest with
	// records since the previous ACK): those that ask for an ACK (AckReq),
	// resends, and a new packet once AckEvery have gone without the room.
	// The payload per packet is the same either way.
	INTHops int
	// CC makes a congestion controller for each QP, when the QP first has
	// data to send (a QP that never sends has none); nil means the
	// profile's (ProfileCC): for Spray cc's "auto" (Swift from RTT, HPCC
	// once ACKs echo INT records), for RoCE "dcqcn", each for the QP's
	// payload size and LineRate. cc.Fixed{} gives the unlimited, unpaced
	// window (still bounded by Window) that nil meant before.
	CC func() cc.Controller
	// LineRate is the rate of the endpoint's link in bytes per second, if
	// known; 0 means unknown. Only the profile's controller (CC nil) uses
	// it: HPCC's and Swift's initial window and increase, DCQCN's starting
	// rate and increase step (cc.Params.LineRate); unknown, they start
	// from 100 Gb/s (HPCC, DCQCN) or 16 packets (Swift) and come down.
	LineRate float64
	// Credits makes the Spray profile's receivers pace their senders:
	// the engine shares its link's rate (LineRate, which must be set)
	// among the QPs whose senders have data for it, by credit grants of
	// a few packets at a time, round robin, and the engine's
	// senders send an unsolicited window (CreditUnsolicited) at the
	// start of a burst and the rest against their receiver's credit. A
	// sender whose peer grants nothing (its ACKs carry no credit) sends
	// as without credits. Off by default: on a 128-host all-to-all
	// (docs/results.md#ack-every) the mean is 2-4% longer with credits,
	// the switch buffer peak about half. The RoCE profile refuses it.
	Credits bool
	// CreditUnsolicited is the bytes an engine with Credits sends without
	// credit at the start of a burst (a message posted to a QP with
	// nothing to send), shared among its QPs with new data to send when
	// the burst's first packet goes (a lone QP sends all of it, each of
	// n QPs a nth rounded up to whole packets); 0 means
	// DefaultCreditUnsolicited (16 KiB), a negative value none.
	CreditUnsolicited int
	// PacingBurst is the pacer's burst in bytes; 0 means 16 KiB.
	PacingBurst int
	// ECN marks data packets ECN-capable (ECT(0)): DCQCN and ECN echo
	// need it. Default off for Spray; on for RoCE with CC nil, whose
	// controller (DCQCN) has no other signal, whatever this field says
	// (as a RoCE NIC with DCQCN marks its packets); set CC to turn it off.
	ECN bool
	// Seed, when not 0, seeds every random choice (QP numbers, initial
	// PSNs, rkeys, region addresses, entropies, spraying order): equal seeds
	// give equal runs over a deterministic link, for tests and benchmarks.
	// 0, the default, draws them from a ChaCha8 generator keyed from
	// crypto/rand, so that a blind attacker cannot guess a QP number, PSN,
	// rkey or region address.
	Seed uint64
	// StartPSN, when not nil, gives the initial send PSN of each new QP
	// instead of a seeded random one.
	StartPSN func(qpn uint32) uint32
	// MicroburstThreshold is the INT queue delay (summed over the hops)
	// above which an acknowledgement counts in QPStats.MicroburstAcks, and
	// the first of a run of them on a path in QPStats.Microbursts; 0 means
	// DefaultMicroburstThreshold (50µs), a negative value counts none.
	MicroburstThreshold time.Duration
	// OnEndpoint, when not nil, is called by NewEndpoint with every Endpoint
	// it starts, before NewEndpoint returns: a hook for code that creates
	// endpoints inside other packages (bench, collective) to instrument them
	// (telemetry.OnEndpoint). It must not block; Engines ignore it.
	OnEndpoint func(*Endpoint)
	// Engines is the number of engine goroutines an Endpoint runs on a
	// multi-queue link (link.Multi): 0 means one per queue, each driving
	// its queue and owning the QPs whose number is its index modulo the
	// number of queues; 1 means one engine over the whole link; any other
	// value must equal the number of queues. On a single link it must be 0
	// or 1.
	Engines int
	// HandoverSlots is the number of frames each hand-over ring between two
	// engines holds (frames that arrive on one engine's queue for a QP that
	// another owns); a frame for a full ring is dropped and counted in
	// EngineStats.HandoverDrops. 0 means 256; rounded up to a power of two.
	// Each ring holds its frames in preallocated slots of MTU+4 bytes.
	HandoverSlots int
	// CPUs, when not empty, pins engine i of an Endpoint to CPU
	// CPUs[i%len(CPUs)]: its goroutine locks its OS thread
	// (runtime.LockOSThread) and sets the thread's affinity
	// (sched_setaffinity; Linux only, NewEndpoint fails elsewhere).
	CPUs []int
	// BusyPoll, when positive, makes an Endpoint's engines poll their links
	// and hand-over rings without sleeping for that long after their last
	// work, yielding the processor between polls (runtime.Gosched), before
	// they sleep in the link's Wait, and Conn.Recv poll its engine's link
	// for that long before it sleeps (on a link.WaitSplitter): lower
	// latency for a core spent spinning. 0 means never spin.
	BusyPoll time.Duration
	// Clock is the clock an Endpoint reads; nil means the system's monotonic
	// clock. Engines and QPs never read it: they are handed the time.
	Clock clock.Clock

	// scratch is the scratch space of the QPs of the one engine whose
	// Config this is (QP.scr), allocated with its first QP; withDefaults
	// clears it, so that no two engines share one.
	scratch *qpScratch
	// Peers configures the QPs made on demand, without a handshake
	// (Endpoint.Peer, SendTo, AcceptPeer; see "Peers on demand"). The
	// zero value initiates and accepts nothing unless asked.
	Peers PeerConfig

	// secEpochPackets is the packets a secured QP sends under one key
	// epoch; 0 means defaultEpochPackets. Tests lower it to force key
	// rotations (secure_test.go).
	secEpochPackets uint64
}

// DefaultLocalAckTimeout is Config.LocalAckTimeout's default: 14, a timer
// of 67.1 ms, as perftest's default QP timeout. It is the smallest of the
// usual settings; NCCL's default NCCL_IB_TIMEOUT is 20 (4.3 s). See the
// package documentation.
const DefaultLocalAckTimeout = 14

// MaxLocalAckTimeout is the largest Config.LocalAckTimeout: IBA's field has
// 5 bits (up to 31), but 2^30 x 4.096µs is above the hour that bounds the
// retransmit package's timers.
const MaxLocalAckTimeout = 29

// AckTimeout returns the timer of a Local ACK Timeout exponent:
// 4.096µs x 2^exp, for exp in [0, MaxLocalAckTimeout].
func AckTimeout(exp int) time.Duration {
	return 4096 * time.Nanosecond << exp
}

// FabricINTHops is the INT room a spray QP reserves on spray's leaf-spine
// fabrics: a record for each switch egress on the longest path (leaf,
// spine, leaf) and one to spare.
const FabricINTHops = 4

// OnINTFabric returns c for a fabric whose switches write INT records into
// spray's data packets (spray's fabric programs): the Spray profile
// reserves room for hops records (0: FabricINTHops), from which its
// congestion control reads queues (cc's auto turns to HPCC) and its
// adaptive path policy learns the physical paths; other profiles are
// returned as they are. It is the one place that says what spray on an
// INT fabric means: perf, bench and compare call it.
func (c Config) OnINTFabric(hops int) Config {
	if c.Profile != Spray {
		return c
	}
	if hops <= 0 {
		hops = FabricINTHops
	}
	c.INTHops = hops
	return c
}

// DefaultSprayMaxRetries is the Spray profile's MaxRetries: at the default
// timers (from 1 ms, or 2 ms before the first RTT sample, doubling to
// 100 ms) a peer silent for about 2 s fails the
// QP. A user-space endpoint on a shared host can be descheduled for
// hundreds of milliseconds, and declaring a live peer dead costs a job
// more than noticing a dead one later (NCCL's IB timeout is seconds);
// a peer that is alive but not reading says so with RNR NAKs instead.
// Guarded by TestDefaultRetries.
const DefaultSprayMaxRetries = 26

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("transport: invalid config")

// withDefaults returns a copy with zero fields replaced by defaults for a
// link whose frames hold at most frameSize bytes.
func (c Config) withDefaults(frameSize int) (Config, error) {
	c.scratch = nil
	if c.Profile > RoCE {
		return c, fmt.Errorf("%w: profile %d", ErrConfig, c.Profile)
	}
	if c.Recovery == RecoveryDefault {
		c.Recovery = SelectiveRepeat
		if c.Profile == RoCE {
			c.Recovery = GoBackN
		}
	}
	if c.Paths == PathsDefault {
		c.Paths = PathsAdaptive
		if c.Profile == RoCE {
			c.Paths = PathsECMP
		}
	}
	if c.Entropies == 0 {
		c.Entropies = 8
	}
	if c.Entropies < 1 || c.Entropies > 1024 {
		return c, fmt.Errorf("%w: Entropies %d not in [1, 1024]", ErrConfig, c.Entropies)
	}
	if c.MTU == 0 {
		c.MTU = min(frameSize, 1514)
	}
	if frameSize > 0 && c.MTU > frameSize {
		return c, fmt.Errorf("%w: MTU %d larger than the link's frames (%d)", ErrConfig, c.MTU, frameSize)
	}
	if c.MTU < 256 || c.MTU > 65535 {
		return c, fmt.Errorf("%w: MTU %d not in [256, 65535]", ErrConfig, c.MTU)
	}
	if c.Window == 0 {
		c.Window = 4096
	}
	if c.Window < 64 || c.Window%64 != 0 || c.Window > 1<<20 {
		return c, fmt.Errorf("%w: Window %d: want a multiple of 64 in [64, 1<<20]", ErrConfig, c.Window)
	}
	if c.HostWindow < 0 {
		return c, fmt.Errorf("%w: HostWindow %d is negative", ErrConfig, c.HostWindow)
	}
	if c.HostRate < 0 || math.IsNaN(c.HostRate) || math.IsInf(c.HostRate, 0) {
		return c, fmt.Errorf("%w: HostRate %v: want bytes per second, 0 for no bound", ErrConfig, c.HostRate)
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = 256
	}
	if c.MaxMessages < 1 || c.MaxMessages > 1<<16 {
		return c, fmt.Errorf("%w: MaxMessages %d not in [1, 65536]", ErrConfig, c.MaxMessages)
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 1 << 30
	}
	if c.MaxMessageSize < 0 || c.MaxMessageSize > 1<<32-1 {
		return c, fmt.Errorf("%w: MaxMessageSize %d not in [0, 4 GiB)", ErrConfig, c.MaxMessageSize)
	}
	if c.MaxRecvBytes == 0 {
		c.MaxRecvBytes = 4 << 30
	}
	if c.SendQueue == 0 {
		c.SendQueue = 1024
	}
	if c.SendQueue < 1 || c.SendQueue > 1<<20 {
		return c, fmt.Errorf("%w: SendQueue %d not in [1, 1<<20]", ErrConfig, c.SendQueue)
	}
	if c.MaxRetries == 0 && c.Profile == Spray {
		c.MaxRetries = DefaultSprayMaxRetries
	}
	if c.AckEvery == 0 {
		c.AckEvery = 2
		if c.Profile == RoCE {
			c.AckEvery = 16
		}
	}
	if c.AckEvery < 1 {
		return c, fmt.Errorf("%w: AckEvery %d", ErrConfig, c.AckEvery)
	}
	if c.AckDelay == 0 {
		c.AckDelay = 20 * time.Microsecond
	}
	if c.INTHops < 0 || c.INTHops > 8 {
		return c, fmt.Errorf("%w: INTHops %d not in [0, 8]", ErrConfig, c.INTHops)
	}
	if c.CC == nil && c.Profile == RoCE {
		c.ECN = true // the profile's DCQCN reacts to CE marks only
	}
	if c.LineRate < 0 || math.IsNaN(c.LineRate) || math.IsInf(c.LineRate, 0) {
		return c, fmt.Errorf("%w: LineRate %v", ErrConfig, c.LineRate)
	}
	if c.LocalAckTimeout == 0 {
		c.LocalAckTimeout = DefaultLocalAckTimeout
	}
	if c.LocalAckTimeout > MaxLocalAckTimeout {
		return c, fmt.Errorf("%w: LocalAckTimeout %d above %d", ErrConfig, c.LocalAckTimeout, MaxLocalAckTimeout)
	}
	if c.Credits && c.Profile != Spray {
		return c, fmt.Errorf("%w: Credits needs the Spray profile", ErrConfig)
	}
	if c.Credits && c.LineRate == 0 {
		return c, fmt.Errorf("%w: Credits needs LineRate, the rate the receiver shares", ErrConfig)
	}
	switch {
	case c.CreditUnsolicited == 0:
		c.CreditUnsolicited = DefaultCreditUnsolicited
	case c.CreditUnsolicited < 0:
		c.CreditUnsolicited = 0
	case c.CreditUnsolicited > 1<<30:
		return c, fmt.Errorf("%w: CreditUnsolicited %d above 1 GiB", ErrConfig, c.CreditUnsolicited)
	}
	if c.PacingBurst == 0 {
		c.PacingBurst = 16 << 10
	}
	if c.MicroburstThreshold == 0 {
		c.MicroburstThreshold = DefaultMicroburstThreshold
	}
	if c.Engines < 0 || c.Engines > 1024 {
		return c, fmt.Errorf("%w: Engines %d not in [0, 1024]", ErrConfig, c.Engines)
	}
	if c.HandoverSlots == 0 {
		c.HandoverSlots = 256
	}
	if c.HandoverSlots < 1 || c.HandoverSlots > 1<<16 {
		return c, fmt.Errorf("%w: HandoverSlots %d not in [1, 65536]", ErrConfig, c.HandoverSlots)
	}
	for _, cpu := range c.CPUs {
		if cpu < 0 || cpu >= 1<<16 {
			return c, fmt.Errorf("%w: CPU %d", ErrConfig, cpu)
		}
	}
	if c.BusyPoll < 0 {
		return c, fmt.Errorf("%w: BusyPoll %v < 0", ErrConfig, c.BusyPoll)
	}
	var err error
	if c.Peers, err = c.Peers.withDefaults(); err != nil {
		return c, err
	}
	return c, nil
}
