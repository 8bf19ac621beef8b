package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// Traffic secrets of the tests: A's Send is B's Recv and the other way.
var (
	secretAB = [32]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	secretBA = [32]byte{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
)

func secA(integrity bool) Security {
	return Security{Send: secretAB, Recv: secretBA, IntegrityOnly: integrity}
}

func secB(integrity bool) Security {
	return Security{Send: secretBA, Recv: secretAB, IntegrityOnly: integrity}
}

// newSecPair is newSimPair with both QPs secured before Connect
// (integrity only if integrity), each sending at most epoch packets per
// key epoch (0: the default).
func newSecPair(t testing.TB, mc mem.Config, cfg Config, integrity bool, epoch uint64) *simPair {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = testutil.Seed(t)
	}
	cfg.secEpochPackets = epoch
	cfgB := cfg
	cfgB.Seed = cfg.Seed + 1
	if cfg.Profile == Spray && strings.HasPrefix(t.Name(), "TestSpoofOnDemand/") {
		// The same attacks on QPs made on demand, secured by a PSK
		// (peers_test.go).
		psk := []byte("a pre-shared key of the test")
		cfg.Peers = PeerConfig{PSK: psk, IntegrityOnly: integrity}
		cfgB.Peers = cfg.Peers
		return primedPeerPair(t, mc, cfg, cfgB)
	}
	return newSimPairOf(t, mc, cfg, cfgB, func(s *simPair) {
		if err := s.qa.Secure(secA(integrity)); err != nil {
			t.Fatal(err)
		}
		if err := s.qb.Secure(secB(integrity)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSecureTransfer: two secured QPs move SENDs byte-exact over a fabric
// that loses, duplicates and reorders, in both profiles, encrypted and
// integrity only, with keys rotating every 256 packets (more than the fabric reorders); no legitimate
// packet is dropped for a security reason except duplicates the fabric
// made (Replayed), and both sides rotated.
func TestSecureTransfer(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		for _, integrity := range []bool{false, true} {
			name := prof.String() + "/encrypted"
			if integrity {
				name = prof.String() + "/integrity"
			}
			t.Run(name, func(t *testing.T) {
				seed := testutil.Seed(t)
				rng := rand.New(rand.NewPCG(seed, 1))
				cfg := Config{Profile: prof, Seed: seed, MTU: 9014, MinRTO: time.Millisecond}
				if prof == RoCE {
					cfg.Window = 128
				}
				s := newSecPair(t, mem.Config{
					Seed: seed, Loss: 0.01, Dup: 0.01, Reorder: 0.3, ReorderDelay: 50 * time.Microsecond,
					Delay: 5 * time.Microsecond, Jitter: 5 * time.Microsecond,
				}, cfg, integrity, 256)
				msgs := randomMessages(rng, msgCount()/4, 1<<20)
				transfer(t, s, msgs)
				sa, sb := s.qa.Stats().Security, s.qb.Stats().Security
				t.Logf("A %+v\nB %+v", sa, sb)
				if s.qa.Stats().Retransmits == 0 {
					t.Fatal("1% loss configured but nothing was retransmitted")
				}
				for _, st := range []SecurityStats{sa, sb} {
					if st.BadTag+st.BadEpoch+st.Unsecured+st.TooOld != 0 {
						t.Fatalf("legitimate packets dropped: %+v", st)
					}
				}
				if sa.TxRotations == 0 || sb.RxRotations == 0 || sb.RxRotations != sa.TxRotations {
					t.Fatalf("A rotated %d send keys, B advanced %d receive epochs", sa.TxRotations, sb.RxRotations)
				}
			})
		}
	}
}

// TestSecureNoPlaintext: a tap on the fabric finds no message's bytes in
// any frame of an encrypted QP, and finds them in an integrity-only one.
func TestSecureNoPlaintext(t *testing.T) {
	for _, integrity := range []bool{false, true} {
		var frames [][]byte
		tap := func(f []byte) bool { frames = append(frames, bytes.Clone(f)); return true }
		s := newSecPair(t, mem.Config{Seed: testutil.Seed(t), Delay: 5 * time.Microsecond, Filter: tap},
			Config{Profile: Spray, Seed: testutil.Seed(t) + 1, MinRTO: time.Millisecond}, integrity, 0)
		rng := testutil.Rand(t)
		msgs := randomMessages(rng, 8, 32<<10)
		transfer(t, s, msgs)
		found := 0
		for _, m := range msgs {
			if len(m) < 32 {
				continue // too short to probe 16 bytes from its middle
			}
			probe := m[len(m)/2 : len(m)/2+16]
			for _, f := range frames {
				if bytes.Contains(f, probe) {
					found++
					break
				}
			}
		}
		secured := 0
		var pk wire.Packet
		for _, f := range frames {
			if wire.Decode(f, &pk) == nil && pk.BTH.Secured {
				secured++
			}
		}
		if secured != len(frames) {
			t.Fatalf("integrity %v: %d of %d frames secured", integrity, secured, len(frames))
		}
		if !integrity && found != 0 {
			t.Fatalf("encrypted: the tap found %d messages in clear", found)
		}
		if integrity && found == 0 {
			t.Fatal("integrity only: the tap found no message in clear")
		}
	}
}

// capture records a copy of every frame the fabric carries.
type capture struct{ frames [][]byte }

func (c *capture) filter(f []byte) bool { c.frames = append(c.frames, bytes.Clone(f)); return true }

// secFrames returns the captured frames from src to dst that decode, with
// their decoded security headers.
func (c *capture) secFrames(t *testing.T, from bool) (fs [][]byte, hs []wire.Packet) {
	t.Helper()
	for _, f := range c.frames {
		var pk wire.Packet
		if err := wire.Decode(f, &pk); err != nil {
			t.Fatalf("captured frame: %v", err)
		}
		if (pk.IP.Src == ipA) == from {
			fs, hs = append(fs, f), append(hs, pk)
		}
	}
	return fs, hs
}

// qpSnapshot is what a packet could change in a QP: every counter but the
// security ones, the scoreboard's and the paths', its timer, owed
// acknowledgements and completions.
type qpSnapshot struct {
	stats      QPStats
	rtx        string
	paths      string
	next       clock.Time
	ackPending int
	ackNow     bool
	cnpDue     bool
	comps      int
	recv       int
	err        error
}

func stateOf(q *QP) qpSnapshot {
	st := q.Stats()
	st.Security = SecurityStats{}
	return qpSnapshot{stats: st, rtx: fmt.Sprintf("%+v", q.RetransmitStats()), paths: fmt.Sprintf("%+v", q.PathStats()),
		next: q.NextTimeout(), ackPending: q.ackPending, ackNow: q.ackNow, cnpDue: q.cnpDue,
		comps: len(q.comps), recv: int(q.recvLen), err: q.err}
}

// refix recomputes the ICRC of a frame edited in place, as an attacker on
// the path would, so that only the tag can catch the edit.
func refix(t *testing.T, f []byte) []byte {
	t.Helper()
	c, err := wire.ICRC(f)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(f[len(f)-4:], c)
	return f
}

// forgery is one forged frame and the counter it must move.
type forgery struct {
	name  string
	toA   bool
	frame []byte
	want  func(SecurityStats) uint64
}

// TestSecureForged: forged, edited and replayed packets, injected into
// both QPs mid-transfer in both profiles, are each counted by the reason
// they fail and change nothing in the QP (counters, scoreboard, paths,
// timers, acknowledgements owed, completions); the transfer then
// completes byte-exact. The same clear forgeries are taken by clear QPs
// (TestSpoof*), so it is the security that stops them.
func TestSecureForged(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			capt := &capture{}
			// Window 64: a replay window of 128 counters, so that early
			// frames fall below it.
			s := newSecPair(t, mem.Config{Seed: testutil.Seed(t), Delay: 5 * time.Microsecond, Filter: capt.filter},
				Config{Profile: prof, Seed: testutil.Seed(t) + 1, MinRTO: time.Millisecond, Window: 64}, false, 0)
			rng := testutil.Rand(t)
			ab, ba := randomMessages(rng, 24, 512<<10), randomMessages(rng, 8, 16<<10)
			for i, m := range ab {
				if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
					t.Fatal(err)
				}
			}
			for i, m := range ba {
				if err := s.qb.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: m}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.run(clock.Time(time.Second), func() bool { return s.qa.Stats().TxPackets >= 300 }); err != nil {
				t.Fatalf("%v: A %+v\nB %+v", err, s.qa.Stats(), s.qb.Stats())
			}
			if s.qa.sb.Outstanding() == 0 {
				t.Fatal("nothing outstanding midway")
			}
			forged := forgeries(t, s, capt)
			for _, f := range forged {
				q, e := s.qb, s.eb
				if f.toA {
					q, e = s.qa, s.ea
				}
				before, sec := stateOf(q), q.Stats().Security
				e.input(s.clk.Now(), s.clk.Now(), bytes.Clone(f.frame))
				after, sec2 := stateOf(q), q.Stats().Security
				if before != after {
					t.Fatalf("%s changed the QP:\nbefore %+v\nafter  %+v", f.name, before, after)
				}
				if f.want(sec2) != f.want(sec)+1 || sec2.Dropped() != sec.Dropped()+1 {
					t.Fatalf("%s: security counters %+v, were %+v", f.name, sec2, sec)
				}
			}
			// The transfer ends byte-exact.
			err := s.run(clock.Time(10*time.Second), func() bool {
				return len(s.ca) == len(ab)+len(ba) && len(s.cb) == len(ab)+len(ba) || s.qa.Err() != nil || s.qb.Err() != nil
			})
			if err != nil || s.qa.Err() != nil || s.qb.Err() != nil {
				t.Fatalf("after the forgeries: %v, A %v, B %v (completions %d, %d)", err, s.qa.Err(), s.qb.Err(), len(s.ca), len(s.cb))
			}
			var gotA, gotB [][]byte
			for _, c := range s.ca {
				if c.Err != nil {
					t.Fatal(c.Err)
				}
				if c.Op == OpRecv {
					gotA = append(gotA, c.Data)
				}
			}
			for _, c := range s.cb {
				if c.Err != nil {
					t.Fatal(c.Err)
				}
				if c.Op == OpRecv {
					gotB = append(gotB, c.Data)
				}
			}
			for i := range ab {
				if hash(gotB[i]) != hash(ab[i]) {
					t.Fatalf("message %d A to B corrupted", i)
				}
			}
			for i := range ba {
				if hash(gotA[i]) != hash(ba[i]) {
					t.Fatalf("message %d B to A corrupted", i)
				}
			}
		})
	}
}

// forgeries builds the forged frames of TestSecureForged from what the
// fabric carried so far.
func forgeries(t *testing.T, s *simPair, capt *capture) []forgery {
	t.Helper()
	badTag := func(st SecurityStats) uint64 { return st.BadTag }
	replayed := func(st SecurityStats) uint64 { return st.Replayed }
	tooOld := func(st SecurityStats) uint64 { return st.TooOld }
	unsecured := func(st SecurityStats) uint64 { return st.Unsecured }
	badEpoch := func(st SecurityStats) uint64 { return st.BadEpoch }

	fs, hs := capt.secFrames(t, true)
	last := s.qb.sec.replay.last
	// A recent data frame that B has taken (its counter at most the
	// highest B accepted, and in the window), with a payload.
	var recent []byte
	var rp wire.Packet
	for i := len(fs) - 1; i >= 0; i-- {
		if c := hs[i].Sec.Counter; c <= last && last-c < 32 && len(hs[i].Payload) > 64 {
			recent, rp = fs[i], hs[i]
			break
		}
	}
	if recent == nil {
		t.Fatal("no recent data frame captured")
	}
	var out []forgery
	out = append(out, forgery{"replayed data frame", false, recent, replayed})
	out = append(out, forgery{"the first data frame, below the window", false, fs[0], tooOld})

	// Edits of a frame B has not seen yet: the counter moved past
	// every one B took (the counter is in the authenticated header, so
	// the edit alone fails the tag, as does any other).
	fresh := func(edit func(f []byte)) []byte {
		f := bytes.Clone(recent)
		edit(f)
		return refix(t, f)
	}
	off := bthOffset(recent)
	payloadOff := len(recent) - wire.ICRCLen - wire.TagLen - len(rp.Payload) - int(rp.BTH.PadCnt)
	setCounter := func(f []byte, c uint64) { binary.BigEndian.PutUint64(f[off+wire.BTHLen+8:], c) }
	out = append(out,
		forgery{"payload bit flipped", false, fresh(func(f []byte) { setCounter(f, last+1); f[payloadOff+10] ^= 4 }), badTag},
		forgery{"PSN edited", false, fresh(func(f []byte) { setCounter(f, last+1); f[off+11] ^= 1 }), badTag},
		forgery{"counter edited", false, fresh(func(f []byte) { setCounter(f, last+1) }), badTag},
		forgery{"tag bit flipped", false, fresh(func(f []byte) { setCounter(f, last+1); f[len(f)-wire.ICRCLen-3] ^= 0x80 }), badTag},
		forgery{"epoch ahead", false, fresh(func(f []byte) { binary.BigEndian.PutUint32(f[off+wire.BTHLen+4:], 9) }), badEpoch},
	)

	// Packets sealed under a key that is not the QP's.
	wrong, err := newSecState(Security{Send: [32]byte{0xEE}, Recv: [32]byte{0xEF}}, defaultEpochPackets, 128)
	if err != nil {
		t.Fatal(err)
	}
	wrong.txCounter = last + 1
	forge := func(toA bool, pk *wire.Packet, payload []byte, st *secState) []byte {
		pk.Eth = wire.Eth{Dst: macB, Src: macA}
		pk.IP = wire.IP{Src: ipA, Dst: ipB, TTL: 64}
		pk.BTH.DestQP, pk.BTH.PKey = s.qb.QPN(), 0xFFFF
		if toA {
			pk.Eth = wire.Eth{Dst: macA, Src: macB}
			pk.IP = wire.IP{Src: ipB, Dst: ipA, TTL: 64}
			pk.BTH.DestQP = s.qa.QPN()
		}
		pk.UDP = wire.UDP{Src: 0xC001, Dst: wire.UDPPort}
		if st != nil {
			pk.BTH.Secured, pk.Cipher = true, st
			st.next(&pk.Sec)
		}
		buf := make([]byte, 9100)
		n, err := wire.Encode(buf, pk, payload)
		if err != nil {
			t.Fatal(err)
		}
		return buf[:n]
	}
	una := uint32(s.qa.sb.Oldest())
	var nakA, dataB *wire.Packet
	if s.qa.cfg.Profile == Spray {
		nakA = &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayAck, PSN: una}, Ack: wire.Ack{
			CumPSN: una, AckedPSN: una, SackBase: una, SackWords: 1, Syndrome: wire.NakRemoteAccessError,
			MsgID: uint32(s.qa.head)}}
		dataB = &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, PSN: rp.BTH.PSN + 1},
			Data: wire.Data{Kind: wire.KindWrite, MsgLen: 64}, RETH: wire.RETH{VA: 0x1000, RKey: 0x1234, Len: 64}}
	} else {
		nakA = &wire.Packet{BTH: wire.BTH{Opcode: wire.OpAcknowledge, PSN: una},
			AETH: wire.AETH{Syndrome: wire.NakRemoteAccessError}}
		dataB = &wire.Packet{BTH: wire.BTH{Opcode: wire.OpWriteOnly, PSN: rp.BTH.PSN + 1},
			RETH: wire.RETH{VA: 0x1000, RKey: 0x1234, Len: 64}}
	}
	nak := *nakA
	data := *dataB
	out = append(out,
		forgery{"clear fatal NAK (a teardown)", true, forge(true, &nak, nil, nil), unsecured},
		forgery{"clear WRITE with a guessed rkey", false, forge(false, &data, make([]byte, 64), nil), unsecured},
	)
	nak, data = *nakA, *dataB
	wrongA, err := newSecState(Security{Send: [32]byte{0xED}, Recv: [32]byte{0xEC}}, defaultEpochPackets, 128)
	if err != nil {
		t.Fatal(err)
	}
	wrongA.txCounter = s.qa.sec.replay.last + 1
	out = append(out,
		forgery{"fatal NAK under a wrong key", true, forge(true, &nak, nil, wrongA), badTag},
		forgery{"WRITE under a wrong key", false, forge(false, &data, make([]byte, 64), wrong), badTag},
	)
	return out
}

// bthOffset returns the offset of the BTH in an IPv4 frame without VLAN tag.
func bthOffset([]byte) int { return wire.EthLen + wire.IPv4Len + wire.UDPLen }

// TestSecureRetiredEpoch: with keys rotating every 64 packets, a packet
// captured under the first epoch and replayed once the receiver has moved
// two epochs on is dropped as a bad epoch (its key is gone), and changes
// nothing; the receiver still takes the previous epoch right after a
// rotation (RxRotations counts each, no legitimate packet dropped).
func TestSecureRetiredEpoch(t *testing.T) {
	capt := &capture{}
	s := newSecPair(t, mem.Config{Seed: testutil.Seed(t), Delay: 5 * time.Microsecond, Filter: capt.filter},
		Config{Profile: Spray, Seed: testutil.Seed(t) + 1, MinRTO: time.Millisecond}, false, 64)
	rng := testutil.Rand(t)
	transfer(t, s, randomMessages(rng, 16, 256<<10))
	sb := s.qb.Stats().Security
	if sb.RxEpoch < 2 || sb.Dropped() != 0 {
		t.Fatalf("B: %+v, want epoch 2 or more and no drop", sb)
	}
	fs, hs := capt.secFrames(t, true)
	if hs[0].Sec.Epoch != 0 {
		t.Fatalf("first frame in epoch %d", hs[0].Sec.Epoch)
	}
	before := stateOf(s.qb)
	s.eb.input(s.clk.Now(), s.clk.Now(), bytes.Clone(fs[0]))
	if st := s.qb.Stats().Security; st.BadEpoch != 1 || st.Dropped() != 1 {
		t.Fatalf("old epoch replayed: %+v", st)
	}
	if after := stateOf(s.qb); after != before {
		t.Fatalf("old epoch changed the QP:\n%+v\n%+v", before, after)
	}
}

// TestSecureAPI: Secure refuses after Connect, twice, and zero or equal
// secrets; a secured QP refuses clear packets and a clear QP secured ones
// (TestSecureForged), and both QPs must agree on IntegrityOnly: a packet
// of the other mode is a bad tag.
func TestSecureAPI(t *testing.T) {
	s := newSimPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{Seed: testutil.Seed(t) + 1})
	if err := s.qa.Secure(secA(false)); !errors.Is(err, ErrSecure) {
		t.Fatalf("Secure after Connect: %v", err)
	}
	q, err := s.ea.CreateQP()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Security{{}, {Send: secretAB}, {Send: secretAB, Recv: secretAB}} {
		if err := q.Secure(bad); !errors.Is(err, ErrSecure) {
			t.Fatalf("Secure(%v): %v", bad, err)
		}
	}
	if err := q.Secure(secA(false)); err != nil || !q.Secured() {
		t.Fatal(err)
	}
	if err := q.Secure(secA(false)); !errors.Is(err, ErrSecure) {
		t.Fatalf("second Secure: %v", err)
	}

	// Mismatched modes: nothing gets through, every packet is a bad tag.
	mp := newSecPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{Seed: testutil.Seed(t) + 1, MaxRetries: 3}, false, 0)
	mp.qb.sec.flags = wire.SecIntegrityOnly
	if err := mp.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	mp.run(clock.Time(time.Minute), func() bool { return mp.qa.Err() != nil })
	if st := mp.qb.Stats(); st.RxPackets != 0 || st.Security.BadTag == 0 {
		t.Fatalf("mismatched modes: B took %d packets, %+v", st.RxPackets, st.Security)
	}
}

// TestSecureWriteRead: over secured QPs with loss and key rotation, A
// WRITEs into B's region and READs it back, in both profiles: the bytes
// landed and read back hash the same as those written.
func TestSecureWriteRead(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			cfg := Config{Profile: prof, Seed: seed, MinRTO: time.Millisecond}
			if prof == RoCE {
				cfg.Window = 128
			}
			s := newSecPair(t, mem.Config{Seed: seed, Loss: 0.02, Delay: 5 * time.Microsecond}, cfg, false, 256)
			rng := rand.New(rand.NewPCG(seed, 9))
			const n, size = 8, 96 << 10
			mr := s.eb.Register(make([]byte, n*size), AccessRemoteWrite|AccessRemoteRead)
			src := randomMessages(rng, n+1, size)[1:]
			for i := range src {
				src[i] = append(src[i], make([]byte, size-len(src[i]))...)
				if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpWrite, Data: src[i], Remote: mr.Remote(uint64(i * size))}); err != nil {
					t.Fatal(err)
				}
			}
			dst := make([][]byte, n)
			for i := range dst {
				dst[i] = make([]byte, size)
				if err := s.qa.Post(WorkRequest{ID: uint64(100 + i), Op: OpRead, Data: dst[i], Remote: mr.Remote(uint64(i * size))}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.run(clock.Time(time.Minute), func() bool { return len(s.ca) == 2*n || s.qa.Err() != nil }); err != nil {
				t.Fatal(err)
			}
			for _, c := range s.ca {
				if c.Err != nil {
					t.Fatalf("completion %d: %v", c.ID, c.Err)
				}
			}
			for i := range src {
				if hash(mr.Buf[i*size:(i+1)*size]) != hash(src[i]) || hash(dst[i]) != hash(src[i]) {
					t.Fatalf("region %d: written or read back corrupted", i)
				}
			}
			sa, sb := s.qa.Stats(), s.qb.Stats()
			if sa.Retransmits+sb.Retransmits == 0 || sa.Security.TxRotations == 0 || sb.Security.TxRotations == 0 {
				t.Fatalf("want retransmits and rotations both ways: A %d %+v, B %d %+v", sa.Retransmits, sa.Security, sb.Retransmits, sb.Security)
			}
			if sa.Security.Dropped()+sb.Security.Dropped() != 0 {
				t.Fatalf("legitimate packets dropped: A %+v B %+v", sa.Security, sb.Security)
			}
		})
	}
}
