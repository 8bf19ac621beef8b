package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestConnRoundTrip: a connect header on every spray data kind and ACK,
// clear and secured, decodes as encoded, and the headers before it keep
// their offsets (the INT region where a switch stamps it).
func TestConnRoundTrip(t *testing.T) {
	r := testutil.Rand(t)
	n := 0
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 300) {
			if !connOpcode(k.p.BTH.Opcode) {
				continue
			}
			for _, secured := range []bool{false, true} {
				k := k
				k.p.BTH.Secured, k.p.Sec = secured, Sec{Epoch: 1, Counter: 9}
				plain, err := encodeKase(&k)
				if err != nil {
					t.Fatal(err)
				}
				k.p.BTH.Conn = true
				k.p.Conn = Conn{Flags: uint8(r.IntN(4)), SrcQP: r.Uint32() & 0xFFFFFF, PSN: r.Uint32() & 0xFFFFFF,
					PeerPSN: r.Uint32() & 0xFFFFFF, Token: r.Uint64(), Ports: [4]uint16{uint16(r.Uint32()), 2, 0, 65535}}
				f, err := encodeKase(&k)
				if err != nil {
					t.Fatalf("%s: %v", k.name, err)
				}
				if len(f) != len(plain)+ConnLen {
					t.Fatalf("%s: %d bytes with the header, %d without", k.name, len(f), len(plain))
				}
				var p Packet
				if err := Decode(f, &p); err != nil {
					t.Fatalf("%s secured %v: %v", k.name, secured, err)
				}
				if p.Conn != k.p.Conn || !p.BTH.Conn {
					t.Fatalf("%s: connect header %+v, want %+v", k.name, p.Conn, k.p.Conn)
				}
				wb := k.p.BTH
				wb.PadCnt = uint8(padLen(len(k.payload)))
				if p.BTH != wb || p.Data != k.p.Data || p.Ack != k.p.Ack || p.RETH != k.p.RETH || p.Imm != k.p.Imm || !bytes.Equal(p.Payload, k.payload) {
					t.Fatalf("%s: decoded %+v %+v %+v, payload %d bytes; want %+v %+v %+v, %d bytes", k.name, p.BTH, p.Data, p.Ack, len(p.Payload), wb, k.p.Data, k.p.Ack, len(k.payload))
				}
				if k.p.BTH.Opcode == OpSprayData && k.p.Data.Flags&FlagINT != 0 {
					var q Packet
					if err := Decode(plain, &q); err != nil {
						t.Fatal(err)
					}
					if cap(f)-cap(p.INT) != cap(plain)-cap(q.INT) {
						t.Fatalf("%s: INT region at %d with the header, %d without", k.name, cap(f)-cap(p.INT), cap(plain)-cap(q.INT))
					}
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no packet tested")
	}
}

// TestConnRefused: Encode refuses a connect header on other opcodes or
// with unknown flags, and Decode refuses one on another opcode, a short
// one, or one of another version.
func TestConnRefused(t *testing.T) {
	r := testutil.Rand(t)
	p := lower(r, netVariants[0], OpCNP)
	p.BTH.Conn = true
	if _, err := Encode(make([]byte, 512), &p, nil); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("Encode of a CNP with a connect header: %v, want ErrBadHeader", err)
	}
	p = lower(r, netVariants[0], OpSprayAck)
	p.Ack.SackWords = 1
	p.BTH.Conn = true
	p.Conn.Flags = 0x8
	if _, err := Encode(make([]byte, 512), &p, nil); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("Encode with connect flags 0x8: %v, want ErrBadHeader", err)
	}
	p.Conn.Flags = ConnReply
	buf := make([]byte, 512)
	m, err := Encode(buf, &p, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := buf[:m]
	f[len(f)-ICRCLen-ConnLen] = 2 << 4 // version 2
	if !fixChecksums(f) {
		t.Fatal("cannot fix checksums")
	}
	var q Packet
	if err := Decode(f, &q); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("Decode of version 2: %v, want ErrBadHeader", err)
	}
	// A CNP with the Conn bit: bad header.
	c := lower(r, netVariants[0], OpCNP)
	m, err = Encode(buf, &c, nil)
	if err != nil {
		t.Fatal(err)
	}
	f = buf[:m]
	f[14+20+8+8] |= connBit
	if !fixChecksums(f) {
		t.Fatal("cannot fix checksums")
	}
	if err := Decode(f, &q); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("Decode of a CNP with the Conn bit: %v, want ErrBadHeader", err)
	}
}
