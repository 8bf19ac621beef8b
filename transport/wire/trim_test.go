package wire

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// A trimmed spray data packet decodes with Trimmed set, its BTH and data
// header as sent (Flags, INTMax and PadCnt cleared) and nothing after them;
// any other packet, or one trimmed already, is refused.
func TestTrim(t *testing.T) {
	r := testutil.Rand(t)
	n := 0
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 300) {
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			if k.p.BTH.Opcode != OpSprayData {
				if _, err := Trim(f); !errors.Is(err, ErrBadHeader) {
					t.Fatalf("%s: Trim: want ErrBadHeader, got %v", k.name, err)
				}
				continue
			}
			for _, secured := range []bool{false, true} {
				k := k
				k.p.BTH.Secured = secured
				k.p.Sec = Sec{Epoch: 3, Counter: 77}
				f, err := encodeKase(&k)
				if err != nil {
					t.Fatal(err)
				}
				m, err := Trim(f)
				if err != nil {
					t.Fatalf("%s secured %v: Trim: %v", k.name, secured, err)
				}
				want := HeaderLen(&Packet{Eth: k.p.Eth, IP: k.p.IP, BTH: BTH{Opcode: OpSprayData, Secured: secured}}) + ICRCLen
				if m != want {
					t.Fatalf("%s secured %v: trimmed to %d bytes, want %d", k.name, secured, m, want)
				}
				var p Packet
				if err := Decode(f[:m], &p); err != nil {
					t.Fatalf("%s secured %v: Decode trimmed: %v", k.name, secured, err)
				}
				wb := k.p.BTH
				wb.Trimmed, wb.PadCnt = true, 0
				wd := k.p.Data
				wd.Flags, wd.INTMax = 0, 0
				if p.BTH != wb || p.Data != wd || len(p.Payload) != 0 || len(p.INT) != 0 || p.IP.Src != k.p.IP.Src || p.UDP.Src != k.p.UDP.Src {
					t.Fatalf("%s secured %v: trimmed decodes as %+v %+v, payload %d bytes; want %+v %+v", k.name, secured, p.BTH, p.Data, len(p.Payload), wb, wd)
				}
				if secured && p.Sec != k.p.Sec {
					t.Fatalf("%s: security header %+v, want %+v", k.name, p.Sec, k.p.Sec)
				}
				if _, err := Trim(f[:m]); !errors.Is(err, ErrBadHeader) {
					t.Fatalf("%s: Trim of a trimmed packet: want ErrBadHeader, got %v", k.name, err)
				}
				f[m-1] ^= 1
				if err := Decode(f[:m], &p); !errors.Is(err, ErrBadICRC) {
					t.Fatalf("%s: trimmed packet with a bad ICRC: want ErrBadICRC, got %v", k.name, err)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no spray data packet trimmed")
	}
	p := lower(r, netVariants[0], OpSprayData)
	if _, err := Encode(make([]byte, 256), &p, nil); err != nil {
		t.Fatal(err)
	}
	p.BTH.Trimmed = true
	if _, err := Encode(make([]byte, 256), &p, nil); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("Encode with Trimmed: want ErrBadHeader, got %v", err)
	}
}

// TestTrimIPv4Checksum: a spray data packet over IPv4 whose sender set a
// UDP checksum (a kernel UDP socket does) leaves Trim with none, as the
// fabric program trims it: the old one no longer holds, and a receiving
// kernel would drop the packet for it.
func TestTrimIPv4Checksum(t *testing.T) {
	p := Packet{
		IP:   IP{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1"), TTL: 64},
		UDP:  UDP{Src: 49152, Dst: UDPPort},
		BTH:  BTH{Opcode: OpSprayData, DestQP: 7, PSN: 9, PKey: 0xffff},
		Data: Data{MsgID: 1, MsgLen: 4096, Kind: KindSend},
	}
	f := make([]byte, FrameLen(&p, 1000))
	n, err := Encode(f, &p, make([]byte, 1000))
	if err != nil {
		t.Fatal(err)
	}
	f = f[:n]
	const udp = 14 + 20
	f[udp+6], f[udp+7] = 0x12, 0x34 // the sender's checksum
	m, err := Trim(f)
	if err != nil {
		t.Fatal(err)
	}
	if f[udp+6] != 0 || f[udp+7] != 0 {
		t.Fatalf("UDP checksum %#02x%02x after Trim, want none (0)", f[udp+6], f[udp+7])
	}
	var q Packet
	if err := Decode(f[:m], &q); err != nil || !q.BTH.Trimmed {
		t.Fatalf("the trimmed frame decodes as %+v, %v", q.BTH, err)
	}
}
