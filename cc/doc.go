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
//   - HPCC's T to 100µs (SoftwareBaseRTT; with 10µs a single 1500-byte
//     packet queued at 1 Gb/s reads as U > 1, and a window of line rate ×
//     10µs cannot fill a 100µs pipe).
//   - HPCC's W_init to at least two full frames (a 200 Mbit/s host port's
//     B·T is 2,500 bytes at T = 100µs, under two 1,500-byte frames, and
//     since a packet goes only when it fits in the window, such a window
//     is stop-and-wait: one packet per RTT, while a loaded machine's RTT
//     is 2-10 times T); and HPCC's reading of spray's test fabric's INT,
//     whose counters differ from a switch's: the queue term loses one frame
//     (HPCCConfig.QueueOffset: the fabric's QLen is the packet's queue
//     delay times the rate, which at line rate includes the packet's own
//     wait for the shaper's tokens, so a busy link with no queue read a
//     frame, 0.6 of B·T), and txRate is capped at the link rate
//     (HPCCConfig.ClampTxRate: TxBytes counts frames entering the shaper,
//     and two records a few µs apart read bursts at 3-8 times the link
//     rate). With the paper's reading, four senders holding a 200 Mbit/s
//     port at 0.94 of its rate read U = 1.36 at the median and sat at the
//     minimum window, which then set their rate.
//   - HPCC's smallest window to one full frame (HPCCConfig.MinWindow; 1024
//     bytes in the zero value). Below a frame the window bounds nothing (a
//     packet goes whenever none is in flight) and only the pacing rate W/T
//     holds the sender back. In spray compare's all-to-all (100 Mbit/s
//     spines, 3.5 KB frames, T = 200µs) a cross-leaf QP's share of B·T is
//     under a frame, so a queue of one frame beyond the offset reads U > 1:
//     HPCC held those QPs at the floor at the median, and a 1024-byte floor
//     paced each at 5 MB/s, four of them 82% of the two spines they share;
//     the spines ran at 93% between ramp and tail. With a one-frame floor
//     each keeps a frame in flight and the spines ran at 97-98%: 49.4-51.0
//     ms per all-to-all against 52.7-53.0 (three runs each, back to back,
//     with the ACK change of the same session). A 4-into-1 incast (TestIncast)
//     kept its queue (p50 208 against 209µs, p99 234 against 235µs).
//   - With Params.AckEvery (opt-in; the transport's default leaves it 0),
//     HPCC's window is at least AckEvery frames (HPCCConfig.MinInflight),
//     the pacing rate still the computed window over T. A window of one
//     frame has each packet acknowledged at once (the sender waits for the
//     ACK, so it asks for it): one ACK per data packet on the links that
//     the other direction's data uses. In spray compare's all-to-all
//     (AckEvery 4, which bench passes) the receivers sent 14.4-14.6k ACKs
//     per 30 all-to-alls instead of 27.9k, the spines carried 45.4-45.5 ms
//     of line time per iteration instead of 46.0-46.6, and an all-to-all
//     took 48.3-48.7 ms against 50.8-52.0 (3 runs each, back to back, load
//     average 3; 47.9-48.1 against 49.5-49.6 at load 0.8), with no queue
//     drop but the mean queue delay at 425-430µs against 95-100µs: the
//     extra frames wait at the spines, above HPCC's target (T plus a
//     frame's time). That is why it is not the transport's default (in
//     TestIncast's 4-into-1, AckEvery 2, HPCC's queue went from p99 235µs
//     to 468µs, beyond twice its target); spray compare opts in
//     (bench passes its receivers' AckEvery), where a QP's fair share of a
//     100 Mbit/s spine times the RTT is below one 3.5 KB frame. Windows of two or more frames need the
//     retransmit package's AckEvery (the probe timeout allows for the
//     receiver's delay while fewer packets are in flight) and the
//     receiver's prompt ACK of a packet that a later-sent one overtook:
//     without them a window of two frames cost 420-1,330 resends per 30
//     all-to-alls on this lossless fabric (100-790 of them found
//     spurious); with them 19-29 at four frames.
//   - HPCC reads the INT records of the ACKs that carry them and ignores
//     the others. With the transport's AckEvery above 1 only some data
//     packets carry an INT region and an ACK echoes the latest of them
//     since the previous ACK (transport.Config.INTHops): in spray
//     compare's all-to-all about 7.3k of 10.1k ACKs per 30 all-to-alls
//     carried records (0.26 per data packet; 0.53 before, every ACK), and
//     the mean queue delay was 349-365µs against 405-424 (3 runs each,
//     back to back, load average 2).
//   - Swift's fabric delay. When ACKs echo INT records, it is the queueing
//     they report (the sum over hops of queue bytes over egress rate;
//     SwiftConfig.INTFabricDelay), and the target of 50µs
//     (SoftwareSwiftTarget, plus up to twice that of flow scaling) is an
//     allowance for it: the RTT of a software fabric holds the endpoints'
//     scheduling delays, which the paper's NIC timestamps exclude. In a
//     4-into-1 incast on a loaded machine the RTT samples had a median of
//     290-470µs and a 90th percentile of 0.7-3.1 ms while INT saw a queue
//     of about 100µs; cutting on those RTTs (the previous rule) held the
//     bottleneck at 0.4-0.6 of its rate. Without INT, the fabric delay is the
//     RTT minus the hold time over the smallest of the last 10-20 s
//     (SwiftConfig.RelativeTarget: an absolute 25µs target is below the
//     unloaded RTT and would cut the window forever), and the smallest
//     sample of the last half to one smoothed RTT rather than each ACK's
//     own (SwiftConfig.StandingDelay, Copa's standing RTT), so that a
//     sample that waited for a descheduled engine does not cut the window.
//     On those ACKs the target is also SoftwareSwiftEndpointAllowance
//     (100µs) higher (SwiftConfig.RTTEndpointAllowance): their RTT holds the
//     receiver's backlog before its engine reads a packet, where the paper's
//     hold time starts at the NIC and its endpoint window has a target of
//     its own. Over the pair testbed (veth, no INT, no queue but the
//     receiver's) that raised the profile default from 5.9 to 7.3 Gbit/s
//     over AF_XDP and from 4.0 to 5.4 over UDP, medians of 8 interleaved
//     runs where the unlimited window moved 9.4 and 7.6 (256 MiB, 2-core
//     machine shared with other benchmarks, load average 1.7-1.9); 200µs
//     was no better in 6 more and overflowed a 1 Gb/s, 32 KiB bottleneck
//     without INT (transport's TestDefaultCCSpray).
//   - Swift's smallest window to 0.1 packet (SoftwareSwiftMinCwnd; the
//     paper's 0.001 paces one packet per 1000 RTTs, seconds on a loaded
//     machine, after a timeout), its reset to it to the third consecutive
//     timeout instead of the first (RetxResetThreshold 3), and its
//     endpoint window off (EndpointTarget < 0): the transport's hold time
//     is its delayed-ACK timer, which fires up to a ms late when the engine
//     sleeps, and cutting on it left one packet in flight, whose ACK then
//     waited for that timer, a spiral measured at 0.01 Gbit/s over
//     link/mem.
//   - Swift's start and increase when Params.LineRate is known: an initial
//     window of one BDP (line rate × BaseRTT, 1 to 16 packets, as HPCC's
//     W_init) instead of 16 packets, and an additive increase of half the
//     target's queue per RTT (0.1 to 1 packet) instead of 1 packet. At 200
//     Mbit/s the pipe and the target queue are a few packets each: four
//     senders of 16 packets overflowed a 32 KiB buffer at the start, and 4
//     packets of increase per RTT overshot the target every RTT (queue p99
//     350-390µs; 250-290µs with the calibration).
//   - DCQCN's rate-increase and alpha timers (T and K) to 3 × BaseRTT, at
//     least the paper's 55µs: the feedback (ECN echoed in ACKs, or CNPs)
//     comes once per software RTT, and 55µs timers raised the rate several
//     times per feedback; and, with Params.LineRate known, R_AI to 1/1000
//     of the line rate (the paper's 40 Mb/s of 40 Gb/s) rather than 40
//     Mb/s, a fifth of a 200 Mbit/s link per step. With the paper's values
//     DCQCN never got alpha above 0.07 in the incast (one CNP per ms or
//     more) and overflowed the buffer like no control at all.
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
// unlimited, unpaced window that nil meant before.
//
// Over link/mem, where the CPU rather than a queue limits a transfer and
// no INT comes back, "auto" (Swift on RTTs) moves as many bytes per second
// as Fixed{}: 9.5-10.2 against 9.0-9.8 Gbit/s in 5 back-to-back pairs
// (`spray perf --link mem --total 268435456`, load average 1.7). It had
// moved a fifth of that (1.8-2.1 against 5.0-9.8) because link/mem handed
// frames to an idle receiver up to a millisecond late: the Go runtime's
// poller rounds a timer under a millisecond up to 1 ms when nothing else
// runs, and a window-limited sender lets both engines idle (Fixed's never
// do). A tenth of the RTT samples read 1.0-1.1 ms with a hold time of 0,
// all of it fabric delay to Swift, which cut its window on them, and the
// 1 ms retransmission timer fired spuriously (28-33 timeouts per 256 MiB).
// link/mem now spins through waits of up to 100µs. Host delays still count
// as fabric delay without INT: the receiver's hold time starts when its
// engine reads the packet, not when the link received it, so a CPU-bound
// receiver's backlog, and an engine that wakes late, add to Sample.RTT -
// Sample.HoldTime; RTTEndpointAllowance (above) allows for some of it, and
// over the pair testbed the default still moved 0.7-0.8 of Fixed{}'s bytes
// per second (medians above). On a shaped leaf-spine fabric the unlimited
// window overflows the switch queues: `spray perf --testbed
// leafspine:1x2x4,rate=100mbit --total 268435456` moved 0.24 Gbit/s over
// AF_XDP and 0.21 over UDP with the default (HPCC from INT; 1.5-2.1k
// retransmissions) against 0.14 and 0.11 with --cc fixed (2.9-3.2 million).
//
// Measured on a leaf-spine testbed (spray incast, bench.RunIncast; 4
// senders into one 200 Mbit/s leaf port with 32 KiB of queue, T the
// measured base RTT, 80-240µs; the 2-core machine shared with other
// benchmarks, load average 4-10): HPCC with ByName's calibration used
// 0.51-0.97 of the link over 17 runs (median 0.66; 0.9 or more in 3) where
// no control used 0.61-1.00 (median 0.96) in the same runs, with no
// overflow drops, Jain's index 0.99-1.00 and the queue's p99 at
// 205-306µs, under twice T in 6 of the 17 runs (the offset lets a frame
// more stand in the queue); the
// paper's reading and W_init (before the calibration), in three runs
// alternating with it, used 0.45-0.78 against its 0.51-0.85, p99
// 152-215µs. What holds HPCC back in its worst runs is the loop, not the
// signal: with U at 0.77-0.82 at the median and the pacing rate near the
// line rate, each sender has one or two packets in flight and its ACKs
// stopped for over a ms some 900 times in 2 s (1.1-1.25 s of the 2 s in
// such gaps in traced runs; in one, at the same instants for all four
// senders), RTT p90 1.2 ms against T = 100µs. Neither the queue (p50
// 30-45µs) nor the receiver (hold time 0 at p90, under 141µs at p99)
// holds it: the time goes in the hosts' and switches' I/O and wake-ups,
// not traced further (the engines sleep between packets under HPCC and
// never without control: a suspect); a controller that keeps the queue near empty
// leaves the link idle through such gaps, which no control and DCQCN ride
// out on their full 1.3 ms buffer (with tens of thousands of overflow
// drops). Earlier figures: Swift's p99 130-185µs with Jain 0.86-1.0 and utilization
// 0.40-0.61; DCQCN's p99 1-1.6 ms, like no control, both overflowing the
// buffer. In spray compare's all-to-all (2x2x2, 100 Mbit/s spine links)
// HPCC's own window is the minimum, one frame in flight, each frame
// acknowledged at once (the window holds no second one), so ACKs took 5%
// of the spines' bytes; with Params.AckEvery, which compare passes, and
// the transport's thinner ACKs and INT regions, 1.7% (see above;
// bench.AllToAllLimit accounts for the rest).
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
