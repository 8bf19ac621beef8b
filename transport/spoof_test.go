package transport

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// The spoofer's own port on the fabric: it sends frames that claim to come
// from the victim's peer.
var (
	macX = [6]byte{0x02, 0, 0, 0, 0, 0x0c}
	ipX  = netip.MustParseAddr("10.0.0.3")
)

// spoofRun is a transfer in both directions (A to B: SENDs and WRITEs, B
// to A: SENDs) over a lossless sim pair, into which a spoofer injects
// frames mid-transfer.
type spoofRun struct {
	*simPair
	log *frameLog // every frame the fabric carried
	x   *mem.Port
	mr  *MR
	ab  [][]byte
	ba  [][]byte
	off []uint64 // where each WRITE of ab lands in mr
}

func newSpoofRun(t *testing.T, prof Profile) *spoofRun {
	t.Helper()
	log := &frameLog{}
	mc := mem.Config{Seed: testutil.Seed(t), Delay: 5 * time.Microsecond, Filter: log.filter}
	cfg := Config{Profile: prof, Seed: testutil.Seed(t) + 1, MinRTO: time.Millisecond}
	var s *simPair
	if prof == Spray && strings.HasPrefix(t.Name(), "TestSpoofOnDemand/") {
		// The same attacks on QPs made on demand (peers_test.go).
		cfgB := cfg
		cfgB.Seed++
		s = newPeerPairOf(t, &clock.Sim{}, mc, cfg, cfgB)
	} else {
		s = newSimPair(t, mc, cfg)
	}
	x, err := s.fab.NewPort(macX, ipX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	r := &spoofRun{simPair: s, log: log, x: x, mr: s.eb.Register(make([]byte, 1<<20), AccessRemoteWrite)}
	rng := testutil.Rand(t)
	r.ab = randomMessages(rng, 24, 64<<10)
	r.ba = randomMessages(rng, 8, 16<<10)
	var off uint64
	for i, m := range r.ab {
		wr := WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}
		if i%3 == 2 {
			wr.Op, wr.Remote = OpWrite, r.mr.Remote(off)
			r.off = append(r.off, off)
			off += uint64(len(m))
		}
		if err := s.qa.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	if s.qb == nil {
		// On demand: B's QP comes with A's first packet.
		if err := s.run(clock.Time(time.Second), func() bool { return s.qb != nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range r.ba {
		if err := s.qb.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// midway runs the transfer until A has sent packets data packets.
func (r *spoofRun) midway(t *testing.T, packets uint64) {
	t.Helper()
	if err := r.run(clock.Time(time.Second), func() bool { return r.qa.Stats().TxPackets >= packets }); err != nil {
		t.Fatal(err)
	}
	if r.qa.sb.Outstanding() == 0 {
		t.Fatal("nothing outstanding midway: the spoofed packet would meet an idle QP")
	}
}

// inject encodes pk (addresses filled in here: from the victim's peer to
// the victim) and sends it from the spoofer's port.
func (r *spoofRun) inject(t *testing.T, toA bool, pk *wire.Packet, payload []byte) {
	t.Helper()
	pk.Eth = wire.Eth{Dst: macA, Src: macB}
	pk.IP = wire.IP{Src: ipB, Dst: ipA, TTL: 64}
	pk.BTH.DestQP, pk.BTH.PKey = r.qa.QPN(), 0xFFFF
	if !toA {
		pk.Eth = wire.Eth{Dst: macB, Src: macA}
		pk.IP = wire.IP{Src: ipA, Dst: ipB, TTL: 64}
		pk.BTH.DestQP = r.qb.QPN()
	}
	pk.UDP = wire.UDP{Src: 0xC001, Dst: wire.UDPPort}
	fs := make([]link.Frame, 1)
	if r.x.Alloc(fs) != 1 {
		t.Fatal("no transmit buffer on the spoofer's port")
	}
	n, err := wire.Encode(fs[0].Buf, pk, payload)
	if err != nil {
		t.Fatal(err)
	}
	fs[0].Buf = fs[0].Buf[:n]
	if _, err := r.x.Send(fs); err != nil {
		t.Fatal(err)
	}
}

// finish runs the transfer to its end and checks that every message
// arrived byte-exact and every request completed without error.
func (r *spoofRun) finish(t *testing.T) {
	t.Helper()
	recvB := 0
	for i := range r.ab {
		if i%3 != 2 {
			recvB++
		}
	}
	err := r.run(clock.Time(10*time.Second), func() bool {
		return len(r.ca) == len(r.ab)+len(r.ba) && len(r.cb) == len(r.ba)+recvB ||
			r.qa.Err() != nil || r.qb.Err() != nil
	})
	for _, q := range []*QP{r.qa, r.qb} {
		if q.Err() != nil {
			t.Fatalf("QP %#x failed: %v", q.QPN(), q.Err())
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var gotA, gotB [][]byte
	for _, c := range r.ca {
		if c.Err != nil {
			t.Fatalf("completion %d on A: %v", c.ID, c.Err)
		}
		if c.Op == OpRecv {
			gotA = append(gotA, c.Data)
		}
	}
	for _, c := range r.cb {
		if c.Err != nil {
			t.Fatalf("completion %d on B: %v", c.ID, c.Err)
		}
		if c.Op == OpRecv {
			gotB = append(gotB, c.Data)
		}
	}
	k, w := 0, 0
	for i, m := range r.ab {
		if i%3 == 2 {
			if got := r.mr.Buf[r.off[w] : r.off[w]+uint64(len(m))]; hash(got) != hash(m) {
				t.Fatalf("WRITE %d landed corrupted", i)
			}
			w++
			continue
		}
		if k >= len(gotB) || hash(gotB[k]) != hash(m) {
			t.Fatalf("SEND %d from A arrived corrupted or not at all", i)
		}
		k++
	}
	for i, m := range r.ba {
		if i >= len(gotA) || hash(gotA[i]) != hash(m) {
			t.Fatalf("SEND %d from B arrived corrupted or not at all", i)
		}
	}
}

// beyond is a PSN the sender cannot have sent by the time a packet sent
// now arrives: more than a Window (the default) past next.
func beyond(next psn.PSN) psn.PSN { return next.Add(4096 + 100) }

// far is a PSN half the PSN space away from p: in no window.
func far(p psn.PSN) psn.PSN { return p.Add(psn.Half - 7) }

// TestSpoofSprayNak is the blind attack that failed a QP with one packet:
// a spray ACK with a NAK syndrome (remote access error, message 0) and a
// meaningless cumulative PSN, sent with the peer's addresses to the QP
// mid-transfer. It is dropped (RejectedAcks) and the transfer completes.
// A NAK with plausible PSNs that names no message in progress is dropped
// too (RejectedNaks). An RNR NAK, which keeps a QP waiting, is held to the
// same checks.
func TestSpoofSprayNak(t *testing.T) {
	for _, tc := range []struct {
		name     string
		plausCum bool // the cumulative PSN is the sender's oldest outstanding
		msg      uint32
		syn      uint8
	}{
		{"meaningless-cum", false, 0, wire.NakRemoteAccessError},
		{"no-such-message", true, 0xBAD0, wire.NakRemoteAccessError},
		{"rnr-meaningless-cum", false, 0, wire.SyndromeRNR},
		{"rnr-no-such-message", true, 0xBAD0, wire.SyndromeRNR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSpoofRun(t, Spray)
			r.midway(t, 60)
			una := r.qa.sb.Oldest()
			cum := far(una)
			if tc.plausCum {
				cum = una
			}
			r.inject(t, true, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayAck, PSN: uint32(cum)}, Ack: wire.Ack{
				CumPSN: uint32(cum), AckedPSN: uint32(cum), SackBase: uint32(cum), SackWords: 1,
				Syndrome: tc.syn, MsgID: tc.msg,
			}}, nil)
			r.finish(t)
			st := r.qa.Stats()
			if st.RejectedAcks+st.RejectedNaks != 1 || st.NaksReceived != 0 || st.RNRNaksReceived != 0 {
				t.Fatalf("rejected %d ACKs and %d NAKs, %d NAKs taken; want the one spoofed NAK rejected", st.RejectedAcks, st.RejectedNaks, st.NaksReceived)
			}
		})
	}
}

// TestSpoofSprayAck: spray ACKs whose cumulative PSN, echoed PSN or SACK
// bits name PSNs never sent are dropped whole (RejectedAcks) and move
// nothing: the transfer completes byte-exact.
func TestSpoofSprayAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  func(una, next psn.PSN) wire.Ack
	}{
		{"cum", func(una, next psn.PSN) wire.Ack {
			return wire.Ack{CumPSN: uint32(far(una)), AckedPSN: uint32(una), SackBase: uint32(una), SackWords: 1}
		}},
		{"cum-beyond-next", func(una, next psn.PSN) wire.Ack {
			return wire.Ack{CumPSN: uint32(beyond(next)), AckedPSN: uint32(una), SackBase: uint32(una), SackWords: 1}
		}},
		{"echoed", func(una, next psn.PSN) wire.Ack {
			return wire.Ack{CumPSN: uint32(una), AckedPSN: uint32(beyond(next)), SackBase: uint32(una), SackWords: 1, EchoTime: 1}
		}},
		{"sack", func(una, next psn.PSN) wire.Ack {
			a := wire.Ack{CumPSN: uint32(una), AckedPSN: uint32(una), SackBase: uint32(beyond(next)), SackWords: 2}
			a.Sack[1] = 1 << 5
			return a
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSpoofRun(t, Spray)
			r.midway(t, 60)
			a := tc.ack(r.qa.sb.Oldest(), r.qa.sb.Next())
			r.inject(t, true, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayAck, PSN: a.CumPSN}, Ack: a}, nil)
			r.finish(t)
			if st := r.qa.Stats(); st.RejectedAcks != 1 {
				t.Fatalf("rejected %d ACKs, want the spoofed one", st.RejectedAcks)
			}
		})
	}
}

// TestSpoofSprayData: spray data packets (SEND and a WRITE with a bad key)
// whose PSN lies far outside the receiver's window are dropped unanswered
// (OutOfWindow); the receiver's own sends and the transfer complete.
func TestSpoofSprayData(t *testing.T) {
	for _, kind := range []wire.OpKind{wire.KindSend, wire.KindSendImm, wire.KindWrite, wire.KindWriteImm} {
		for _, pos := range []string{"ahead", "behind"} {
			t.Run(kind.String()+"-"+pos, func(t *testing.T) {
				r := newSpoofRun(t, Spray)
				r.midway(t, 60)
				before := r.qb.Stats()
				payload := []byte("spoofed payload")
				p := far(r.qb.rcv.(*sprayReceiver).win.Cum())
				if pos == "behind" {
					p = r.qb.rcv.(*sprayReceiver).win.Cum().Add(^uint32(4096 + 10))
				}
				pk := &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, PSN: uint32(p)},
					Data: wire.Data{Kind: kind, MsgID: 0, MsgLen: uint32(len(payload)), TxTime: 1}}
				if kind == wire.KindWrite || kind == wire.KindWriteImm {
					pk.RETH = wire.RETH{VA: 0xDEAD0000, RKey: 0xBAD, Len: uint32(len(payload))}
				}
				r.inject(t, false, pk, payload)
				r.finish(t)
				st := r.qb.Stats()
				if st.OutOfWindow != before.OutOfWindow+1 || st.RemoteAccessErrors != 0 || st.AcksSent == 0 {
					t.Fatalf("out of window %d (before %d), remote access errors %d; want the spoofed packet out of window", st.OutOfWindow, before.OutOfWindow, st.RemoteAccessErrors)
				}
			})
		}
	}
}

// TestSpoofClassicAck: ACKNOWLEDGE packets that name PSNs the QP never
// sent (ACK, sequence NAK) or no outstanding request (remote access
// error, invalid request, remote operational error) are dropped and
// counted; none fails or rewinds the QP.
func TestSpoofClassicAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		syn  uint8
		nak  bool
	}{
		{"ack", wire.SyndromeAck | 0x1F, false},
		{"nak-sequence", wire.NakPSNSequenceError, true},
		{"nak-remote-access", wire.NakRemoteAccessError, true},
		{"nak-invalid-request", wire.NakInvalidRequest, true},
		{"nak-remote-operational", wire.NakRemoteOperational, true},
		{"rnr", wire.SyndromeRNR, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSpoofRun(t, RoCE)
			r.midway(t, 60)
			p := far(r.qa.sb.Oldest())
			r.inject(t, true, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpAcknowledge, PSN: uint32(p)},
				AETH: wire.AETH{Syndrome: tc.syn, MSN: 1}}, nil)
			r.finish(t)
			st := r.qa.Stats()
			got := st.RejectedAcks
			if tc.nak {
				got = st.RejectedNaks
			}
			if got != 1 || st.RejectedAcks+st.RejectedNaks != 1 || st.NaksReceived != 0 || st.RNRNaksReceived != 0 {
				t.Fatalf("rejected %d ACKs, %d NAKs, took %d NAKs, %d RNR NAKs; want the spoofed one rejected", st.RejectedAcks, st.RejectedNaks, st.NaksReceived, st.RNRNaksReceived)
			}
		})
	}
}

// TestSpoofClassicNakOld: a fatal or RNR NAK naming a PSN already
// acknowledged (before the oldest outstanding) is no outstanding request:
// dropped.
func TestSpoofClassicNakOld(t *testing.T) {
	r := newSpoofRun(t, RoCE)
	r.midway(t, 60)
	p := r.qa.sb.Oldest().Add(^uint32(0)) // the PSN before the oldest outstanding
	for _, syn := range []uint8{wire.NakRemoteAccessError, wire.SyndromeRNR} {
		r.inject(t, true, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpAcknowledge, PSN: uint32(p)},
			AETH: wire.AETH{Syndrome: syn}}, nil)
	}
	r.finish(t)
	if st := r.qa.Stats(); st.RejectedNaks != 2 {
		t.Fatalf("rejected %d NAKs, want the two spoofed ones", st.RejectedNaks)
	}
}

// TestSpoofClassicData: RC SEND and WRITE packets of every opcode whose
// PSN lies far outside the responder's window are dropped unanswered
// (OutOfWindow: no sequence NAK goes back); the transfer completes.
func TestSpoofClassicData(t *testing.T) {
	for op := wire.OpSendFirst; op <= wire.OpWriteOnlyImm; op++ {
		for _, pos := range []string{"ahead", "behind"} {
			t.Run(op.String()+"-"+pos, func(t *testing.T) {
				r := newSpoofRun(t, RoCE)
				r.midway(t, 60)
				before := r.qb.Stats()
				p := far(r.qb.rcv.(*classicReceiver).exp)
				if pos == "behind" {
					p = r.qb.rcv.(*classicReceiver).exp.Add(^uint32(4096 + 10))
				}
				pk := &wire.Packet{BTH: wire.BTH{Opcode: op, PSN: uint32(p)},
					RETH: wire.RETH{VA: 0xDEAD0000, RKey: 0xBAD, Len: 16}, Imm: 7}
				r.inject(t, false, pk, make([]byte, 16))
				r.finish(t)
				st := r.qb.Stats()
				if st.OutOfWindow != before.OutOfWindow+1 || st.RemoteAccessErrors != 0 {
					t.Fatalf("out of window %d (before %d), remote access errors %d; want the spoofed packet out of window", st.OutOfWindow, before.OutOfWindow, st.RemoteAccessErrors)
				}
				if st.NaksSent != before.NaksSent {
					t.Fatalf("%d NAKs sent after the spoofed packet, want none", st.NaksSent-before.NaksSent)
				}
			})
		}
	}
}

// TestSpoofCNP: a CNP to a spray QP (whose receivers never send one) and
// one to an idle RoCE QP are dropped (RejectedCNPs); one to a RoCE QP with
// data in flight is taken (a CNP names no PSN to check) and the transfer
// still completes byte-exact.
func TestSpoofCNP(t *testing.T) {
	cnp := func() *wire.Packet { return &wire.Packet{BTH: wire.BTH{Opcode: wire.OpCNP, BECN: true}} }
	t.Run("spray", func(t *testing.T) {
		r := newSpoofRun(t, Spray)
		r.midway(t, 60)
		r.inject(t, true, cnp(), nil)
		r.finish(t)
		if st := r.qa.Stats(); st.RejectedCNPs != 1 || st.CNPsReceived != 0 {
			t.Fatalf("rejected %d CNPs, took %d; want the spoofed one rejected", st.RejectedCNPs, st.CNPsReceived)
		}
	})
	t.Run("roce-idle", func(t *testing.T) {
		r := newSpoofRun(t, RoCE)
		r.finish(t)
		r.clk.Set(r.clk.Now().Add(time.Second))
		taken := r.qa.Stats().CNPsReceived
		r.inject(t, true, cnp(), nil)
		if err := r.run(r.clk.Now().Add(time.Millisecond), func() bool {
			return r.qa.Stats().RejectedCNPs > 0 || r.qa.Stats().CNPsReceived > taken
		}); err != nil {
			t.Fatal(err)
		}
		if r.qa.Stats().RejectedCNPs != 1 || r.qa.Stats().CNPsReceived != taken {
			t.Fatalf("rejected %d CNPs, took %d more; want the spoofed one rejected", r.qa.Stats().RejectedCNPs, r.qa.Stats().CNPsReceived-taken)
		}
	})
	t.Run("roce-busy", func(t *testing.T) {
		r := newSpoofRun(t, RoCE)
		r.midway(t, 60)
		taken := r.qa.Stats().CNPsReceived
		r.inject(t, true, cnp(), nil)
		r.finish(t)
		if st := r.qa.Stats(); st.CNPsReceived != taken+1 || st.RejectedCNPs != 0 {
			t.Fatalf("took %d CNPs (before %d), rejected %d", st.CNPsReceived, taken, st.RejectedCNPs)
		}
	})
}

// TestSpoofWriteInWindow: a spoofed spray WRITE with a bad key that hits
// the receive window (a guessed PSN) fails the responder side of the QP
// it reaches, as a genuine one would (a sticky NAK remote access error),
// but not that QP's requester side: its own sends complete byte-exact. The
// peer drops the NAKs, which name no message it has in progress (the
// spoofer guessed a message ID the responder would take, 40 of A's 24)
// (RejectedNaks).
func TestSpoofWriteInWindow(t *testing.T) {
	r := newSpoofRun(t, Spray)
	r.midway(t, 60)
	cum := r.qb.rcv.(*sprayReceiver).win.Cum()
	payload := []byte("spoofed payload")
	r.inject(t, false, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, PSN: uint32(cum.Add(3000))},
		Data: wire.Data{Kind: wire.KindWrite, MsgID: 40, MsgLen: uint32(len(payload)), TxTime: 1},
		RETH: wire.RETH{VA: 0xDEAD0000, RKey: 0xBAD, Len: uint32(len(payload))}}, payload)
	more := randomMessages(testutil.Rand(t), 8, 32<<10)
	for i, m := range more {
		if err := r.qb.Post(WorkRequest{ID: uint64(100 + i), Op: OpSend, Data: m}); err != nil {
			t.Fatal(err)
		}
	}
	sent := func() int {
		n := 0
		for _, c := range r.cb {
			if c.ID >= 100 && c.Err == nil {
				n++
			}
		}
		return n
	}
	if err := r.run(clock.Time(10*time.Second), func() bool { return sent() == len(more) || r.qb.Err() != nil }); err != nil {
		t.Fatal(err)
	}
	if r.qb.Err() != nil {
		t.Fatalf("the spoofed WRITE failed the receiver's own QP: %v", r.qb.Err())
	}
	var got [][]byte
	for _, c := range r.ca {
		if c.Op == OpRecv {
			got = append(got, c.Data)
		}
	}
	got = got[len(got)-len(more):]
	for i, m := range more {
		if hash(got[i]) != hash(m) {
			t.Fatalf("message %d from B arrived corrupted", i)
		}
	}
	if st := r.qb.Stats(); st.RemoteAccessErrors != 1 {
		t.Fatalf("%d remote access errors at B, want the spoofed WRITE's", st.RemoteAccessErrors)
	}
	if st := r.qa.Stats(); st.RejectedNaks == 0 || st.NaksReceived != 0 {
		t.Fatalf("A rejected %d NAKs and took %d; want B's NAKs of the spoofed WRITE rejected", st.RejectedNaks, st.NaksReceived)
	}
	// B's responder now refuses A's packets: A's transfer cannot finish,
	// and A fails as for a dead peer, after its retransmission timeouts.
	// (run may stop at the step that failed A: nothing is left to happen.)
	if err := r.run(clock.Time(time.Minute), func() bool { return r.qa.Err() != nil }); err != nil && r.qa.Err() == nil {
		t.Fatal(err)
	}
	if !errors.Is(r.qa.Err(), ErrPeerUnreachable) {
		t.Fatalf("A failed with %v, want ErrPeerUnreachable", r.qa.Err())
	}
	t.Logf("A failed at %v: %v", r.clk.Now(), r.qa.Err())
}

// expected is the PSN B's responder expects next from A.
func (r *spoofRun) expected() psn.PSN {
	if c, ok := r.qb.rcv.(*classicReceiver); ok {
		return c.exp
	}
	return r.qb.rcv.(*sprayReceiver).win.Cum()
}

// readResponses returns the READ response frames B sent (RoCE opcodes,
// or spray data of kind ReadResp).
func (r *spoofRun) readResponses() []seenFrame {
	return r.log.match(func(f seenFrame) bool {
		return !f.fromA && (isReadResponse(f.op) || f.op == wire.OpSprayData && f.kind == wire.KindReadResp)
	})
}

// nothingToSpoofer checks that no frame reached the spoofer's port.
func (r *spoofRun) nothingToSpoofer(t *testing.T) {
	t.Helper()
	fs := make([]link.Frame, 8)
	n, err := r.x.Recv(fs)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the spoofer received %d frames", n)
	}
}

// spoofedRead is a READ request of the region mr for len bytes at PSN p,
// in the profile's encoding.
func spoofedRead(prof Profile, p psn.PSN, mr *MR, key uint32, n uint32) *wire.Packet {
	pk := &wire.Packet{BTH: wire.BTH{Opcode: wire.OpReadRequest, PSN: uint32(p)},
		RETH: wire.RETH{VA: mr.Addr, RKey: key, Len: n}}
	if prof == Spray {
		pk.BTH.Opcode = wire.OpSprayData
		pk.Data = wire.Data{Kind: wire.KindReadReq, MsgID: 0xBAD, TxTime: 1}
	}
	return pk
}

// TestSpoofReadRequest: a blind spoofer's READ request to the QP number
// it guessed, naming a region it may read (the worst case: it learned the
// address and key), whose PSN lies outside the responder's window, ahead
// or behind, is dropped unanswered (OutOfWindow) in both profiles: no
// READ response leaves B, nothing reaches the spoofer, and the transfer
// completes byte-exact. (At the PSN B expects, a request is B's next one
// whoever sent it, as in IBA: a wrong key there is the sticky NAK remote
// access error of TestSpoofWriteInWindow. Just behind it, it is a
// duplicate: TestSpoofReadRequestDuplicate.)
func TestSpoofReadRequest(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		for _, pos := range []string{"ahead", "behind"} {
			t.Run(prof.String()+"-"+pos, func(t *testing.T) {
				r := newSpoofRun(t, prof)
				secret := r.eb.Register(make([]byte, 64<<10), AccessRemoteRead)
				r.midway(t, 60)
				before := r.qb.Stats()
				p := far(r.expected())
				if pos == "behind" {
					p = r.expected().Add(^uint32(4096 + 10))
				}
				r.inject(t, false, spoofedRead(prof, p, secret, secret.RKey, 4096), nil)
				r.finish(t)
				st := r.qb.Stats()
				if st.OutOfWindow != before.OutOfWindow+1 || st.RemoteAccessErrors != 0 || st.NaksSent != before.NaksSent {
					t.Fatalf("out of window %d (before %d), access errors %d, NAKs %d; want the spoofed request out of window",
						st.OutOfWindow, before.OutOfWindow, st.RemoteAccessErrors, st.NaksSent-before.NaksSent)
				}
				if rs := r.readResponses(); len(rs) != 0 {
					t.Fatalf("B sent %d READ responses to a request out of window", len(rs))
				}
				r.nothingToSpoofer(t)
			})
		}
	}
}

// TestSpoofReadRequestDuplicate: a spoofed READ request in the duplicate
// window (a PSN just behind the one B expects). The RoCE responder
// executes a duplicate READ again (IBA): with a key that reads the region
// the responses go to B's peer, never to the spoofer, and A drops them,
// as they answer no READ of its own (RejectedReadResponses or
// Duplicates); with a wrong key the request is dropped and counted
// (RemoteAccessErrors), with no NAK. The spray responder answers a
// duplicate with an ACK only (Duplicates). The transfer completes
// byte-exact either way.
func TestSpoofReadRequestDuplicate(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		for _, goodKey := range []bool{true, false} {
			name := prof.String() + "-wrong-key"
			if goodKey {
				name = prof.String() + "-good-key"
			}
			t.Run(name, func(t *testing.T) {
				r := newSpoofRun(t, prof)
				secret := r.eb.Register(make([]byte, 64<<10), AccessRemoteRead)
				key := secret.RKey
				if !goodKey {
					key++
				}
				r.midway(t, 60)
				beforeA, beforeB := r.qa.Stats(), r.qb.Stats()
				p := r.expected().Add(^uint32(2)) // 3 behind
				r.inject(t, false, spoofedRead(prof, p, secret, key, 100), nil)
				r.finish(t)
				sa, sb := r.qa.Stats(), r.qb.Stats()
				if sb.Duplicates == beforeB.Duplicates || sb.NaksSent != beforeB.NaksSent {
					t.Fatalf("B counted %d duplicates and sent %d NAKs; want the spoofed request a duplicate, no NAK",
						sb.Duplicates-beforeB.Duplicates, sb.NaksSent-beforeB.NaksSent)
				}
				resp := r.readResponses()
				switch {
				case prof == Spray || !goodKey:
					if len(resp) != 0 || (prof == RoCE) != (sb.RemoteAccessErrors == beforeB.RemoteAccessErrors+1) {
						t.Fatalf("B sent %d READ responses, counted %d access errors", len(resp), sb.RemoteAccessErrors-beforeB.RemoteAccessErrors)
					}
				default:
					if len(resp) != 1 || resp[0].psn != p {
						t.Fatalf("B answered the duplicate with %d responses, want one at PSN %d", len(resp), p)
					}
					if sa.RejectedReadResponses+sa.Duplicates == beforeA.RejectedReadResponses+beforeA.Duplicates {
						t.Fatal("A took a response to a READ it never sent")
					}
				}
				r.nothingToSpoofer(t)
			})
		}
	}
}

// TestSpoofReadResponse: READ responses spoofed to A mid-transfer, while
// A has no READ outstanding, are dropped and counted, and the transfer
// completes byte-exact. RoCE: every response opcode, at a PSN in no
// window and at A's oldest outstanding PSN (a SEND's or a WRITE's)
// (RejectedReadResponses). Spray: a response far ahead of A's receive
// window (OutOfWindow) and one inside it naming no READ
// (RejectedReadResponses).
func TestSpoofReadResponse(t *testing.T) {
	t.Run("roce", func(t *testing.T) {
		for op := wire.OpReadResponseFirst; op <= wire.OpReadResponseOnly; op++ {
			for _, pos := range []string{"far", "outstanding"} {
				t.Run(op.String()+"-"+pos, func(t *testing.T) {
					r := newSpoofRun(t, RoCE)
					r.midway(t, 60)
					p := far(r.qa.sb.Oldest())
					if pos == "outstanding" {
						p = r.qa.sb.Oldest()
					}
					r.inject(t, true, &wire.Packet{BTH: wire.BTH{Opcode: op, PSN: uint32(p)},
						AETH: wire.AETH{Syndrome: wire.SyndromeAck | 0x1F}}, make([]byte, 64))
					r.finish(t)
					if st := r.qa.Stats(); st.RejectedReadResponses != 1 || st.OutOfOrderDrops != 0 {
						t.Fatalf("rejected %d READ responses, %d out of order; want the spoofed one rejected", st.RejectedReadResponses, st.OutOfOrderDrops)
					}
					r.nothingToSpoofer(t)
				})
			}
		}
	})
	for _, pos := range []string{"far", "in-window"} {
		t.Run("spray-"+pos, func(t *testing.T) {
			r := newSpoofRun(t, Spray)
			r.midway(t, 60)
			before := r.qa.Stats()
			cum := r.qa.rcv.(*sprayReceiver).win.Cum()
			p := far(cum)
			if pos == "in-window" {
				p = cum.Add(5)
			}
			payload := []byte("spoofed response")
			r.inject(t, true, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, PSN: uint32(p)},
				Data: wire.Data{Kind: wire.KindReadResp, MsgID: 0xBAD, MsgLen: uint32(len(payload)), TxTime: 1}, Imm: 3}, payload)
			r.finish(t)
			st := r.qa.Stats()
			got, want := st.RejectedReadResponses-before.RejectedReadResponses, uint64(1)
			if pos == "far" {
				got = st.OutOfWindow - before.OutOfWindow
			}
			if got != want {
				t.Fatalf("%s: counted %d, want the spoofed response", pos, got)
			}
			r.nothingToSpoofer(t)
		})
	}
}

// TestSpoofClassicNakInRead: a fatal NAK naming a PSN that a RoCE READ
// request took for one of its response packets, where no request began,
// names no request: dropped (RejectedNaks), and the READ completes
// byte-exact. One naming the READ's own PSN names the request: it fails
// the QP, as a genuine one would.
func TestSpoofClassicNakInRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    uint32 // response packet whose PSN the NAK names
		fail bool
	}{
		{"inside", 2, false},
		{"request", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := testutil.Seed(t)
			s := newSimPair(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond}, readConfig(RoCE, seed))
			src := randomBytes(rand.New(rand.NewPCG(seed, 10)), 100<<10)
			mr := s.eb.Register(src, AccessRemoteRead)
			into := make([]byte, len(src))
			p := s.qa.sb.Next()
			if err := s.qa.Post(WorkRequest{ID: 1, Op: OpRead, Data: into, Remote: mr.Remote(0)}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ea.Step(s.clk.Now()); err != nil {
				t.Fatal(err)
			}
			pk := wire.Packet{}
			s.qb.headers(&pk, 50000)
			pk.BTH.Opcode, pk.BTH.PSN = wire.OpAcknowledge, uint32(p.Add(tc.k))
			pk.AETH = wire.AETH{Syndrome: wire.NakRemoteAccessError}
			s.qa.Handle(s.clk.Now(), &pk)
			if tc.fail {
				if !errors.Is(s.qa.Err(), ErrRemoteAccess) {
					t.Fatalf("a NAK of the READ request left the QP with %v, want ErrRemoteAccess", s.qa.Err())
				}
				return
			}
			runUntil(t, s, 1)
			if c := s.ca[0]; c.Err != nil || hash(into) != hash(src) {
				t.Fatalf("READ after a spoofed NAK: %+v, bytes match %v", c, hash(into) == hash(src))
			}
			if st := s.qa.Stats(); st.RejectedNaks != 1 || st.NaksReceived != 0 {
				t.Fatalf("rejected %d NAKs, took %d; want the spoofed one rejected", st.RejectedNaks, st.NaksReceived)
			}
		})
	}
}

// TestSpoofSprayWriteKey is the sniffing attack: a WRITE with a wrong key,
// at a PSN inside the receiver's window and under a message ID the sender
// has not used, fails the receiver's QP, whose NAK then names the
// spoofer's message. The sender takes none of it as its own (no remote
// access error on its requests: it caused none), and the error that
// fails it at last says what happened instead of only that the peer
// stopped acknowledging.
func TestSpoofSprayWriteKey(t *testing.T) {
	r := newSpoofRun(t, Spray)
	r.midway(t, 60)
	payload := []byte("spoofed payload")
	const spoofID = 30
	p := r.qb.rcv.(*sprayReceiver).win.Highest().Add(100)
	pk := &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, PSN: uint32(p)},
		Data: wire.Data{Kind: wire.KindWrite, MsgID: spoofID, MsgLen: uint32(len(payload)), TxTime: 1},
		RETH: wire.RETH{VA: 0xDEAD0000, RKey: 0xBAD, Len: uint32(len(payload))}}
	r.inject(t, false, pk, payload)
	// Once the sender failed, nothing is left to run: the run ends.
	if err := r.run(clock.Time(time.Minute), func() bool { return r.qa.Err() != nil }); err != nil && r.qa.Err() == nil {
		t.Fatal(err)
	}
	if st := r.qb.Stats(); st.RemoteAccessErrors != 1 {
		t.Fatalf("receiver's remote access errors %d, want the spoofed WRITE's", st.RemoteAccessErrors)
	}
	err := r.qa.Err()
	for _, c := range r.ca {
		if errors.Is(c.Err, ErrRemoteAccess) {
			t.Fatalf("request %d failed with %v: the sender caused no remote access error", c.ID, c.Err)
		}
	}
	if errors.Is(err, ErrRemoteAccess) || r.qa.Stats().RejectedNaks == 0 {
		t.Fatalf("sender's error %v, %d NAKs rejected: want the NAKs naming the spoofer's message rejected", err, r.qa.Stats().RejectedNaks)
	}
	for _, want := range []string{"remote access error", "message 30", "never sent"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("sender's error %q does not say %q", err, want)
		}
	}
	t.Logf("sender's error: %v", err)
}
