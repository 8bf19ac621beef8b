package wirecheck

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/transport/wire"
)

var (
	macA, macB = [6]byte{2, 0, 0, 0, 0, 0xa}, [6]byte{2, 0, 0, 0, 0, 0xb}
	ipA, ipB   = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
)

func TestToolMissing(t *testing.T) {
	t.Setenv("PATH", "")
	_, err := CheckWithTshark("nowhere.pcap")
	if !errors.Is(err, ErrToolMissing) {
		t.Fatalf("tshark not in PATH: %v", err)
	}
}

func TestICRCBytes(t *testing.T) {
	var p wire.Packet
	p.Eth = wire.Eth{Dst: macB, Src: macA}
	p.IP = wire.IP{Src: ipA, Dst: ipB}
	p.UDP = wire.UDP{Src: 50000, Dst: wire.UDPPort}
	p.BTH = wire.BTH{Opcode: wire.OpSendOnly, DestQP: 0x123, PSN: 9}
	for _, v6 := range []bool{false, true} {
		for _, vlan := range []bool{false, true} {
			if v6 {
				p.IP.Src, p.IP.Dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
			}
			p.Eth.HasVLAN = vlan
			buf := make([]byte, 200)
			n, err := wire.Encode(buf, &p, nil)
			if err != nil {
				t.Fatal(err)
			}
			padded := append(buf[:n:n], make([]byte, 20)...) // Ethernet padding
			got, ok := icrcBytes(padded)
			if !ok || !bytes.Equal(got, buf[n-4:n]) {
				t.Fatalf("v6 %v vlan %v: %x %v, want %x", v6, vlan, got, ok, buf[n-4:n])
			}
			for k := range n - 4 {
				if _, ok := icrcBytes(buf[:k]); ok {
					t.Fatalf("v6 %v vlan %v: ICRC found in %d of %d bytes", v6, vlan, k, n)
				}
			}
		}
	}
}
