package cc

import (
	"errors"
	"fmt"
	"time"
)

// Params are what a controller needs to know of the path it runs on, for
// ByName to pick defaults. Zero fields take ByName's software-fabric
// defaults (see ByName).
type Params struct {
	LineRate    float64       // bytes per second the sender's link carries; 0: the controller's default (100 Gb/s)
	BaseRTT     time.Duration // unloaded round trip of the fabric; 0: SoftwareBaseRTT
	PacketBytes int           // payload of a full packet; 0: 1400
	// AckEvery, when above 1, has HPCC keep a window of at least that
	// many frames (HPCCConfig.MinInflight), so that a receiver that
	// acknowledges every AckEvery packets (transport.Config.AckEvery) can:
	// fewer ACKs on the links, at the cost of up to AckEvery frames per
	// QP waiting in the queues when HPCC's own window is smaller (see the
	// package doc). 0: HPCC's own window (the transport's default).
	AckEvery int
}

// Calibration of ByName for software fabrics (network namespaces, veth,
// user-space endpoints on shared CPUs), where the unloaded RTT is 50-500µs
// rather than the 5-10µs of the papers' hardware. See the package doc.
const (
	// SoftwareBaseRTT is HPCC's T when Params.BaseRTT is 0.
	SoftwareBaseRTT = 100 * time.Microsecond
	// SoftwareSwiftTarget is Swift's base target, measured from the
	// path's smallest recent fabric delay (SwiftConfig.RelativeTarget).
	SoftwareSwiftTarget = 50 * time.Microsecond
	// SoftwareSwiftEndpointAllowance is added to Swift's target on ACKs
	// without INT records (SwiftConfig.RTTEndpointAllowance): their RTT
	// holds the receiver's backlog before its engine reads a packet, which
	// a CPU-bound receiver keeps at tens to hundreds of µs. 100µs still
	// keeps a 1 Gb/s, 32 KiB bottleneck without INT from overflowing
	// (transport's TestDefaultCCSpray).
	SoftwareSwiftEndpointAllowance = 100 * time.Microsecond
	// SoftwareSwiftHostTarget is Swift's endpoint target for ACKs whose
	// hold counts from the packet's arrival at the receiving host
	// (SwiftConfig.HostEndpointTarget; the AF_XDP link stamps arrivals):
	// the time packets may queue in a host's receive ring while its
	// transport waits for a CPU. It is well inside what the ring holds
	// (2048 entries: 680 jumbo frames, 5.5 ms at 10 Gbit/s), and close to
	// a scheduler's time slice on a shared host, which a tighter target
	// would read as congestion (docs/results.md#calibration).
	SoftwareSwiftHostTarget = time.Millisecond
	// SoftwareSwiftMinCwnd is Swift's smallest window in packets: a
	// packet every 10 RTTs at worst. The paper's 0.001 (a packet every
	// 1000 RTTs) stalls a QP for seconds after a timeout when an RTT is a
	// few hundred µs to a few ms, and software fabrics time out spuriously
	// under CPU load.
	SoftwareSwiftMinCwnd = 0.1
)

// Names lists the controllers ByName knows; "none" is another name for
// "fixed".
var Names = []string{"auto", "hpcc", "swift", "dcqcn", "fixed", "none"}

// ByName returns a constructor of the named controller, configured from p;
// each QP calls it for its own controller:
//
//   - "auto": Auto, Swift until INT records come back, then HPCC (the spray
//     profile's default);
//   - "hpcc": HPCC with T = p.BaseRTT (SoftwareBaseRTT if 0), W_init at
//     least two frames (p.PacketBytes plus spray's headers), a smallest
//     window of one frame (MinWindow), the queue term less one frame
//     (QueueOffset) and txRate at most the link rate (ClampTxRate): the
//     test fabric's INT counters, see the package doc; and with
//     p.AckEvery, a window of at least that many frames (MinInflight);
//   - "swift": Swift with a target of SoftwareSwiftTarget (flow scaling up
//     to twice that on top) for the queueing that INT records report
//     (SwiftConfig.INTFabricDelay) or, on ACKs without INT, over the
//     path's smallest recent fabric delay and filtered of scheduling spikes
//     (SwiftConfig.StandingDelay), with SoftwareSwiftEndpointAllowance
//     more target for the endpoints' delays that such an RTT holds
//     (SwiftConfig.RTTEndpointAllowance), RetxResetThreshold 3, smallest
//     window SoftwareSwiftMinCwnd, an endpoint window only for ACKs whose
//     hold counts from the packet's arrival at the host (target
//     SoftwareSwiftHostTarget; otherwise the hold time is the delayed-ACK
//     timer, which fires up to a ms late on a loaded machine);
//     with p.LineRate known, an initial window of one BDP (line rate ×
//     BaseRTT, 1 to 16 packets) and an additive increase of half the
//     target's queue per RTT (0.1 to 1 packet);
//   - "dcqcn": DCQCN at p.LineRate, reacting to CNPs and to ECN echoes (the
//     roce profile's default), its timers at 3 × BaseRTT (SoftwareBaseRTT
//     if 0) and, with p.LineRate known, R_AI at 1/1000 of it;
//   - "fixed" or "none": Fixed, unlimited and unpaced.
//
// The other parameters are the papers' (the controllers' config zero
// values).
func ByName(name string, p Params) (func() Controller, error) {
	hc, sc := p.hpcc(), p.swift()
	switch name {
	case "fixed", "none":
		return func() Controller { return Fixed{} }, nil
	case "auto":
		return func() Controller { return NewAuto(AutoConfig{HPCC: hc, Swift: sc}) }, nil
	case "hpcc":
		return func() Controller { return NewHPCC(hc) }, nil
	case "swift":
		return func() Controller { return NewSwift(sc) }, nil
	case "dcqcn":
		dc := p.dcqcn()
		return func() Controller { return NewDCQCN(dc) }, nil
	}
	return nil, fmt.Errorf("%w %q (want one of %v)", ErrUnknown, name, Names)
}

// ErrUnknown is returned (wrapped) by ByName for a name it does not know.
var ErrUnknown = errors.New("cc: unknown controller")

func (p Params) hpcc() HPCCConfig {
	t := p.BaseRTT
	if t <= 0 {
		t = SoftwareBaseRTT
	}
	line := p.LineRate
	if !positive(line) {
		line = 12.5e9 // HPCC's default
	}
	// W_init is the paper's line rate × T, but at least two frames: a
	// window under two frames holds the sender to one packet in flight.
	winit := max(line*t.Seconds(), float64(2*p.frameBytes()))
	// The smallest window is one frame, not 1024 bytes (see the package
	// doc): below a frame the window no longer bounds anything (a packet
	// still goes when none is in flight) and only the pacing rate W/T
	// holds the sender back.
	// A window of AckEvery frames lets the receiver acknowledge AckEvery
	// packets at once; the pacing rate stays HPCC's (see the package doc).
	minIn := 0
	if p.AckEvery > 1 {
		minIn = p.AckEvery * p.frameBytes() // may exceed W_init: it is no window HPCC computes
	}
	return HPCCConfig{LineRate: p.LineRate, BaseRTT: t, InitWindow: int(min(winit, 1<<40)), MinWindow: p.frameBytes(), QueueOffset: p.frameBytes(), ClampTxRate: true, MinInflight: minIn}
}

// frameBytes is about one full frame on the wire: the payload and spray's
// headers (Ethernet, IPv4, UDP, BTH, data header, INT with 4 hops, ICRC:
// 182 bytes).
func (p Params) frameBytes() int {
	pb := p.PacketBytes
	if pb <= 0 {
		pb = 1400
	}
	return pb + 14 + 20 + 8 + 12 + 24 + 4 + 4*24 + 4
}

// dcqcn calibrates DCQCN for a software fabric (ours): its feedback loop
// is a software RTT (100µs to ms), so the rate-increase and alpha timers
// run at 3 × BaseRTT (at least the paper's 55µs) rather than raising the
// rate many times per feedback; with p.LineRate known, R_AI is the paper's
// share of the line rate (40 Mb/s of 40 Gb/s, 1/1000) rather than 40 Mb/s,
// which is a fifth of a 200 Mb/s link per timer period.
func (p Params) dcqcn() DCQCNConfig {
	t := p.BaseRTT
	if t <= 0 {
		t = SoftwareBaseRTT
	}
	t = max(3*t, 55*time.Microsecond)
	c := DCQCNConfig{LineRate: p.LineRate, AlphaPeriod: t, IncreasePeriod: t}
	if p.LineRate > 0 {
		c.AdditiveRate = p.LineRate / 1000
	}
	return c
}

func (p Params) swift() SwiftConfig {
	c := SwiftConfig{PacketBytes: p.PacketBytes, BaseTarget: SoftwareSwiftTarget, RelativeTarget: true, INTFabricDelay: true, StandingDelay: true, EndpointTarget: -1, RetxResetThreshold: 3, MinCwnd: SoftwareSwiftMinCwnd,
		RTTEndpointAllowance: SoftwareSwiftEndpointAllowance, HostEndpointTarget: SoftwareSwiftHostTarget}
	if p.LineRate > 0 {
		// A slow link's pipe and target queue are a few packets: start at
		// the BDP (HPCC's W_init) and let one flow's increase per RTT be at
		// most half the target queue, instead of 16 and 1 packet (ours).
		mss := float64(p.PacketBytes)
		if mss <= 0 {
			mss = 1400
		}
		t := p.BaseRTT
		if t <= 0 {
			t = SoftwareBaseRTT
		}
		c.InitCwnd = min(max(p.LineRate*t.Seconds()/mss, 1), 16)
		c.AI = min(max(p.LineRate*SoftwareSwiftTarget.Seconds()/mss/2, 0.1), 1)
	}
	return c
}

// Target returns the queueing delay that the named controller, as ByName
// configures it from p, aims to keep a bottleneck under: Swift's largest
// target (base plus the full flow-scaling range), HPCC's T plus, when
// p.LineRate is known, one frame's time at it (with the QueueOffset that
// ByName sets, U reaches 1 > η at a queue of one T beyond the frame that
// the fabric's INT counts as each packet's own wait for the shaper), and 0
// for the others, which have no delay target.
func Target(name string, p Params) time.Duration {
	switch name {
	case "swift":
		return 3 * SoftwareSwiftTarget
	case "hpcc", "auto":
		t := p.hpcc().BaseRTT
		if p.LineRate > 0 {
			t += time.Duration(float64(p.frameBytes()) / p.LineRate * float64(time.Second))
		}
		return t
	}
	return 0
}
