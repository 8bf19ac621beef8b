package rss

import (
	"net/netip"
	"testing"
)

// The vectors of Microsoft's "Verifying the RSS Hash Calculation", under
// DefaultKey: the hash of the addresses alone and of addresses and ports.
var vectors = []struct {
	dst, src         string
	dport, sport     uint16
	addrOnly, tcpUDP uint32
}{
	{"161.142.100.80", "66.9.149.187", 1766, 2794, 0x323e8fc2, 0x51ccc178},
	{"65.69.140.83", "199.92.111.2", 4739, 14230, 0xd718262a, 0xc626b0ea},
	{"12.22.207.184", "24.19.198.95", 38024, 12898, 0xd2d0a5de, 0x5c2b394a},
	{"209.142.163.6", "38.27.205.30", 2217, 48228, 0x82989176, 0xafc7327f},
	{"202.188.127.2", "153.39.163.191", 1303, 44251, 0x5d1809c5, 0x10e828a2},
	{"3ffe:2501:200:3::1", "3ffe:2501:200:1fff::7", 1766, 2794, 0x2cc18cd5, 0x40207d3d},
	{"ff02::1", "3ffe:501:8::260:97ff:fe40:efab", 4739, 14230, 0x0f0c461c, 0xdde51bbf},
	{"fe80::200:f8ff:fe21:67cf", "3ffe:1900:4545:3:200:f8ff:fe21:67cf", 38024, 44251, 0x4b61e985, 0x02d1feef},
}

func TestVerificationVectors(t *testing.T) {
	for _, v := range vectors {
		tp := Tuple{Src: netip.MustParseAddr(v.src), Dst: netip.MustParseAddr(v.dst), SrcPort: v.sport, DstPort: v.dport}
		if got := Toeplitz(DefaultKey, tp.Input(nil, false)); got != v.addrOnly {
			t.Errorf("%s -> %s addresses: hash %#08x, want %#08x", v.src, v.dst, got, v.addrOnly)
		}
		if got := Hash(DefaultKey, tp); got != v.tcpUDP {
			t.Errorf("%s:%d -> %s:%d: hash %#08x, want %#08x", v.src, v.sport, v.dst, v.dport, got, v.tcpUDP)
		}
	}
}

func TestParseFrame(t *testing.T) {
	f := make([]byte, 14+20+8)
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0], ip[9] = 0x45, 17
	copy(ip[12:], []byte{10, 0, 0, 1})
	copy(ip[16:], []byte{10, 0, 0, 2})
	ip[20], ip[21], ip[22], ip[23] = 0xc0, 0x01, 0x12, 0xb7
	tp, ok := ParseFrame(f)
	want := Tuple{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 0xc001, DstPort: 4791}
	if !ok || tp != want {
		t.Fatalf("ParseFrame = %+v, %v; want %+v", tp, ok, want)
	}
	ip[6] = 0x01 // a later fragment has no ports
	if _, ok := ParseFrame(f); ok {
		t.Error("a non-first fragment parsed")
	}
	for n := range 14 + 20 + 8 {
		if _, ok := ParseFrame(f[:n]); ok {
			t.Errorf("a %d-byte frame parsed", n)
		}
	}
}

func TestPortsFor(t *testing.T) {
	tab := Spread(4, 128, nil)
	tp := Tuple{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), DstPort: 4791}
	for q := range 4 {
		ports := tab.PortsFor(nil, tp, q, 8, 49152, 65535)
		if len(ports) != 8 {
			t.Fatalf("queue %d: %d ports, want 8", q, len(ports))
		}
		for _, p := range ports {
			tp.SrcPort = p
			if got := tab.QueueOf(tp); got != q {
				t.Errorf("port %d: queue %d, want %d", p, got, q)
			}
		}
	}
}
