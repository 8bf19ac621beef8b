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
// The connection manager (package internal/cm) runs over TCP in the
// spirit of rdma_cm: the first Listen binds Options.CMAddr (default the
// endpoint's address, port CMPort), Dial sends the peer its QP's number,
// first PSN and address, the service and what the two sides must agree
// on (link, steering, security), and both QPs are connected when Dial and
// Accept return. Each connection keeps its TCP connection open as the
// channel that tells the peer about the end of the QP. Many connections
// may join the same two endpoints, for one service or several.
//
// Dial fails at once with ErrRefused where nothing listens, and with the
// peer's reason when it refuses: ErrUnknownService (no Listener),
// ErrVersion, ErrIncompatible (links that cannot exchange frames: kernel
// UDP against AF_XDP or AF_PACKET, two MTUs, two UDP data ports; the
// error names both sides' values), ErrPeerAddr (a QP address other than
// the address its TCP connection has, so that a peer cannot aim this
// endpoint's traffic at a third host; Options.TrustPeerIP lifts it),
// ErrSecurityMismatch, ErrAuth or ErrRejected. A listener answers at most
// Options.MaxHandshakes requests at once, each for at most
// Options.HandshakeTimeout; when all are taken, Dial tries again until
// its context ends, so that a flood of requests that never complete
// neither grows the listener's memory nor locks legitimate dialers out.
// Endpoint.CMStats counts what happened.
//
// Conn.Close drains the work posted on the QP, tells the peer, waits for
// its confirmation (the peer drains its own work first) and destroys the
// QP; the peer destroys its own. Calls pending on either side then return
// an error wrapping net.ErrClosed, and the peer's Recv returns the
// messages that arrived before, then io.EOF. A peer whose process ends
// breaks the channel: its Conns fail at once with ErrPeerGone (in clear;
// see Security). A peer whose host disappears fails the QP as the
// transport does, transport.ErrPeerUnreachable after its retransmission
// timeouts; errors of a QP whose peer never answers are a
// *transport.QPError, which carries its counters and what to check. A
// restarted peer is dialled again like a new one.
//
// Without a handshake, Endpoint.SendTo (transport.Endpoint.SendTo, Peer
// and AcceptPeer) reaches a peer whose Options.Transport.Peers.Accept is
// set: the QP is made by the first packet, which carries the message, and
// the message completes in one round trip (see transport's "Peers on
// demand").
//
// With several engines (one per device queue), each side sends the other
// its device's RSS key and table, and each picks its QP's UDP source
// ports so that the peer's device delivers every frame to the queue of
// the QP's engine (transport.Endpoint.Steering); a device that does not
// report RSS is served as before, with frames handed between engines.
//
// docs/design.md ("Above the transport") describes the protocol: its
// messages, versions, handshake states and timers.
//
// # Security
//
// Options.Security protects an endpoint's connections. The connection
// manager's channel runs TLS 1.3 (crypto/tls), authenticated by
// certificates (Security.TLS), a pre-shared key (Security.PSK), or both;
// every message of the handshake and the close travels inside it. With a
// key, each side sends in the handshake an HMAC-SHA256, keyed with the key, of
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
// close_notify closes it in order, as a Close does, but the end of its
// channel without one (a reset, a FIN, a record that fails its tag) can be
// forged on the path, so it is counted (CMStats.ChannelsCut) and leaves
// the QP running; a peer that is really gone shows as
// transport.ErrPeerUnreachable on the next operation. A Close still
// reaches the peer: when the channel has ended, or stays silent for a
// quarter of Options.CloseTimeout, DREQ and DREP travel over the QP
// itself, authenticated like its every packet, acknowledged and retried
// by the transport (CMStats.ClosesOverQP). The peer's Recv then returns
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
