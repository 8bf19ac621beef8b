package transport

import (
	"bytes"
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
	s := &simPair{t: t, clk: &clock.Sim{}}
	log := &peerLog{clk: s.clk}
	s.fab = mem.NewFabric(mem.Config{Seed: testutil.Seed(t), Delay: delay, Filter: log.filter}, s.clk)
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
		if s.qb == nil {
			s.qb = q
		}
	}
	if s.qa, err = s.ea.CreatePeerQP(PeerAddr{IP: ipB, MAC: macB}); err != nil {
		t.Fatal(err)
	}
	return s, log
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
