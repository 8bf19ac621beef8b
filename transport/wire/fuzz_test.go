package wire

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// addSeeds adds a frame of every kind, in every network variant, to f's
// corpus, with the extra arguments first.
func addSeeds(f *testing.F, extra ...any) {
	r := testutil.Rand(f)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 48) {
			fr, err := encodeKase(&k)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(append(append([]any{}, extra...), fr)...)
			if connOpcode(k.p.BTH.Opcode) {
				// With the connect header of an on-demand QP.
				k.p.BTH.Conn = true
				k.p.Conn = Conn{Flags: ConnReply, SrcQP: 0x1234, PSN: 7, PeerPSN: 9, Token: r.Uint64(), Ports: [4]uint16{1, 2, 3, 4}}
				fr, err := encodeKase(&k)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(append(append([]any{}, extra...), fr)...)
			}
		}
	}
	// A 58-byte frame padded to the Ethernet minimum, and IPv4 options.
	k := kase{p: lower(r, netVariants[0], OpSendOnly)}
	fr, err := encodeKase(&k)
	if err != nil || len(fr) != 58 {
		f.Fatalf("short SEND: %d bytes, %v", len(fr), err)
	}
	f.Add(append(append([]any{}, extra...), append(fr, 0, 0))...)
	o, _ := findOffs(fr)
	opt := append(bytes.Clone(fr[:o.udp]), 1, 1, 1, 0) // NOP NOP NOP EOL
	opt = append(opt, fr[o.udp:]...)
	opt[o.ip] = 0x46
	binary.BigEndian.PutUint16(opt[o.ip+2:], uint16(len(opt)-o.ip))
	fixChecksums(opt)
	f.Add(append(append([]any{}, extra...), opt)...)
}

// FuzzDecode: Decode never panics; whatever it accepts re-encodes to a frame
// that decodes to the same fields, and stays valid after StampHop. With fix
// set, the IPv4 checksum and the ICRC are recomputed first, so that the
// fuzzer reaches the extension-header decoders behind the ICRC check.
func FuzzDecode(f *testing.F) {
	addSeeds(f, true)
	f.Fuzz(func(t *testing.T, fix bool, data []byte) {
		if fix {
			data = bytes.Clone(data)
			fixChecksums(data)
		}
		var p Packet
		if err := Decode(data, &p); err != nil {
			return
		}
		var l layout
		if err := parse(data, &l); err != nil {
			t.Fatalf("Decode accepted what parse rejects: %v", err)
		}
		if c, err := ICRC(data); err != nil || c != binary.LittleEndian.Uint32(data[l.end-ICRCLen:]) {
			t.Fatalf("Decode accepted, ICRC() = %#x, %v", c, err)
		}
		buf := make([]byte, FrameLen(&p, len(p.Payload)))
		n, err := Encode(buf, &p, p.Payload)
		if err != nil {
			t.Fatalf("re-encode of a decoded packet: %v\n%+v", err, p)
		}
		var q Packet
		if err := Decode(buf[:n], &q); err != nil {
			t.Fatalf("decode of re-encoded frame: %v", err)
		}
		want := p
		if want.IP.TTL == 0 {
			want.IP.TTL = defaultTTL
		}
		if d := diffPacket(&q, &want); d != "" {
			t.Fatalf("re-encoded frame decodes differently:\n%s", d)
		}
		if ok, err := StampHop(buf[:n], Hop{Switch: 1, TS: 2}); err != nil {
			t.Fatalf("StampHop: %v", err)
		} else if ok {
			if err := Decode(buf[:n], &q); err != nil {
				t.Fatalf("decode after StampHop: %v", err)
			}
			if len(q.INT) != len(want.INT)+HopLen {
				t.Fatalf("StampHop: %d INT bytes, had %d", len(q.INT), len(want.INT))
			}
		}
	})
}

// FuzzICRC: ICRC never panics and, when it finds the frame's layout, agrees
// with the slow model (mask a copy, CRC it whole).
func FuzzICRC(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ICRC(data)
		if err != nil {
			return
		}
		if m := modelICRC(data); c != m {
			t.Fatalf("ICRC %#x, model %#x", c, m)
		}
	})
}

// The extra seeds of addSeeds decode: padding and options are accepted.
func TestExtraSeeds(t *testing.T) {
	r := testutil.Rand(t)
	k := kase{p: lower(r, netVariants[0], OpSendOnly)}
	fr, err := encodeKase(&k)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	if err := Decode(append(fr, 0, 0), &p); err != nil || p.BTH != k.p.BTH {
		t.Fatalf("padded to 60: %v", err)
	}
	o, _ := findOffs(fr)
	opt := append(bytes.Clone(fr[:o.udp]), 1, 1, 1, 0)
	opt = append(opt, fr[o.udp:]...)
	opt[o.ip] = 0x46
	binary.BigEndian.PutUint16(opt[o.ip+2:], uint16(len(opt)-o.ip))
	if !fixChecksums(opt) {
		t.Fatal("options frame does not parse")
	}
	if err := Decode(opt, &p); err != nil || p.BTH != k.p.BTH {
		t.Fatalf("IPv4 options: %v", err)
	}
}
