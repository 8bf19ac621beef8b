// Package cm is spray's connection manager: the handshake that sets up a
// pair of connected QPs over TCP, in the spirit of rdma_cm, the channel
// that then tells each side about the end of the other's QP, and the TLS
// and pre-shared-key security that protects both and keys the QPs.
//
// It is internal because it has no user of its own: applications reach it
// through the root package (spray.Open, Endpoint.Listen, Endpoint.Dial,
// Conn), which wraps its Endpoint, Listener and Conn and re-exports its
// errors, so that there is one front door and this package can change its
// shape (states, timers, the split between dialer and listener) without
// breaking anyone. A public cm would only give a second way in to the
// same objects.
//
// # Protocol
//
// The connection manager, in the spirit of rdma_cm, runs over TCP: the
// first Listen binds Options.CMAddr (default the endpoint's address, port
// CMPort, 4791), and each connection keeps its TCP connection open as the
// channel that tells the peer about the end of the QP. Every message is an
// 8-byte header ("SPCM", version 5, type, body length, big endian) and a
// body of at most 512 bytes in version 1, 8776 in version 2, 8783 in
// version 3, 8817 in versions 4 and 5:
//
//	REQ   profile, QPN, first PSN, MAC, IP, service, steering, link, security   dialer to listener
//	REP   QPN, first PSN, MAC, IP, steering, link, security                     listener: QP created and connected
//	REJ   reason, version, text                                       either side: refused
//	RTU   -                                                           dialer: QP connected; Accept returns
//	DREQ  -                                                           either side: drained, closing
//	DREP  -                                                           the other: drained too, QP freed
//
// A request with another version, for a service without a Listener, for
// another profile or that does not parse gets a REJ, and Dial an error
// wrapping ErrVersion, ErrUnknownService or ErrRejected; a Dial to an
// address where nothing listens fails at once with ErrRefused. Many
// connections may join the same two endpoints, for one service or several.
//
// The link block (version 3) is the sender's link kind, IP MTU and the UDP
// ports it receives data on and sends data to (0 where unknown: a
// caller's link has no kind nor ports). Either side refuses a pair that
// cannot exchange frames, and Dial returns ErrIncompatible naming both
// sides' values: kernel UDP against AF_XDP or AF_PACKET (a UDP link's MAC
// is made up), two MTUs, or a UDP port one side sends to and the other
// does not receive on. Either side also refuses a QP address other than
// the one its peer's TCP connection has (ErrPeerAddr), so that a peer
// cannot aim this endpoint's traffic at a third host; Options.TrustPeerIP
// lifts that for a connection manager on another network than the data
// path. Dial sends from the endpoint's address when the host has it.
//
// A listener answers at most Options.MaxHandshakes requests at once, each
// for at most Options.HandshakeTimeout; one that ends short of a
// connection destroys its QP before it closes the TCP connection. When
// all are taken, a new request drops the oldest if that one has waited a
// twentieth of the timeout, and is refused otherwise; Dial tries again on
// either until its context ends, so that a flood of requests that never
// complete neither grows the listener's memory nor locks legitimate
// dialers out. Endpoint.CMStats counts what happened.
//
// # Steering
//
// An endpoint with several engines (one per device queue) hands a frame
// that arrives on another engine's queue over to the QP's engine, a copy
// through a ring. The steering in REQ and REP avoids that: each side sends
// its device's RSS hash key and indirection table and the queue of its
// QP's engine (transport.Endpoint.Steering; encoded by rss.Table's
// AppendBinary, at most a 64-byte key and 4096 entries), and the other
// side picks the UDP source ports of its QP (its entropies) so that this
// device's RSS hash delivers every frame to that queue, while the
// fabric's ECMP hash still spreads them over its paths. The listener
// creates its QP steered (transport.Endpoint.CreateQPSteered); the
// dialer, whose QP exists before the reply, steers it when the reply
// comes (transport.Conn.Steer). A side with one engine, or whose device
// does not report RSS (veth, a link without transport.RSSReader), sends
// an empty steering: frames towards it land anywhere and are handed over,
// as without steering, and the other direction is steered all the same.
//
// Version 1 had no steering, version 2 no link block. A listener answers
// a request in the request's version, so an older dialer is served as
// before; an older listener rejects a later request with a REJ naming its
// version (as another version, or as malformed when the body exceeds its
// bound), and Dial then dials again in that version on a new TCP
// connection with the same QP: one more round trip, and what the version
// lacks goes unchecked (version 1: no steering either). Later messages of
// a connection (RTU, DREQ, DREP) are in the version agreed.
//
// Version 5 changes no message: it says that the side's data path takes
// spray ACKs that carry the receiver's message limit (wire.AckMsgLimit),
// which a build of version 4 or earlier drops as a bad header (its sends
// would then fail with ErrPeerUnreachable). A connection agreed in version
// 4 or earlier connects this side's QP with transport.QPInfo.NoMsgLimit:
// it sends the older peer no limit, whichever side dials, and
// Conn.Remote reports it (TestCMOlderDataPath).
//
// Conn.Close drains the work posted on the QP, sends DREQ, waits for the
// peer's DREP (the peer drains its own work first) and destroys the QP;
// the peer destroys its own when it sends DREP. Calls pending on either
// side then return an error wrapping net.ErrClosed, and the peer's Recv
// returns the messages that arrived before, then io.EOF. A peer whose
// process ends breaks the channel: its Conns fail at once with ErrPeerGone
// (in clear; see Security), as does a Conn whose peer confirms a DREQ this
// side never sent (one was injected on the path).
// A peer whose host disappears fails the QP as the transport does,
// transport.ErrPeerUnreachable after its retransmission timeouts; errors
// of a QP whose peer never answers are a *transport.QPError, which carries
// its counters (ACKs received, packets sent, timeouts, the frames this
// endpoint dropped) and what to check. A restarted peer is dialled again
// like a new one.
//
// A secured Conn does not believe a FIN or a reset on its channel (anyone
// on the path can forge one): the QP carries on, and its close goes over
// the QP itself when the channel has ended or stays silent, as a close
// marker, an empty SEND whose immediate is 0x53504305 (DREQ) or
// 0x53504306 (DREP), authenticated by the QP's keys, acknowledged and
// retried by the transport (Conn.closeLocal; docs/design.md, "Close over
// the QP").
//
// # The handshake as a state machine
//
// Each side of a handshake is a state machine (handshake.go for the
// listener, dial.go for the dialer): named
// states, the events that move it (a message read, a write that failed,
// a timer, an eviction), and one small function per transition, each
// returning the next state. The listener's runs in the goroutine that
// serve starts for a TCP connection, the dialer's in Dial; both read
// their events from the TCP (or TLS) connection, whose deadline is the
// handshake timer. docs/design.md has the table of states and
// transitions, and each row names the test that drives it.
//
// # Caveats
//
// Error texts name the root package's options (Options.CMAddr,
// Options.TrustPeerIP): they are what the user sets. The Config here is
// built from those options by spray.NewEndpoint.
package cm
