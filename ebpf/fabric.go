package ebpf

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Limits of the fabric programs' maps.
const (
	// MaxPorts is the number of ports that one Fabric can have attached
	// over its life (slots are reused after DetachPort).
	MaxPorts = 1024
	// MaxInflight is the number of RoCE frames whose egress time the
	// fabric remembers until the next port's ingress (an LRU map: beyond it
	// the oldest entries go and their queue delay is not measured).
	MaxInflight = 65536
)

// ErrUnknownPort is returned by the Fabric methods that take a PortID for a
// port that is not attached.
var ErrUnknownPort = errors.New("ebpf: fabric port not attached")

// PortID names a switch port of a test fabric: the switch and port numbers
// written into INT hop records. It identifies the port in the Fabric API
// because ifindexes repeat across the network namespaces of a testbed.
type PortID struct {
	Switch uint16
	Port   uint16
}

// String formats the id as "switch/port".
func (id PortID) String() string { return fmt.Sprintf("%d/%d", id.Switch, id.Port) }

// PortConfig describes a switch port for AttachPort. The zero value (except
// for a unique ID) is a port that stamps INT with rate 0, marks nothing and
// drops nothing.
type PortConfig struct {
	// ID is the port's switch and port numbers, unique within a Fabric.
	ID PortID
	// RateMbps is the egress link rate in Mbit/s, written into hop records
	// and used to turn queue delay into queue bytes (QLen). 0 gives QLen 0.
	// Set it to the rate the port is shaped to.
	RateMbps uint32
	// ECN is the marking of the port's egress queue; zero: no marking.
	ECN ECNConfig
	// Faults are the faults injected at the port's egress; zero: none.
	Faults Faults
	// Edge marks a port whose peer does not run the fabric programs (a
	// leaf's port to a host): what enters there did not come from a
	// port's egress, so its ingress measures no queue delay and forgets
	// any egress time remembered under the frame's key (left by an
	// earlier copy that a queue dropped, or that went to a host), which
	// would otherwise count as queue delay. Zero: the peer is a port.
	Edge bool
	// TrimQueue trims at the queue, as a switch that trims does when its
	// queue has no room: a whole spray data packet that would take the
	// port's queue beyond TrimQueue bytes is cut to its headers (as
	// Faults.Trim cuts one that loss would drop; TrimmedQueue), and what
	// cannot be trimmed goes on to the queue. The queue is a model kept by
	// the egress program: every frame it passes adds its bytes, and the
	// link drains them at RateMbps, which must then be set; the qdisc
	// that shapes the port must drain at that rate. Zero: no trimming at
	// the queue.
	TrimQueue uint32
	// QueueLimit is the port's queue in bytes (its qdisc's limit): a frame
	// that would take the model beyond it is left out of the model, as the
	// full queue drops it. Zero: no limit.
	QueueLimit uint32
	// PriorityClass is the skb->priority that trimmed spray data packets
	// and RoCE control frames (spray ACKs, credit grants and requests, RC
	// ACKs, CNPs) get, so that a qdisc with a class of that handle (an
	// HTB class "major:minor" is (major<<16)|minor) sends them ahead of
	// the data, as a trimming switch queues them. Zero: trimmed packets
	// get priority 7 (TC_PRIO_CONTROL), control frames keep theirs.
	PriorityClass uint32
}

// ECNConfig is RED-like ECN marking on queue delay, as DCQCN switches do on
// queue length: an ECT packet whose delay in the port's queue is at most
// KMin is not marked, one at or above KMax is marked CE, and in between the
// marking probability rises linearly from 0 to PMax. Packets already CE or
// not ECT are left alone. The zero value marks nothing.
type ECNConfig struct {
	// KMin is the delay below which nothing is marked; >= 0.
	KMin time.Duration
	// KMax is the delay from which every ECT packet is marked; 0 turns
	// marking off. KMax >= KMin.
	KMax time.Duration
	// PMax is the marking probability just below KMax, in [0, 1]; 0 means
	// 1. It is applied in steps of 1/65536.
	PMax float64
}

// Faults are injected on a port's egress, per frame, in this order:
// blackhole, random loss, burst loss. The zero value injects nothing.
type Faults struct {
	// Blackhole drops every frame: a failed link.
	Blackhole bool
	// Loss is the probability in [0, 1] that a frame is lost.
	Loss float64
	// Burst is Gilbert-Elliott burst loss; the zero value is off.
	Burst GilbertElliott
	// RoCEOnly applies the faults only to RoCE frames (UDP to 4791), so that
	// ARP, neighbour discovery and control connections keep working.
	RoCEOnly bool
	// Trim cuts a whole spray data packet that random or burst loss would
	// drop to its headers instead, as a switch whose queue is full does
	// (wire.Trim: the trim bit, lengths, checksums and a new ICRC), and
	// sends it on with skb->priority 7 (Trimmed); the receiver asks for
	// its PSN at once. Other frames are dropped as before, and blackhole
	// drops everything.
	Trim bool
}

// GilbertElliott is a two-state burst loss model: each frame first moves the
// state (good to bad with probability P, bad to good with probability R),
// then is lost with probability LossGood or LossBad of the new state. The
// mean burst length in the bad state is 1/R frames. The zero value is off;
// the model is on when P or LossGood is non-zero.
type GilbertElliott struct {
	P, R     float64 // transition probabilities per frame, [0, 1]
	LossGood float64 // loss probability in the good state, [0, 1]
	LossBad  float64 // loss probability in the bad state, [0, 1]; 0 means 1
}

// On reports whether the model is enabled.
func (g GilbertElliott) On() bool { return g.P != 0 || g.LossGood != 0 }

// PortCounters are the counters of one port, summed over CPUs.
type PortCounters struct {
	// Packets and Bytes count frames that the port's egress passed on (not
	// dropped); Bytes from the Ethernet header, without FCS.
	Packets, Bytes uint64
	// Drops by cause, at the port's egress.
	DropLoss, DropBurst, DropBlackhole uint64
	// ECNMarked counts packets marked CE for the delay in this port's queue.
	ECNMarked uint64
	// INTStamped counts hop records written at this port's egress; INTFull
	// counts spray data packets whose INT region had no free slot.
	INTStamped, INTFull uint64
	// Trimmed counts spray data packets cut to their headers and sent on
	// instead of dropped: for a fault (Faults.Trim) or for the queue
	// (PortConfig.TrimQueue, also counted in TrimmedQueue).
	Trimmed, TrimmedQueue uint64
	// DropQueue counts spray data packets that the queue had no room for
	// and that could not be cut (a failed trim): dropped.
	DropQueue uint64
	// RxPackets counts frames seen by the port's ingress.
	RxPackets uint64
	// Measured counts RoCE frames sent by this port whose queue delay was
	// measured at the next port's ingress; QueueDelaySum is the sum of
	// those delays and MaxQueueDelay the largest.
	Measured      uint64
	QueueDelaySum time.Duration
	MaxQueueDelay time.Duration
}

// Drops returns the frames dropped by the egress program: faults and
// failed trims.
func (c PortCounters) Drops() uint64 {
	return c.DropLoss + c.DropBurst + c.DropBlackhole + c.DropQueue
}

// MeanQueueDelay returns QueueDelaySum / Measured, or 0.
func (c PortCounters) MeanQueueDelay() time.Duration {
	if c.Measured == 0 {
		return 0
	}
	return c.QueueDelaySum / time.Duration(c.Measured)
}

// Sub returns c - o field by field: the counts between two snapshots.
// MaxQueueDelay is c's (a maximum cannot be subtracted).
func (c PortCounters) Sub(o PortCounters) PortCounters {
	return PortCounters{
		Packets:       c.Packets - o.Packets,
		Bytes:         c.Bytes - o.Bytes,
		DropLoss:      c.DropLoss - o.DropLoss,
		DropBurst:     c.DropBurst - o.DropBurst,
		DropBlackhole: c.DropBlackhole - o.DropBlackhole,
		ECNMarked:     c.ECNMarked - o.ECNMarked,
		INTStamped:    c.INTStamped - o.INTStamped,
		INTFull:       c.INTFull - o.INTFull,
		Trimmed:       c.Trimmed - o.Trimmed,
		TrimmedQueue:  c.TrimmedQueue - o.TrimmedQueue,
		DropQueue:     c.DropQueue - o.DropQueue,
		RxPackets:     c.RxPackets - o.RxPackets,
		Measured:      c.Measured - o.Measured,
		QueueDelaySum: c.QueueDelaySum - o.QueueDelaySum,
		MaxQueueDelay: c.MaxQueueDelay,
	}
}

// String formats the counters for logs.
func (c PortCounters) String() string {
	return fmt.Sprintf("pkts=%d bytes=%d drop(loss=%d burst=%d blackhole=%d queue=%d) trimmed=%d (queue %d) ecn=%d int=%d intfull=%d rx=%d qdelay(n=%d mean=%v max=%v)",
		c.Packets, c.Bytes, c.DropLoss, c.DropBurst, c.DropBlackhole, c.DropQueue, c.Trimmed, c.TrimmedQueue, c.ECNMarked,
		c.INTStamped, c.INTFull, c.RxPackets, c.Measured, c.MeanQueueDelay(), c.MaxQueueDelay)
}

// portParams is the validated, kernel-ready form of a port's settings
// (the fields of struct fabric_port).
type portParams struct {
	id                         PortID
	rate                       uint32
	kmin, kmax, pmax           uint64
	loss, geP, geR, geLG, geLB uint64
	blackhole, burst, roceOnly bool
	trim                       bool
	edge                       bool
	trimQueue, limit, prio     uint32
}

// threshold turns probability p into a threshold on a uniform 32-bit draw.
func threshold(field string, p float64) (uint64, error) {
	if !(p >= 0 && p <= 1) { // also NaN
		return 0, fmt.Errorf("%w: %s %v outside [0, 1]", ErrInvalidConfig, field, p)
	}
	return uint64(math.Round(p * (1 << 32))), nil
}

func (e ECNConfig) params(pp *portParams) error {
	if e.KMin < 0 || e.KMax < 0 || (e.KMax != 0 && e.KMax < e.KMin) {
		return fmt.Errorf("%w: ECN KMin %v, KMax %v", ErrInvalidConfig, e.KMin, e.KMax)
	}
	pm := e.PMax
	if pm == 0 {
		pm = 1
	}
	t, err := threshold("ECN PMax", pm)
	if err != nil {
		return err
	}
	pp.kmin, pp.kmax, pp.pmax = uint64(e.KMin), uint64(e.KMax), t
	return nil
}

func (f Faults) params(pp *portParams) error {
	var err error
	if pp.loss, err = threshold("Loss", f.Loss); err != nil {
		return err
	}
	if pp.geP, err = threshold("Burst.P", f.Burst.P); err != nil {
		return err
	}
	if pp.geR, err = threshold("Burst.R", f.Burst.R); err != nil {
		return err
	}
	if pp.geLG, err = threshold("Burst.LossGood", f.Burst.LossGood); err != nil {
		return err
	}
	lb := f.Burst.LossBad
	if lb == 0 {
		lb = 1
	}
	if pp.geLB, err = threshold("Burst.LossBad", lb); err != nil {
		return err
	}
	pp.blackhole, pp.burst, pp.roceOnly, pp.trim = f.Blackhole, f.Burst.On(), f.RoCEOnly, f.Trim
	return nil
}

func (c PortConfig) params() (portParams, error) {
	pp := portParams{id: c.ID, rate: c.RateMbps, edge: c.Edge,
		trimQueue: c.TrimQueue, limit: c.QueueLimit, prio: c.PriorityClass}
	if c.TrimQueue != 0 && c.RateMbps == 0 {
		return portParams{}, fmt.Errorf("%w: TrimQueue %d needs RateMbps, the rate its queue drains at", ErrInvalidConfig, c.TrimQueue)
	}
	if err := c.ECN.params(&pp); err != nil {
		return portParams{}, err
	}
	if err := c.Faults.params(&pp); err != nil {
		return portParams{}, err
	}
	return pp, nil
}

// DefaultBPFFS is where a bpffs is normally mounted; pinned fabrics live in
// directories under it.
const DefaultBPFFS = "/sys/fs/bpf"

// ObjectIDs are kernel ids of a fabric's programs, links and maps
// (Fabric.Objects), to check that a teardown left none behind.
type ObjectIDs struct {
	Programs, Links, Maps []uint32
}
