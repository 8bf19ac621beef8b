package transport

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// seenFrame is what a test keeps of a frame the fabric carried.
type seenFrame struct {
	fromA   bool
	op      wire.Opcode
	kind    wire.OpKind // spray data
	psn     psn.PSN
	reth    wire.RETH
	aeth    wire.AETH
	payload []byte
}

// frameLog records the RC frames a fabric carries; drop, when set, drops
// the frames it returns true for (after recording them).
type frameLog struct {
	mu     sync.Mutex
	frames []seenFrame
	drop   func(f seenFrame) bool
}

func (l *frameLog) filter(b []byte) bool {
	var pk wire.Packet
	if wire.Decode(b, &pk) != nil {
		return true
	}
	f := seenFrame{fromA: pk.IP.Src == ipA, op: pk.BTH.Opcode, kind: pk.Data.Kind, psn: psn.New(pk.BTH.PSN), reth: pk.RETH, aeth: pk.AETH,
		payload: append([]byte(nil), pk.Payload...)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.frames = append(l.frames, f)
	return l.drop == nil || !l.drop(f)
}

func (l *frameLog) match(fn func(f seenFrame) bool) []seenFrame {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []seenFrame
	for _, f := range l.frames {
		if fn(f) {
			out = append(out, f)
		}
	}
	return out
}

// classicReadPair is a RoCE sim pair over a lossless fabric whose frames
// are logged, with a region of B to read.
func classicReadPair(t *testing.T, log *frameLog) (*simPair, *MR, []byte) {
	t.Helper()
	seed := testutil.Seed(t)
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond, Filter: log.filter}, readConfig(RoCE, seed))
	src := randomBytes(rand.New(rand.NewPCG(seed, 9)), 256<<10)
	return s, s.eb.Register(src, AccessRemoteRead), src
}

// TestClassicReadWire checks the IBA RC rules of a RoCE READ on the wire:
// a READ of n response packets takes n PSNs of the requester (the SEND
// posted after it gets the READ's PSN plus n); the responses are READ
// RESPONSE First, Middle..., Last carrying the READ's PSNs, with an AETH
// (ACK syndrome) on First and Last only; a one-packet READ is answered by
// an Only; the requester acknowledges none of them.
func TestClassicReadWire(t *testing.T) {
	log := &frameLog{}
	s, mr, src := classicReadPair(t, log)
	seg := s.qa.seg
	size := 3*seg + 100 // four response packets
	into := make([]byte, size)
	small := make([]byte, 10)
	p0 := s.qa.sb.Next()
	for i, wr := range []WorkRequest{
		{Op: OpSend, Data: []byte("before")},
		{Op: OpRead, Data: into, Remote: mr.Remote(7)},
		{Op: OpSend, Data: []byte("after")},
		{Op: OpRead, Data: small, Remote: mr.Remote(0)},
	} {
		wr.ID = uint64(i + 1)
		if err := s.qa.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	runUntil(t, s, 4)
	for _, c := range s.ca {
		if c.Err != nil {
			t.Fatalf("completion %+v", c)
		}
	}
	if hash(into) != hash(src[7:7+size]) || hash(small) != hash(src[:10]) {
		t.Fatal("READ bytes differ")
	}
	fromA := log.match(func(f seenFrame) bool { return f.fromA })
	want := []struct {
		op  wire.Opcode
		psn psn.PSN
	}{
		{wire.OpSendOnly, p0},
		{wire.OpReadRequest, p0.Add(1)},
		{wire.OpSendOnly, p0.Add(5)}, // the READ took PSNs 1 to 4
		{wire.OpReadRequest, p0.Add(6)},
	}
	if len(fromA) != len(want) {
		t.Fatalf("A sent %d frames, want %d (no acknowledgement of the responses): %+v", len(fromA), len(want), fromA)
	}
	for i, w := range want {
		if fromA[i].op != w.op || fromA[i].psn != w.psn {
			t.Fatalf("A's frame %d: %v PSN %d, want %v PSN %d", i, fromA[i].op, fromA[i].psn, w.op, w.psn)
		}
	}
	if r := fromA[1].reth; r.VA != mr.Addr+7 || r.RKey != mr.RKey || r.Len != uint32(size) {
		t.Fatalf("READ request RETH %+v", r)
	}
	resp := log.match(func(f seenFrame) bool { return !f.fromA && isReadResponse(f.op) })
	wantResp := []wire.Opcode{wire.OpReadResponseFirst, wire.OpReadResponseMiddle, wire.OpReadResponseMiddle,
		wire.OpReadResponseLast, wire.OpReadResponseOnly}
	if len(resp) != len(wantResp) {
		t.Fatalf("B sent %d READ responses, want %d", len(resp), len(wantResp))
	}
	psns := []psn.PSN{p0.Add(1), p0.Add(2), p0.Add(3), p0.Add(4), p0.Add(6)}
	for i, f := range resp {
		hasAETH := f.aeth.Syndrome == wire.SyndromeAck|0x1F
		if f.op != wantResp[i] || f.psn != psns[i] || hasAETH == (f.op == wire.OpReadResponseMiddle) {
			t.Fatalf("response %d: %v PSN %d AETH %+v, want %v PSN %d", i, f.op, f.psn, f.aeth, wantResp[i], psns[i])
		}
	}
	if r := s.qb.rcv.(*classicReceiver); r.exp != p0.Add(7) {
		t.Fatalf("B expects PSN %d, want %d", r.exp, p0.Add(7))
	}
	if st := s.qa.Stats(); st.AcksSent != 0 || st.RxPackets != 5 {
		t.Fatalf("A sent %d ACKs and took %d responses, want 0 and 5", st.AcksSent, st.RxPackets)
	}
}

// TestClassicReadLostResponse drops the first transmission of one READ
// response packet: a middle one (the next response shows the gap at once)
// or the last (found by the requester's timeout, or by the ACK of a SEND
// posted after the READ, which the responder sends after the responses).
// The requester asks again with a READ request at the lost packet's PSN
// for the rest of the range (address and length moved on), the responder
// executes it again, and the READ completes byte-exact.
func TestClassicReadLostResponse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lost  uint32 // index of the response packet lost
		after bool   // a SEND follows the READ
	}{
		{"middle", 1, false},
		{"last", 3, false},
		{"last-then-send", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &frameLog{}
			s, mr, src := classicReadPair(t, log)
			seg := uint32(s.qa.seg)
			size := 3*seg + 100
			first := s.qa.sb.Next()
			lost := first.Add(tc.lost)
			dropped := false
			log.drop = func(f seenFrame) bool {
				if !dropped && isReadResponse(f.op) && f.psn == lost {
					dropped = true
					return true
				}
				return false
			}
			into := make([]byte, size)
			if err := s.qa.Post(WorkRequest{ID: 1, Op: OpRead, Data: into, Remote: mr.Remote(64)}); err != nil {
				t.Fatal(err)
			}
			n := 1
			if tc.after {
				n++
				if err := s.qa.Post(WorkRequest{ID: 2, Op: OpSend, Data: []byte("after")}); err != nil {
					t.Fatal(err)
				}
			}
			runUntil(t, s, n)
			if c := s.ca[0]; c.Err != nil || hash(into) != hash(src[64:64+size]) {
				t.Fatalf("READ: %+v, bytes match %v", c, hash(into) == hash(src[64:64+size]))
			}
			if !dropped {
				t.Fatal("no response was dropped")
			}
			again := log.match(func(f seenFrame) bool { return f.fromA && f.op == wire.OpReadRequest && f.psn == lost })
			if len(again) == 0 {
				t.Fatalf("A asked no READ again at PSN %d", lost)
			}
			off := tc.lost * seg
			if r := again[0].reth; r.VA != mr.Addr+64+uint64(off) || r.RKey != mr.RKey || r.Len != size-off {
				t.Fatalf("READ asked again with RETH %+v, want address %#x length %d", r, mr.Addr+64+uint64(off), size-off)
			}
			if st := s.qb.Stats(); st.Retransmits == 0 {
				t.Fatal("B resent no response")
			}
			if st := s.qa.Stats(); st.RejectedReadResponses != 0 || st.AcksSent != 0 {
				t.Fatalf("A rejected %d responses, sent %d ACKs; want none", st.RejectedReadResponses, st.AcksSent)
			}
			t.Logf("A: timeouts %d, out of order %d; asked again %d times", s.qa.Stats().Timeouts, s.qa.Stats().OutOfOrderDrops, len(again))
		})
	}
}

// TestClassicReadDuplicateRequest: a duplicate READ request (a PSN the
// responder has passed) is executed again: the responder sends the
// responses anew at the request's PSNs, reading the region again (bytes
// changed since are what they carry), with no NAK and no change to its
// expected PSN; the requester drops them as duplicates. A duplicate with
// a wrong key is dropped and counted, and answered with nothing.
func TestClassicReadDuplicateRequest(t *testing.T) {
	log := &frameLog{}
	s, mr, src := classicReadPair(t, log)
	size := 2*s.qa.seg + 5
	into := make([]byte, size)
	p := s.qa.sb.Next()
	if err := s.qa.Post(WorkRequest{ID: 1, Op: OpRead, Data: into, Remote: mr.Remote(0)}); err != nil {
		t.Fatal(err)
	}
	runUntil(t, s, 1)
	if hash(into) != hash(src[:size]) {
		t.Fatal("READ bytes differ")
	}
	r := s.qb.rcv.(*classicReceiver)
	exp, before := r.exp, s.qb.Stats()
	src[0], src[size-1] = src[0]^0xFF, src[size-1]^0xFF // the responder reads again
	dup := func(key uint32) {
		pk := wire.Packet{}
		s.qa.headers(&pk, 50000)
		pk.BTH.Opcode, pk.BTH.PSN = wire.OpReadRequest, uint32(p)
		pk.RETH = wire.RETH{VA: mr.Addr, RKey: key, Len: uint32(size)}
		s.qb.Handle(s.clk.Now(), &pk)
	}
	dup(mr.RKey)
	runUntil(t, s, 1)
	if err := s.run(s.clk.Now().Add(time.Millisecond), func() bool { return s.qa.Stats().Duplicates >= 3 }); err != nil {
		t.Fatal(err)
	}
	after := s.qb.Stats()
	if r.exp != exp || after.NaksSent != before.NaksSent || after.Retransmits-before.Retransmits != 3 {
		t.Fatalf("after a duplicate READ: expected PSN %d (was %d), %d NAKs, %d responses resent; want it unchanged, none, 3",
			r.exp, exp, after.NaksSent-before.NaksSent, after.Retransmits-before.Retransmits)
	}
	resp := log.match(func(f seenFrame) bool { return !f.fromA && isReadResponse(f.op) })
	if len(resp) != 6 || resp[3].psn != p || resp[3].op != wire.OpReadResponseFirst || resp[5].op != wire.OpReadResponseLast {
		t.Fatalf("responses %+v: want the READ's three twice", resp)
	}
	if resp[3].payload[0] != src[0] || resp[5].payload[len(resp[5].payload)-1] != src[size-1] {
		t.Fatal("the duplicate was answered with the bytes read the first time, not read again")
	}
	if hash(into[1:size-1]) != hash(src[1:size-1]) || into[0] == src[0] {
		t.Fatal("the requester took the responses to the duplicate")
	}
	dup(mr.RKey + 1)
	if err := s.run(s.clk.Now().Add(time.Millisecond), func() bool { return false }); err == nil {
		t.Fatal("run returned early")
	}
	bad := s.qb.Stats()
	if bad.RemoteAccessErrors != after.RemoteAccessErrors+1 || bad.NaksSent != after.NaksSent || bad.TxPackets != after.TxPackets {
		t.Fatalf("duplicate with a wrong key: %d access errors, %d NAKs, %d packets sent; want 1, 0, 0",
			bad.RemoteAccessErrors-after.RemoteAccessErrors, bad.NaksSent-after.NaksSent, bad.TxPackets-after.TxPackets)
	}
	if s.qa.Err() != nil || s.qb.Err() != nil {
		t.Fatalf("a QP failed: %v, %v", s.qa.Err(), s.qb.Err())
	}
}
