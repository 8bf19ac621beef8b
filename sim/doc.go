// Package sim is a packet-level discrete-event simulator of datacenter
// fabrics whose hosts run spray's own transport: the same
// transport.Engine, QP, reorder, retransmit, multipath and cc code as on
// the testbeds, unmodified, under one simulated clock.
//
// Use it to compare transports on fabrics that no machine at hand can
// build: hundreds to thousands of hosts at 100 Gbit/s, with switch
// buffers, ECN, INT and PFC. Run runs a Workload once per profile (roce:
// ECMP, Go-Back-N, DCQCN, PFC; spray: adaptive spraying, selective repeat,
// HPCC, no PFC) and scenario (lossless, random loss, a failing link) and
// returns one Row each: flow completion times, retransmits, drops by
// cause, PAUSE frames and paused time, buffer occupancy. The spray sim
// command prints them.
//
// # The fabric
//
// New builds a leaf-spine (HxLxS: hosts per leaf, leaves, spines, as
// package testbed names them) or a k-ary three-tier fat-tree (ParseTopo),
// with a rate and a propagation delay per tier; hosts faster than the
// uplinks oversubscribe the first tier. A frame takes (len + 24) x 8 / rate
// on a link (the 24 bytes are preamble, FCS and inter-frame gap),
// computed in picoseconds so that a train of frames completes in its exact
// serialization and propagation time (TestFlowTime, TestOneFlowLineRate),
// and a switch forwards it once it has arrived whole (store and forward).
//
// A switch has one buffer shared by its output queues. Without PFC a
// queue takes a frame while it holds less than Alpha times the free buffer
// (the dynamic threshold of shallow-buffer switches), else the frame is
// dropped (Drops.Queue: TestQueueDrop). With Topo.Trim (ParseTopo's trim
// option, off by default, without PFC) a spray data frame that its queue
// has no room for is cut to its headers instead (wire.Trim: the trim bit,
// no payload, a new ICRC) and sent from a priority queue of the port, ahead
// of its data, at most 4,096 frames a port; other frames are dropped as
// before. Control frames (ACKs, NAKs, CNPs, credits) share that priority
// queue, as NDP's switches queue them with the headers, and the port's INT
// TxBytes counts what it sends from it. Its receiver answers with a NAK
// for exactly that PSN, and the sender resends it at once
// (FabricStats.Trimmed, Row.Trimmed, a line after the table:
// TestTrimSmallBuffer). Topo.Alpha (ParseTopo's alpha) sets the queues'
// threshold: with trim, a small one keeps every queue short
// (TestTrimShortQueue). ECN-capable frames are marked CE
// at enqueue by RED on the queue's bytes, KMin/KMax/PMax
// (TestECNProbability). Spray data frames with an INT region get a hop
// record at enqueue, in the record format the eBPF fabric writes
// (wire.StampHop: switch, port, rate, TS the enqueue time, QLen the bytes
// ahead of the frame and its own, TxBytes the port's counter), which is
// what the HPCC controller reads (TestINTReachesHPCC). Upward, a switch
// picks among its live uplinks by a hash of the 5-tuple, seeded per switch;
// the UDP source port is the entropy (TestECMPSpread). The flows of an
// uplink it cannot use spread over the others, as an ECMP group's do when
// a member leaves it (TestFailoverSpreads).
//
// With PFC the fabric is lossless for one class, every frame: each switch
// counts the bytes each ingress port brought into its buffer and, when
// they reach the XOFF threshold (PFC.Alpha, 1/8, of the free shared
// buffer, or a static PFC.XOff), sends PAUSE upstream; the upstream port
// (a switch port or a host's NIC) stops after the link's delay, once its
// current frame is out, and restarts on RESUME, sent when the account
// falls PFC.Resume bytes (two frames) below the threshold. ParseTopo's
// pfc=XOFF/XON option sets both (TestPFCThresholds). Headroom for what arrives meanwhile is set aside per
// port. Queues behind a paused port build, fill their switch and pause
// further upstream: head-of-line blocking and congestion spreading emerge
// (TestPFCPauseResume, TestPFCHeadOfLine). A PAUSE frame is counted per
// XOFF transition (no refresh frames are modelled), and the time each port
// stood paused.
//
// Topo.Shaper models the netns testbed's switches instead (package
// testbed: a TBF qdisc on each veth end of a switch port): a frame leaves
// a port once its token bucket holds the frame's bytes, crosses the link
// in no time but its delay, and the hosts' links towards their leaf are
// not shaped. A hop that is not the bottleneck then adds no serialization,
// as on the testbed, where an idle path's round trip is the software's
// forwarding alone (TestShaperTBF); INT QLen and ECN use the time a frame
// waits for its tokens, as the testbed's programs measure it
// (TestShaperINT). Topo.PortBuffer gives each egress queue its own bytes
// and tail drop, a TBF's limit (TestPortBuffer). FabricConfig.ECNDelay
// sets ECN's thresholds in time, as the testbed's programs mark
// (TestECNDelay), and EdgeUnmeasured leaves the ports that face hosts
// without ECN marks or INT queue lengths, as the testbed, whose programs
// measure a queue at the next hop's ingress and run on no host
// (TestEdgeUnmeasured). PFC's headroom assumes
// links that serialize: hosts that send at once overrun it, so PFC on a
// Shaper fabric is not lossless (the testbed has no PFC).
//
// Faults: SetLinkDown (both directions blackholed; the switches at its
// ends route around it at once, the others after a reconvergence delay,
// and then along no path that leads into it, however many switches
// ahead: TestFatTreeReroute),
// SetLoss (random loss per frame) and SetBurstLoss (Gilbert-Elliott).
//
// # Hosts
//
// A host's NIC serializes at its link's rate from a queue of NICFrames.
// A host runs one transport engine on its link (Host.Link), as a real
// endpoint does: Run gives it one QP per peer it exchanges flows with,
// connected to the peer's QP and carrying the flows of both directions.
// The link lends packet buffers to the engine and takes them back, 32
// frames at a time; the event loop steps the engine when a frame arrives
// for it, when its NIC queue has drained to half after it ran short of
// slots (TestNICRefill), and at its NextDeadline, so engines never poll.
// Every engine gets an explicit seed, from the run's seed and the host's
// index, and steps once at time 0, before the first post, as an
// endpoint's engine runs between connecting and the collective: a host's
// QPs then take turns in the order it posts to them, not in the order
// they were connected, which is peer order on every host and would aim
// every host's first bursts at the same peer (TestReadyInPostOrder). An
// engine's step costs the packets it moves, its QPs with work and its
// expiring timers, not O(peers), also when its NIC queue is full, so a
// host of a 1,024-host all-to-all holds 1,023 QPs in one engine (the
// transport's schedule). Config.Queues runs one engine per NIC queue instead
// (Host.QueueLink), the host's QPs spread over them and its frames
// steered to the queue of their destination QP (Host.Steer), as an
// endpoint with one engine per queue (TestQueues).
//
// # Workloads
//
// ParseWorkload builds permutations, all-to-alls (grouped, as NCCL sends,
// or pairwise rounds), incasts and a mix over background traffic, with
// flow sizes fixed or from a CDF file; ReadConnectionMatrix and
// ReadHtsimTopo read htsim's connection matrices and topology files, and
// WriteConnectionMatrix writes one, so that the same workload runs in
// both simulators. Flows are RDMA WRITEs with immediate; a flow completes
// when its receiver has it whole.
//
// moe:SIZE,compute=DUR,iters=N is a mixture-of-experts layer in training,
// repeated as steps: every rank dispatches SIZE/hosts to every other (an
// all-to-all), computes for DUR once all of its own dispatch is in (a
// Trigger's Delay), combines with a second all-to-all, and starts its
// next step once all of its combine is in; ranks wait on their own
// receives, not on a global barrier. Steps default to enough that the
// compute alone lasts MinRateWindow (100 ms), so that the rates a run
// gives per minute come from a window long enough to mean one
// (TestMoEWorkload). RowSteps and WriteSteps report the mean step, the
// collectives' times, and the share of the step spent computing (the
// MFU-style figure) and waiting on the network.
//
// moe:ep=G,... is expert-parallel training from the model (MoEModel):
// jobs of EP groups placed in a leaf, over leaves or over pods, per-pair
// token copies from tokens, experts and top-k, dispatch, compute and
// combine, and a data parallel ring between steps (TestMoEDataParallel).
// Topo adds what fabrics of a hundred thousand hosts have: a fat-tree
// oversubscribed above its pods, planes, and links failed, flapping and
// lossy, chosen by the seed (TestFaultsDeterministic).
//
// # Reports
//
// Every Row sets its collectives' time beside their line-rate bound
// (Row.Bound, Net.Bound: the busiest link's bytes with these frames'
// headers, each flow spread over its equal-cost paths; TestBoundByHand).
// Every Row states the simulated time its counters cover (Simulated). A
// rate per minute (PausesPerMin) is given only from at least
// MinRateWindow of it (PerMinute); a shorter row reports its count and
// window, and the table prints "-" for its rate (TestPerMinute). Each
// kind of collective (dispatch, combine, reduce-scatter, all-gather, or
// the workload's own) is timed per instance, an EP group or a data
// parallel ring in one step, and reported by its mean and p99.9
// (Row.Collectives; TestCollectiveStatsByHand, TestTwoHostSteps);
// WriteHeadline writes them with pauses per minute, switch buffer and
// the compute share of the step as a Markdown table.
//
// # Determinism and cost
//
// Everything runs in one goroutine; events at the same nanosecond run in
// the order they were scheduled, and every random choice comes from a
// seeded source, so the same Config gives the same Result and the same
// JSON bytes (TestDeterminism). Wall time and event rates are reported
// apart (WriteWall). Memory is the packet buffers (the most frames in
// flight at once, BenchmarkPermutation's pktbufs) plus the engines' QP
// state: it is bounded by buffers and windows, not by the run's length.
// Estimate reckons it before a run, with QPs and engines at the live
// heap a connected, idle QP and an engine hold on this build of the
// transport, and Run refuses a workload above Config.Memory with
// ErrMemory (TestMemoryBound). That is a floor, not a bound: a QP with
// work holds its rings and window state as well (an all-to-all's QPs
// are all busy at once), and the process's RSS exceeds the live heap by
// what the garbage collector lets grow; spray sim --mem sets the
// collector's limit too.
//
// # Caveats
//
// One traffic class: PFC pauses ACKs and CNPs with the data. Switches have
// no forwarding latency and count buffer in bytes, not cells. Routes do
// not change but to avoid a down link. IPv4 only.
package sim
