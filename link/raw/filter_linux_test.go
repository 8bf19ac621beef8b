package raw

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// runFilter interprets the classic BPF subset the filter uses, as the
// kernel does: a load outside the packet ends the program with 0.
func runFilter(t *testing.T, prog []unix.SockFilter, pkt []byte, pkttype uint32) uint32 {
	var a, x uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		load := func(off uint32, size int) (uint32, bool) {
			if off == adPkt && size == 4 {
				return pkttype, true
			}
			if int(off)+size > len(pkt) {
				return 0, false
			}
			switch size {
			case 1:
				return uint32(pkt[off]), true
			case 2:
				return uint32(binary.BigEndian.Uint16(pkt[off:])), true
			}
			return binary.BigEndian.Uint32(pkt[off:]), true
		}
		var ok bool
		switch in.Code {
		case ldAbsW:
			a, ok = load(in.K, 4)
		case ldAbsH:
			a, ok = load(in.K, 2)
		case ldAbsB:
			a, ok = load(in.K, 1)
		case ldIndH:
			a, ok = load(x+in.K, 2)
		case ldxMSH:
			var b uint32
			b, ok = load(in.K, 1)
			x = 4 * (b & 0xF)
		case jeqK:
			ok = true
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case jsetK:
			ok = true
			if a&in.K != 0 {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case retK:
			return in.K
		default:
			t.Fatalf("opcode %#x not modelled", in.Code)
		}
		if !ok {
			return 0
		}
	}
	t.Fatal("fell off the end of the filter")
	return 0
}

// frame builds Ethernet [| 802.1Q] | IPv4 or IPv6 | UDP | 8 bytes to dport.
func frame(vlan, v6 bool, dport uint16) []byte {
	b := make([]byte, 14, 128)
	et := uint16(0x0800)
	if v6 {
		et = 0x86DD
	}
	if vlan {
		binary.BigEndian.PutUint16(b[12:], 0x8100)
		b = append(b, 0, 7, byte(et>>8), byte(et))
	} else {
		binary.BigEndian.PutUint16(b[12:], et)
	}
	if v6 {
		ip := make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, 17, 64
		b = append(b, ip...)
	} else {
		ip := make([]byte, 20)
		ip[0], ip[9], ip[8] = 0x45, 17, 64
		b = append(b, ip...)
	}
	u := make([]byte, 16)
	binary.BigEndian.PutUint16(u[0:], 50000)
	binary.BigEndian.PutUint16(u[2:], dport)
	return append(b, u...)
}

func TestFilterModel(t *testing.T) {
	prog := filterProgram(4791)
	ipOff := func(vlan bool) int {
		if vlan {
			return 18
		}
		return 14
	}
	type tc struct {
		name    string
		pkt     []byte
		pkttype uint32
		accept  bool
	}
	var cases []tc
	for _, vlan := range []bool{false, true} {
		for _, v6 := range []bool{false, true} {
			name := map[bool]string{false: "v4", true: "v6"}[v6] + map[bool]string{false: "", true: "+vlan"}[vlan]
			o := ipOff(vlan)
			cases = append(cases,
				tc{name + " to 4791", frame(vlan, v6, 4791), unix.PACKET_HOST, true},
				tc{name + " broadcast", frame(vlan, v6, 4791), unix.PACKET_BROADCAST, true},
				tc{name + " outgoing", frame(vlan, v6, 4791), unix.PACKET_OUTGOING, false},
				tc{name + " other host", frame(vlan, v6, 4791), unix.PACKET_OTHERHOST, false},
				tc{name + " to 4792", frame(vlan, v6, 4792), unix.PACKET_HOST, false},
				tc{name + " truncated", frame(vlan, v6, 4791)[:o+8], unix.PACKET_HOST, false},
			)
			tcp := frame(vlan, v6, 4791)
			if v6 {
				tcp[o+6] = 6
			} else {
				tcp[o+9] = 6
			}
			cases = append(cases, tc{name + " tcp", tcp, unix.PACKET_HOST, false})
			if !v6 {
				opts := frame(vlan, false, 0)
				opts[o] = 0x46 // 4 bytes of options move the UDP header
				opts = append(opts[:o+20], append([]byte{1, 1, 1, 1}, opts[o+20:]...)...)
				binary.BigEndian.PutUint16(opts[o+24+2:], 4791)
				cases = append(cases, tc{name + " with options", opts, unix.PACKET_HOST, true})
				for _, fr := range []uint16{0x2000, 0x0001, 0x1FFF} {
					f := frame(vlan, false, 4791)
					binary.BigEndian.PutUint16(f[o+6:], fr)
					cases = append(cases, tc{name + " fragment", f, unix.PACKET_HOST, false})
				}
				df := frame(vlan, false, 4791)
				binary.BigEndian.PutUint16(df[o+6:], 0x4000)
				cases = append(cases, tc{name + " DF", df, unix.PACKET_HOST, true})
			}
		}
	}
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	cases = append(cases, tc{"arp", arp, unix.PACKET_BROADCAST, false}, tc{"empty", nil, 0, false})
	for _, c := range cases {
		got := runFilter(t, prog, c.pkt, c.pkttype) != 0
		if got != c.accept {
			t.Errorf("%s: accepted %v, want %v", c.name, got, c.accept)
		}
	}
}
