package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
)

// kase is one packet to encode: a Packet whose fields that do not apply to
// its opcode are zero, so that Decode of its frame must give it back.
type kase struct {
	name    string
	p       Packet
	payload []byte
}

// netVariant is one choice of lower headers.
type netVariant struct {
	name string
	v6   bool
	vlan bool
}

var netVariants = []netVariant{
	{"ipv4", false, false},
	{"ipv4+vlan", false, true},
	{"ipv6", true, false},
	{"ipv6+vlan", true, true},
}

// lower returns a Packet with random Ethernet, IP, UDP and BTH fields.
func lower(r *rand.Rand, nv netVariant, op Opcode) Packet {
	var p Packet
	for i := range 6 {
		p.Eth.Dst[i] = byte(r.Uint32())
		p.Eth.Src[i] = byte(r.Uint32())
	}
	if nv.vlan {
		p.Eth.HasVLAN = true
		p.Eth.VLAN = uint16(r.Uint32())
	}
	if nv.v6 {
		var s, d [16]byte
		for i := range 16 {
			s[i], d[i] = byte(r.Uint32()), byte(r.Uint32())
		}
		s[0], d[0] = 0xFD, 0xFD
		p.IP.Src, p.IP.Dst = netip.AddrFrom16(s), netip.AddrFrom16(d)
		p.IP.FlowLabel = r.Uint32() & 0xFFFFF
	} else {
		p.IP.Src = netip.AddrFrom4([4]byte{10, byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		p.IP.Dst = netip.AddrFrom4([4]byte{10, byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		p.IP.ID = uint16(r.Uint32())
	}
	p.IP.TOS = byte(r.Uint32())
	p.IP.TTL = byte(1 + r.IntN(255))
	p.UDP.Src = uint16(r.Uint32())
	p.UDP.Dst = UDPPort
	p.BTH = BTH{
		Opcode: op,
		SE:     r.IntN(2) == 0,
		M:      r.IntN(2) == 0,
		PKey:   uint16(r.Uint32()),
		FECN:   r.IntN(2) == 0,
		BECN:   r.IntN(2) == 0,
		DestQP: r.Uint32() & 0xFFFFFF,
		AckReq: r.IntN(2) == 0,
		PSN:    r.Uint32() & 0xFFFFFF,
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
	b := make([]byte, n*HopLen)
	for i := range n {
		PutHop(b, i, Hop{
			Switch: uint16(r.Uint32()), Port: uint16(r.Uint32()), RateMbps: r.Uint32(),
			TS: r.Uint64(), QLen: r.Uint32(), TxBytes: r.Uint32(),
		})
	}
	return b
}

// allKinds returns every packet kind of the brief with random fields and
// payloads of up to maxPayload bytes.
func allKinds(r *rand.Rand, nv netVariant, maxPayload int) []kase {
	var ks []kase
	pl := func() []byte { return randBytes(r, r.IntN(maxPayload+1)) }
	add := func(name string, p Packet, payload []byte) {
		p.BTH.PadCnt = uint8(padLen(len(payload)))
		ks = append(ks, kase{nv.name + "/" + name, p, payload})
	}
	reth := func() RETH { return RETH{VA: r.Uint64(), RKey: r.Uint32(), Len: r.Uint32()} }

	for _, op := range []Opcode{OpSendFirst, OpSendMiddle, OpSendLast, OpSendOnly,
		OpWriteMiddle, OpWriteLast, OpReadResponseMiddle} {
		add(op.String(), lower(r, nv, op), pl())
	}
	for _, op := range []Opcode{OpSendLastImm, OpSendOnlyImm, OpWriteLastImm} {
		p := lower(r, nv, op)
		p.Imm = r.Uint32()
		add(op.String(), p, pl())
	}
	for _, op := range []Opcode{OpWriteFirst, OpWriteOnly} {
		p := lower(r, nv, op)
		p.RETH = reth()
		add(op.String(), p, pl())
	}
	p := lower(r, nv, OpWriteOnlyImm)
	p.RETH, p.Imm = reth(), r.Uint32()
	add(OpWriteOnlyImm.String(), p, pl())
	p = lower(r, nv, OpReadRequest)
	p.RETH = reth()
	add(OpReadRequest.String(), p, nil)
	for _, op := range []Opcode{OpReadResponseFirst, OpReadResponseLast, OpReadResponseOnly} {
		p := lower(r, nv, op)
		p.AETH = AETH{Syndrome: SyndromeAck | 0x1F, MSN: r.Uint32() & 0xFFFFFF}
		add(op.String(), p, pl())
	}
	for _, syn := range []uint8{SyndromeAck | uint8(r.IntN(32)), SyndromeRNR | uint8(r.IntN(32)),
		NakPSNSequenceError, NakInvalidRequest, NakRemoteAccessError, NakRemoteOperational, NakInvalidRDRequest} {
		p := lower(r, nv, OpAcknowledge)
		p.AETH = AETH{Syndrome: syn, MSN: r.Uint32() & 0xFFFFFF}
		add(fmt.Sprintf("ACK syndrome %#02x", syn), p, nil)
	}
	p = lower(r, nv, OpCNP)
	p.BTH.BECN = true
	add("CNP", p, nil)

	for k := KindSend; k <= KindReadReq; k++ {
		for _, ints := range [][2]int{{-1, 0}, {0, 0}, {1 + r.IntN(MaxINTHops), 0}, {MaxINTHops, r.IntN(MaxINTHops + 1)}, {MaxINTHops, MaxINTHops}} {
			p := lower(r, nv, OpSprayData)
			p.Data = Data{MsgID: r.Uint32(), Offset: r.Uint32(), MsgLen: r.Uint32(), Kind: k, TxTime: r.Uint64()}
			name := fmt.Sprintf("spray data %v", k)
			if ints[0] >= 0 {
				p.Data.Flags = FlagINT
				p.Data.INTMax = uint8(ints[0])
				p.INT = randHops(r, ints[1])
				name += fmt.Sprintf(" INT %d/%d", ints[1], ints[0])
			}
			if kindRETH(k) {
				p.RETH = reth()
			}
			if kindImm(k) {
				p.Imm = r.Uint32()
			}
			if c := []uint8{0, DataUnsolicited, DataCredited}[r.IntN(3)]; c != 0 {
				p.Data.Credit = c
				name += fmt.Sprintf(" credit %#x", c)
			}
			add(name, p, pl())
		}
	}
	for w := 1; w <= MaxSackWords; w++ {
		for h := 0; h <= MaxINTHops; h++ {
			p := lower(r, nv, OpSprayAck)
			p.Ack = Ack{
				CumPSN: r.Uint32() & 0xFFFFFF, AckedPSN: r.Uint32() & 0xFFFFFF, SackBase: r.Uint32() & 0xFFFFFF,
				MsgID: r.Uint32(), EchoTime: r.Uint64(), HoldNs: r.Uint32(), ECNCount: uint16(r.Uint32()),
				Entropy: uint16(r.Uint32()), Syndrome: []uint8{SyndromeAck, NakPSNSequenceError}[r.IntN(2)],
				SackWords: uint8(w), INTHops: uint8(h),
			}
			for i := range w {
				p.Ack.Sack[i] = r.Uint64()
			}
			p.INT = randHops(r, h)
			if h%2 == 1 {
				p.Ack.Flags, p.Ack.Credit = AckCredit, r.Uint32()
			}
			add(fmt.Sprintf("spray ACK sack %d hops %d", w, h), p, nil)
		}
	}
	for _, op := range []Opcode{OpCreditGrant, OpCreditRequest} {
		for _, f := range []uint8{0, CreditRetry} {
			p := lower(r, nv, op)
			p.Credit = Credit{Count: r.Uint32(), Used: r.Uint32(), Flags: f}
			add(fmt.Sprintf("%v flags %#x", op, f), p, nil)
		}
	}
	return ks
}

// encodeKase encodes k into a new buffer of exactly the frame's length.
func encodeKase(k *kase) ([]byte, error) {
	buf := make([]byte, FrameLen(&k.p, len(k.payload)))
	n, err := Encode(buf, &k.p, k.payload)
	if err != nil {
		return nil, err
	}
	if n != len(buf) {
		return nil, fmt.Errorf("Encode returned %d, FrameLen %d", n, len(buf))
	}
	return buf, nil
}

// diffPacket describes how got differs from want ("" if it does not).
func diffPacket(got, want *Packet) string {
	g, w := *got, *want
	var d string
	if !bytes.Equal(g.Payload, w.Payload) {
		d += fmt.Sprintf("Payload: got %d bytes %x, want %d bytes %x\n", len(g.Payload), g.Payload, len(w.Payload), w.Payload)
	}
	if !bytes.Equal(g.INT, w.INT) {
		d += fmt.Sprintf("INT: got %x, want %x\n", g.INT, w.INT)
	}
	if g.Eth != w.Eth || g.IP != w.IP || g.UDP != w.UDP || g.BTH != w.BTH || g.RETH != w.RETH ||
		g.AETH != w.AETH || g.Imm != w.Imm || g.Data != w.Data || g.Ack != w.Ack || g.Conn != w.Conn {
		g.Payload, w.Payload, g.INT, w.INT = nil, nil, nil, nil
		d += fmt.Sprintf("fields:\n got %+v\nwant %+v\n", g, w)
	}
	return d
}

// offsets finds the header offsets of a frame that encodeKase produced, by
// the obvious route (independent of parse).
type offs struct{ ip, udp, bth, end int }

func findOffs(f []byte) (o offs, v6 bool) {
	o.ip = 14
	if f[12] == 0x81 && f[13] == 0x00 {
		o.ip = 18
	}
	v6 = f[o.ip]>>4 == 6
	if v6 {
		o.udp = o.ip + 40
	} else {
		o.udp = o.ip + int(f[o.ip]&0xF)*4
	}
	o.bth = o.udp + 8
	o.end = o.udp + int(binary.BigEndian.Uint16(f[o.udp+4:]))
	return o, v6
}

// modelICRC is the slow, obvious ICRC: mask a copy, CRC it in one go.
func modelICRC(frame []byte) uint32 {
	f := bytes.Clone(frame)
	o, v6 := findOffs(f)
	if v6 {
		f[o.ip] |= 0x0F
		f[o.ip+1], f[o.ip+2], f[o.ip+3] = 0xFF, 0xFF, 0xFF
		f[o.ip+7] = 0xFF
	} else {
		f[o.ip+1] = 0xFF
		f[o.ip+8] = 0xFF
		f[o.ip+10], f[o.ip+11] = 0xFF, 0xFF
	}
	f[o.udp+6], f[o.udp+7] = 0xFF, 0xFF
	f[o.bth+4] = 0xFF
	// A secured frame's data header follows its security header; an
	// INT region that does not fit before its tag is not masked (Decode
	// rejects such a frame after the ICRC).
	d, tag := o.bth+12, o.end-4
	if f[o.bth+8]&0x40 != 0 && o.end-o.udp >= 8+12+16+16+4 {
		d, tag = d+16, tag-16
	}
	if f[o.bth] == byte(OpSprayData) && d+24 <= tag && f[d+13]&FlagINT != 0 && f[d+14] <= 8 {
		n := 4 + 24*int(f[d+14])
		for i := range n {
			if d+24+n > tag {
				break
			}
			f[d+24+i] = 0xFF
		}
	}
	in := append(bytes.Repeat([]byte{0xFF}, 8), f[o.ip:o.end-4]...)
	return crc32.ChecksumIEEE(in)
}

// fixChecksums rewrites the IPv4 header checksum and the ICRC of a frame
// whose layout parse accepts, so that tests can hand Decode frames with
// deliberately bad fields that the checksums do not catch first.
func fixChecksums(f []byte) bool {
	var l layout
	if parse(f, &l) != nil {
		return false
	}
	if !l.v6 {
		putIPv4Checksum(f, l.ip, l.ipLen)
	}
	binary.LittleEndian.PutUint32(f[l.end-ICRCLen:], icrc(f, &l))
	return true
}
