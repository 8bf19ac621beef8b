package udp

import (
	"encoding/binary"
	"net/netip"
)

// Header sizes and values the link reads and writes.
const (
	ethLen    = 14
	vlanLen   = 4
	ipv4Len   = 20
	ipv6Len   = 40
	udpLen    = 8
	etherIPv4 = 0x0800
	etherIPv6 = 0x86DD
	etherVLAN = 0x8100
	protoUDP  = 17
	ttl       = 64
)

// headroom is the length of the headers that Recv synthesizes.
func headroom(v6 bool) int {
	if v6 {
		return ethLen + ipv6Len + udpLen
	}
	return ethLen + ipv4Len + udpLen
}

// parsed is what Send needs from a frame's lower headers.
type parsed struct {
	dst     [16]byte // IPv4 in the first 4 bytes
	tos     uint8
	sport   uint16
	payload int // offset of the UDP payload in the frame
	plen    int // its length, from the UDP length field
}

// parseFrame reads Ethernet (with at most one 802.1Q tag) | IPv4 or IPv6 |
// UDP from b. v6 selects the address family the link accepts. It reports
// false for anything else: another family, not UDP, IPv6 extension headers,
// IPv4 fragments, lengths that do not fit.
func parseFrame(b []byte, v6 bool, p *parsed) bool {
	if len(b) < ethLen {
		return false
	}
	off := ethLen
	et := binary.BigEndian.Uint16(b[12:])
	if et == etherVLAN {
		if len(b) < ethLen+vlanLen {
			return false
		}
		et = binary.BigEndian.Uint16(b[16:])
		off += vlanLen
	}
	var l4 int
	switch {
	case et == etherIPv4 && !v6:
		if len(b) < off+ipv4Len || b[off]>>4 != 4 || b[off+9] != protoUDP {
			return false
		}
		ihl := int(b[off]&0x0F) * 4
		if ihl < ipv4Len || len(b) < off+ihl {
			return false
		}
		if binary.BigEndian.Uint16(b[off+6:])&0x3FFF != 0 { // MF or fragment offset
			return false
		}
		p.tos = b[off+1]
		copy(p.dst[:4], b[off+16:off+20])
		l4 = off + ihl
	case et == etherIPv6 && v6:
		if len(b) < off+ipv6Len || b[off]>>4 != 6 || b[off+6] != protoUDP {
			return false
		}
		p.tos = uint8(binary.BigEndian.Uint16(b[off:]) >> 4)
		copy(p.dst[:], b[off+24:off+40])
		l4 = off + ipv6Len
	default:
		return false
	}
	if len(b) < l4+udpLen {
		return false
	}
	ulen := int(binary.BigEndian.Uint16(b[l4+4:]))
	if ulen < udpLen || l4+ulen > len(b) {
		return false
	}
	p.sport = binary.BigEndian.Uint16(b[l4:])
	p.payload = l4 + udpLen
	p.plen = ulen - udpLen
	return true
}

// macOf is the synthesized MAC address of an IP address: 02:00 and the
// address's last four bytes.
func macOf(a netip.Addr) [6]byte {
	s := a.As16()
	return [6]byte{0x02, 0x00, s[12], s[13], s[14], s[15]}
}

// writeHeaders synthesizes Ethernet | IPv4 or IPv6 | UDP in b[:headroom]
// for a datagram of plen bytes that lies at b[headroom:headroom+plen], sent
// from src:sport to dst:dport with the given TOS / traffic class. src and
// dst are both IPv4 (4 bytes used) or both IPv6.
func writeHeaders(b []byte, v6 bool, src, dst *[16]byte, srcMAC, dstMAC *[6]byte, sport, dport uint16, tos uint8, plen int) {
	copy(b[0:6], dstMAC[:])
	copy(b[6:12], srcMAC[:])
	ip := b[ethLen:]
	ulen := udpLen + plen
	if !v6 {
		binary.BigEndian.PutUint16(b[12:], etherIPv4)
		ip = ip[:ipv4Len]
		ip[0] = 0x45
		ip[1] = tos
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4Len+ulen))
		binary.BigEndian.PutUint32(ip[4:], 0x4000) // ID 0, DF
		ip[8] = ttl
		ip[9] = protoUDP
		ip[10], ip[11] = 0, 0
		copy(ip[12:16], src[:4])
		copy(ip[16:20], dst[:4])
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip)))
		u := b[ethLen+ipv4Len:]
		binary.BigEndian.PutUint16(u[0:], sport)
		binary.BigEndian.PutUint16(u[2:], dport)
		binary.BigEndian.PutUint16(u[4:], uint16(ulen))
		u[6], u[7] = 0, 0
		return
	}
	binary.BigEndian.PutUint16(b[12:], etherIPv6)
	binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(tos)<<20)
	binary.BigEndian.PutUint16(ip[4:], uint16(ulen))
	ip[6] = protoUDP
	ip[7] = ttl
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	u := b[ethLen+ipv6Len:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(ulen))
	u[6], u[7] = 0, 0
	// Pseudo-header: addresses, UDP length, next header; then the datagram.
	s := sum(0, ip[8:40])
	s += uint64(ulen) + protoUDP
	s = sum(s, u[:udpLen+plen])
	c := ^fold(s)
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(u[6:], c)
}

// sum adds b as big-endian 16-bit words (odd tail padded with zero) to s.
// The 64-bit accumulator cannot overflow for any b shorter than 2^48 bytes.
func sum(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v>>48 + (v>>32)&0xFFFF + (v>>16)&0xFFFF + v&0xFFFF
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// fold reduces a one's complement sum to 16 bits.
func fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}

// macOfRaw is macOf for an address as the kernel gives it (IPv4 in the
// first four bytes).
func macOfRaw(a *[16]byte, v6 bool) [6]byte {
	if v6 {
		return [6]byte{0x02, 0x00, a[12], a[13], a[14], a[15]}
	}
	return [6]byte{0x02, 0x00, a[0], a[1], a[2], a[3]}
}
