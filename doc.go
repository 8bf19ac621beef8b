// Package spray is the front door of the spray transport: one call opens
// an endpoint on a network interface, and Listen, Accept and Dial set up
// connected queue pairs given only an address.
//
//	ep, err := spray.Open(ctx, spray.Options{Interface: "eth0"})
//	ln, err := ep.Listen("train")        // on one host
//	c, err := ln.Accept(ctx)
//	c, err := ep.Dial(ctx, "10.0.0.2", "train") // on the other
//	err = c.Send(ctx, msg)               // returns when the peer acknowledged every byte
//	m, err := c.Recv(ctx)                // messages arrive whole, in order
//	err = c.Close()                      // drains, tells the peer, frees both QPs
//
// # Links
//
// Open resolves the interface (name to index, MAC and first IPv4 address,
// or an address to the interface that holds it) and opens the link that
// Options.Link asks for. LinkAuto opens AF_XDP with the steering program
// when the process may (root, or CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF,
// CAP_PERFMON and CAP_IPC_LOCK or a memlock limit above the UMEM's 32 MiB a
// queue) and the device supports it, and
// kernel UDP otherwise, on loopback always; Endpoint.Link and Options.Logf
// say which and why. Kernel UDP needs no privilege: two processes on one
// host run on 127.0.0.1 and 127.0.0.2. NewEndpoint takes a link the caller
// opened instead (link/mem in tests).
//
// Open is three calls that a program may make itself: LookupInterface
// (name or address to Interface), OpenLink (a LinkConfig to a link) and
// NewEndpoint (a link to an Endpoint with its connection manager), or
// transport.NewEndpoint for a bare transport endpoint. OpenLink is the one
// place where links are built: the benchmarks (package bench) and the
// spray command call it too. Options holds what an application sets;
// LinkConfig, a separate struct, adds what only a harness needs: fixed
// UDP source ports (Entropies) and peer port, an exact FrameSize, the
// steering program's Allow list. Both work in the calling thread's
// network namespace; to open a link in another one (a testbed host), lock
// the OS thread, enter the namespace, call LookupInterface and OpenLink,
// and return.
//
// # Connections
//
// The connection manager, in the spirit of rdma_cm, runs over TCP: the
// first Listen binds Options.CMAddr (default the endpoint's address, port
// CMPort, 4791), and each connection keeps its TCP connection open as the
// channel that tells the peer about the end of the QP. Every message is an
// 8-byte header ("SPCM", version 4, type, body length, big endian) and a
// body of at most 512 bytes in version 1, 8776 in version 2, 8783 in
// version 3, 8817 in version 4:
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
// # Security
//
// Options.Security protects an endpoint's connections. The connection
// manager's channel runs TLS 1.3 (crypto/tls), authenticated by
// certificates (Security.TLS), a pre-shared key (Security.PSK), or both;
// REQ, REP, RTU, REJ, DREQ and DREP all travel inside it. With a key,
// each side sends in its REQ or REP an HMAC-SHA256, keyed with the key, of
// material exported from its TLS session (RFC 8446 section 7.5), and
// checks the other's: a man in the middle holds two sessions and cannot
// forge either proof; listeners then present throwaway certificates that
// nobody verifies. Each QP gets two 32-byte secrets exported from the same
// session with both QPNs as context, one per direction, and installs them
// (transport.Conn.Secure) before its first packet: every packet of the QP
// is then authenticated with AES-GCM and its payload encrypted, unless
// both sides set Security.IntegrityOnly. Conn.Protection says which.
//
// Security is on when both sides set it. ListenWith and DialWith set it
// (or clear) for one service or one connection in place of the
// endpoint's, so that one connection manager serves clear and secured
// services side by side. One connection manager port serves TLS and
// clear dialers (the first byte tells them apart); a service with
// Security refuses a clear dialer, and a dialer with Security refuses a
// clear service, both with ErrSecurityMismatch, unless
// Security.AllowClear, which lets the connection run in clear. A wrong
// key, CA, certificate or name fails Dial with ErrAuth naming the cause.
// A secured Conn believes only what TLS authenticates: the peer's
// close_notify closes it in order, as a DREQ does, but the end of its
// channel without one (a reset, a FIN, a record that fails its tag) can be
// forged on the path, so it is counted (CMStats.ChannelsCut) and leaves
// the QP running; a peer that is really gone shows as
// transport.ErrPeerUnreachable on the next operation. A Close still
// reaches the peer: when the channel has ended, or stays silent for a
// quarter of Options.CloseTimeout, DREQ and DREP travel over the QP
// itself, authenticated like its every packet, acknowledged and retried
// by the transport (an empty SEND whose immediate is 0x53504305, DREQ, or
// 0x53504306, DREP; CMStats.ClosesOverQP). The peer's Recv then returns
// io.EOF when it reaches the marker, and both QPs are freed within the
// close timeout; a Close that no confirmation reached by then frees this
// side's QP all the same (CMStats.CloseUnconfirmed).
//
// # Errors
//
// errors.Is works with ErrOptions, ErrRefused, ErrUnknownService,
// ErrVersion, ErrIncompatible, ErrPeerAddr, ErrSecurityMismatch, ErrAuth, ErrRejected, ErrPeerClosed,
// ErrPeerGone, ErrClosed (the last three wrap net.ErrClosed), and the transport's sentinels
// (transport.ErrPeerUnreachable, transport.ErrRemoteAccess, ...).
package spray
