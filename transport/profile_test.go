package transport

import (
	"errors"
	"testing"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// Each profile's sender and receiver, driven alone: a bare QP (no engine,
// no link, no peer) whose profile half is handed hand-made packets.

const (
	bareStart = 1000 // the bare QP's first PSN
	barePeer  = 5000 // its peer's first PSN
)

func bareQP(t *testing.T, cfg Config) *QP {
	t.Helper()
	c, err := cfg.withDefaults(9014)
	if err != nil {
		t.Fatal(err)
	}
	rng := testutil.Rand(t)
	q, err := newQP(&c, 0x11, bareStart, macA, ipA, nil, rng)
	if err != nil {
		t.Fatal(err)
	}
	q.mrs = newMRTable(rng, true)
	if err := q.Connect(QPInfo{QPN: 0x22, PSN: barePeer, MAC: macB, IP: ipB}); err != nil {
		t.Fatal(err)
	}
	return q
}

// sprayData is spray data packet i (PSN barePeer+i) of a SEND of n
// packets of seg bytes.
func sprayData(i, n, seg int) *wire.Packet {
	return &wire.Packet{
		BTH:     wire.BTH{Opcode: wire.OpSprayData, PSN: uint32(psn.New(barePeer).Add(uint32(i))), AckReq: i == n-1},
		Data:    wire.Data{Kind: wire.KindSend, MsgID: 0, Offset: uint32(i * seg), MsgLen: uint32(n * seg), TxTime: uint64(i + 1)},
		Payload: make([]byte, seg),
	}
}

// TestSprayReceiverAlone: out-of-order placement, the cumulative PSN and
// SACK bitmap of the ACK it owes, duplicates, packets far behind, and the
// message completed once whole.
func TestSprayReceiverAlone(t *testing.T) {
	q := bareQP(t, Config{Profile: Spray})
	r := q.rcv.(*sprayReceiver)
	const n, seg = 6, 100
	for _, i := range []int{0, 2, 5} {
		r.recv(1, sprayData(i, n, seg))
	}
	var pk wire.Packet
	if nak := r.fillAck(2, &pk); nak || pk.BTH.Opcode != wire.OpSprayAck {
		t.Fatalf("ACK opcode %v, NAK %v", pk.BTH.Opcode, nak)
	}
	a := pk.Ack
	if a.CumPSN != barePeer+1 || a.AckedPSN != barePeer+5 {
		t.Fatalf("cumulative PSN %d, echoed %d; want %d, %d", a.CumPSN, a.AckedPSN, barePeer+1, barePeer+5)
	}
	for _, i := range []uint32{2, 5} {
		if k := barePeer + i - a.SackBase; a.Sack[k/64]&(1<<(k%64)) == 0 {
			t.Fatalf("PSN %d not in the SACK bitmap (base %d, %x)", barePeer+i, a.SackBase, a.Sack[:a.SackWords])
		}
	}
	r.ackSent()
	r.recv(3, sprayData(2, n, seg)) // a duplicate
	r.recv(3, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, PSN: uint32(psn.New(barePeer).Add(^uint32(5000)))}})
	if st := q.Stats(); st.Duplicates != 1 || st.OutOfWindow != 1 || st.MaxReorderHeld != 2 {
		t.Fatalf("duplicates %d, out of window %d, most held %d; want 1, 1, 2", st.Duplicates, st.OutOfWindow, st.MaxReorderHeld)
	}
	for _, i := range []int{1, 3, 4} {
		r.recv(4, sprayData(i, n, seg))
	}
	c, ok := q.PollCompletion()
	if !ok || c.Op != OpRecv || c.Len != n*seg {
		t.Fatalf("completion %+v, %v; want the %d-byte message", c, ok, n*seg)
	}
}

// TestClassicReceiverAlone: in-order acceptance, one sequence NAK per gap,
// the ACK of the last PSN accepted, and a sticky NAK for a bad WRITE.
func TestClassicReceiverAlone(t *testing.T) {
	q := bareQP(t, Config{Profile: RoCE})
	r := q.rcv.(*classicReceiver)
	pkt := func(i uint32, op wire.Opcode) *wire.Packet {
		return &wire.Packet{BTH: wire.BTH{Opcode: op, PSN: barePeer + i}, Payload: []byte("abcd")}
	}
	var pk wire.Packet
	r.recv(1, pkt(1, wire.OpSendOnly)) // a gap: PSN barePeer is missing
	r.recv(1, pkt(2, wire.OpSendOnly))
	if nak := r.fillAck(1, &pk); !nak || pk.AETH.Syndrome != wire.NakPSNSequenceError || pk.BTH.PSN != barePeer {
		t.Fatalf("NAK %v syndrome %#x PSN %d; want a sequence NAK for %d", nak, pk.AETH.Syndrome, pk.BTH.PSN, barePeer)
	}
	r.ackSent()
	r.recv(2, pkt(3, wire.OpSendOnly))
	if r.nakDue || q.Stats().OutOfOrderDrops != 3 {
		t.Fatalf("NAK due %v, out-of-order drops %d; want one NAK per gap and 3 drops", r.nakDue, q.Stats().OutOfOrderDrops)
	}
	r.recv(3, pkt(0, wire.OpSendFirst))
	r.recv(3, pkt(1, wire.OpSendLast))
	if nak := r.fillAck(3, &pk); nak || pk.AETH.Syndrome&0xE0 != wire.SyndromeAck || pk.BTH.PSN != barePeer+1 {
		t.Fatalf("NAK %v syndrome %#x PSN %d; want an ACK of %d", nak, pk.AETH.Syndrome, pk.BTH.PSN, barePeer+1)
	}
	if c, ok := q.PollCompletion(); !ok || string(c.Data) != "abcdabcd" {
		t.Fatalf("completion %+v, %v; want the two packets' message", c, ok)
	}
	w := pkt(2, wire.OpWriteOnly)
	w.RETH = wire.RETH{VA: 1, RKey: 0xBAD, Len: 4}
	r.recv(4, w)
	r.recv(4, pkt(3, wire.OpSendOnly))
	if nak := r.fillAck(4, &pk); !nak || pk.AETH.Syndrome != wire.NakRemoteAccessError || pk.BTH.PSN != barePeer+2 {
		t.Fatalf("NAK %v syndrome %#x PSN %d; want a remote access error for %d", nak, pk.AETH.Syndrome, pk.BTH.PSN, barePeer+2)
	}
}

// sendAll posts one SEND of n packets on q and transmits them; it returns
// the packets' PSNs.
func sendAll(t *testing.T, q *QP, n int) []psn.PSN {
	t.Helper()
	if err := q.Post(WorkRequest{ID: 9, Op: OpSend, Data: make([]byte, n*q.seg)}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, q.cfg.MTU)
	var ps []psn.PSN
	var pk wire.Packet
	for range n {
		k, err := q.PollTransmit(1, buf)
		if err != nil || k == 0 {
			t.Fatalf("transmit: %d bytes, %v", k, err)
		}
		if err := wire.Decode(buf[:k], &pk); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, psn.New(pk.BTH.PSN))
	}
	return ps
}

// TestSpraySenderAlone: spray ACKs with SACK bits acknowledge exactly
// what they name and complete the message; a NAK that names the message
// in progress fails the QP with its error.
func TestSpraySenderAlone(t *testing.T) {
	cfg := Config{Profile: Spray, CC: func() cc.Controller { return cc.Fixed{} }}
	q := bareQP(t, cfg)
	s := q.snd.(*spraySender)
	ps := sendAll(t, q, 4)
	ack := func(cum psn.PSN, sack uint64) *wire.Packet {
		return &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayAck}, Ack: wire.Ack{
			CumPSN: uint32(cum), AckedPSN: uint32(ps[3]), SackBase: uint32(cum), Sack: [wire.MaxSackWords]uint64{sack}, SackWords: 1,
		}}
	}
	s.onAck(2, ack(ps[2], 0b10)) // 0 and 1 cumulatively, 3 selectively
	if got := q.sb.Stats().Acked; got != 3 {
		t.Fatalf("%d packets acknowledged, want 3", got)
	}
	if _, ok := q.PollCompletion(); ok {
		t.Fatal("completed with a packet missing")
	}
	s.onAck(3, ack(ps[3].Next(), 0))
	if c, ok := q.PollCompletion(); !ok || c.ID != 9 || c.Err != nil {
		t.Fatalf("completion %+v, %v; want request 9", c, ok)
	}
	sendAll(t, q, 2)
	nak := ack(q.sb.Oldest(), 0)
	nak.Ack.AckedPSN, nak.Ack.Syndrome, nak.Ack.MsgID = uint32(q.sb.Oldest()), wire.NakRemoteAccessError, 1
	s.onAck(4, nak)
	if !errors.Is(q.Err(), ErrRemoteAccess) {
		t.Fatalf("QP error %v after a NAK naming the message in progress, want ErrRemoteAccess", q.Err())
	}
}

// TestClassicSenderAlone: classic opcodes and AckReq, a sequence NAK
// that makes the scoreboard resend from the PSN it names, the ACK that
// completes, and a fatal NAK naming an outstanding PSN.
func TestClassicSenderAlone(t *testing.T) {
	for _, tc := range []struct {
		write, imm, first, last bool
		want                    wire.Opcode
	}{
		{false, false, true, false, wire.OpSendFirst}, {false, false, false, false, wire.OpSendMiddle},
		{false, true, false, true, wire.OpSendLastImm}, {false, false, true, true, wire.OpSendOnly},
		{true, false, false, true, wire.OpWriteLast}, {true, true, true, true, wire.OpWriteOnlyImm},
	} {
		if got := classicOpcode(tc.write, tc.imm, tc.first, tc.last); got != tc.want {
			t.Errorf("classicOpcode(%v, %v, %v, %v) = %v, want %v", tc.write, tc.imm, tc.first, tc.last, got, tc.want)
		}
	}
	q := bareQP(t, Config{Profile: RoCE, CC: func() cc.Controller { return cc.Fixed{} }})
	s := q.snd.(*classicSender)
	ps := sendAll(t, q, 3)
	ack := func(p psn.PSN, syn uint8) *wire.Packet {
		return &wire.Packet{BTH: wire.BTH{Opcode: wire.OpAcknowledge, PSN: uint32(p)}, AETH: wire.AETH{Syndrome: syn}}
	}
	s.onAck(2, ack(ps[1], wire.NakPSNSequenceError))
	if !q.sb.HasLost() || q.sb.Oldest() != ps[1] {
		t.Fatalf("after a NAK for %d: resend queued %v, oldest %d", ps[1], q.sb.HasLost(), q.sb.Oldest())
	}
	s.onAck(3, ack(ps[2], wire.SyndromeAck|0x1F))
	if c, ok := q.PollCompletion(); !ok || c.ID != 9 || c.Err != nil {
		t.Fatalf("completion %+v, %v; want request 9", c, ok)
	}
	ps = sendAll(t, q, 2)
	s.onAck(4, ack(ps[1], wire.NakRemoteAccessError))
	if !errors.Is(q.Err(), ErrRemoteAccess) {
		t.Fatalf("QP error %v after a NAK naming PSN %d, want ErrRemoteAccess", q.Err(), ps[1])
	}
}
