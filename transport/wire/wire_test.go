package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

func TestRoundTrip(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 1500) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatalf("%s: Encode: %v", k.name, err)
			}
			if got := HeaderLen(&k.p); !bytes.Equal(f[got:got+len(k.payload)], k.payload) {
				t.Fatalf("%s: payload not at HeaderLen %d", k.name, got)
			}
			var p Packet
			if err := Decode(f, &p); err != nil {
				t.Fatalf("%s: Decode: %v\n%x", k.name, err, f)
			}
			want := k.p
			want.Payload = k.payload
			if d := diffPacket(&p, &want); d != "" {
				t.Fatalf("%s: round trip differs:\n%s", k.name, d)
			}
			if got, want := modelICRC(f), binary.LittleEndian.Uint32(f[len(f)-4:]); got != want {
				t.Fatalf("%s: stored ICRC %#x, slow model says %#x", k.name, want, got)
			}
			if c, err := ICRC(f); err != nil || c != modelICRC(f) {
				t.Fatalf("%s: ICRC() = %#x, %v; model %#x", k.name, c, err, modelICRC(f))
			}
		}
	}
}

// IPv4 options are skipped by Decode and covered, unmasked, by the ICRC.
func TestIPv4Options(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants[:2] {
		for _, k := range allKinds(r, nv, 100) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			o, _ := findOffs(f)
			words := 1 + r.IntN(10)
			g := append(bytes.Clone(f[:o.udp]), randBytes(r, 4*words)...)
			g = append(g, f[o.udp:]...)
			g[o.ip] = 0x45 + byte(words)
			binary.BigEndian.PutUint16(g[o.ip+2:], uint16(len(g)-o.ip))
			putIPv4Checksum(g, o.ip, 20+4*words)
			binary.LittleEndian.PutUint32(g[len(g)-4:], modelICRC(g))
			var p Packet
			if err := Decode(g, &p); err != nil {
				t.Fatalf("%s with %d option words: %v", k.name, words, err)
			}
			want := k.p
			want.Payload = k.payload
			if d := diffPacket(&p, &want); d != "" {
				t.Fatalf("%s with options:\n%s", k.name, d)
			}
			g[o.ip+20] ^= 1 // options are invariant
			putIPv4Checksum(g, o.ip, 20+4*words)
			if err := Decode(g, &p); !errors.Is(err, ErrBadICRC) {
				t.Fatalf("%s: flipped option bit: %v", k.name, err)
			}
		}
	}
}

// Decoding into a Packet that held another packet leaves nothing behind.
func TestDecodeResets(t *testing.T) {
	r := testutil.Rand(t)
	ks := allKinds(r, netVariants[0], 64)
	var p Packet
	for _, i := range r.Perm(len(ks)) {
		k := ks[i]
		f, err := encodeKase(&k)
		if err != nil {
			t.Fatal(err)
		}
		if err := Decode(f, &p); err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		want := k.p
		want.Payload = k.payload
		if d := diffPacket(&p, &want); d != "" {
			t.Fatalf("%s after another packet:\n%s", k.name, d)
		}
	}
}

// Fields that do not apply to an opcode do not change the frame.
func TestEncodeIgnoresOtherFields(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 40) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			g := k
			g.p.BTH.PadCnt = 3 - g.p.BTH.PadCnt
			g.p.Payload = []byte("ignored")
			if g.p.BTH.Opcode != OpSprayData && g.p.BTH.Opcode != OpSprayAck {
				g.p.Data = Data{MsgID: 1, Flags: FlagINT, INTMax: 3}
				g.p.Ack = Ack{SackWords: 9}
				if g.p.BTH.Opcode != OpAcknowledge {
					g.p.INT = nil // ACK and data INT must match their counts
				}
			}
			if opTable[g.p.BTH.Opcode]&opAETH == 0 {
				g.p.AETH = AETH{Syndrome: 0x60, MSN: 0xFFFFFFFF}
			}
			if !nv.v6 {
				g.p.IP.FlowLabel = 0xFFFFFFFF
			}
			if !nv.vlan {
				g.p.Eth.VLAN = 0xABCD
			}
			f2, err := encodeKase(&g)
			if err != nil {
				t.Fatalf("%s: %v", k.name, err)
			}
			if !bytes.Equal(f, f2) {
				t.Fatalf("%s: unrelated fields changed the frame", k.name)
			}
		}
	}
}

// The payload may already sit at buf[HeaderLen:] (zero-copy encode).
func TestEncodeInPlacePayload(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants {
		k := allKinds(r, nv, 1024)[3]
		want, err := encodeKase(&k)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		hl := HeaderLen(&k.p)
		copy(buf[hl:], k.payload)
		n, err := Encode(buf, &k.p, buf[hl:hl+len(k.payload)])
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Fatalf("%s: in-place encode differs (err %v)", k.name, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	p := Packet{
		IP:  IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
		BTH: BTH{Opcode: OpSendOnly},
	}
	buf := make([]byte, 128)
	n, err := Encode(buf, &p, []byte("abc"))
	if err != nil {
		t.Fatal(err)
	}
	var q Packet
	if err := Decode(buf[:n], &q); err != nil {
		t.Fatal(err)
	}
	if q.IP.TTL != 64 || q.UDP.Dst != UDPPort || q.BTH.PadCnt != 1 || string(q.Payload) != "abc" {
		t.Fatalf("defaults: TTL %d, UDP dst %d, PadCnt %d, payload %q", q.IP.TTL, q.UDP.Dst, q.BTH.PadCnt, q.Payload)
	}
	if got := binary.BigEndian.Uint16(buf[14+6:]); got != 0x4000 {
		t.Fatalf("IPv4 flags/fragment = %#x, want DF", got)
	}
	if buf[14+20+6] != 0 || buf[14+20+7] != 0 {
		t.Fatal("IPv4 UDP checksum not zero")
	}
}

// The IPv6 UDP checksum that Encode writes verifies (sum over pseudo header
// and datagram is 0xFFFF), also after StampHop.
func TestIPv6UDPChecksum(t *testing.T) {
	r := testutil.Rand(t)
	for _, k := range allKinds(r, netVariants[3], 999) {
		f, err := encodeKase(&k)
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string) {
			o, _ := findOffs(f)
			var pseudo []byte
			pseudo = append(pseudo, f[o.ip+8:o.ip+40]...)
			pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(o.end-o.udp))
			pseudo = append(pseudo, 0, 0, 0, 17)
			var s uint32
			add := func(b []byte) {
				for i := 0; i < len(b); i += 2 {
					w := uint32(b[i]) << 8
					if i+1 < len(b) {
						w |= uint32(b[i+1])
					}
					s += w
				}
			}
			add(pseudo)
			add(f[o.udp:o.end])
			for s > 0xFFFF {
				s = s>>16 + s&0xFFFF
			}
			if s != 0xFFFF || binary.BigEndian.Uint16(f[o.udp+6:]) == 0 {
				t.Fatalf("%s %s: UDP checksum does not verify (sum %#x)", k.name, what, s)
			}
		}
		check("encoded")
		if ok, err := StampHop(f, Hop{Switch: 7, TS: 99}); err != nil {
			t.Fatal(err)
		} else if ok {
			check("stamped")
		}
	}
}

// Every bit of a frame matters: flipping one either changes only a field that
// is outside the ICRC or variant, or makes Decode fail.
func TestBitFlips(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 9) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			o, v6 := findOffs(f)
			intOff, intEnd := -1, -1
			if k.p.BTH.Opcode == OpSprayData && k.p.Data.Flags&FlagINT != 0 {
				intOff = o.bth + INTShimOff
				intEnd = intOff + INTShimLen + int(k.p.Data.INTMax)*HopLen
			}
			for i := range f {
				for bit := range 8 {
					f[i] ^= 1 << bit
					var p Packet
					err := Decode(f, &p)
					f[i] ^= 1 << bit
					switch {
					case i < 12 || (nv.vlan && (i == 14 || i == 15)):
						// Ethernet addresses and VLAN TCI: not covered by the ICRC.
						if err != nil || p.Eth == k.p.Eth {
							t.Fatalf("%s: byte %d bit %d (Ethernet): err %v, Eth %+v", k.name, i, bit, err, p.Eth)
						}
					case v6 && (i == o.ip && bit < 4 || i > o.ip && i < o.ip+4 || i == o.ip+7):
						// IPv6 traffic class, flow label, hop limit: variant.
						if err != nil || p.IP == k.p.IP {
							t.Fatalf("%s: byte %d bit %d (IPv6 variant): err %v", k.name, i, bit, err)
						}
					case i == o.udp+6 || i == o.udp+7:
						// UDP checksum: variant, not verified.
						if err != nil {
							t.Fatalf("%s: byte %d bit %d (UDP checksum): %v", k.name, i, bit, err)
						}
					case i == o.bth+4 && bit == 5:
						// Trimmed: variant; a whole packet marked trimmed has
						// more than a data header after its BTH (or an INT
						// region the ICRC now covers), unless its data header
						// is all it had.
						if err == nil && !p.BTH.Trimmed || err != nil && !errors.Is(err, ErrBadHeader) && !errors.Is(err, ErrBadICRC) {
							t.Fatalf("%s: byte %d bit %d (Trimmed): err %v, trimmed %v", k.name, i, bit, err, p.BTH.Trimmed)
						}
					case i == o.bth+4:
						// BTH byte 4: FECN, BECN, reserved: variant.
						if err != nil {
							t.Fatalf("%s: byte %d bit %d (BTH byte 4): %v", k.name, i, bit, err)
						}
						if bit >= 6 && p.BTH == k.p.BTH {
							t.Fatalf("%s: FECN/BECN flip not decoded", k.name)
						}
					case i >= intOff && i < intEnd:
						// INT region: variant; the shim is checked.
						if err != nil && !errors.Is(err, ErrBadHeader) {
							t.Fatalf("%s: byte %d bit %d (INT region): %v", k.name, i, bit, err)
						}
					case i < o.ip:
						if !errors.Is(err, ErrNotRoCE) {
							t.Fatalf("%s: byte %d bit %d (EtherType): %v", k.name, i, bit, err)
						}
					case !v6 && i < o.udp:
						if err == nil {
							t.Fatalf("%s: byte %d bit %d (IPv4 header): no error", k.name, i, bit)
						}
					case i < o.bth:
						if err == nil {
							t.Fatalf("%s: byte %d bit %d (IP/UDP header): no error", k.name, i, bit)
						}
					case i == o.bth || (k.p.BTH.Opcode == OpSprayData && (i == o.bth+25 || i == o.bth+26)):
						// Fields that tell where the INT region is.
						if err == nil {
							t.Fatalf("%s: byte %d bit %d (opcode/INT layout): no error", k.name, i, bit)
						}
					default:
						if !errors.Is(err, ErrBadICRC) {
							t.Fatalf("%s: byte %d bit %d: want ErrBadICRC, got %v", k.name, i, bit, err)
						}
					}
				}
			}
		}
	}
}

// Changing variant bytes keeps the ICRC valid.
func TestVariantFields(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 100) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			sum := binary.LittleEndian.Uint32(f[len(f)-4:])
			o, v6 := findOffs(f)
			if v6 {
				f[o.ip] ^= 0x0F
				f[o.ip+1] ^= 0xFF
				f[o.ip+2] ^= 0x5A
				f[o.ip+3] ^= 0xA5
				f[o.ip+7]--
			} else {
				f[o.ip+1] ^= 0xFF // TOS
				f[o.ip+8]--       // TTL
				putIPv4Checksum(f, o.ip, o.udp-o.ip)
			}
			f[o.udp+6] ^= 0x12
			f[o.udp+7] ^= 0x34
			f[o.bth+4] ^= 0xC0 | byte(r.IntN(32)) // FECN, BECN, reserved bits (not Trimmed)
			stamped := 0
			for {
				ok, err := StampHop(f, Hop{Switch: uint16(stamped), Port: 1, RateMbps: 100000, TS: r.Uint64(), QLen: r.Uint32(), TxBytes: r.Uint32()})
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				stamped++
			}
			if k.p.BTH.Opcode == OpSprayData && k.p.Data.Flags&FlagINT != 0 {
				// Unfilled slots and nothing else: scribble over the whole region
				// past the filled ones.
				if want := int(k.p.Data.INTMax) - len(k.p.INT)/HopLen; stamped != want {
					t.Fatalf("%s: stamped %d hops, want %d", k.name, stamped, want)
				}
			} else if stamped != 0 {
				t.Fatalf("%s: StampHop stamped a packet without INT region", k.name)
			}
			var p Packet
			if err := Decode(f, &p); err != nil {
				t.Fatalf("%s: after changing variant fields: %v", k.name, err)
			}
			if c, _ := ICRC(f); c != sum {
				t.Fatalf("%s: ICRC changed from %#x to %#x", k.name, sum, c)
			}
			if p.BTH.FECN == k.p.BTH.FECN || p.BTH.BECN == k.p.BTH.BECN {
				t.Fatalf("%s: FECN/BECN not decoded after change", k.name)
			}
			if stamped > 0 {
				n := len(k.p.INT) / HopLen
				if len(p.INT) != int(k.p.Data.INTMax)*HopLen || !bytes.Equal(p.INT[:len(k.p.INT)], k.p.INT) {
					t.Fatalf("%s: INT after stamping: %d bytes", k.name, len(p.INT))
				}
				if h := HopAt(p.INT, n); h.Switch != 0 || h.Port != 1 || h.RateMbps != 100000 {
					t.Fatalf("%s: first stamped hop %+v", k.name, h)
				}
			}
		}
	}
}

func TestTruncation(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 70) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			for n := range len(f) {
				g := bytes.Clone(f[:n])
				var p Packet
				if err := Decode(g, &p); !errors.Is(err, ErrTruncated) {
					t.Fatalf("%s: truncated to %d of %d bytes: %v", k.name, n, len(f), err)
				}
				if _, err := ICRC(g); !errors.Is(err, ErrTruncated) {
					t.Fatalf("%s: ICRC of frame truncated to %d: %v", k.name, n, err)
				}
			}
			// Bytes after the packet: Ethernet padding in a frame of up to 60
			// bytes, an error in a longer one.
			g := append(bytes.Clone(f), 0, 0, 0, 0)
			var p Packet
			err = Decode(g, &p)
			if len(g) <= 60 {
				if err != nil {
					t.Fatalf("%s: padded to %d bytes: %v", k.name, len(g), err)
				}
			} else if !errors.Is(err, ErrBadLength) {
				t.Fatalf("%s: 4 trailing bytes: %v", k.name, err)
			}
		}
	}
}

// frameFor encodes a packet of a given kind for the error tests.
func frameFor(t *testing.T, nv netVariant, op Opcode, payload []byte) []byte {
	t.Helper()
	p := Packet{
		IP:  IP{Src: netip.MustParseAddr("10.1.1.1"), Dst: netip.MustParseAddr("10.1.1.2")},
		BTH: BTH{Opcode: op, DestQP: 5, PSN: 9},
	}
	if nv.v6 {
		p.IP = IP{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	}
	p.Eth.HasVLAN = nv.vlan
	switch op {
	case OpSprayData:
		p.Data = Data{Kind: KindWriteImm, Flags: FlagINT, INTMax: 2}
	case OpSprayAck:
		p.Ack = Ack{SackWords: 2, INTHops: 1}
		p.INT = make([]byte, HopLen)
	}
	buf := make([]byte, FrameLen(&p, len(payload)))
	if _, err := Encode(buf, &p, payload); err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestDecodeErrors(t *testing.T) {
	type mut struct {
		name  string
		op    Opcode
		pl    int
		edit  func(f []byte, o offs) // o from findOffs
		fix   bool                   // recompute IPv4 checksum and ICRC after edit
		want  error
		v4    bool // IPv4 only
		after int  // append this many zero bytes after edit
		grow  int  // grow the packet by this many bytes before the ICRC
	}
	muts := []mut{
		{name: "EtherType ARP", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.ip-2], f[o.ip-1] = 0x08, 0x06 }, want: ErrNotRoCE},
		{name: "two VLAN tags", op: OpSendOnly, edit: func(f []byte, o offs) { f[12], f[13] = 0x81, 0x00; f[16], f[17] = 0x81, 0x00 }, want: ErrNotRoCE},
		{name: "TCP", op: OpSendOnly, v4: true, edit: func(f []byte, o offs) { f[o.ip+9] = 6; putIPv4Checksum(f, o.ip, 20) }, want: ErrNotRoCE},
		{name: "IPv6 ext header", op: OpSendOnly, edit: func(f []byte, o offs) {
			if f[o.ip]>>4 == 6 {
				f[o.ip+6] = 0
			} else {
				f[o.ip+9] = 0
			}
		}, want: ErrNotRoCE},
		{name: "fragment", op: OpSendOnly, v4: true, edit: func(f []byte, o offs) { f[o.ip+6] |= 0x20; putIPv4Checksum(f, o.ip, 20) }, want: ErrNotRoCE},
		{name: "UDP port", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.udp+3]++ }, want: ErrNotRoCE},
		{name: "IP version", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.ip] ^= 0x20 }, want: ErrNotRoCE},
		{name: "IHL 4", op: OpSendOnly, v4: true, edit: func(f []byte, o offs) { f[o.ip] = 0x44 }, want: ErrBadLength},
		{name: "IPv4 checksum", op: OpSendOnly, v4: true, edit: func(f []byte, o offs) { f[o.ip+10]++ }, want: ErrIPChecksum},
		{name: "IPv4 TTL", op: OpSendOnly, v4: true, edit: func(f []byte, o offs) { f[o.ip+8]++ }, want: ErrIPChecksum},
		{name: "UDP length", op: OpSendOnly, pl: 8, edit: func(f []byte, o offs) { binary.BigEndian.PutUint16(f[o.udp+4:], uint16(o.end-o.udp-4)) }, want: ErrBadLength},
		{name: "trailing bytes", op: OpSendOnly, pl: 40, after: 8, want: ErrBadLength},
		{name: "ICRC", op: OpSendOnly, pl: 4, edit: func(f []byte, o offs) { f[o.end-1]++ }, want: ErrBadICRC},
		{name: "payload", op: OpSendOnly, pl: 4, edit: func(f []byte, o offs) { f[o.end-5]++ }, want: ErrBadICRC},
		{name: "unknown opcode", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.bth] = 0x12 }, fix: true, want: ErrBadOpcode},
		{name: "UD opcode", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.bth] = 0x64 }, fix: true, want: ErrBadOpcode},
		{name: "TVer", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.bth+1] |= 1 }, fix: true, want: ErrBadHeader},
		{name: "payload not aligned", op: OpSendOnly, pl: 8, grow: 2, fix: true, want: ErrBadLength},
		{name: "ACK with bytes after AETH", op: OpAcknowledge, grow: 4, fix: true, want: ErrBadLength},
		{name: "CNP with bytes after", op: OpCNP, grow: 4, fix: true, want: ErrBadLength},
		{name: "unknown opcode with bad ICRC", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.bth] = 0x12 }, want: ErrBadICRC},
		{name: "Imm opcode, payload shorter than ImmDt", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.bth] = byte(OpSendOnlyImm) }, fix: true, want: ErrTruncated},
		{name: "pad > payload", op: OpSendOnly, edit: func(f []byte, o offs) { f[o.bth+1] |= 0x30 }, fix: true, want: ErrBadLength},
		{name: "pad on ACK", op: OpAcknowledge, edit: func(f []byte, o offs) { f[o.bth+1] |= 0x10 }, fix: true, want: ErrBadHeader},
		{name: "READ request too short", op: OpSendOnly, pl: 8, edit: func(f []byte, o offs) { f[o.bth] = byte(OpReadRequest) }, fix: true, want: ErrTruncated},
		{name: "ACK with bytes", op: OpSendOnly, pl: 8, edit: func(f []byte, o offs) { f[o.bth] = byte(OpAcknowledge) }, fix: true, want: ErrBadLength},
		{name: "SackWords 0", op: OpSprayAck, edit: func(f []byte, o offs) { f[o.bth+12+33] = 0 }, fix: true, want: ErrBadHeader},
		{name: "SackWords 5", op: OpSprayAck, edit: func(f []byte, o offs) { f[o.bth+12+33] = 5 }, fix: true, want: ErrBadHeader},
		{name: "INTHops 9", op: OpSprayAck, edit: func(f []byte, o offs) { f[o.bth+12+34] = 9 }, fix: true, want: ErrBadHeader},
		{name: "INTHops beyond", op: OpSprayAck, edit: func(f []byte, o offs) { f[o.bth+12+34] = 2 }, fix: true, want: ErrTruncated},
		{name: "ACK PSN 25 bits", op: OpSprayAck, edit: func(f []byte, o offs) { f[o.bth+12] = 1 }, fix: true, want: ErrBadHeader},
		{name: "data kind", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+12+12] = 6 }, fix: true, want: ErrBadHeader},
		{name: "data flags", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+12+13] |= 0x80 }, fix: true, want: ErrBadHeader},
		{name: "INTMax 9", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+12+14] = 9 }, want: ErrBadHeader},
		{name: "INTMax beyond", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+12+14] = 5 }, want: ErrTruncated},
		{name: "INTMax without flag", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+12+13] = 0 }, fix: true, want: ErrBadHeader},
		{name: "INT version", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+INTShimOff] = 2 }, want: ErrBadHeader},
		{name: "INT count", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+INTShimOff+1] = 3 }, want: ErrBadHeader},
		{name: "INT max", op: OpSprayData, pl: 4, edit: func(f []byte, o offs) { f[o.bth+INTShimOff+2] = 1 }, want: ErrBadHeader},
	}
	for _, m := range muts {
		for _, nv := range netVariants {
			if m.v4 && nv.v6 {
				continue
			}
			f := frameFor(t, nv, m.op, make([]byte, m.pl))
			if m.grow > 0 {
				f = grow(f, m.grow)
			}
			o, _ := findOffs(f)
			if m.edit != nil {
				m.edit(f, o)
			}
			if m.fix && !fixChecksums(f) {
				t.Fatalf("%s/%s: cannot fix checksums", m.name, nv.name)
			}
			f = append(f, make([]byte, m.after)...)
			var p Packet
			err := Decode(f, &p)
			if m.want == ErrNone {
				if err != nil {
					t.Errorf("%s/%s: %v", m.name, nv.name, err)
				}
				continue
			}
			if !errors.Is(err, m.want) {
				t.Errorf("%s/%s: got %v, want %v", m.name, nv.name, err, m.want)
			} else if !strings.HasPrefix(err.Error(), m.want.Error()+": ") {
				t.Errorf("%s/%s: message %q lacks context", m.name, nv.name, err)
			}
		}
	}
}

// grow inserts n zero bytes before the ICRC and fixes the IP and UDP lengths
// (not the checksums).
func grow(f []byte, n int) []byte {
	o, v6 := findOffs(f)
	g := append(bytes.Clone(f[:o.end-4]), make([]byte, n)...)
	g = append(g, f[o.end-4:]...)
	if v6 {
		binary.BigEndian.PutUint16(g[o.ip+4:], uint16(o.end+n-o.udp))
	} else {
		binary.BigEndian.PutUint16(g[o.ip+2:], uint16(o.end+n-o.ip))
	}
	binary.BigEndian.PutUint16(g[o.udp+4:], uint16(o.end+n-o.udp))
	return g
}

// ErrNone marks a mutation that must still decode.
var ErrNone = errors.New("no error")

func TestEncodeErrors(t *testing.T) {
	good := func() Packet {
		return Packet{
			IP:  IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
			BTH: BTH{Opcode: OpSendOnly},
		}
	}
	cases := []struct {
		name    string
		edit    func(p *Packet)
		payload int
		buf     int
		want    error
	}{
		{"buffer too small", func(p *Packet) {}, 10, 14 + 20 + 8 + 12 + 12 + 3, ErrTooSmall},
		{"unknown opcode", func(p *Packet) { p.BTH.Opcode = 0x99 }, 0, 200, ErrBadOpcode},
		{"mixed families", func(p *Packet) { p.IP.Dst = netip.MustParseAddr("::1") }, 0, 200, ErrBadHeader},
		{"no addresses", func(p *Packet) { p.IP = IP{} }, 0, 200, ErrBadHeader},
		{"QP 25 bits", func(p *Packet) { p.BTH.DestQP = 1 << 24 }, 0, 200, ErrBadHeader},
		{"PSN 25 bits", func(p *Packet) { p.BTH.PSN = 1 << 24 }, 0, 200, ErrBadHeader},
		{"TVer", func(p *Packet) { p.BTH.TVer = 16 }, 0, 200, ErrBadHeader},
		{"flow label", func(p *Packet) {
			p.IP = IP{Src: netip.MustParseAddr("::1"), Dst: netip.MustParseAddr("::2"), FlowLabel: 1 << 20}
		}, 0, 200, ErrBadHeader},
		{"payload on ACK", func(p *Packet) { p.BTH.Opcode = OpAcknowledge }, 1, 200, ErrBadHeader},
		{"MSN", func(p *Packet) { p.BTH.Opcode = OpAcknowledge; p.AETH.MSN = 1 << 24 }, 0, 200, ErrBadHeader},
		{"SackWords 0", func(p *Packet) { p.BTH.Opcode = OpSprayAck }, 0, 200, ErrBadHeader},
		{"SackWords 5", func(p *Packet) { p.BTH.Opcode = OpSprayAck; p.Ack.SackWords = 5 }, 0, 200, ErrBadHeader},
		{"ACK INT len", func(p *Packet) { p.BTH.Opcode = OpSprayAck; p.Ack.SackWords = 1; p.Ack.INTHops = 1 }, 0, 200, ErrBadHeader},
		{"ACK INTHops 9", func(p *Packet) {
			p.BTH.Opcode = OpSprayAck
			p.Ack = Ack{SackWords: 1, INTHops: 9}
			p.INT = make([]byte, 9*HopLen)
		}, 0, 400, ErrBadHeader},
		{"ACK PSN", func(p *Packet) { p.BTH.Opcode = OpSprayAck; p.Ack = Ack{SackWords: 1, CumPSN: 1 << 24} }, 0, 200, ErrBadHeader},
		{"data kind", func(p *Packet) { p.BTH.Opcode = OpSprayData; p.Data.Kind = 6 }, 0, 200, ErrBadHeader},
		{"data flags", func(p *Packet) { p.BTH.Opcode = OpSprayData; p.Data.Flags = 2 }, 0, 200, ErrBadHeader},
		{"INTMax 9", func(p *Packet) { p.BTH.Opcode = OpSprayData; p.Data.Flags = FlagINT; p.Data.INTMax = 9 }, 0, 400, ErrBadHeader},
		{"INTMax no flag", func(p *Packet) { p.BTH.Opcode = OpSprayData; p.Data.INTMax = 1 }, 0, 400, ErrBadHeader},
		{"data INT > max", func(p *Packet) {
			p.BTH.Opcode = OpSprayData
			p.Data = Data{Flags: FlagINT, INTMax: 1}
			p.INT = make([]byte, 2*HopLen)
		}, 0, 400, ErrBadHeader},
		{"data INT partial", func(p *Packet) {
			p.BTH.Opcode = OpSprayData
			p.Data = Data{Flags: FlagINT, INTMax: 1}
			p.INT = make([]byte, 5)
		}, 0, 400, ErrBadHeader},
		{"too long for IP", func(p *Packet) {}, 70000, 80000, ErrBadLength},
	}
	for _, c := range cases {
		p := good()
		c.edit(&p)
		buf := make([]byte, c.buf)
		if n, err := Encode(buf, &p, make([]byte, c.payload)); !errors.Is(err, c.want) || n != 0 {
			t.Errorf("%s: Encode = %d, %v; want %v", c.name, n, err, c.want)
		}
	}
}

// Frames built by scapy (testdata/scapy_frames.txt) decode, with scapy's ICRC.
func TestScapyFrames(t *testing.T) {
	f, err := os.Open("testdata/scapy_frames.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]func(p *Packet) bool{
		"SEND Only, 8-byte payload": func(p *Packet) bool {
			return p.BTH.Opcode == OpSendOnly && p.BTH.DestQP == 0x123456 && p.BTH.PSN == 0xABCDEF &&
				p.BTH.AckReq && p.IP.TTL == 17 && p.IP.TOS == 0x62 && string(p.Payload) == "spray!!!"
		},
		"Acknowledge, AETH NAK PSN sequence error": func(p *Packet) bool {
			return p.BTH.Opcode == OpAcknowledge && p.AETH == AETH{Syndrome: NakPSNSequenceError, MSN: 0x0A0B0C} &&
				p.Eth.HasVLAN && p.Eth.VLAN == 0x6064 && p.BTH.BECN && IsNak(p.AETH.Syndrome)
		},
		"CNP": func(p *Packet) bool {
			return p.BTH.Opcode == OpCNP && p.BTH.DestQP == 0x777 && p.BTH.BECN && p.IP.TOS&3 == ECNCE
		},
	}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		desc, hx, _ := strings.Cut(line, "\t")
		frame, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatal(err)
		}
		var p Packet
		if err := Decode(frame, &p); err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		if !want[desc](&p) {
			t.Fatalf("%s: decoded %+v", desc, p)
		}
		// Decode verified scapy's ICRC; so must ICRC and the slow model.
		stored := binary.LittleEndian.Uint32(frame[len(frame)-4:])
		if c, err := ICRC(frame); err != nil || c != stored || modelICRC(frame) != stored {
			t.Fatalf("%s: ICRC %#x (%v), model %#x, scapy %#x", desc, c, err, modelICRC(frame), stored)
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("read %d frames, want %d", n, len(want))
	}
}

func TestHopAtPutHop(t *testing.T) {
	r := testutil.Rand(t)
	recs := make([]byte, 3*HopLen+5)
	hs := make([]Hop, 3)
	for i := range hs {
		hs[i] = Hop{uint16(r.Uint32()), uint16(r.Uint32()), r.Uint32(), r.Uint64(), r.Uint32(), r.Uint32()}
		PutHop(recs, i, hs[i])
	}
	for i := range hs {
		if got := HopAt(recs, i); got != hs[i] {
			t.Fatalf("hop %d: got %+v want %+v", i, got, hs[i])
		}
	}
	// Layout: Switch2 Port2 RateMbps4 TS8 QLen4 TxBytes4, big-endian.
	PutHop(recs, 0, Hop{Switch: 0x0102, Port: 0x0304, RateMbps: 0x05060708, TS: 0x090A0B0C0D0E0F10, QLen: 0x11121314, TxBytes: 0x15161718})
	for i := range HopLen {
		if recs[i] != byte(i+1) {
			t.Fatalf("hop byte %d = %#x", i, recs[i])
		}
	}
	before := bytes.Clone(recs)
	PutHop(recs, 3, Hop{Switch: 1}) // only 5 bytes there
	PutHop(recs, -1, Hop{Switch: 1})
	if !bytes.Equal(before, recs) {
		t.Fatal("PutHop out of range wrote")
	}
	if HopAt(recs, 3) != (Hop{}) || HopAt(recs, -1) != (Hop{}) || HopAt(nil, 0) != (Hop{}) {
		t.Fatal("HopAt out of range not zero")
	}
}

func TestOpcodeString(t *testing.T) {
	if OpWriteOnlyImm.String() != "RDMA WRITE Only with Immediate" || Opcode(0x99).String() != "Opcode(0x99)" {
		t.Fatal(OpWriteOnlyImm.String(), Opcode(0x99).String())
	}
	if KindWriteImm.String() != "WriteImm" || OpKind(9).String() != "OpKind(9)" {
		t.Fatal(KindWriteImm.String())
	}
}

func benchFrame(tb testing.TB) (Packet, []byte, []byte) {
	p := Packet{
		Eth: Eth{Dst: [6]byte{2, 0, 0, 0, 0, 2}, Src: [6]byte{2, 0, 0, 0, 0, 1}},
		IP:  IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), TOS: ECNECT0},
		UDP: UDP{Src: 49152},
		BTH: BTH{Opcode: OpSprayData, DestQP: 17, PSN: 1234},
		Data: Data{MsgID: 1, Offset: 4096, MsgLen: 1 << 20, Kind: KindWrite, Flags: FlagINT,
			INTMax: 4, TxTime: 123456789},
		RETH: RETH{VA: 0x7f0000001000, RKey: 0x1234, Len: 1 << 20},
	}
	payload := make([]byte, 1024)
	buf := make([]byte, 2048)
	n, err := Encode(buf, &p, payload)
	if err != nil {
		tb.Fatal(err)
	}
	return p, payload, buf[:n]
}

func TestZeroAllocs(t *testing.T) {
	p, payload, frame := benchFrame(t)
	buf := make([]byte, 2048)
	if a := testing.AllocsPerRun(100, func() { _, _ = Encode(buf, &p, payload) }); a != 0 {
		t.Errorf("Encode: %v allocs", a)
	}
	var q Packet
	if a := testing.AllocsPerRun(100, func() { _ = Decode(frame, &q) }); a != 0 {
		t.Errorf("Decode: %v allocs", a)
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = ICRC(frame) }); a != 0 {
		t.Errorf("ICRC: %v allocs", a)
	}
	// Rejected frames cost nothing either.
	bad := bytes.Clone(frame)
	bad[len(bad)-1]++
	short := frame[:50]
	unknown := bytes.Clone(frame)
	unknown[14+20+8] = 0x99
	fixChecksums(unknown)
	for name, f := range map[string][]byte{"bad ICRC": bad, "truncated": short, "unknown opcode": unknown} {
		var err error
		if a := testing.AllocsPerRun(100, func() { err = Decode(f, &q) }); a != 0 || err == nil {
			t.Errorf("Decode %s: %v allocs, err %v", name, a, err)
		}
	}
	ipv6 := p
	ipv6.IP = IP{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	if a := testing.AllocsPerRun(100, func() { _, _ = Encode(buf, &ipv6, payload) }); a != 0 {
		t.Errorf("Encode IPv6: %v allocs", a)
	}
}

func BenchmarkEncode(b *testing.B) {
	p, payload, frame := benchFrame(b)
	buf := make([]byte, 2048)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(buf, &p, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	_, _, frame := benchFrame(b)
	var p Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Decode(frame, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeIPv6(b *testing.B) {
	p, payload, frame := benchFrame(b)
	p.IP = IP{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	buf := make([]byte, 2048)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(buf, &p, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// The largest frames: IPv6 carries a 65535-byte UDP datagram, IPv4 a
// 65535-byte packet, one byte more is ErrBadLength.
func TestMaxLength(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		p := Packet{IP: IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}, BTH: BTH{Opcode: OpSendOnly}}
		max := 0xFFFF - IPv4Len - UDPLen - BTHLen - ICRCLen
		if v6 {
			p.IP = IP{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
			max = 0xFFFF - UDPLen - BTHLen - ICRCLen
		}
		max &^= 3
		buf := make([]byte, 70000)
		n, err := Encode(buf, &p, make([]byte, max))
		if err != nil {
			t.Fatalf("v6=%v: %d-byte payload: %v", v6, max, err)
		}
		var q Packet
		if err := Decode(buf[:n], &q); err != nil || len(q.Payload) != max {
			t.Fatalf("v6=%v: decode of the largest frame: %v", v6, err)
		}
		if _, err := Encode(buf, &p, make([]byte, max+4)); !errors.Is(err, ErrBadLength) {
			t.Fatalf("v6=%v: %d-byte payload: %v", v6, max+4, err)
		}
	}
}

// TestINTRegionMatchesStampHop: stamping through INTRegion and PutHop
// gives the bytes StampHop gives, hop by hop, on IPv4 frames of every
// kind, and INTRegion offers no slot where StampHop stamps none.
func TestINTRegionMatchesStampHop(t *testing.T) {
	r := testutil.Rand(t)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 50) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			g := bytes.Clone(f)
			off, n, max, ok := INTRegion(g)
			for hop := 0; ; hop++ {
				h := Hop{Switch: uint16(hop), Port: 3, RateMbps: 100000, TS: r.Uint64(), QLen: r.Uint32(), TxBytes: r.Uint32()}
				stamped, _ := StampHop(f, h)
				if _, v6 := findOffs(f); v6 {
					if ok {
						t.Fatalf("%s: INTRegion offers an IPv6 frame's slots", k.name)
					}
					break
				}
				if stamped != (ok && n < max) {
					t.Fatalf("%s, hop %d: StampHop %v, INTRegion ok=%v %d of %d", k.name, hop, stamped, ok, n, max)
				}
				if !stamped {
					break
				}
				PutHop(g[off+INTShimLen:], n, h)
				n++
				g[off+INTShimCountOff] = byte(n)
				if !bytes.Equal(f, g) {
					t.Fatalf("%s, hop %d: the frames differ", k.name, hop)
				}
			}
		}
	}
	if _, _, _, ok := INTRegion([]byte{1, 2, 3}); ok {
		t.Fatal("INTRegion of 3 bytes: ok")
	}
}

// BenchmarkICRCSmall times the ICRC of the frames of a 64-byte SEND: the
// data frame and a plain ACK, whose CRC runs over short pieces.
func BenchmarkICRCSmall(b *testing.B) {
	p := Packet{
		Eth:  Eth{Dst: [6]byte{2, 0, 0, 0, 0, 2}, Src: [6]byte{2, 0, 0, 0, 0, 1}},
		IP:   IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), TOS: ECNECT0},
		UDP:  UDP{Src: 49152},
		BTH:  BTH{Opcode: OpSprayData, DestQP: 17, PSN: 1234},
		Data: Data{MsgID: 1, MsgLen: 64, Kind: KindSend, TxTime: 123456789},
	}
	ack := p
	ack.BTH.Opcode = OpSprayAck
	ack.Data = Data{}
	ack.Ack = Ack{SackWords: 1}
	for _, c := range []struct {
		name    string
		p       *Packet
		payload []byte
	}{{"data64", &p, make([]byte, 64)}, {"ack", &ack, nil}} {
		buf := make([]byte, 2048)
		n, err := Encode(buf, c.p, c.payload)
		if err != nil {
			b.Fatal(err)
		}
		frame := buf[:n]
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if _, err := ICRC(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestICRCOwned: the ICRC Encode and DecodeOwned compute over a frame
// they own, with the variant fields set to ones for the pass, equals the
// one Decode checks (a flipped byte fails it), and leaves the frame's
// bytes as they were, for frames over IPv4 and
// IPv6, with and without an INT region, of payloads from 0 to 300 bytes.
func TestICRCOwned(t *testing.T) {
	p, _, _ := benchFrame(t)
	p.IP.TTL, p.BTH.FECN = 61, true
	for _, v6 := range []bool{false, true} {
		for _, intr := range []bool{false, true} {
			for size := 0; size <= 300; size += 7 {
				q := p
				if v6 {
					q.IP = IP{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), TOS: ECNECT0, FlowLabel: 0x12345}
				}
				if !intr {
					q.Data.Flags, q.Data.INTMax = 0, 0
				}
				payload := make([]byte, size)
				for i := range payload {
					payload[i] = byte(i*7 + size)
				}
				buf := make([]byte, 2048)
				n, err := Encode(buf, &q, payload)
				if err != nil {
					t.Fatal(err)
				}
				frame := buf[:n]
				var l layout
				if err := parse(frame, &l); err != nil {
					t.Fatal(err)
				}
				want := icrc(frame, &l)
				before := bytes.Clone(frame)
				if got := icrcOwned(frame, &l); got != want {
					t.Errorf("v6 %v INT %v payload %d: icrcOwned %#x, icrc %#x", v6, intr, size, got, want)
				}
				if !bytes.Equal(frame, before) {
					t.Errorf("v6 %v INT %v payload %d: icrcOwned changed the frame", v6, intr, size)
				}
				var d Packet
				if err := DecodeOwned(frame, &d); err != nil {
					t.Errorf("v6 %v INT %v payload %d: %v", v6, intr, size, err)
				}
				if !bytes.Equal(frame, before) {
					t.Errorf("v6 %v INT %v payload %d: DecodeOwned changed the frame", v6, intr, size)
				}
				frame[len(frame)-ICRCLen-1]++
				if err := DecodeOwned(frame, &d); !errors.Is(err, ErrBadICRC) {
					t.Errorf("v6 %v INT %v payload %d: a flipped byte decodes with %v, want ErrBadICRC", v6, intr, size, err)
				}
			}
		}
	}
}

// BenchmarkEncodeSmall encodes the data frame of a 64-byte SEND.
func BenchmarkEncodeSmall(b *testing.B) {
	p := Packet{
		Eth:  Eth{Dst: [6]byte{2, 0, 0, 0, 0, 2}, Src: [6]byte{2, 0, 0, 0, 0, 1}},
		IP:   IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), TOS: ECNECT0},
		UDP:  UDP{Src: 49152},
		BTH:  BTH{Opcode: OpSprayData, DestQP: 17, PSN: 1234},
		Data: Data{MsgID: 1, MsgLen: 64, Kind: KindSend, TxTime: 123456789},
	}
	payload := make([]byte, 64)
	buf := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(buf, &p, payload); err != nil {
			b.Fatal(err)
		}
	}
}
