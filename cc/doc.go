// Package cc is spray's congestion control: the Controller interface that
// the transport drives, the HPCC, Swift and DCQCN controllers, a fixed-rate
// controller and a pacer; it is sans-IO.
//
// Use a Controller per QP (or per destination) to decide how many bytes may
// be in flight (Window) and how fast to send them (Rate), and a Pacer to turn
// the rate into send times. The transport reports every event to the
// controller: OnSend for each packet it transmits (retransmissions
// included), OnAck for each acknowledgement with its RTT, ECN count and
// echoed INT records, OnLoss for each packet declared lost, OnTimeout for a
// retransmission timeout, OnCNP for a RoCEv2 congestion notification packet.
// It calls OnTimer whenever NextTimer has passed, and reads Window and Rate
// before it sends.
//
// Three controllers follow published designs; each constructor takes a
// config struct whose zero value gives the defaults listed here (paper
// values unless marked "ours"):
//
//   - HPCC (NewHPCC; Li et al., "HPCC: High Precision Congestion Control",
//     SIGCOMM 2019) computes a window from the INT hop records echoed in
//     each ACK (Sample.INT, a Hop per switch): per egress port,
//     U = min(qlen, previous qlen)/(B·T) + txRate/B, with txRate from the
//     wrapping TxBytes counter and TS deltas of consecutive records of the
//     same port; the most loaded hop, smoothed over T; per ACK
//     W = Wc/(U/η) + W_AI (or Wc + W_AI in the first maxStage RTTs below
//     η), the reference Wc updated once per RTT; Rate = W/T. Defaults:
//     η = 0.95, maxStage = 5, W_init = line rate × T (the paper's
//     B_NIC × T), W_AI = W_init(1-η)/N with N = 100 (ours), T = 10µs (ours),
//     line rate 100 Gb/s (ours), minimum window 1024 bytes (ours); no
//     QueueOffset and no ClampTxRate (a switch's INT, see below).
//   - Swift (NewSwift; Kumar et al., "Swift: Delay is Simple and Effective
//     for Congestion Control in the Datacenter", SIGCOMM 2020) keeps a
//     fabric window against Sample.RTT minus Sample.HoldTime, with a target
//     of base + hops·h + flow scaling (fs_range at fs_min_cwnd, falling as
//     1/sqrt(cwnd) to 0 at fs_max_cwnd), and an endpoint window against
//     Sample.HoldTime; additive increase ai per RTT, decrease by
//     max(1 - β(delay-target)/delay, 1 - max_mdf) at most once per RTT,
//     MaxMDF on loss, MinCwnd on a timeout, pacing at cwnd/RTT below one
//     packet. Defaults: ai = 1, β = 0.8, max_mdf = 0.5, fs_min_cwnd = 0.1,
//     fs_max_cwnd = 100 packets (the values used with the paper's
//     algorithm); base target 25µs, fs_range 2 × base, endpoint target
//     50µs, h = 0, cwnd 0.001..1024 packets of 1400 bytes, initial 16
//     (ours: the paper derives targets from the deployment). Options
//     (ours, off in the zero value): the fabric delay from INT records
//     (INTFabricDelay), relative to a windowed minimum (RelativeTarget),
//     filtered of single delayed samples (StandingDelay), and an endpoint
//     allowance on the target of ACKs without INT (RTTEndpointAllowance).
//   - DCQCN (NewDCQCN and CNPGenerator; Zhu et al., "Congestion Control for
//     Large-Scale RDMA Deployments", SIGCOMM 2015) is a rate controller: on
//     a CNP, Rt = Rc, Rc = Rc(1 - α/2), α = (1-g)α + g; α decays by (1-g)
//     every K without a CNP; a timer and a byte counter drive F stages of
//     fast recovery, then additive (R_AI) and hyper (R_HAI) increase.
//     Defaults: g = 1/256, K = 55µs, timer 55µs, byte counter 10 MB,
//     F = 5, CNP interval at the receiver 50µs, R_AI = 40 Mb/s (the paper's
//     values); R_HAI = 10 × R_AI, line rate 100 Gb/s, minimum rate
//     10 Mb/s (ours).
//
// Auto (NewAuto) runs Swift until the first ACK that echoes an INT record
// and HPCC from then on, handing over Swift's window: the spray profile's
// default. A fixed rate (Fixed; "fixed" or "none" in ByName) stays
// available, unlimited by default.
//
// Recalibrated for software fabrics (ours). The papers tune for hardware
// with 5-10µs RTTs; a testbed of network namespaces and user-space endpoints
// on shared CPUs has unloaded RTTs of 50-500µs that move with CPU load,
// spurious timeouts, and ms-long scheduling stalls. ByName, which
// transport.ProfileCC and the CLI use, therefore changes:
//
//   - HPCC's T to 100µs (SoftwareBaseRTT): with 10µs a single 1500-byte
//     packet queued at 1 Gb/s reads as U > 1, and a window of line rate ×
//     10µs cannot fill a 100µs pipe.
//   - HPCC's W_init to at least two full frames: a packet goes only when it
//     fits in the window, so a smaller window is stop-and-wait.
//   - HPCC's reading of spray's test fabric's INT, whose counters differ
//     from a switch's: the queue term loses one frame
//     (HPCCConfig.QueueOffset: the fabric's QLen is the packet's queue
//     delay times the rate, which includes the packet's own wait for the
//     shaper's tokens), and txRate is capped at the link rate
//     (HPCCConfig.ClampTxRate: TxBytes counts frames entering the shaper,
//     and two records a few µs apart read bursts above the link rate).
//     TestHPCCSoftwareFabric guards both, and the one-frame floor below.
//   - HPCC's smallest window to one full frame (HPCCConfig.MinWindow; 1024
//     bytes in the zero value): below a frame the window bounds nothing and
//     only the pacing rate W/T holds the sender back, which on a fabric
//     where a QP's share of B·T is under a frame leaves the links idle.
//   - With Params.AckEvery (opt-in; the transport's default leaves it 0),
//     HPCC's window is at least AckEvery frames (HPCCConfig.MinInflight,
//     TestHPCCMinInflight), the pacing rate still the computed window over
//     T: a window of one frame has each packet acknowledged at once. The
//     extra frames wait at the bottleneck, above HPCC's target, which is
//     why it is not the transport's default; spray compare opts in (bench
//     passes its receivers' AckEvery), where a QP's fair share of a spine
//     times the RTT is below one frame. Windows of two or more frames need
//     the retransmit package's AckEvery (the probe timeout allows for the
//     receiver's delay while fewer packets are in flight) and the
//     receiver's prompt ACK of a packet that a later-sent one overtook, or
//     they resend spuriously.
//   - HPCC reads the INT records of the ACKs that carry them and ignores
//     the others: with the transport's AckEvery above 1 only some data
//     packets carry an INT region and an ACK echoes the latest of them
//     since the previous ACK (transport.Config.INTHops).
//   - Swift's fabric delay. When ACKs echo INT records, it is the queueing
//     they report (the sum over hops of queue bytes over egress rate;
//     SwiftConfig.INTFabricDelay), and the target of 50µs
//     (SoftwareSwiftTarget, plus up to twice that of flow scaling) is an
//     allowance for it: the RTT of a software fabric holds the endpoints'
//     scheduling delays, which the paper's NIC timestamps exclude. Without
//     INT, the fabric delay is the RTT minus the hold time over the
//     smallest of the last 10-20 s (SwiftConfig.RelativeTarget: an absolute
//     25µs target is below the unloaded RTT and would cut the window
//     forever), and the smallest sample of the last half to one smoothed
//     RTT rather than each ACK's own (SwiftConfig.StandingDelay, Copa's
//     standing RTT), so that a sample that waited for a descheduled engine
//     does not cut the window. On those ACKs the target is also
//     SoftwareSwiftEndpointAllowance (100µs) higher
//     (SwiftConfig.RTTEndpointAllowance): their RTT holds the receiver's
//     backlog before its engine reads a packet, where the paper's hold time
//     starts at the NIC. A larger allowance overflows a shallow bottleneck
//     without INT (transport's TestDefaultCCSpray).
//   - Swift's smallest window to 0.1 packet (SoftwareSwiftMinCwnd; the
//     paper's 0.001 paces one packet per 1000 RTTs, seconds on a loaded
//     machine, after a timeout), its reset to it to the third consecutive
//     timeout instead of the first (RetxResetThreshold 3), and its
//     endpoint window off (EndpointTarget < 0): the transport's hold time
//     is its delayed-ACK timer, which fires late when the engine sleeps,
//     and cutting on it leaves one packet in flight whose ACK then waits
//     for that timer. The exception is an ACK whose hold counts from the
//     packet's arrival at the host (Sample.HostHold; the AF_XDP link
//     stamps arrivals): its hold is the host's queueing, and the endpoint
//     window holds it to 1 ms (SoftwareSwiftHostTarget,
//     SwiftConfig.HostEndpointTarget).
//   - Swift's start and increase when Params.LineRate is known: an initial
//     window of one BDP (line rate × BaseRTT, 1 to 16 packets, as HPCC's
//     W_init) instead of 16 packets, and an additive increase of half the
//     target's queue per RTT (0.1 to 1 packet) instead of 1 packet: at a
//     few hundred Mbit/s the pipe and the target queue are a few packets
//     each, and the paper's values overflow a shallow buffer at the start
//     and overshoot the target every RTT.
//   - DCQCN's rate-increase and alpha timers (T and K) to 3 × BaseRTT, at
//     least the paper's 55µs: the feedback (ECN echoed in ACKs, or CNPs)
//     comes once per software RTT, and 55µs timers raise the rate several
//     times per feedback; and, with Params.LineRate known, R_AI to 1/1000
//     of the line rate (the paper's 40 Mb/s of 40 Gb/s) rather than 40
//     Mb/s, a fifth of a 200 Mbit/s link per step. With the paper's values
//     alpha stays low under software feedback and DCQCN overflows a
//     shallow buffer like no control at all.
//
// DCQCN also takes the spray profile's ECN echo as CNPs
// (DCQCNConfig.EchoInterval), so that it runs under either profile. Swift
// below one packet paces at cwnd over the smaller of the latest and the
// smoothed RTT (ours: one stalled sample would otherwise space the next
// packets by ms). Before the first RTT sample, Swift cuts once at most
// (ours: the losses of a start-up burst arrive together). The config
// structs' zero values stay the papers'.
//
// Profiles: transport.Config.CC nil means the profile's controller
// (transport.ProfileCC): "auto" for the spray profile, "dcqcn" for the
// roce profile (whose data packets it then marks ECN-capable), as ByName
// configures them with the QP's payload size and transport.Config.LineRate.
// Any other controller is a Config.CC (or a --cc flag) away; Fixed{} is the
// unlimited, unpaced window.
//
// Without INT and without arrival stamps, host delays count as fabric
// delay: the receiver's hold time starts when its engine reads the packet,
// not when the link received it, so a CPU-bound receiver's backlog, and an
// engine that wakes late, add to Sample.RTT - Sample.HoldTime;
// RTTEndpointAllowance allows for some of it. A link that stamps arrivals
// (transport: link.Frame.RxTime) moves the time frames wait in its rings,
// at the receiver and for the ACK at the sender, into Sample.HoldTime.
// On a shaped fabric the profile's controller is what keeps the queues
// short; the unlimited window overflows them. Figures for each controller
// (incast, pair and leaf-spine runs) are in docs/results.md.
//
// How the transport feeds them: HPCC needs INT (Config.INTHops > 0, ACKs
// echoing the acknowledged packet's records, switches stamping them) plus
// OnSend/OnAck/OnLoss byte counts, which tell its RTTs apart. Swift needs
// Sample.RTT from the echoed transmit timestamp and Sample.HoldTime, one
// OnAck per ACK with the bytes it acknowledged, OnLoss and OnTimeout. DCQCN
// needs ECN-capable data packets, a CNPGenerator per QP at the receiver
// (answering CE-marked packets with OpCNP when OnCE says so) and OnCNP at
// the sender, OnSend for its byte counter, and OnTimer whenever NextTimer
// has passed; its Window is 0 (rate only) unless configured.
//
// Caveats: the controllers are tested against synthetic sample streams,
// fluid models of one bottleneck and a transfer through the transport over
// a link/mem bottleneck (where only Swift has a signal: link/mem stamps no
// INT and marks no ECN); bench's incast run (spray incast) measures them on
// a leaf-spine testbed. The defaults marked "ours" are starting points for
// tuning. HPCC treats each egress
// port it hears of on its own, so a spraying sender smooths the most
// loaded hop of each packet's path, as the paper's single-path algorithm
// would; it ignores ACKs without INT. Swift counts hops only from INT
// records.
//
// Nothing here reads a clock, starts a goroutine or draws global randomness:
// time is an argument of every call. Controllers and Pacers are not safe for
// concurrent use; the engine that owns the QP calls them.
//
// Caveat: a Pacer spaces packets by its rate and lets at most its burst
// through at once; it does not know the window. The transport must check
// both: a packet may go when the bytes in flight are below Window (or
// nothing is in flight) and Pacer.Next has passed.
package cc
