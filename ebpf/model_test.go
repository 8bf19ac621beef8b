package ebpf

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// XDP return codes (enum xdp_action).
const (
	xdpAborted  uint32 = 0
	xdpDrop     uint32 = 1
	xdpPass     uint32 = 2
	xdpRedirect uint32 = 4
)

// outcome is what the steering program does with one frame: its return code
// and the counter it moves.
type outcome struct {
	action  uint32
	counter SteerCounters // exactly one field is 1
}

var (
	outSteered   = outcome{xdpRedirect, SteerCounters{Steered: 1}}
	outPassed    = outcome{xdpPass, SteerCounters{Passed: 1}}
	outMalformed = outcome{xdpDrop, SteerCounters{Malformed: 1}}
	outRefused   = outcome{xdpDrop, SteerCounters{Refused: 1}}
	outNoSocket  = outcome{xdpPass, SteerCounters{NoSocket: 1}}
)

func (o outcome) String() string {
	switch o {
	case outSteered:
		return "steered"
	case outPassed:
		return "passed"
	case outMalformed:
		return "malformed"
	case outRefused:
		return "refused"
	case outNoSocket:
		return "nosocket"
	}
	return "?"
}

// model is the slow, obvious statement of what steer.c decides, written from
// the rules in doc.go. socket says whether a socket is registered for the
// frame's queue. Rule 11 (Stamp) changes no decision where the model is
// compared, BPF_PROG_TEST_RUN, which always leaves headroom: NoRoom cannot
// happen there; TestSteerStamp checks what the stamp does to the bytes.
func model(frame []byte, cfg SteerConfig, socket bool) outcome {
	port := cfg.Port
	if port == 0 {
		port = DefaultPort
	}
	be16 := func(b []byte, off int) int { return int(binary.BigEndian.Uint16(b[off:])) }

	// 1. Ethernet and one VLAN tag.
	if len(frame) < 14 {
		return outPassed
	}
	etherType := be16(frame, 12)
	l3 := 14
	if etherType == 0x8100 || etherType == 0x88A8 {
		if len(frame) < 18 {
			return outPassed
		}
		etherType = be16(frame, 16)
		l3 = 18
	}
	ip := frame[l3:]

	var src, dst netip.Addr
	var udp []byte // the IP payload
	switch etherType {
	case 0x0800:
		// 2. Protocol byte.
		if len(ip) < 10 || ip[9] != 17 {
			return outPassed
		}
		// 3. IP header.
		if len(ip) < 20 || ip[0]>>4 != 4 {
			return outMalformed
		}
		hl := int(ip[0]&0x0f) * 4
		total := be16(ip, 2)
		if hl < 20 || total < hl || total > len(ip) {
			return outMalformed
		}
		// 4. Fragments.
		if flagsFrag := be16(ip, 6); flagsFrag&0x2000 != 0 || flagsFrag&0x1fff != 0 {
			return outPassed
		}
		src = netip.AddrFrom4([4]byte(ip[12:16]))
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
		udp = ip[hl:total]
	case 0x86DD:
		if len(ip) < 7 || ip[6] != 17 {
			return outPassed
		}
		if len(ip) < 40 || ip[0]>>4 != 6 {
			return outMalformed
		}
		payload := be16(ip, 4)
		if 40+payload > len(ip) {
			return outMalformed
		}
		src = netip.AddrFrom16([16]byte(ip[8:24]))
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		udp = ip[40 : 40+payload]
	default:
		return outPassed
	}
	// 5. UDP header.
	if len(udp) < 8 {
		return outMalformed
	}
	// 6. Port.
	if uint16(be16(udp, 2)) != port {
		return outPassed
	}
	// 7. UDP length.
	if ulen := be16(udp, 4); ulen < 8 || ulen > len(udp) {
		return outMalformed
	}
	// 8. Local. Configured IPv4 addresses are compared as IPv4; an IPv6
	// header never matches them, even with an IPv4-mapped address.
	norm := func(as []netip.Addr) []netip.Addr {
		var out []netip.Addr
		for _, a := range as {
			out = append(out, a.Unmap().WithZone(""))
		}
		return out
	}
	if local := norm(cfg.Local); len(local) > 0 && !slices.Contains(local, dst) {
		return outPassed
	}
	// 9. Allow.
	if allow := norm(cfg.Allow); len(allow) > 0 && !slices.Contains(allow, src) {
		return outRefused
	}
	// 10. Socket.
	if socket {
		return outSteered
	}
	return outNoSocket
}

// frameSpec describes a test frame; build turns it into bytes. The zero value
// (with addresses set) is an untagged IPv4 UDP frame to port 0.
type frameSpec struct {
	vlanTPIDs []uint16 // one entry per tag, outermost first
	etherType uint16   // overrides the IP ethertype when non-zero
	src, dst  netip.Addr
	proto     uint8 // IP protocol / next header when protoSet, else UDP
	protoSet  bool
	options   int // IPv4 option bytes (a multiple of 4, at most 40)
	fragment  uint16
	srcPort   uint16
	dstPort   uint16
	payload   []byte
	pad       int // Ethernet padding after the IP packet
}

var (
	testMACDst = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	testMACSrc = [6]byte{0x02, 0, 0, 0, 0, 0x02}
)

func (f frameSpec) build() []byte {
	b := append([]byte(nil), testMACDst[:]...)
	b = append(b, testMACSrc[:]...)
	for i, tpid := range f.vlanTPIDs {
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, uint16(100+i)) // PCP 0, VID 100+i
	}
	proto := uint8(17)
	if f.protoSet {
		proto = f.proto
	}
	udpLen := 8 + len(f.payload)
	etherType := f.etherType
	if f.src.Is4() {
		if etherType == 0 {
			etherType = 0x0800
		}
		b = binary.BigEndian.AppendUint16(b, etherType)
		ipStart := len(b)
		hl := 20 + f.options
		b = append(b, byte(0x40|hl/4), 0)
		b = binary.BigEndian.AppendUint16(b, uint16(hl+udpLen))
		b = append(b, 0x12, 0x34)
		b = binary.BigEndian.AppendUint16(b, f.fragment)
		b = append(b, 64, proto, 0, 0)
		b = append(b, f.src.AsSlice()...)
		b = append(b, f.dst.AsSlice()...)
		for i := 0; i < f.options; i++ {
			b = append(b, 1) // NOP options
		}
		binary.BigEndian.PutUint16(b[ipStart+10:], ipChecksum(b[ipStart:ipStart+hl]))
	} else {
		if etherType == 0 {
			etherType = 0x86DD
		}
		b = binary.BigEndian.AppendUint16(b, etherType)
		b = append(b, 0x60, 0, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
		b = append(b, proto, 64)
		b = append(b, f.src.AsSlice()...)
		b = append(b, f.dst.AsSlice()...)
	}
	b = binary.BigEndian.AppendUint16(b, f.srcPort)
	b = binary.BigEndian.AppendUint16(b, f.dstPort)
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0, 0) // no UDP checksum (IPv4) / not checked here
	b = append(b, f.payload...)
	return append(b, make([]byte, f.pad)...)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
