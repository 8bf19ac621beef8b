package transport

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// PeerConfig configures the QPs an engine makes on demand, without a
// handshake (see "Peers on demand" in the package doc). Its zero value
// initiates on demand and accepts nothing. A PeerConfig is copied with
// its Config.
type PeerConfig struct {
	// Accept makes the engine create a QP for a valid first packet from a
	// peer (a connect header, destination QP wire.ConnQP). Without it such
	// packets are dropped and counted in PeerStats.Refused.
	Accept bool
	// MaxHalfOpen bounds the QPs created by first packets whose initiator
	// has not yet shown that it holds the acceptor's QP number; a first
	// packet beyond it is dropped (PeerStats.HalfOpenDrops) and its
	// initiator resends it. 0 means 128.
	MaxHalfOpen int
	// HalfOpenTimeout destroys a half-open QP its initiator never
	// confirms (PeerStats.HalfOpenExpired). 0 means 10 s.
	HalfOpenTimeout time.Duration
	// IdleTimeout closes an on-demand QP, on both sides, once it has had
	// nothing outstanding and no packet for that long
	// (PeerStats.IdleClosed); the next send to the peer makes a new one.
	// 0 means 30 s; negative, never.
	IdleTimeout time.Duration
	// PSK, when set (at least 16 bytes), secures every on-demand QP
	// (QP.Secure): each side derives the QP's traffic secrets from the key,
	// the initiator's token, QP number and both addresses, so that the
	// first packet is authenticated, and a first packet that fails
	// authentication creates nothing (PeerStats.AuthFailed). Both sides
	// need the same key.
	PSK []byte
	// IntegrityOnly leaves the payloads of secured on-demand QPs in clear;
	// both sides must agree.
	IntegrityOnly bool
}

func (c PeerConfig) withDefaults() (PeerConfig, error) {
	if c.MaxHalfOpen == 0 {
		c.MaxHalfOpen = 128
	}
	if c.MaxHalfOpen < 1 || c.MaxHalfOpen > 1<<20 {
		return c, fmt.Errorf("%w: Peers.MaxHalfOpen %d not in [1, 2^20]", ErrConfig, c.MaxHalfOpen)
	}
	if c.HalfOpenTimeout == 0 {
		c.HalfOpenTimeout = 10 * time.Second
	}
	if c.HalfOpenTimeout < 0 {
		return c, fmt.Errorf("%w: Peers.HalfOpenTimeout %v < 0", ErrConfig, c.HalfOpenTimeout)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.PSK != nil && len(c.PSK) < 16 {
		return c, fmt.Errorf("%w: Peers.PSK of %d bytes: at least 16", ErrConfig, len(c.PSK))
	}
	return c, nil
}

// PeerStats count an engine's on-demand QPs and the first packets it
// refused. Every refusal leaves every QP as it was.
type PeerStats struct {
	// Initiated: QPs made by CreatePeerQP (Endpoint.Peer, SendTo).
	// Accepted: QPs made by a peer's first packet. Confirmed: accepted
	// QPs whose initiator then showed it holds their number.
	Initiated, Accepted, Confirmed uint64
	// HalfOpen is the accepted QPs not yet confirmed, now.
	HalfOpen int
	// Refused: first packets while Accept is off. HalfOpenDrops: first
	// packets dropped at MaxHalfOpen. AuthFailed: first packets that
	// failed authentication (PSK) or came unsecured to a secured engine.
	Refused, HalfOpenDrops, AuthFailed uint64
	// BadConnect: packets whose connect header or its absence does not fit
	// the QP they name: a token, QP number or flag that is not the QP's, a
	// reply for no on-demand QP, a packet without the header to an
	// initiator that does not yet know its peer. Blind guesses land here.
	BadConnect uint64
	// Replayed: first packets of a connection this engine closed lately.
	Replayed uint64
	// IdleClosed: QPs closed here for idleness. PeerClosed: QPs closed
	// because the peer closed its side. HalfOpenExpired: half-open QPs
	// destroyed at HalfOpenTimeout.
	IdleClosed, PeerClosed, HalfOpenExpired uint64
}

func (s *PeerStats) add(o PeerStats) {
	s.Initiated += o.Initiated
	s.Accepted += o.Accepted
	s.Confirmed += o.Confirmed
	s.HalfOpen += o.HalfOpen
	s.Refused += o.Refused
	s.HalfOpenDrops += o.HalfOpenDrops
	s.AuthFailed += o.AuthFailed
	s.BadConnect += o.BadConnect
	s.Replayed += o.Replayed
	s.IdleClosed += o.IdleClosed
	s.PeerClosed += o.PeerClosed
	s.HalfOpenExpired += o.HalfOpenExpired
}

// PeerAddr names a peer endpoint for an on-demand QP: its IP address and,
// on a link that switches frames by MAC without a neighbour table
// (link/mem), its MAC. Kernel UDP ignores the MAC; AF_XDP and AF_PACKET
// links rewrite it from the host's neighbour table.
type PeerAddr struct {
	IP  netip.Addr
	MAC [6]byte
}

// peerKey names an accepted QP: the initiator's address, QP and token.
type peerKey struct {
	ip    netip.Addr
	qpn   uint32
	token uint64
}

// peerQP is the on-demand state of a QP (QP.od).
type peerQP struct {
	initiator bool
	token     uint64
	peerPSN   uint32 // the acceptor's first PSN, chosen by the initiator
	ports     [wire.ConnPorts]uint16
	// known: the initiator holds the acceptor's QP number; on the
	// acceptor, it has shown so (a packet without the header came).
	known   bool
	key     peerKey    // acceptor: its entry in peerTable.byKey
	iniPSN  uint32     // acceptor: the initiator's first PSN, echoed
	created clock.Time // acceptor: when the first packet made it
	// closed: the QP left the engine; notice: it closed idle and its
	// last packet tells the peer so (ConnClose).
	closed, notice bool
}

// peerTable is an engine's on-demand state (Engine.od).
type peerTable struct {
	cfg   PeerConfig
	byKey map[peerKey]*QP
	all   map[*QP]struct{} // every on-demand QP of the engine
	stats PeerStats
	// recent remembers the keys of QPs closed within the idle timeout
	// (at most maxRecent, oldest forgotten first), so that a delayed or
	// replayed first packet of a closed connection makes no new QP.
	recent    map[peerKey]clock.Time
	recentQ   []peerKey
	sweepAt   clock.Time
	now       clock.Time             // the latest time the engine handed the table
	onAccept  func(q *QP)            // Endpoint: wrap an accepted QP
	onClose   func(q *QP, why error) // Endpoint: a QP closed idle or by its peer
	notices   []closeNotice          // idle closes to tell peers about
	comps     []Completion           // of QPs closed, for Engine.Completions
	noticeBuf wire.Packet
}

// closeNotice is what an idle close tells the peer: enough to address a
// spray ACK carrying the connect header with ConnClose.
type closeNotice struct {
	q *QP // destroyed; its addresses, numbers and keys are still good
}

const maxRecent = 1 << 16

// peers returns the engine's on-demand table, made on first use.
func (e *Engine) peers() *peerTable {
	if e.od == nil {
		e.od = &peerTable{cfg: e.cfg.Peers, byKey: map[peerKey]*QP{}, all: map[*QP]struct{}{}, recent: map[peerKey]clock.Time{}}
	}
	return e.od
}

// PeerStats returns the engine's on-demand counters.
func (e *Engine) PeerStats() PeerStats {
	if e.od == nil {
		return PeerStats{}
	}
	return e.od.stats
}

// CreatePeerQP creates a QP connected on demand to the peer at to: it can
// send at once, and its packets carry the connect header until the peer's
// first answer names the peer's QP.
func (e *Engine) CreatePeerQP(to PeerAddr) (*QP, error) {
	return e.createPeerQP(to, [wire.ConnPorts]uint16{})
}

// createPeerQP is CreatePeerQP with the entropies the acceptor is asked
// to send from (Endpoint.Peer: those this side's RSS delivers to the QP's
// engine; zero: any).
func (e *Engine) createPeerQP(to PeerAddr, ports [wire.ConnPorts]uint16) (*QP, error) {
	if !to.IP.IsValid() || to.IP.Is4() != e.info.IP.Is4() {
		return nil, fmt.Errorf("%w: peer address %v for a link at %v", ErrInvalidRequest, to.IP, e.info.IP)
	}
	if e.cfg.Profile != Spray {
		return nil, fmt.Errorf("%w: on-demand QPs need the Spray profile", ErrConfig)
	}
	t := e.peers()
	q, err := e.createQP(e.info.Ports)
	if err != nil {
		return nil, err
	}
	od := &peerQP{initiator: true, token: e.rng.Uint64() | 1, peerPSN: e.rng.Uint32() & psn.Mask, ports: ports}
	if t.cfg.PSK != nil {
		if err := q.securePeer(t.cfg, od.token, q.lip, q.qpn, to.IP, true); err != nil {
			e.DestroyQP(q)
			return nil, err
		}
	}
	if err := q.Connect(QPInfo{QPN: wire.ConnQP, PSN: od.peerPSN, MAC: to.MAC, IP: to.IP}); err != nil {
		e.DestroyQP(q)
		return nil, err
	}
	q.od = od
	q.peerSeg()
	t.all[q] = struct{}{}
	t.stats.Initiated++
	e.armSweep(q.lastNow)
	return q, nil
}

// securePeer secures q with the traffic secrets of an on-demand QP: HKDF
// of the PSK, salted with the token, over the initiator's address and QP
// number and the acceptor's address; the first 32 bytes carry the
// initiator's packets.
func (q *QP) securePeer(c PeerConfig, token uint64, ini netip.Addr, iniQPN uint32, acc netip.Addr, initiator bool) error {
	s, err := peerSecrets(c, token, ini, iniQPN, acc, initiator)
	if err != nil {
		return err
	}
	return q.Secure(s)
}

func peerSecrets(c PeerConfig, token uint64, ini netip.Addr, iniQPN uint32, acc netip.Addr, initiator bool) (Security, error) {
	var salt [8]byte
	binary.BigEndian.PutUint64(salt[:], token)
	info := make([]byte, 0, 64)
	info = append(info, "spray-peer-keys"...)
	a, b := ini.As16(), acc.As16()
	info = append(info, a[:]...)
	info = binary.BigEndian.AppendUint32(info, iniQPN)
	info = append(info, b[:]...)
	prk, err := hkdf.Extract(sha256.New, c.PSK, salt[:])
	if err != nil {
		return Security{}, err
	}
	out, err := hkdf.Expand(sha256.New, prk, string(info), 64)
	if err != nil {
		return Security{}, err
	}
	var s Security
	if initiator {
		copy(s.Send[:], out[:32])
		copy(s.Recv[:], out[32:])
	} else {
		copy(s.Recv[:], out[:32])
		copy(s.Send[:], out[32:])
	}
	s.IntegrityOnly = c.IntegrityOnly
	return s, nil
}

// peerSeg sizes an on-demand QP's packets: the connect header its first
// packets carry takes wire.ConnLen bytes of payload, and a message is cut
// into packets when it is posted, before the QP knows which of them will
// carry the header, so every packet of the QP gives those bytes up
// (about 2% at a 1500-byte MTU).
func (q *QP) peerSeg() {
	over := wire.ConnLen
	if q.sec != nil {
		over += secOverhead
	}
	q.seg = payloadSizeOver(q.cfg, q.lip.Is6(), over)
}

// stampConn is the transmit hook of headers for an on-demand QP: until
// the peer has shown it knows this QP, the packet carries the connect
// header (data and ACKs; other opcodes carry none and an initiator sends
// none before it knows its peer).
func (q *QP) stampConn(pk *wire.Packet) {
	od := q.od
	if od == nil || od.known && !od.notice {
		return
	}
	pk.BTH.Conn = true
	pk.Conn = wire.Conn{Token: od.token, SrcQP: q.qpn}
	if od.initiator {
		pk.Conn.PSN, pk.Conn.PeerPSN, pk.Conn.Ports = uint32(q.startPSN), od.peerPSN, od.ports
	} else {
		pk.Conn.Flags = wire.ConnReply
		pk.Conn.PSN, pk.Conn.PeerPSN = od.iniPSN, uint32(q.startPSN)
	}
	if od.notice {
		pk.Conn.Flags |= wire.ConnClose
	}
}

// onDemand takes a packet that carries a connect header, or one addressed
// to an on-demand QP (q, nil for none): it checks the header against the
// QP, or creates the QP a valid first packet asks for, and authenticates
// the packet (QP.admit). It returns the QP that is to handle the packet,
// or nil when the packet is dropped (counted).
func (e *Engine) onDemand(now clock.Time, q *QP, frame []byte) *QP {
	pk := &e.pkt
	t := e.peers()
	c := &pk.Conn
	if !pk.BTH.Conn {
		// A packet without the header, to an on-demand QP.
		od := q.od
		if od.initiator && !od.known {
			t.stats.BadConnect++
			return nil
		}
		if !q.admit(frame, pk) {
			return nil
		}
		if !od.known && pk.IP.Src == q.rip {
			// The initiator addressed this QP by number: it holds the
			// reply. Confirmed only once the QP takes the packet without
			// a refusal, so that a blind guess of the number cannot stop
			// the replies the initiator may still need.
			before := q.refusals()
			e.visits++
			q.handle(now, now, pk)
			if q.refusals() == before {
				od.known = true
				t.stats.HalfOpen--
				t.stats.Confirmed++
			}
			e.afterHandle(q, now)
			return nil
		}
		return q
	}
	if pk.BTH.Trimmed {
		t.stats.BadConnect++ // its header went with the payload
		return nil
	}
	if c.Flags&wire.ConnReply != 0 {
		// The acceptor's packet, to one of this engine's initiators.
		if q == nil || q.od == nil || !q.od.initiator || c.Token != q.od.token || pk.IP.Src != q.rip ||
			c.SrcQP < minQPN || q.od.known && c.SrcQP != q.rqpn {
			t.stats.BadConnect++
			return nil
		}
		if !q.admit(frame, pk) {
			return nil
		}
		if c.Flags&wire.ConnClose != 0 {
			e.closePeer(q, now, errPeerClosedIdle, false)
			t.stats.PeerClosed++
			return nil
		}
		if !q.od.known {
			q.rqpn, q.od.known = c.SrcQP, true
			// Tell the acceptor at once that its number arrived, so that
			// its QP leaves the half-open set even if this side sends
			// nothing more.
			q.ackNow = true
		}
		return q
	}
	// The initiator's packet.
	key := peerKey{ip: pk.IP.Src, qpn: c.SrcQP, token: c.Token}
	if pk.BTH.DestQP != wire.ConnQP {
		// An initiator that knows its peer sends no header but to say it
		// closed.
		if q == nil || q.od == nil || q.od.initiator || q.od.key != key || c.Flags&wire.ConnClose == 0 {
			t.stats.BadConnect++
			return nil
		}
		if !q.admit(frame, pk) {
			return nil
		}
		e.closePeer(q, now, errPeerClosedIdle, false)
		t.stats.PeerClosed++
		return nil
	}
	if a := t.byKey[key]; a != nil {
		if !a.admit(frame, pk) {
			return nil
		}
		if c.Flags&wire.ConnClose != 0 {
			e.closePeer(a, now, errPeerClosedIdle, false)
			t.stats.PeerClosed++
			return nil
		}
		return a
	}
	switch {
	case c.Flags&wire.ConnClose != 0:
		t.stats.BadConnect++ // a close for a QP this side no longer has
		return nil
	case !t.cfg.Accept || e.cfg.Profile != Spray || pk.BTH.Opcode != wire.OpSprayData:
		t.stats.Refused++
		return nil
	case t.recent[key] != 0:
		t.stats.Replayed++
		return nil
	case c.SrcQP < minQPN || !pk.IP.Src.IsValid() || pk.IP.Src.IsMulticast() || pk.IP.Src == e.info.IP:
		t.stats.BadConnect++
		return nil
	}
	e.sweep(now) // an expired half-open QP frees its place first
	if t.stats.HalfOpen >= t.cfg.MaxHalfOpen {
		t.stats.HalfOpenDrops++
		return nil
	}
	var sec *secState
	if t.cfg.PSK != nil {
		// Authenticated before anything is made: a forged first packet
		// costs a key derivation and creates nothing.
		s, err := peerSecrets(t.cfg, c.Token, pk.IP.Src, c.SrcQP, e.info.IP, false)
		if err == nil {
			sec, err = newSecState(s, e.secLimit(), 2*e.cfg.Window)
		}
		if err != nil || !sec.admit(frame, pk) {
			t.stats.AuthFailed++
			return nil
		}
	} else if pk.BTH.Secured {
		t.stats.AuthFailed++
		return nil
	}
	ports := e.info.Ports
	if len(ports) == 0 {
		var got []uint16
		for _, p := range c.Ports {
			if p != 0 {
				got = append(got, p)
			}
		}
		if len(got) > 0 {
			ports = got
		}
	}
	a, err := e.createQPAt(ports, c.PeerPSN)
	if err != nil {
		t.stats.HalfOpenDrops++ // no QP number or memory: as full
		return nil
	}
	if sec != nil {
		a.sec = sec
		a.seg = payloadSizeOver(a.cfg, a.lip.Is6(), secOverhead)
	}
	if err := a.Connect(QPInfo{QPN: c.SrcQP, PSN: c.PSN, MAC: pk.Eth.Src, IP: pk.IP.Src}); err != nil {
		e.DestroyQP(a)
		t.stats.BadConnect++
		return nil
	}
	a.od = &peerQP{token: c.Token, key: key, created: now, iniPSN: c.PSN}
	a.peerSeg()
	a.lastNow, a.activeAt = now, now
	t.byKey[key] = a
	t.all[a] = struct{}{}
	t.stats.Accepted++
	t.stats.HalfOpen++
	e.armSweep(now)
	if t.onAccept != nil {
		t.onAccept(a)
	}
	return a
}

// secLimit is the packets per key epoch of the engine's secured QPs.
func (e *Engine) secLimit() uint64 {
	if e.cfg.secEpochPackets != 0 {
		return e.cfg.secEpochPackets
	}
	return defaultEpochPackets
}

// createQPAt is createQP with the first PSN given.
func (e *Engine) createQPAt(ports []uint16, start uint32) (*QP, error) {
	qpn, err := e.allocQPN()
	if err != nil {
		return nil, err
	}
	q, err := newQP(&e.cfg, qpn, start, e.info.MAC, e.info.IP, ports, e.rng)
	if err != nil {
		return nil, err
	}
	q.mrs = e.mrs
	e.qps[qpn] = q
	e.addDense(q)
	e.schedInit(q)
	return q, nil
}

// refusals sums the counters of packets a QP refused.
func (q *QP) refusals() uint64 {
	if q.rare == nil {
		return 0
	}
	r := q.rare
	return r.OutOfWindow + r.BadPackets + r.RejectedAcks + r.RejectedNaks + r.RejectedCNPs + r.RejectedReadResponses
}

// afterHandle is what input does after a QP handled a packet.
func (e *Engine) afterHandle(q *QP, now clock.Time) {
	e.hostFlight(q)
	q.touch()
	e.noteCtrl(q, now)
	e.noteRepair(q)
}

// ErrIdleClosed is the error of an on-demand QP closed for idleness on
// either side; it wraps ErrDestroyed (and net.ErrClosed).
var ErrIdleClosed = fmt.Errorf("transport: idle on-demand QP closed: %w", ErrDestroyed)

// errPeerClosedIdle fails what was pending on a QP whose peer closed it
// for idleness: the peer took nothing of it after its close.
var errPeerClosedIdle = fmt.Errorf("%w: the peer closed it: %w", ErrQPFailed, ErrIdleClosed)

// closePeer destroys an on-demand QP and tells the endpoint; notify
// sends the peer a close notice.
func (e *Engine) closePeer(q *QP, now clock.Time, why error, notify bool) {
	t := e.peers()
	od := q.od
	if od == nil || od.closed {
		return
	}
	t.now = max(t.now, now)
	if q.state == stateReady {
		q.fail(why)
	}
	if notify && q.rqpn != wire.ConnQP {
		od.notice = true
		t.notices = append(t.notices, closeNotice{q: q})
	}
	e.DestroyQP(q)
	if t.onClose != nil {
		t.onClose(q, why) // the Endpoint hands its completions out
	} else {
		// Engine.Completions passes destroyed QPs by: it takes these.
		t.comps = append(t.comps, q.comps...)
		clear(q.comps)
		q.comps = q.comps[:0]
	}
}

// dropPeer takes a destroyed on-demand QP out of the engine's table and
// remembers an accepted one's key for the idle timeout, so that a late or
// replayed first packet of it makes no new QP.
func (e *Engine) dropPeer(q *QP) {
	t := e.peers()
	od := q.od
	if od.closed {
		return
	}
	od.closed = true
	delete(t.all, q)
	if od.initiator {
		return
	}
	if !od.known {
		t.stats.HalfOpen--
	}
	delete(t.byKey, od.key)
	if t.cfg.IdleTimeout > 0 {
		if len(t.recentQ) >= maxRecent {
			delete(t.recent, t.recentQ[0])
			t.recentQ = t.recentQ[1:]
		}
		t.recent[od.key] = max(t.now, q.lastNow).Add(t.cfg.IdleTimeout) | 1
		t.recentQ = append(t.recentQ, od.key)
	}
}

// armSweep makes sure a sweep is due for the QPs on demand.
func (e *Engine) armSweep(now clock.Time) {
	t := e.od
	if t.sweepAt == 0 || t.sweepAt == clock.Never {
		t.sweepAt = now.Add(t.period())
	}
}

// period is how often the engine looks for idle and expired QPs: a
// quarter of the shorter timeout, so that a QP closes at most a quarter
// late.
func (t *peerTable) period() time.Duration {
	d := t.cfg.HalfOpenTimeout
	if t.cfg.IdleTimeout > 0 {
		d = min(d, t.cfg.IdleTimeout)
	}
	return max(d/4, time.Millisecond)
}

// deadline is the engine's next on-demand sweep, Never without one.
func (e *Engine) peerDeadline() clock.Time {
	if e.od == nil || len(e.od.all) == 0 && len(e.od.notices) == 0 {
		return clock.Never
	}
	if len(e.od.notices) > 0 {
		return 0
	}
	return e.od.sweepAt
}

// sweep closes the idle QPs and the expired half-open ones when the sweep
// is due, forgets the closed keys whose time passed, and sends the close
// notices owed. Step runs it; it costs a pass over the on-demand QPs once
// a period.
func (e *Engine) sweep(now clock.Time) {
	t := e.od
	if t == nil {
		return
	}
	t.now = max(t.now, now)
	if len(t.notices) > 0 {
		e.sendNotices()
	}
	if now < t.sweepAt {
		return
	}
	t.sweepAt = now.Add(t.period())
	for q := range t.all {
		od := q.od
		switch {
		case !od.initiator && !od.known && now.Sub(od.created) >= t.cfg.HalfOpenTimeout:
			t.stats.HalfOpenExpired++
			e.closePeer(q, now, ErrIdleClosed, false)
		case t.cfg.IdleTimeout > 0 && now.Sub(q.activeAt) >= t.cfg.IdleTimeout && q.quiet():
			t.stats.IdleClosed++
			e.closePeer(q, now, ErrIdleClosed, true)
		}
	}
	for len(t.recentQ) > 0 {
		k := t.recentQ[0]
		if at, ok := t.recent[k]; ok && at > now {
			break
		}
		delete(t.recent, k)
		t.recentQ = t.recentQ[1:]
	}
	if len(t.all) == 0 {
		t.sweepAt = clock.Never
	}
	if len(t.notices) > 0 {
		e.sendNotices()
	}
}

// quiet reports whether q has nothing outstanding: no message to send or
// being acknowledged, none received and not taken, no READ, no ACK owed.
func (q *QP) quiet() bool {
	return q.state != stateReady || q.head == q.tail && q.recvLen == 0 && q.readsOut == 0 && q.readSlots == 0 && q.ackPending == 0 && !q.ackNow
}

// sendNotices transmits the close notices owed: a spray ACK with the
// connect header and ConnClose, once (a lost notice leaves the peer to
// its own idle timeout). Notices wait for a transmit buffer.
func (e *Engine) sendNotices() {
	t := e.od
	for len(t.notices) > 0 {
		if !e.borrow() {
			return
		}
		n := t.notices[0]
		q := n.q
		pk := &t.noticeBuf
		*pk = wire.Packet{}
		q.headers(pk, q.nextAckEntropy())
		q.stampConn(pk)
		pk.BTH.Opcode = wire.OpSprayAck
		pk.Ack = wire.Ack{SackWords: 1}
		m, err := wire.Encode(e.tx[0].Buf, pk, nil)
		t.notices = t.notices[1:]
		if err != nil {
			continue
		}
		e.tx[0].Buf = e.tx[0].Buf[:m]
		e.stats.TxBytes += uint64(m)
		if e.flush(1) != nil {
			return
		}
	}
}
