package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// buildFrame writes Ethernet | IPv4 or IPv6 | UDP | payload into b, by hand,
// and returns the frame. Only the fields the link reads need to be right.
func buildFrame(b []byte, src, dst netip.Addr, sport uint16, tos uint8, payload []byte) []byte {
	clear(b[:14])
	off := 14
	ulen := 8 + len(payload)
	if dst.Is4() {
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		ip := b[off : off+20]
		ip[0], ip[1] = 0x45, tos
		binary.BigEndian.PutUint16(ip[2:], uint16(20+ulen))
		clear(ip[4:])
		ip[8], ip[9] = 64, 17
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		off += 20
	} else {
		binary.BigEndian.PutUint16(b[12:], 0x86DD)
		ip := b[off : off+40]
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(tos)<<20)
		binary.BigEndian.PutUint16(ip[4:], uint16(ulen))
		ip[6], ip[7] = 17, 64
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		off += 40
	}
	binary.BigEndian.PutUint16(b[off:], sport)
	binary.BigEndian.PutUint16(b[off+2:], 4791)
	binary.BigEndian.PutUint16(b[off+4:], uint16(ulen))
	binary.BigEndian.PutUint16(b[off+6:], 0)
	n := copy(b[off+8:], payload)
	return b[:off+8+n]
}

// rx is what a test reads back out of a received frame, checked against
// RFC 791/768/8200 by slow, obvious code.
type rx struct {
	src, dst     netip.Addr
	sport, dport uint16
	tos          uint8
	payload      []byte
}

func onesSum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return s
}

func parseRx(b []byte) (rx, error) {
	var r rx
	if len(b) < 14 {
		return r, errors.New("short")
	}
	var u []byte
	switch et := binary.BigEndian.Uint16(b[12:]); et {
	case 0x0800:
		ip := b[14:34]
		if ip[0] != 0x45 || ip[9] != 17 {
			return r, fmt.Errorf("ip header % x", ip)
		}
		if onesSum(ip) != 0xFFFF {
			return r, errors.New("bad IPv4 header checksum")
		}
		if int(binary.BigEndian.Uint16(ip[2:])) != len(b)-14 {
			return r, errors.New("IPv4 total length")
		}
		r.tos = ip[1]
		r.src = netip.AddrFrom4([4]byte(ip[12:16]))
		r.dst = netip.AddrFrom4([4]byte(ip[16:20]))
		u = b[34:]
		if binary.BigEndian.Uint16(u[6:]) != 0 {
			return r, errors.New("IPv4 UDP checksum not 0")
		}
	case 0x86DD:
		ip := b[14:54]
		if ip[0]>>4 != 6 || ip[6] != 17 {
			return r, fmt.Errorf("ip header % x", ip)
		}
		if int(binary.BigEndian.Uint16(ip[4:])) != len(b)-54 {
			return r, errors.New("IPv6 payload length")
		}
		r.tos = uint8(binary.BigEndian.Uint16(ip) >> 4)
		r.src = netip.AddrFrom16([16]byte(ip[8:24]))
		r.dst = netip.AddrFrom16([16]byte(ip[24:40]))
		u = b[54:]
		pseudo := append(append([]byte{}, ip[8:40]...), 0, 0, byte(len(u)>>8), byte(len(u)), 0, 0, 0, 17)
		if binary.BigEndian.Uint16(u[6:]) == 0 || onesSum(append(pseudo, u...)) != 0xFFFF {
			return r, errors.New("bad IPv6 UDP checksum")
		}
	default:
		return r, fmt.Errorf("ethertype %#x", et)
	}
	if int(binary.BigEndian.Uint16(u[4:])) != len(u) {
		return r, errors.New("UDP length")
	}
	r.sport = binary.BigEndian.Uint16(u)
	r.dport = binary.BigEndian.Uint16(u[2:])
	r.payload = u[8:]
	return r, nil
}
