package wireshark

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/transporttest"
	"github.com/sprayfabric/spray/transport/wire"
)

// update rewrites the golden captures in testdata:
//
//	go test ./wireshark -run TestGolden -update
var update = flag.Bool("update", false, "rewrite the golden captures in testdata")

// The golden captures, in testdata. opcodes.pcap is built by wire.Encode
// (every opcode, kind, INT fill, SACK size and syndrome); the others are
// transfers between two engines over link/mem, recorded as the fabric sent
// them (after its switches stamped INT records and marked CE).
const (
	capOpcodes = "opcodes.pcap"
	capSpray   = "spray-transfer.pcap"
	capRoCE    = "roce-transfer.pcap"
	// capSecure: secured QPs, encrypted (spray, with INT records stamped
	// and CE marks) and integrity only (RoCE).
	capSecure = "secure-transfer.pcap"
)

var goldenCaptures = []string{capOpcodes, capSpray, capRoCE, capSecure}

// epoch is the time of the first frame of every golden capture.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// writeCapture writes frames to a classic pcap file in memory, the i-th
// stamped ts[i] after epoch.
func writeCapture(t *testing.T, frames [][]byte, ts []time.Duration) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcap.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if err := w.WritePacket(epoch.Add(ts[i]), f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// netVariant is one choice of lower headers.
type netVariant struct {
	name     string
	v6, vlan bool
	src, dst netip.Addr
}

var netVariants = []netVariant{
	{name: "ipv4", src: netip.MustParseAddr("10.0.0.1"), dst: netip.MustParseAddr("10.0.0.2")},
	{name: "ipv4+vlan", vlan: true, src: netip.MustParseAddr("10.0.1.1"), dst: netip.MustParseAddr("10.0.1.2")},
	{name: "ipv6", v6: true, src: netip.MustParseAddr("fd00::1"), dst: netip.MustParseAddr("fd00::2")},
	{name: "ipv6+vlan", v6: true, vlan: true, src: netip.MustParseAddr("fd00:1::1"), dst: netip.MustParseAddr("fd00:1::2")},
}

// opcodeFrames encodes, with wire.Encode and a fixed seed, one frame of
// every opcode spray speaks, every data kind with and without an INT region
// (empty, partly and fully filled), spray ACKs of every SACK size with 0 to
// 8 echoed hop records, every AETH syndrome class and NAK code, in both IP
// versions with and without a VLAN tag.
func opcodeFrames(t *testing.T) [][]byte {
	r := rand.New(rand.NewPCG(0x5e7a, 0xd155ec7))
	var frames [][]byte
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv) {
			buf := make([]byte, wire.FrameLen(&k.p, len(k.payload)))
			n, err := wire.Encode(buf, &k.p, k.payload)
			if err != nil {
				t.Fatalf("%s: %v", k.name, err)
			}
			frames = append(frames, buf[:n])
			if op := k.p.BTH.Opcode; op == wire.OpSprayData || op == wire.OpSprayAck {
				// The same packet as the first packets of a QP made on
				// demand carry it: with the connect header.
				c := k.p
				c.BTH.Conn = true
				c.Conn = wire.Conn{Flags: uint8(len(frames) % 4), SrcQP: r.Uint32() & 0xFFFFFF, PSN: r.Uint32() & 0xFFFFFF,
					PeerPSN: r.Uint32() & 0xFFFFFF, Token: r.Uint64(), Ports: [4]uint16{uint16(r.Uint32()), uint16(r.Uint32()), 0, 65535}}
				cb := make([]byte, wire.FrameLen(&c, len(k.payload)))
				m, err := wire.Encode(cb, &c, k.payload)
				if err != nil {
					t.Fatalf("%s with a connect header: %v", k.name, err)
				}
				frames = append(frames, cb[:m])
			}
			if k.p.BTH.Opcode == wire.OpSprayData {
				// The same packet trimmed by a switch (wire.Trim).
				tr := bytes.Clone(buf[:n])
				m, err := wire.Trim(tr)
				if err != nil {
					t.Fatalf("%s: trim: %v", k.name, err)
				}
				frames = append(frames, tr[:m])
			}
		}
	}
	return frames
}

type kase struct {
	name    string
	p       wire.Packet
	payload []byte
}

func lower(r *rand.Rand, nv netVariant, op wire.Opcode) wire.Packet {
	var p wire.Packet
	p.Eth.Src, p.Eth.Dst = [6]byte{2, 0, 0, 0, 0, 0xa}, [6]byte{2, 0, 0, 0, 0, 0xb}
	if nv.vlan {
		p.Eth.HasVLAN, p.Eth.VLAN = true, uint16(r.IntN(4096))
	}
	p.IP = wire.IP{Src: nv.src, Dst: nv.dst, TOS: byte(r.Uint32()), TTL: byte(1 + r.IntN(255)), ID: uint16(r.Uint32())}
	if nv.v6 {
		p.IP.FlowLabel, p.IP.ID = r.Uint32()&0xFFFFF, 0
	}
	// Entropies in the dynamic range, as multipath draws them: a lower
	// source port could be a well-known port that Wireshark prefers.
	p.UDP = wire.UDP{Src: uint16(49152 + r.IntN(16384)), Dst: wire.UDPPort}
	p.BTH = wire.BTH{
		Opcode: op, SE: r.IntN(2) == 0, M: r.IntN(2) == 0, PKey: uint16(r.Uint32()),
		FECN: r.IntN(2) == 0, BECN: r.IntN(2) == 0, DestQP: r.Uint32() & 0xFFFFFF,
		AckReq: r.IntN(2) == 0, PSN: r.Uint32() & 0xFFFFFF,
	}
	return p
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randHops(r *rand.Rand, n int) []byte {
	b := make([]byte, n*wire.HopLen)
	for i := range n {
		wire.PutHop(b, i, wire.Hop{
			Switch: uint16(r.Uint32()), Port: uint16(r.Uint32()), RateMbps: r.Uint32(),
			TS: r.Uint64(), QLen: r.Uint32(), TxBytes: r.Uint32(),
		})
	}
	return b
}

func allKinds(r *rand.Rand, nv netVariant) []kase {
	var ks []kase
	pl := func() []byte { return randBytes(r, r.IntN(70)) }
	add := func(name string, p wire.Packet, payload []byte) {
		ks = append(ks, kase{nv.name + "/" + name, p, payload})
	}
	reth := func() wire.RETH { return wire.RETH{VA: r.Uint64(), RKey: r.Uint32(), Len: r.Uint32()} }
	for _, op := range []wire.Opcode{wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLast, wire.OpSendOnly,
		wire.OpWriteMiddle, wire.OpWriteLast, wire.OpReadResponseMiddle} {
		add(op.String(), lower(r, nv, op), pl())
	}
	for _, op := range []wire.Opcode{wire.OpSendLastImm, wire.OpSendOnlyImm, wire.OpWriteLastImm} {
		p := lower(r, nv, op)
		p.Imm = r.Uint32()
		add(op.String(), p, pl())
	}
	for _, op := range []wire.Opcode{wire.OpWriteFirst, wire.OpWriteOnly} {
		p := lower(r, nv, op)
		p.RETH = reth()
		add(op.String(), p, pl())
	}
	p := lower(r, nv, wire.OpWriteOnlyImm)
	p.RETH, p.Imm = reth(), r.Uint32()
	add(wire.OpWriteOnlyImm.String(), p, pl())
	p = lower(r, nv, wire.OpReadRequest)
	p.RETH = reth()
	add(wire.OpReadRequest.String(), p, nil)
	for _, op := range []wire.Opcode{wire.OpReadResponseFirst, wire.OpReadResponseLast, wire.OpReadResponseOnly} {
		p := lower(r, nv, op)
		p.AETH = wire.AETH{Syndrome: wire.SyndromeAck | 0x1F, MSN: r.Uint32() & 0xFFFFFF}
		add(op.String(), p, pl())
	}
	for _, syn := range ackSyndromes(r) {
		p := lower(r, nv, wire.OpAcknowledge)
		p.AETH = wire.AETH{Syndrome: syn, MSN: r.Uint32() & 0xFFFFFF}
		add(fmt.Sprintf("Acknowledge syndrome %#02x", syn), p, nil)
	}
	p = lower(r, nv, wire.OpCNP)
	p.BTH.BECN = true
	add("CNP", p, nil)

	for k := wire.KindSend; k <= wire.KindReadReq; k++ {
		for _, ints := range [][2]int{{-1, 0}, {0, 0}, {1 + r.IntN(wire.MaxINTHops), 0},
			{wire.MaxINTHops, 1 + r.IntN(wire.MaxINTHops-1)}, {wire.MaxINTHops, wire.MaxINTHops}} {
			p := lower(r, nv, wire.OpSprayData)
			p.Data = wire.Data{MsgID: r.Uint32(), Offset: r.Uint32(), MsgLen: r.Uint32(), Kind: k, TxTime: r.Uint64()}
			name := fmt.Sprintf("spray data %v", k)
			if ints[0] >= 0 {
				p.Data.Flags, p.Data.INTMax = wire.FlagINT, uint8(ints[0])
				p.INT = randHops(r, ints[1])
				name += fmt.Sprintf(" INT %d/%d", ints[1], ints[0])
			}
			if k.HasRETH() {
				p.RETH = reth()
			}
			if k.HasImm() {
				p.Imm = r.Uint32()
			}
			p.Data.Credit = []uint8{0, wire.DataUnsolicited, wire.DataCredited}[int(k)%3]
			var payload []byte
			if k != wire.KindReadReq {
				payload = pl()
			}
			add(name, p, payload)
		}
	}
	syns := ackSyndromes(r)
	i := 0
	for w := 1; w <= wire.MaxSackWords; w++ {
		for h := 0; h <= wire.MaxINTHops; h += 2 + w%2 {
			p := lower(r, nv, wire.OpSprayAck)
			p.Ack = wire.Ack{
				CumPSN: r.Uint32() & 0xFFFFFF, AckedPSN: r.Uint32() & 0xFFFFFF, SackBase: r.Uint32() & 0xFFFFFF,
				MsgID: r.Uint32(), EchoTime: r.Uint64(), HoldNs: r.Uint32(), ECNCount: uint16(r.Uint32()),
				Entropy: uint16(r.Uint32()), Syndrome: syns[i%len(syns)], SackWords: uint8(w), INTHops: uint8(h),
			}
			i++
			for j := range w {
				p.Ack.Sack[j] = r.Uint64() & r.Uint64() // sparse: ranges and holes
			}
			if w == 1 {
				p.Ack.Sack[0] = 0
			}
			if w == 2 {
				p.Ack.SackBase = 0xFFFFC0 // the SACKed PSNs wrap past 2^24
				p.Ack.Sack[0] |= 1<<63 | 1<<62
				p.Ack.Sack[1] |= 1
			}
			p.INT = randHops(r, h)
			if w%2 == 0 {
				p.Ack.Flags, p.Ack.Credit = wire.AckCredit, r.Uint32()
			}
			add(fmt.Sprintf("spray ACK sack %d hops %d", w, h), p, nil)
		}
	}
	for _, op := range []wire.Opcode{wire.OpCreditGrant, wire.OpCreditRequest} {
		for _, f := range []uint8{0, wire.CreditRetry} {
			p := lower(r, nv, op)
			p.Credit = wire.Credit{Count: r.Uint32(), Used: r.Uint32(), Flags: f}
			add(fmt.Sprintf("%v flags %#x", op, f), p, nil)
		}
	}
	return ks
}

// ackSyndromes returns an ACK (with a credit count), an RNR NAK and every
// NAK code.
func ackSyndromes(r *rand.Rand) []uint8 {
	return []uint8{wire.SyndromeAck | uint8(r.IntN(32)), wire.SyndromeRNR | uint8(r.IntN(32)),
		wire.NakPSNSequenceError, wire.NakInvalidRequest, wire.NakRemoteAccessError,
		wire.NakRemoteOperational, wire.NakInvalidRDRequest}
}

// transferFrames runs a transfer between two engines over a link/mem fabric
// with mc's faults (loss, duplication, reordering; mc's seed, delay and
// filter are set here) under the simulated clock (SENDs, SENDs with immediate, WRITEs,
// WRITEs with immediate, READs, then a WRITE with a wrong R_Key that the
// peer refuses) and returns every frame the fabric's ports sent, with its
// simulated send time. Every ce-th data frame is marked CE; with stamp, every
// data frame with an INT region gets a hop record, as a switch would write.
func transferFrames(t *testing.T, cfg transport.Config, mc mem.Config, ce int, stamp bool, o transporttest.Options) ([][]byte, []time.Duration) {
	t.Helper()
	var frames [][]byte
	var ts []time.Duration
	var clk *clock.Sim
	data := 0
	mc.Seed, mc.Delay = cfg.Seed, 5*time.Microsecond
	mc.Filter = func(f []byte) bool {
		var p wire.Packet
		if err := wire.Decode(f, &p); err == nil && p.BTH.Opcode.HasPayload() && p.BTH.Opcode != wire.OpAcknowledge {
			data++
			if ce > 0 && data%ce == 0 {
				markCE(f)
			}
			if stamp {
				if _, err := wire.StampHop(f, wire.Hop{Switch: 7, Port: p.UDP.Src % 4, RateMbps: 100000,
					TS: uint64(clk.Now()), QLen: uint32(data%50) * 1500, TxBytes: uint32(data) * 1500}); err != nil {
					t.Errorf("stamping a hop record: %v", err)
				}
			}
		}
		frames = append(frames, bytes.Clone(f))
		ts = append(ts, time.Duration(clk.Now()))
		return true
	}
	p := transporttest.NewPairWith(t, mc, cfg, o)
	clk = p.Clock
	region := make([]byte, 64<<10)
	mr := p.B.Register(region, transport.AccessRemoteWrite|transport.AccessRemoteRead)
	r := rand.New(rand.NewPCG(cfg.Seed, 1))
	msg := func(n int) []byte { return randBytes(r, n) }
	wrs := []transport.WorkRequest{
		{Op: transport.OpSend, Data: msg(0)},
		{Op: transport.OpSend, Data: msg(3)},
		{Op: transport.OpSendImm, Data: msg(1000), Imm: 0xabcd},
		{Op: transport.OpSend, Data: msg(12000)},
		{Op: transport.OpWrite, Data: msg(100), Remote: mr.Remote(0)},
		{Op: transport.OpWriteImm, Data: msg(9000), Remote: mr.Remote(100), Imm: 7},
		{Op: transport.OpWrite, Data: msg(5000), Remote: mr.Remote(20000)},
		{Op: transport.OpRead, Data: make([]byte, 100), Remote: mr.Remote(0)},
		{Op: transport.OpRead, Data: make([]byte, 9000), Remote: mr.Remote(100)},
	}
	for i := range wrs {
		wrs[i].ID = uint64(i + 1)
		if err := p.QA.Post(wrs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if err := p.QB.Post(transport.WorkRequest{ID: uint64(100 + i), Op: transport.OpSend, Data: msg(700 * i)}); err != nil {
			t.Fatal(err)
		}
	}
	limit := clock.Time(10 * time.Second)
	if err := p.Run(limit, func() bool { return len(p.CA) >= len(wrs)+4 && len(p.CB) >= 4+5 }); err != nil {
		t.Fatalf("transfer: %v (A %d completions, B %d)", err, len(p.CA), len(p.CB))
	}
	for _, c := range p.CA {
		if c.Err != nil {
			t.Fatalf("completion %d: %v", c.ID, c.Err)
		}
	}
	// A WRITE with a wrong R_Key: the peer answers with a NAK (remote
	// access error) and A's QP fails.
	bad := mr.Remote(0)
	bad.RKey ^= 0x5a5a
	if err := p.QA.Post(transport.WorkRequest{ID: 99, Op: transport.OpWrite, Data: msg(200), Remote: bad}); err != nil {
		t.Fatal(err)
	}
	n := len(p.CA)
	if err := p.Run(limit, func() bool { return len(p.CA) > n }); err != nil {
		t.Fatalf("WRITE with a wrong R_Key: %v", err)
	}
	if c := p.CA[n]; c.ID != 99 || c.Err == nil {
		t.Fatalf("WRITE with a wrong R_Key completed %+v, want an error", c)
	}
	if err := p.Run(limit, func() bool { return p.Fabric.NextDelivery() == clock.Never }); err != nil {
		t.Fatalf("draining the fabric: %v", err)
	}
	return frames, ts
}

// markCE sets the ECN field of an IPv4 frame to CE (3) and fixes its header
// checksum, as a congested switch does.
func markCE(f []byte) {
	if len(f) < 34 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return
	}
	ip := f[14:34]
	ip[1] |= 3
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
}

// buildCapture returns the bytes of golden capture name.
func buildCapture(t *testing.T, name string) []byte {
	switch name {
	case capOpcodes:
		fs := opcodeFrames(t)
		ts := make([]time.Duration, len(fs))
		for i := range ts {
			ts[i] = time.Duration(i) * time.Microsecond
		}
		return writeCapture(t, fs, ts)
	case capSpray:
		fs, ts := transferFrames(t, transport.Config{Profile: transport.Spray, Seed: 21, MTU: 1514, Window: 64,
			MinRTO: time.Millisecond, ECN: true, INTHops: 2, AckEvery: 2, Paths: transport.PathsAdaptive},
			mem.Config{Loss: 0.03, Dup: 0.01, Reorder: 0.1, ReorderDelay: 20 * time.Microsecond, Jitter: 2 * time.Microsecond}, 7, true,
			transporttest.Options{})
		return writeCapture(t, fs, ts)
	case capRoCE:
		fs, ts := transferFrames(t, transport.Config{Profile: transport.RoCE, Seed: 22, MTU: 1514, Window: 64,
			LocalAckTimeout: 8},
			mem.Config{Loss: 0.1, Dup: 0.02, Reorder: 0.02, ReorderDelay: 10 * time.Microsecond}, 5, false,
			transporttest.Options{})
		return writeCapture(t, fs, ts)
	case capSecure:
		sec := &transport.Security{Send: [32]byte{1, 2, 3}, Recv: [32]byte{4, 5, 6}}
		fs, ts := transferFrames(t, transport.Config{Profile: transport.Spray, Seed: 23, MTU: 1514, Window: 64,
			MinRTO: time.Millisecond, ECN: true, INTHops: 2, Paths: transport.PathsAdaptive},
			mem.Config{Loss: 0.03, Dup: 0.01}, 7, true, transporttest.Options{Secure: sec})
		integrity := *sec
		integrity.IntegrityOnly = true
		fr, tr := transferFrames(t, transport.Config{Profile: transport.RoCE, Seed: 24, MTU: 1514, Window: 64,
			LocalAckTimeout: 8},
			mem.Config{Loss: 0.05}, 0, false, transporttest.Options{Secure: &integrity})
		last := ts[len(ts)-1]
		for i := range tr {
			tr[i] += last + time.Millisecond
		}
		return writeCapture(t, append(fs, fr...), append(ts, tr...))
	}
	t.Fatalf("no golden capture %q", name)
	return nil
}

// TestGoldenCaptures checks that spray's codec decodes every frame of the
// golden captures in testdata, and that opcodes.pcap is what its generator
// writes now, so that a change of the wire format shows up here; -update
// rewrites them all.
func TestGoldenCaptures(t *testing.T) {
	for _, name := range goldenCaptures {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name)
			var b []byte
			if *update || name == capOpcodes {
				b = buildCapture(t, name)
			}
			if *update {
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./wireshark -run TestGoldenCaptures -update writes it)", err)
			}
			// The transfers change whenever the transport's behaviour does
			// (TestGoldenCapture in package transport guards that); they only
			// have to stay decodable. The opcode capture depends on the codec
			// alone.
			if name == capOpcodes && !bytes.Equal(old, b) {
				t.Errorf("%s differs from what its generator writes now: if the wire format changed on purpose, "+
					"rerun with -update and bring the dissector in step (TestDissector)", path)
			}
			recs, err := pcap.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var p wire.Packet
			for i, rec := range recs {
				if err := wire.Decode(rec.Data, &p); err != nil {
					t.Fatalf("frame %d: spray's codec rejects it: %v", i+1, err)
				}
			}
			t.Logf("%s: %d frames, %d bytes", name, len(recs), len(old))
		})
	}
}
