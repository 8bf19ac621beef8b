// Package bench holds spray's workloads and their measurement: the
// point-to-point perf workload (goodput, message rate, ping-pong latency,
// integrity by SHA-256), statistics (percentiles) and reports (text tables
// and JSON). The spray CLI is a thin shell over it.
//
// Workloads run over a Conn, so that the same workload measures a spray QP
// and a kernel TCP connection between the same two endpoints.
//
// ServePerf and DialPerf are perf's server and client between hosts
// (`spray perf server|client`), over a TCP control connection. The server
// serves clients at once (kernel TCP and udp runs side by side, each udp
// run on its own RoCE port from 4791 up; xdp and raw runs take turns per
// link kind, one steering program per interface). Either side ends a run
// with ErrPeerGone, and frees its QP, endpoint, link and eBPF attachment,
// when its peer goes away: the control connection closes or is reset (a
// killed process: milliseconds), or stops answering TCP keepalives (a
// vanished host: about 7 s); a QP that fails ends it too, and a client
// that connects and says nothing is dropped after 10 s. Every read and
// write of the control connection ends with the run's context. The
// hellos carry each side's steering (the RSS key and table of its device
// and its QP's queue, when its link reports them, as AF_XDP on a NIC
// with RSS does): the client creates its QP steered to the server's
// queue, the server steers its QP to the client's, and neither side's
// engines hand frames over. A peer whose hellos lack it still works, its
// direction unsteered.
//
// RunCollective is the nccl-tests-style collective sweep behind `spray
// bench <collective>` (size, count, type, time, algbw, busbw, #wrong,
// p50/p99/p99.9 of the slowest rank's iteration times); RunFabric runs
// several QPs between two hosts of a leaf-spine fabric with goodput
// timelines (the failover, collision and loss figures); RunFailover
// blackholes a leaf-spine link in the middle of one (and restores it) and
// reads the recovery off the timeline, behind `spray perf --fault`;
// RunIncast is the
// N->1 congestion-control bench behind `spray incast`.
//
// Compare is the fabric comparison behind `spray compare`: the same
// all-to-all with classic RoCE, spray and kernel TCP on one leaf-spine
// testbed, one rank per host namespace (all in this process), under
// scenarios of faults (loss on the spine links, ECMP collisions, a spine
// link blackholed mid-run), with the fabric programs' counters read per
// run; WriteCompareTable, WriteCompareJSON and WriteCompareCDF report it.
// Without root it runs the ranks over loopback (link/udp), with loss
// injected by the sending links and no fabric scenarios. Each QP profile
// runs its own congestion control by default (spray HPCC/Swift, roce
// DCQCN; CompareConfig's SprayCC and RoCECC, or CCWindow for the same
// fixed window on both, so that they differ only in paths and loss
// recovery). Caveats: on a two-core machine the forwarding
// namespaces and the engines share the CPUs, so the all-to-all reaches a
// fraction of the fabric's limit (AllToAllLimit; docs/results.md has the
// figures) and times are noisy; spray's retransmissions there are mostly
// spurious (CompareRow.Duplicates).
// Spray's QPs on a testbed acknowledge every 4 packets (or after 4 frame
// times at the spine rate), since their ACKs share the spine links with
// the data going the other way, and reserve one INT hop record per switch
// of a leaf-spine path (3).
package bench
