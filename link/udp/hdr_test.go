package udp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestHeadersRoundTrip writes headers with writeHeaders, reads them back
// with parseFrame and with the test's slow parser, for random addresses,
// ports, TOS and lengths of both families.
func TestHeadersRoundTrip(t *testing.T) {
	r := testutil.Rand(t)
	buf := make([]byte, 2000)
	for i := 0; i < 5000; i++ {
		v6 := r.IntN(2) == 0
		var src, dst [16]byte
		for k := range src {
			src[k], dst[k] = byte(r.Uint32()), byte(r.Uint32())
		}
		if !v6 {
			clear(src[4:])
			clear(dst[4:])
		}
		sport, dport, tos := uint16(r.Uint32()), uint16(r.Uint32()), uint8(r.Uint32())
		h := headroom(v6)
		plen := r.IntN(len(buf) - h)
		for k := h; k < h+plen; k++ {
			buf[k] = byte(r.Uint32())
		}
		smac, dmac := macOfRaw(&src, v6), macOfRaw(&dst, v6)
		writeHeaders(buf, v6, &src, &dst, &smac, &dmac, sport, dport, tos, plen)
		frame := buf[:h+plen]
		var p parsed
		if !parseFrame(frame, v6, &p) || parseFrame(frame, !v6, &p) {
			t.Fatalf("parseFrame of a written frame failed (v6 %v)", v6)
		}
		if p.dst != dst || p.sport != sport || p.tos != tos || p.payload != h || p.plen != plen {
			t.Fatalf("parsed %+v", p)
		}
		got, err := parseRx(frame)
		if err != nil {
			t.Fatalf("v6 %v plen %d: %v", v6, plen, err)
		}
		want := netip.AddrFrom16(src)
		if !v6 {
			want = netip.AddrFrom4([4]byte(src[:4]))
		}
		if got.src != want || got.dport != dport || got.tos != tos || len(got.payload) != plen {
			t.Fatalf("slow parser: %+v", got)
		}
		if [6]byte(frame[6:12]) != smac || [6]byte(frame[0:6]) != dmac {
			t.Fatal("MACs")
		}
	}
}

// TestParseVLAN checks that an 802.1Q tag is skipped and fragments refused.
func TestParseVLAN(t *testing.T) {
	b := make([]byte, 100)
	src, dst := [16]byte{10, 0, 0, 1}, [16]byte{10, 0, 0, 2}
	var m [6]byte
	writeHeaders(b[4:], false, &src, &dst, &m, &m, 1000, 4791, 0, 20)
	copy(b[0:12], b[4:16])
	binary.BigEndian.PutUint16(b[12:], etherVLAN)
	binary.BigEndian.PutUint16(b[14:], 42)
	var p parsed
	if !parseFrame(b[:4+42+20], false, &p) || p.sport != 1000 || p.payload != 46 || p.plen != 20 {
		t.Fatalf("VLAN frame: %+v", p)
	}
	binary.BigEndian.PutUint16(b[4+14+6:], 0x2000) // more fragments
	if parseFrame(b[:4+42+20], false, &p) {
		t.Fatal("fragment accepted")
	}
}

// FuzzParseFrame checks that parseFrame never panics and that what it
// accepts lies inside the frame.
func FuzzParseFrame(f *testing.F) {
	b := make([]byte, 80)
	src, dst := [16]byte{10, 0, 0, 1}, [16]byte{10, 0, 0, 2}
	var m [6]byte
	writeHeaders(b, false, &src, &dst, &m, &m, 1000, 4791, 0, 80-42)
	f.Add(b, false)
	writeHeaders(b, true, &src, &dst, &m, &m, 1000, 4791, 0, 80-62)
	f.Add(b, true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		var p parsed
		if !parseFrame(b, v6, &p) {
			return
		}
		if p.payload < headroom(v6) || p.plen < 0 || p.payload+p.plen > len(b) {
			t.Fatalf("accepted %+v for %d bytes", p, len(b))
		}
	})
}

func BenchmarkWriteHeadersV6(b *testing.B) {
	buf := make([]byte, 1500)
	var src, dst [16]byte
	var m [6]byte
	b.ReportAllocs()
	b.SetBytes(1500)
	for b.Loop() {
		writeHeaders(buf, true, &src, &dst, &m, &m, 1, 2, 0, 1500-62)
	}
}
