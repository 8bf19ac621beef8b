// Package transport is spray's reliable transport: queue pairs (QPs) that
// carry messages and one-sided RDMA WRITEs and READs between two hosts over any
// link.Link, with per-packet multipath spraying, out-of-order placement and
// selective retransmit (the Spray profile), or classic RoCEv2 behaviour (the
// RoCE profile: one path per QP, in-order reception, Go-Back-N).
//
// # Layers
//
// QP is the sans-IO state machine of one connection: Handle a decoded
// packet at a time, PollTransmit to encode the next packet into a buffer,
// NextTimeout and HandleTimeout for timers. It does no I/O, starts no
// goroutines, reads no clock and takes its randomness from its engine.
// Loss recovery (package retransmit), reordering (package reorder), path
// choice (package multipath) and congestion control (package cc) are parts
// it is built from, chosen by Config.
//
// Inside, a QP is a shell and one profile's protocol, split as gVisor's
// TCP splits its sender and receiver: the shell (qp.go) keeps the state,
// posting, the send queue, the scoreboard, the path policy, the
// controller, transmit arbitration, timers and completions; a sender and
// a receiver per profile (spray_send.go, spray_recv.go for Spray;
// classic_send.go, classic_recv.go for RoCE) keep only their own state
// and packets. Selective repeat or Go-Back-N is the scoreboard's mode
// (Config.Recovery), so either profile takes either.
//
// Engine drives the QPs of one link: Step(now) receives a batch, decodes it
// (transport/wire) and dispatches by destination QP, runs timers and
// transmits in batches into link-owned buffers. Given link/mem and a
// clock.Sim, an Engine runs deterministically and as fast as the CPU allows:
// the protocol tests of this package work that way.
//
// Endpoint runs an Engine on its own goroutine with the real clock and
// offers the Go API: CreateQP, Connect (after exchanging QPInfo out of
// band), blocking Send/Write/Read/Recv calls that take a context, Post with a
// completion queue (CQ) for asynchronous use, and memory registration.
//
// # Engines and queues
//
// On a multi-queue link (link.Multi: an AF_XDP link bound to every queue
// of a NIC, or link/mem's MultiPort) an Endpoint runs one engine goroutine
// per queue (Shards; Config.Engines 0), or one engine over the whole link
// (Engines 1). Engine i drives queue i and owns the QPs whose number is i
// modulo the number of engines; a QP transmits on its owner's queue. The
// NIC spreads received frames over the queues by its RSS hash of their
// addresses and UDP source ports, and spray's sprayed entropies reach every
// queue: a frame for a QP that another engine owns is copied into the
// hand-over ring from the receiving engine to the owner (a bounded
// lock-free single-producer single-consumer ring, one per ordered pair of
// engines, Config.HandoverSlots frames each) and its link buffer released
// at once. A full ring drops the frame, counted in
// EngineStats.HandoverDrops, and the sender's loss recovery repairs it as
// any other loss. Memory regions are shared by all the engines (a WRITE
// may arrive on any queue); completions, the CQ and Conn behave as with one
// engine. Endpoint.EngineStats and Snapshot.Engines give each engine's
// counters.
//
// Hand-overs cost a copy; a QP can avoid them where the receiver's RSS
// configuration is known (a link that implements RSSReader: link/mem's
// MultiPort, a device read with rss.Device): Endpoint.Steering describes
// where a QP's frames should land (its address, its device's RSS key and
// indirection table, its engine's queue), and the peer's
// Endpoint.CreateQPSteered picks entropies that the receiver's Toeplitz
// hash puts on that queue; Conn.Steer does the same for a QP created
// before its peer's steering was known. The root package's connection
// manager exchanges steerings in its handshake. Where the hash is unknown
// (veth, the testbeds), the hand-over ring is the path.
//
// Config.CPUs pins engine i to a CPU (runtime.LockOSThread and
// sched_setaffinity, Linux). Config.BusyPoll makes idle engines poll their
// queues and rings for that long before they sleep, and Conn.Recv poll its
// engine's link while it waits: lower latency at the cost of a core
// spinning (each poll yields the processor, so other goroutines still
// run).
//
// Calls run on the caller's goroutine under the state lock of the engine
// that owns the QP, which the engine goroutine holds except while it
// sleeps; on a link whose wait splits (link.WaitSplitter, every link of
// this repository) a post also transmits on the caller's goroutine, so
// that a message leaves without waiting for the engine goroutine to be
// scheduled (BenchmarkPingPong).
//
// # Peers on demand
//
// A QP can also be made without a handshake, as Ultra Ethernet's PDCs are:
// Endpoint.Peer (Engine.CreatePeerQP) returns a Conn to an address that
// can send at once, and Endpoint.SendTo sends on it. Until the peer's
// first answer, the QP's packets go to QP wire.ConnQP (0) with the
// connect header (package wire): the initiator's QP number and first PSN,
// the first PSN the acceptor is to use, a random 64-bit token and four
// entropies for the acceptor's packets (those the initiator's RSS
// delivers to its QP's engine, on a multi-queue link that knows its RSS;
// 0: the acceptor's own; TestPeerSteered). An engine
// with Config.Peers.Accept creates the acceptor's QP from a valid first
// data packet, connected to the initiator at its source address, places
// the data, delivers it, and acknowledges with the header and
// wire.ConnReply: its own QP number, the token echoed. The initiator
// takes the number (the token must match) and answers with an ACK at
// once; from then on neither side sends the header. A first message of
// one packet thus completes after one data packet and one ACK
// (TestPeerFirstMessage; BenchmarkFirstMessage in the root package
// compares it with Dial then Send). Endpoint.AcceptPeer hands out the
// Conns that peers made; a peer's messages reach its Recv from the first
// packet on. The Spray profile only.
//
// The rules that keep it safe (PeerConfig, PeerStats):
//
//   - An accepted QP is half-open until a packet of the initiator without
//     the header (which it sends once it holds the acceptor's number)
//     passes the QP's own checks. At most Peers.MaxHalfOpen (128) are
//     half-open; a first packet beyond is dropped (HalfOpenDrops) and its
//     initiator resends it; a half-open QP expires after
//     Peers.HalfOpenTimeout (10 s) (TestPeerHalfOpenBound).
//   - Accepted QPs are keyed by the initiator's address, QP number and
//     token: a duplicate first packet reaches the QP it made, and the key
//     of a closed QP is remembered for the idle timeout (at most 65,536
//     keys), so that a late or replayed first packet makes nothing
//     (Replayed; TestPeerDuplicateFirst).
//   - A packet whose header does not name the QP it reaches (token, QP
//     number, flags), and a packet without the header to an initiator
//     that does not yet know its peer, is dropped (BadConnect): a blind
//     attacker must guess a 64-bit token before anything else; past that,
//     every check of a handshake's QP holds (TestPeerBlind;
//     TestSpoofOnDemand runs the blind-attack tests against on-demand
//     QPs).
//   - In clear, as with UDP, the source address of a first packet is
//     taken on trust: a spoofed one makes a half-open QP (bounded, and
//     answered towards the address it claims) and its message is
//     delivered. With Peers.PSK, every on-demand QP is secured (see
//     Security) with secrets derived by HKDF from the key, the token, the
//     initiator's address and QP number and the acceptor's address; the
//     acceptor authenticates the first packet before it makes anything,
//     so a forged one costs a key derivation and creates nothing
//     (AuthFailed; TestPeerSecure). A replay of a captured first packet
//     after the acceptor has forgotten its key (the idle timeout after
//     the close) makes a QP again and delivers its message again.
//   - A QP with nothing outstanding that has received and sent nothing for
//     Peers.IdleTimeout (30 s; negative: never) closes (IdleClosed): its
//     engine destroys it and sends the peer a close notice (a spray ACK
//     with wire.ConnClose and the token), and the peer closes its side
//     (PeerClosed), failing what it had posted since with ErrIdleClosed;
//     the acceptor dropped those packets, so SendTo sends the message
//     again on a new QP. A lost notice leaves the peer to its own timer.
//     The engine looks for idle and expired QPs a quarter of the shorter
//     timeout apart, from Step, with the time it is given
//     (TestPeerCloseNotice, TestEndpointSendTo).
//   - Every packet of an on-demand QP gives up wire.ConnLen bytes of
//     payload (about 2% at a 1500-byte MTU), since a message is cut into
//     packets before the QP knows which of them carry the header.
//
// # Unpredictable numbers
//
// With Config.Seed 0 (the default) QP numbers, start PSNs, remote keys and
// the region addresses peers name are drawn from a ChaCha8 generator keyed
// from crypto/rand, anew for every QP and region, so that an off-path
// attacker cannot guess them. A nonzero Seed makes every random choice
// reproducible, for tests and benchmarks.
//
// # Semantics
//
//   - Messages of 0 bytes up to Config.MaxMessageSize (default 1 GiB) are
//     delivered whole, exactly once, in the order they were posted, whatever
//     the order their packets arrive in. A sender's completion means the peer
//     acknowledged every byte.
//   - A WRITE names a peer's region by address and remote key (MR.Remote).
//     The receiver checks every packet against the region's bounds, key and
//     access; a refused WRITE writes nothing and the receiver answers it,
//     and every later packet, with a NAK remote access error. As in IBA the
//     writer's QP then moves to the error state: the WRITE fails with
//     ErrRemoteAccess, every other pending request with ErrQPFailed.
//   - A READ (OpRead, Conn.Read) names a peer's region the same way and
//     reads len(Data) bytes of it into Data; see "RDMA READ" below.
//   - A peer that stops acknowledging fails the QP with ErrPeerUnreachable
//     after Config.MaxRetries retransmission timeouts in a row; every pending
//     and later request then fails with ErrQPFailed.
//   - Received messages land in receive buffers the application posts
//     (Conn.PostRecv, or Post with OpPostRecv; see "Posted receive
//     buffers"), or, on a QP that never posted one, in buffers of a bounded
//     pool, taken per message when its first packet arrives (Spray) or
//     grown as packets arrive in order (RoCE), which Message.Release gives
//     back. The receiver holds at most Config.MaxMessages undelivered
//     messages per QP, and a Spray receiver's ACKs say so: they carry the
//     ID of the first message it has no room for, and the sender starts
//     no message beyond it (msgwin.go), so a slow reader holds its sender
//     back without a packet resent. Beyond that (RoCE, or a Spray
//     sender's persist probe once the reader has been silent for a
//     retransmission timeout), packets are dropped (counted in NoBuffer)
//     and the sender retransmits them later: a slow reader slows its
//     sender down instead of growing memory. The receiver answers such
//     drops with an RNR NAK (receiver not ready), which tells the sender
//     its peer is alive: the retransmission timeouts until the reader
//     takes more do not count against MaxRetries (IBA's rnr_retry 7,
//     unlimited), so a reader that sleeps never fails its sender.
//   - Every bound is in Config; frames that fail to decode, packets for
//     unknown QPs and packets from the wrong source are counted and dropped.
//   - Feedback proves itself before it is acted on (RFC 5961's idea): an
//     ACK, SACK or NAK whose PSNs are not between a Window before the
//     oldest unacknowledged PSN and the next PSN to send, a NAK that names
//     no outstanding request, and a CNP to a QP with no data in flight are
//     dropped and counted (QPStats.RejectedAcks, RejectedNaks,
//     RejectedCNPs); a data packet whose PSN lies a Window or more outside
//     the receive window is dropped unanswered (OutOfWindow). None of them
//     fails or rewinds a QP. A spoofer who knows the QP number still has
//     to guess a PSN within the window; a CNP carries no PSN, so one
//     spoofed while RoCE data is in flight is taken.
//
// # RDMA READ
//
// A READ is a request from the requester and a response from the
// responder. Both profiles check the region the same way and order READs
// the same way; they differ in how the response travels and is recovered.
//
//   - The responder checks the region when the request arrives: the key
//     must name a registered region (not deregistered) with
//     AccessRemoteRead, and the whole range must lie inside it. A refused
//     READ reads nothing; the responder answers it, and every later packet,
//     with a NAK remote access error, and the requester's READ fails with
//     ErrRemoteAccess (its QP then fails, every other pending request with
//     ErrQPFailed), exactly as for a WRITE.
//   - The responder executes a READ once every message the requester sent
//     before it has been executed (so a READ sees the WRITEs posted before
//     it), and reads the region as it sends (and resends) the response, as
//     a RoCE NIC reads memory when it generates responses: a WRITE to the
//     same bytes posted after the READ may land before the response reads
//     them (IBA's fence; post the WRITE after the READ completes).
//   - A READ completes when every byte of its response has landed (and,
//     in the Spray profile, its request is acknowledged), in
//     posting order with the QP's other requests. The responder sees no
//     completion. Until then Data belongs to the QP; a Conn.Read whose
//     context ends first may still see bytes land afterwards.
//   - Spray: the request is one data packet (kind ReadReq, RETH) in the
//     requester's PSN sequence, acknowledged and resent like any data; the
//     response is a message of the responder's own send queue and PSN
//     sequence (kind ReadResp, naming the request by its message ID),
//     sprayed, placed out of order straight into the requester's buffer,
//     acknowledged by SACK and resent selectively by the responder. It
//     takes a send queue slot of the responder (Config.SendQueue); a
//     request that finds none is dropped, counted in NoBuffer, and resent
//     by the requester. A duplicate request is acknowledged, not executed
//     again.
//   - RoCE: IBA's RC rules, so that a RoCE NIC can be either peer. A READ
//     request (opcode 0x0C, RETH) for n response packets takes n PSNs of
//     the requester's sequence; the responder answers with RDMA READ
//     Response First/Middle/Last or Only (0x0D-0x10, AETH with an ACK
//     syndrome and the MSN on First, Last and Only) carrying those PSNs,
//     sends them before it acknowledges any later PSN, and expects the
//     request's PSN plus n next. Each response acknowledges every PSN up
//     to its own; the requester takes them in PSN order and sends no ACK
//     for them. A lost response is asked for again: the requester resends
//     a READ request at the first missing response's PSN for the rest of
//     the range (address and length moved on) after its timeout, or at
//     once when a later response or an acknowledgement of a later PSN
//     shows the gap (Go-Back-N). The responder executes a duplicate READ
//     request (a PSN it has passed) again, reading the region anew, with
//     no NAK; one whose range it may not read is dropped and counted in
//     RemoteAccessErrors. A READ longer than a quarter of Config.Window
//     packets is asked for by several requests, each answered
//     First..Last. The responder answers at most Config.MaxMessages READs
//     at once; a request beyond is dropped (NoBuffer) and asked again
//     after the requester's timeout. In RetransmitStats, Retransmitted
//     counts the response PSNs asked for again.
//   - A READ response is acted on only if it answers an outstanding READ:
//     a response while none is outstanding, naming another request or a
//     PSN no READ asked for, or not fitting the READ's length or opcode
//     sequence is dropped before it touches the window or the buffer,
//     counted in QPStats.RejectedReadResponses; a spray response outside
//     the receive window counts in OutOfWindow, a RoCE response for
//     packets already landed in Duplicates (TestReadSpoofedResponse,
//     TestSpoofReadResponse). A spoofed READ request outside the
//     responder's window is dropped unanswered (TestSpoofReadRequest).
//
// Opcodes, headers and the ICRC are IBA's: tshark decodes RoCE requests
// and responses as RDMA READ (TestReadXDPTshark in link/pcap).
//
// # Posted receive buffers
//
// As with verbs' ibv_post_recv, the application may post receive buffers
// on a QP: Conn.PostRecv(ctx, buf), whose messages Recv returns, or
// Conn.Post with a WorkRequest of Op OpPostRecv, whose completions (the
// request's ID, Data the buffer's first Len bytes) arrive on the CQ. At
// most Config.MaxMessages buffers wait at once (ErrRecvQueueFull). From
// the first posted buffer on, every SEND or SEND with immediate the QP
// delivers takes the next posted buffer, in order, and its packets are
// placed straight into it whatever order they arrive in: no allocation
// and no copy. A WRITE takes no buffer, and unlike verbs neither does a
// WRITE with immediate: its completion carries the immediate and the
// length written, with no Data. Post the first buffer before Connect so
// that the first message takes one too.
//
// A message that starts before its buffer is known waits for it. The
// Spray receiver places packets of several messages at once; it knows a
// message's buffer when every earlier message has started (the number of
// SENDs before it is then known) and that many buffers are posted. Until
// then the message goes into a pooled buffer, within Config.MaxMessages
// and MaxRecvBytes, and is copied into its buffer when it is delivered:
// it completes once its buffer is posted. The RoCE receiver takes one
// message at a time in order: a SEND whose first packet finds no buffer
// posted is dropped (NoBuffer), and the requester's timer resends it, as
// an RNR NAK would make a verbs requester retry. Either way the receiver
// answers the dropped packet with an RNR NAK, and the sender waits for the
// buffer without counting its timeouts against MaxRetries.
//
// A SEND longer than its buffer is IBA's local length error: nothing is
// written past the buffer (its length, not its capacity, is the limit);
// the buffer completes with ErrLocalLength, every other posted buffer with
// ErrFlushed, PostRecv fails from then on, and the receiver answers the
// sender with a NAK invalid request, which fails the sender's QP with
// ErrInvalidRequest. When the receiver found the error as the message
// arrived (RoCE; Spray when the buffer was known) the message's own
// request fails; when it found it at delivery (Spray, message held before
// its buffer was posted), the sender may have completed that request
// already, and its next one fails. A QP that fails flushes its posted
// buffers with ErrFlushed; Destroy hands them back (Post's on the CQ with
// ErrFlushed) and makes a waiting Recv return ErrDestroyed.
//
// A steady loop of SENDs into posted buffers allocates nothing per
// message, nor does one on a QP without posted buffers that gives each
// message back with Message.Release (TestPostedRecvNoAllocs,
// BenchmarkPostedRecv); Conn.PostRecv and Conn.Recv allocate nothing
// either (TestEndpointRecvNoAllocs).
//
// # Classic RoCE loss recovery
//
// The RoCE profile recovers from loss as an RC queue pair on a RoCE NIC
// does, not as a modern TCP:
//
//   - The requester's retransmission timer is the QP's Local ACK Timeout,
//     the 5-bit QP attribute that verbs set with ibv_modify_qp
//     (ibv_qp_attr.timeout, "local ack timeout for primary path" in
//     rdma-core's ibv_modify_qp(3); InfiniBand specification 1.2, 12.7.34,
//     as Open MPI's help text cites it): a timer of 4.096 µs x 2^timeout
//     (the kernel's rdma_set_ack_timeout and drivers such as qib compute it
//     so). It takes no RTT sample and does not back off: every timeout
//     restarts it at the same value, and after retry_cnt timeouts without
//     progress (3 bits, at most 7; specification 12.7.38) the QP fails
//     with a retry-exceeded completion error. Config.LocalAckTimeout is the exponent,
//     Config.MaxRetries the retry count (default 7); the QP fails
//     (MaxRetries+1) x 4.096 µs x 2^LocalAckTimeout after its last
//     progress.
//   - The responder takes packets in PSN order only. A packet beyond the
//     expected PSN gets one NAK (PSN sequence error) and every later one is
//     dropped without an answer until the expected PSN arrives (Linux's
//     soft-RoCE responder, drivers/infiniband/sw/rxe/rxe_resp.c, check_psn
//     and its sent_psn_nak flag; Shanley, InfiniBand Network Architecture,
//     chapter 17: an out-of-sequence request is a class B error, a NAK and
//     no other action). Duplicates are acknowledged again.
//   - The requester goes back to the NAK'd PSN and resends everything from
//     there (Go-Back-N). A lost tail packet, a lost NAK or a lost
//     retransmission leaves nothing for the responder to NAK: only the
//     timer repairs them, one Local ACK Timeout later.
//
// The default exponent is 14 (67.1 ms), perftest's default QP timeout
// (DEF_QP_TIME in linux-rdma/perftest's src/perftest_parameters.h, with
// DEF_RETRY_COUNT 7). It is the smallest of the usual settings, so that the
// profile shows RoCE at its quickest common configuration: NCCL sets
// NCCL_IB_TIMEOUT, default 20 (4.3 s; 18 and 14 in older releases), with
// NCCL_IB_RETRY_CNT 7 (NVIDIA/nccl, src/transport/net_ib); Huawei's HCCL
// (HCCL_RDMA_TIMEOUT) uses 20 too. A negative LocalAckTimeout gives the RoCE profile the Spray
// profile's adaptive timer instead (RFC 6298, from MinRTO, doubling up to
// MaxRTO), an ablation that no RoCE NIC runs by the specification. Some
// recent NICs (NVIDIA's "adaptive retransmission" firmware option) start
// below the Local ACK Timeout and back off up to it; the profile models the
// specification's fixed timer.
//
// # Congestion control
//
// Each QP has its own controller (package cc), made by Config.CC. nil
// means the profile's (ProfileCC): the Spray profile runs cc's "auto",
// Swift on the RTT until acknowledgements echo INT records and HPCC from
// them on; the RoCE profile runs DCQCN and marks its data packets
// ECN-capable for it (Config.ECN), as a RoCE NIC with DCQCN does; both are
// calibrated for software fabrics (cc.ByName) with the QP's payload size
// and, when the application knows it, Config.LineRate. Any profile takes
// any controller through Config.CC; a constructor of cc.Fixed{} gives an
// unlimited, unpaced window, which overruns a shaped queue.
//
// # Wire
//
// The Spray profile uses spray's opcodes (0xE0 data, 0xE1 ACK with SACK
// bitmap, echoed timestamp and INT records); the RoCE profile uses the
// standard RC opcodes and AETH ACK/NAK, so that its packets decode in
// Wireshark as RoCEv2. With Config.INTHops and AckEvery above 1, only the
// spray data packets whose records an ACK is likely to echo carry the INT
// region, and an ACK echoes the latest of them (its PSN, timestamp,
// entropy and hold time with its records). Classic packets carry a power-of-two payload (the
// RoCE path MTU: 1024 bytes for a 1500-byte MTU), spray packets as much as
// the MTU allows.
//
// # Errors
//
// errors.Is works with the exported sentinels: ErrConfig, ErrRemoteAccess,
// ErrPeerUnreachable, ErrQPFailed, ErrQueueFull, ErrNotConnected,
// ErrInvalidRequest, ErrLocalLength, ErrFlushed, ErrRecvQueueFull, and
// net.ErrClosed for a closed Endpoint or a destroyed Conn (ErrDestroyed).
// A blocking Conn call whose peer stopped answering, or whose context
// ended while the peer had acknowledged nothing (or, for Recv, while
// nothing arrived and the endpoint dropped frames), returns a *QPError: it
// wraps that error (errors.Is still matches ErrPeerUnreachable or
// context.DeadlineExceeded), carries the QP's and the endpoint's counters,
// and its text says what to check.
package transport
