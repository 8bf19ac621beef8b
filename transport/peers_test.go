package transport

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// peerLog records every frame the fabric carries, decoded, with the
// simulated time it was sent at.
type peerLog struct {
	mu     sync.Mutex
	clk    *clock.Sim
	frames []peerFrame
}

type peerFrame struct {
	at    clock.Time
	fromA bool
	op    wire.Opcode
	dest  uint32
	conn  bool
	cflag uint8
	raw   []byte
}

func (l *peerLog) filter(b []byte) bool {
	var pk wire.Packet
	if wire.Decode(b, &pk) != nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frames = append(l.frames, peerFrame{at: l.clk.Now(), fromA: pk.IP.Src == ipA, op: pk.BTH.Opcode, dest: pk.BTH.DestQP,
		conn: pk.BTH.Conn, cflag: pk.Conn.Flags, raw: append([]byte(nil), b...)})
	return true
}

func (l *peerLog) all() []peerFrame {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]peerFrame(nil), l.frames...)
}

// newPeerPair is two engines on a link/mem fabric under a simulated clock,
// with no QP: A initiates on demand (s.qa, CreatePeerQP to B), B accepts
// (s.qb, set when A's first packet makes it).
func newPeerPair(t *testing.T, delay time.Duration, cfgA, cfgB Config) (*simPair, *peerLog) {
	t.Helper()
	clk := &clock.Sim{}
	log := &peerLog{clk: clk}
	// Frames of a 1500-byte MTU: the connect header must fit in full
	// packets.
	mc := mem.Config{Seed: testutil.Seed(t), Delay: delay, Filter: log.filter, FrameSize: 1514}
	return newPeerPairOf(t, clk, mc, cfgA, cfgB), log
}

// newPeerPairOf is newPeerPair on a fabric of mc.
func newPeerPairOf(t testing.TB, clk *clock.Sim, mc mem.Config, cfgA, cfgB Config) *simPair {
	t.Helper()
	s := &simPair{t: t, clk: clk}
	s.fab = mem.NewFabric(mc, s.clk)
	pa, err := s.fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := s.fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close(); pb.Close() })
	if cfgA.Seed == 0 {
		cfgA.Seed = testutil.Seed(t)
	}
	if cfgB.Seed == 0 {
		cfgB.Seed = testutil.Seed(t) + 1
	}
	cfgB.Peers.Accept = true
	if s.ea, err = NewEngine(pa, cfgA); err != nil {
		t.Fatal(err)
	}
	if s.eb, err = NewEngine(pb, cfgB); err != nil {
		t.Fatal(err)
	}
	s.eb.peers().onAccept = func(q *QP) {
		if s.qb == nil && q.rip == ipA && q.rqpn == s.qa.QPN() {
			s.qb = q
		}
	}
	if s.qa, err = s.ea.CreatePeerQP(PeerAddr{IP: ipB, MAC: macB}); err != nil {
		t.Fatal(err)
	}
	return s
}

// received returns the messages of the receive completions in cs.
func received(cs []Completion) [][]byte {
	var out [][]byte
	for _, c := range cs {
		if (c.Op == OpRecv || c.Op == OpRecvImm) && c.Err == nil {
			out = append(out, c.Data)
		}
	}
	return out
}

func sends(cs []Completion) int {
	n := 0
	for _, c := range cs {
		if c.Op == OpSend && c.Err == nil {
			n++
		}
	}
	return n
}

// TestPeerFirstMessage: the first message to a new peer completes after
// one data packet and one acknowledgement, one round trip: no handshake.
// The packets carry the connect header until each side knows the other,
// and the acceptor's QP leaves the half-open set at the initiator's next
// packet. Later messages, both ways, carry no header.
func TestPeerFirstMessage(t *testing.T) {
	const delay = 10 * time.Microsecond
	s, log := newPeerPair(t, delay, Config{}, Config{})
	msg := randomMessages(testutil.Rand(t), 1, 1000)[0]
	if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	if err := s.run(clock.Time(time.Second), func() bool { return sends(s.ca) == 1 }); err != nil {
		t.Fatal(err)
	}
	done := s.clk.Now()
	fs := log.all()
	var before []peerFrame
	for _, f := range fs {
		if f.at < done {
			before = append(before, f)
		}
	}
	if len(before) != 2 || !before[0].fromA || before[0].op != wire.OpSprayData || before[0].dest != wire.ConnQP || !before[0].conn ||
		before[1].fromA || before[1].op != wire.OpSprayAck || !before[1].conn || before[1].cflag != wire.ConnReply {
		t.Fatalf("frames before the first message completed: %+v; want A's data with the connect header to QP 0, B's ACK with the reply", before)
	}
	if done > clock.Time(2*delay+delay/2) {
		t.Fatalf("first message completed at %v, want one round trip (%v) plus its transmission", time.Duration(done), 2*delay)
	}
	if got := received(s.cb); len(got) != 1 || hash(got[0]) != hash(msg) {
		t.Fatalf("B received %d messages, want the one sent, intact", len(got))
	}
	// The initiator's confirmation takes the acceptor's QP out of the
	// half-open set.
	if err := s.run(clock.Time(time.Second), func() bool { return s.eb.PeerStats().Confirmed == 1 }); err != nil {
		t.Fatal(err)
	}
	if st := s.eb.PeerStats(); st.HalfOpen != 0 || st.Accepted != 1 {
		t.Fatalf("acceptor stats %+v: want 1 accepted, none half-open", st)
	}
	// Both directions, no more headers.
	n := len(log.all())
	rng := testutil.Rand(t)
	ab, ba := randomMessages(rng, 4, 20000), randomMessages(rng, 4, 20000)
	for i := range ab {
		if err := s.qa.Post(WorkRequest{ID: uint64(10 + i), Op: OpSend, Data: ab[i]}); err != nil {
			t.Fatal(err)
		}
		if err := s.qb.Post(WorkRequest{ID: uint64(10 + i), Op: OpSend, Data: ba[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.run(clock.Time(time.Second), func() bool { return sends(s.ca) == 5 && sends(s.cb) == 4 }); err != nil {
		t.Fatal(err)
	}
	for _, f := range log.all()[n:] {
		if f.conn {
			t.Fatalf("a connect header after both sides knew each other: %+v", f)
		}
	}
	checkMessages(t, "B", received(s.cb)[1:], ab)
	checkMessages(t, "A", received(s.ca), ba)
	if st := s.qa.Stats(); st.Timeouts != 0 || st.Retransmits != 0 {
		t.Fatalf("initiator resent on a lossless fabric: %+v", st)
	}
}

func checkMessages(t *testing.T, who string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s received %d messages, want %d", who, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: message %d differs (%d bytes, want %d)", who, i, len(got[i]), len(want[i]))
		}
	}
}

// injectFrom sends raw frame bytes from a port of its own on s's fabric.
func injectFrom(t *testing.T, p *mem.Port, frame []byte) {
	t.Helper()
	fs := make([]link.Frame, 1)
	if p.Alloc(fs) != 1 {
		t.Fatal("no transmit buffer")
	}
	fs[0].Buf = fs[0].Buf[:copy(fs[0].Buf, frame)]
	if _, err := p.Send(fs); err != nil {
		t.Fatal(err)
	}
}

// macNowhere is a MAC that no port of the test fabrics has.
var macNowhere = [6]byte{0x02, 0, 0, 0, 0, 0xee}

// peerSpoofer is a port of its own on s's fabric.
func peerSpoofer(t *testing.T, s *simPair) *mem.Port {
	t.Helper()
	x, err := s.fab.NewPort(macX, ipX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// firstPacket encodes a spray data packet with the connect header from
// ip (MAC mac) to B's QP 0: a message of one packet.
func firstPacket(t *testing.T, mac [6]byte, ip [4]byte, srcQP uint32, token uint64, payload []byte) []byte {
	t.Helper()
	var pk wire.Packet
	pk.Eth = wire.Eth{Dst: macB, Src: mac}
	pk.IP = wire.IP{Src: netipFrom4(ip), Dst: ipB, TTL: 64}
	pk.UDP = wire.UDP{Src: 0xC001, Dst: wire.UDPPort}
	pk.BTH = wire.BTH{Opcode: wire.OpSprayData, PKey: 0xFFFF, DestQP: wire.ConnQP, PSN: 1000, Conn: true}
	pk.Data = wire.Data{MsgLen: uint32(len(payload))}
	pk.Conn = wire.Conn{SrcQP: srcQP, PSN: 1000, PeerPSN: 5000, Token: token}
	buf := make([]byte, 2048)
	n, err := wire.Encode(buf, &pk, payload)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestPeerDuplicateFirst: duplicates of the first packets (a fabric that
// duplicates every frame) and a first packet replayed after the
// connection is up create no second QP and deliver nothing twice; once
// both sides closed the idle connection, the replay is still refused
// (PeerStats.Replayed), and a new send to the peer makes a new
// connection.
func TestPeerDuplicateFirst(t *testing.T) {
	cfg := Config{Peers: PeerConfig{IdleTimeout: 20 * time.Millisecond}}
	s, log := newPeerPair(t, 10*time.Microsecond, cfg, cfg)
	s.fab.SetDup(1)
	rng := testutil.Rand(t)
	msgs := randomMessages(rng, 3, 3000)
	for i, m := range msgs {
		if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.run(clock.Time(time.Second), func() bool { return sends(s.ca) == 3 && len(received(s.cb)) == 3 }); err != nil {
		t.Fatal(err)
	}
	s.fab.SetDup(0)
	var first []byte
	for _, f := range log.all() {
		if f.fromA && f.conn && f.op == wire.OpSprayData {
			first = f.raw
			break
		}
	}
	x := peerSpoofer(t, s)
	injectFrom(t, x, first)
	if err := s.run(s.clk.Now().Add(time.Millisecond), func() bool { return false }); err == nil {
		t.Fatal("run ended")
	}
	checkMessages(t, "B", received(s.cb), msgs)
	if st := s.eb.PeerStats(); st.Accepted != 1 {
		t.Fatalf("B accepted %d QPs, want 1: %+v", st.Accepted, st)
	}
	// Idle: both sides close.
	if err := s.run(clock.Time(time.Second), func() bool {
		return len(s.ea.peers().all) == 0 && len(s.eb.peers().all) == 0
	}); err != nil {
		t.Fatal(err)
	}
	if a, b := s.ea.PeerStats(), s.eb.PeerStats(); a.IdleClosed+a.PeerClosed != 1 || b.IdleClosed+b.PeerClosed != 1 {
		t.Fatalf("idle close: A %+v, B %+v", a, b)
	}
	if s.ea.QP(s.qa.QPN()) != nil || s.eb.QP(s.qb.QPN()) != nil {
		t.Fatal("an idle QP is still on its engine")
	}
	injectFrom(t, x, first)
	if err := s.run(s.clk.Now().Add(time.Millisecond), func() bool { return s.eb.PeerStats().Replayed == 1 }); err != nil {
		t.Fatal(err)
	}
	if st := s.eb.PeerStats(); st.Accepted != 1 || len(received(s.cb)) != 3 {
		t.Fatalf("the replay after the close made a QP or a message: %+v", st)
	}
	// The next send makes a new connection.
	q, err := s.ea.CreatePeerQP(PeerAddr{IP: ipB, MAC: macB})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Post(WorkRequest{ID: 9, Op: OpSend, Data: msgs[0]}); err != nil {
		t.Fatal(err)
	}
	if err := s.run(s.clk.Now().Add(time.Second), func() bool { return sends(s.ca) == 4 && len(received(s.cb)) == 4 }); err != nil {
		t.Fatal(err)
	}
	if st := s.eb.PeerStats(); st.Accepted != 2 {
		t.Fatalf("B accepted %d QPs, want 2", st.Accepted)
	}
}

// TestPeerHalfOpenBound: first packets from a spoofer, each with a QP and
// token of its own, fill the acceptor's half-open set and no more
// (PeerStats.HalfOpenDrops); they expire at HalfOpenTimeout, and the
// legitimate initiator, refused meanwhile, is served by its resend.
func TestPeerHalfOpenBound(t *testing.T) {
	cfgB := Config{Peers: PeerConfig{MaxHalfOpen: 4, HalfOpenTimeout: 5 * time.Millisecond}}
	s, _ := newPeerPair(t, 10*time.Microsecond, Config{MinRTO: time.Millisecond}, cfgB)
	x := peerSpoofer(t, s)
	for i := range 10 {
		// From a MAC no port has: the replies go nowhere, as to a
		// spoofed source.
		injectFrom(t, x, firstPacket(t, macNowhere, [4]byte{10, 0, 0, 9}, 0x1000+uint32(i), 77+uint64(i), []byte("spoof")))
	}
	if err := s.run(clock.Time(time.Second), func() bool { return s.eb.PeerStats().HalfOpenDrops == 6 }); err != nil {
		t.Fatal(err)
	}
	if st := s.eb.PeerStats(); st.Accepted != 4 || st.HalfOpen != 4 {
		t.Fatalf("after the flood: %+v, want 4 accepted and half-open", st)
	}
	msg := []byte("the legitimate first message")
	if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	if err := s.run(clock.Time(time.Second), func() bool { return sends(s.ca) == 1 }); err != nil {
		t.Fatal(err)
	}
	st := s.eb.PeerStats()
	if st.HalfOpenDrops < 7 || st.HalfOpenExpired != 4 || st.Accepted != 5 {
		t.Fatalf("acceptor %+v: want the legitimate peer refused while full, the flood expired, then it accepted", st)
	}
	got := received(onQP(s.cb, s.qb.QPN()))
	if len(got) != 1 || !bytes.Equal(got[0], msg) {
		t.Fatalf("B received %q, want the legitimate message once", got)
	}
}

// TestPeerBlind: packets a blind attacker can make (the peer's addresses
// and QP numbers known, the token not) change nothing: a reply with a
// guessed token to the initiator, a close notice to either side, a packet
// without the header to an initiator that does not yet know its peer,
// and a first packet that names the initiator's QP with another token
// (a QP of its own, half-open, not the connection's). Each is counted in
// BadConnect or makes its own QP; the transfer completes intact.
func TestPeerBlind(t *testing.T) {
	s, _ := newPeerPair(t, 10*time.Microsecond, Config{MinRTO: time.Millisecond}, Config{})
	x := peerSpoofer(t, s)
	rng := testutil.Rand(t)
	ab := randomMessages(rng, 8, 40000)
	for i, m := range ab {
		if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
			t.Fatal(err)
		}
	}
	// Before A knows B's QP: a packet without the header, and a reply
	// with a guessed token.
	spoofToA := func(conn bool, flags uint8, token uint64, srcQP uint32) {
		var pk wire.Packet
		pk.Eth = wire.Eth{Dst: macA, Src: macB}
		pk.IP = wire.IP{Src: ipB, Dst: ipA, TTL: 64}
		pk.UDP = wire.UDP{Src: 0xC002, Dst: wire.UDPPort}
		pk.BTH = wire.BTH{Opcode: wire.OpSprayAck, PKey: 0xFFFF, DestQP: s.qa.QPN(), Conn: conn}
		pk.Ack = wire.Ack{Syndrome: wire.NakRemoteAccessError, SackWords: 1}
		pk.Conn = wire.Conn{Flags: flags, Token: token, SrcQP: srcQP}
		buf := make([]byte, 512)
		n, err := wire.Encode(buf, &pk, nil)
		if err != nil {
			t.Fatal(err)
		}
		injectFrom(t, x, buf[:n])
	}
	spoofToA(false, 0, 0, 0)
	spoofToA(true, wire.ConnReply, rng.Uint64(), 0x4242)
	if err := s.run(clock.Time(time.Second), func() bool { return s.ea.PeerStats().BadConnect == 2 }); err != nil {
		t.Fatal(err)
	}
	if err := s.run(clock.Time(time.Second), func() bool { return s.qb != nil && s.qa.od.known && s.qa.Stats().TxPackets > 10 }); err != nil {
		t.Fatal(err)
	}
	// Mid-transfer: close notices with a guessed token to both, a reply
	// naming another QP, and a first packet claiming A's QP.
	spoofToA(true, wire.ConnReply|wire.ConnClose, rng.Uint64(), s.qb.QPN())
	spoofToA(true, wire.ConnReply, s.qa.od.token^1, s.qb.QPN())
	close := firstPacket(t, macA, ipA.As4(), s.qa.QPN(), s.qa.od.token^2, nil)
	injectFrom(t, x, close)
	if err := s.run(clock.Time(time.Second), func() bool { return sends(s.ca) == len(ab) }); err != nil {
		t.Fatal(err)
	}
	checkMessages(t, "B", received(onQP(s.cb, s.qb.QPN())), ab)
	// The spoofed QP's replies to A count too.
	if a := s.ea.PeerStats(); a.BadConnect < 4 || a.PeerClosed != 0 {
		t.Fatalf("initiator %+v: want the blind packets counted, no close", a)
	}
	if s.qa.Err() != nil || s.qb.Err() != nil {
		t.Fatalf("a QP failed: %v, %v", s.qa.Err(), s.qb.Err())
	}
	if b := s.eb.PeerStats(); b.Accepted != 2 || b.PeerClosed != 0 {
		t.Fatalf("acceptor %+v: the first packet with another token makes its own QP and closes nothing", b)
	}
}

// onQP returns the completions of the QP numbered qpn.
func onQP(cs []Completion, qpn uint32) []Completion {
	var out []Completion
	for _, c := range cs {
		if c.QPN == qpn {
			out = append(out, c)
		}
	}
	return out
}

// TestPeerSecure: with a pre-shared key on both sides, the on-demand QPs
// are secured from their first packet; a first packet in clear, or sealed
// under another key, is dropped before anything is made
// (PeerStats.AuthFailed), and an initiator with another key gets no QP.
func TestPeerSecure(t *testing.T) {
	psk := []byte("sixteen byte key and more")
	cfg := Config{MinRTO: time.Millisecond, Peers: PeerConfig{PSK: psk}}
	s, _ := newPeerPair(t, 10*time.Microsecond, cfg, cfg)
	msg := randomMessages(testutil.Rand(t), 1, 5000)[0]
	if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	if err := s.run(clock.Time(time.Second), func() bool { return sends(s.ca) == 1 }); err != nil {
		t.Fatal(err)
	}
	if !s.qa.Secured() || !s.qb.Secured() {
		t.Fatal("on-demand QPs with a PSK are not secured")
	}
	checkMessages(t, "B", received(s.cb), [][]byte{msg})
	x := peerSpoofer(t, s)
	injectFrom(t, x, firstPacket(t, macX, [4]byte{10, 0, 0, 3}, 0x2000, 5, []byte("clear")))
	if err := s.run(clock.Time(time.Second), func() bool { return s.eb.PeerStats().AuthFailed == 1 }); err != nil {
		t.Fatal(err)
	}
	// An initiator with another key.
	other := cfg
	other.Peers.PSK = []byte("another sixteen byte key")
	other.Seed = 99
	px, err := s.fab.NewPort([6]byte{2, 0, 0, 0, 0, 0x0d}, netipFrom4([4]byte{10, 0, 0, 4}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	ex, err := NewEngine(px, other)
	if err != nil {
		t.Fatal(err)
	}
	qx, err := ex.CreatePeerQP(PeerAddr{IP: ipB, MAC: macB})
	if err != nil {
		t.Fatal(err)
	}
	if err := qx.Post(WorkRequest{ID: 1, Op: OpSend, Data: []byte("wrong key")}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		now := s.clk.Now()
		if _, err := ex.Step(now); err != nil {
			t.Fatal(err)
		}
		if err := s.run(now.Add(100*time.Microsecond), func() bool { return false }); err == nil {
			t.Fatal("run ended")
		}
	}
	st := s.eb.PeerStats()
	if st.AuthFailed < 2 || st.Accepted != 1 || len(received(s.cb)) != 1 {
		t.Fatalf("acceptor %+v, %d messages: want the wrong key refused, nothing made", st, len(received(s.cb)))
	}
}

func netipFrom4(a [4]byte) netip.Addr { return netip.AddrFrom4(a) }

// primedPeerPair is newPeerPairOf with the connection up: an empty SEND
// from A made B's QP and both sides know each other; the completions it
// made are cleared.
func primedPeerPair(t testing.TB, mc mem.Config, cfgA, cfgB Config) *simPair {
	t.Helper()
	s := newPeerPairOf(t, &clock.Sim{}, mc, cfgA, cfgB)
	if err := s.qa.Post(WorkRequest{ID: 1 << 40, Op: OpSend}); err != nil {
		t.Fatal(err)
	}
	if err := s.run(clock.Time(time.Second), func() bool {
		return sends(s.ca) == 1 && s.qb != nil && s.eb.PeerStats().Confirmed == 1
	}); err != nil {
		t.Fatal(err)
	}
	s.ca, s.cb = nil, nil
	return s
}

// TestSpoofOnDemand runs the blind-attack tests of spoof_test.go against
// QPs made on demand: the attacks that a QP of the handshake survives, a
// QP made by a first packet survives too.
func TestSpoofOnDemand(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"SprayNak", TestSpoofSprayNak}, {"SprayAck", TestSpoofSprayAck}, {"SprayData", TestSpoofSprayData},
		{"CNP", TestSpoofCNP}, {"WriteInWindow", TestSpoofWriteInWindow}, {"ReadRequest", TestSpoofReadRequest},
		{"ReadRequestDuplicate", TestSpoofReadRequestDuplicate}, {"ReadResponse", TestSpoofReadResponse},
		{"SprayWriteKey", TestSpoofSprayWriteKey}, {"SecureForged", TestSecureForged},
	} {
		t.Run(c.name, c.f)
	}
}

// TestPeerCloseNotice: a message posted as the peer closes the idle QP
// reaches a QP that is gone there (UnknownQP) and is not delivered; the
// peer's close notice fails it with ErrIdleClosed, which tells SendTo
// that the message may go again on a new QP.
func TestPeerCloseNotice(t *testing.T) {
	cfgA := Config{Peers: PeerConfig{IdleTimeout: time.Second}}
	cfgB := Config{Peers: PeerConfig{IdleTimeout: 10 * time.Millisecond}}
	s, _ := newPeerPair(t, 10*time.Microsecond, cfgA, cfgB)
	if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	if err := s.run(clock.Time(time.Second), func() bool { return s.eb.PeerStats().IdleClosed == 1 }); err != nil {
		t.Fatal(err)
	}
	// B closed and its notice is on the wire: A posts now, and sends
	// before it reads the notice (the transmit half of a Step).
	if err := s.qa.Post(WorkRequest{ID: 2, Op: OpSend, Data: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ea.transmit(s.clk.Now()); err != nil {
		t.Fatal(err)
	}
	var failed *Completion
	if err := s.run(s.clk.Now().Add(time.Second), func() bool {
		for i := range s.ca {
			if s.ca[i].ID == 2 {
				failed = &s.ca[i]
			}
		}
		return failed != nil
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(failed.Err, ErrIdleClosed) {
		t.Fatalf("the message posted as the peer closed: %v, want ErrIdleClosed", failed.Err)
	}
	if got := received(s.cb); len(got) != 1 {
		t.Fatalf("B received %d messages, want the first only", len(got))
	}
	if a := s.ea.PeerStats(); a.PeerClosed != 1 || len(s.ea.peers().all) != 0 {
		t.Fatalf("initiator %+v: want its QP closed by the notice", a)
	}
	// Its packet reaches B, where the QP is gone.
	if err := s.run(s.clk.Now().Add(time.Second), func() bool { return s.eb.Stats().UnknownQP > 0 }); err != nil {
		t.Fatalf("the second message's packet did not reach B's closed QP: %v", err)
	}
	if got := received(s.cb); len(got) != 1 {
		t.Fatalf("B received %d messages, want the first only", len(got))
	}
}
