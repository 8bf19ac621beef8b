package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// ones stands in for the masked INT region when the ICRC is computed.
var ones = func() (b [INTRegionMaxLen]byte) {
	for i := range b {
		b[i] = 0xFF
	}
	return b
}()

// Masks of the variant fields, ORed into the bytes from the IP header to the
// end of the BTH: IPv4 header (without options), UDP header, BTH; IPv6
// header, UDP header, BTH. zeroMask covers IPv4 options.
var (
	maskIPv4 = [IPv4Len + UDPLen + BTHLen]byte{
		1: 0xFF, 8: 0xFF, 10: 0xFF, 11: 0xFF, // TOS, TTL, header checksum
		IPv4Len + 6: 0xFF, IPv4Len + 7: 0xFF, // UDP checksum
		IPv4Len + UDPLen + 4: 0xFF, // BTH FECN, BECN, reserved
	}
	maskIPv6 = [IPv6Len + UDPLen + BTHLen]byte{
		0: 0x0F, 1: 0xFF, 2: 0xFF, 3: 0xFF, 7: 0xFF, // traffic class, flow label, hop limit
		IPv6Len + 6: 0xFF, IPv6Len + 7: 0xFF,
		IPv6Len + UDPLen + 4: 0xFF,
	}
	zeroMask [40]byte
)

// crcTables are slicing-by-8 tables for the IEEE polynomial, derived from
// crc32.IEEETable, for maskedUpdate.
var crcTables = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		for k := 1; k < 8; k++ {
			c := t[k-1][i]
			t[k][i] = c>>8 ^ t[0][byte(c)]
		}
	}
	return t
}()

// crcPseudoLRH is the CRC after the 8 bytes of 0xFF that start the ICRC.
var crcPseudoLRH = crc32.Update(0, crc32.IEEETable, ones[:8])

// maskedUpdate continues CRC-32 (IEEE) crc, as crc32.Update does, over the
// bytes of p each ORed with the byte of mask at the same index
// (len(mask) >= len(p)), slicing by 8. It serves the header bytes, which
// hold the variant fields: hash/crc32 would need a masked copy of them, and
// a stack buffer passed to it escapes (it calls its accelerated IEEE
// implementation through a function value) and would cost an allocation.
func maskedUpdate(crc uint32, p, mask []byte) uint32 {
	t := &crcTables
	c := ^crc
	mask = mask[:len(p)]
	for len(p) >= 8 {
		v := binary.LittleEndian.Uint64(p) | binary.LittleEndian.Uint64(mask)
		c ^= uint32(v)
		c = t[7][byte(c)] ^ t[6][byte(c>>8)] ^ t[5][byte(c>>16)] ^ t[4][c>>24] ^
			t[3][byte(v>>32)] ^ t[2][byte(v>>40)] ^ t[1][byte(v>>48)] ^ t[0][byte(v>>56)]
		p, mask = p[8:], mask[8:]
	}
	for i := range p {
		c = t[0][byte(c)^(p[i]|mask[i])] ^ c>>8
	}
	return ^c
}

// ICRC returns the invariant CRC of a whole RoCEv2 frame (Ethernet header
// first, ICRC last; the ICRC bytes themselves are not covered), as RoCEv2
// (IBA annex A17.4) defines it: CRC-32 (IEEE) over 8 bytes of 0xFF, then the
// IP header, UDP header, BTH and everything after up to the ICRC, with the
// variant fields read as all ones (IPv4 TOS, TTL and header checksum; IPv6
// traffic class, flow label and hop limit; UDP checksum; BTH byte 4) and
// spray's INT region (shim and every slot) read as all ones too. The frame
// stores the value little-endian. ICRC checks only what it needs to find
// those fields; it does not verify the IPv4 checksum or the opcode.
func ICRC(frame []byte) (uint32, error) {
	var l layout
	if err := parse(frame, &l); err != nil {
		return 0, err
	}
	return icrc(frame, &l), nil
}

// icrc computes the ICRC of a parsed frame: the headers up to the end of the
// BTH through maskedUpdate, the rest (a payload, mostly) through
// hash/crc32's accelerated IEEE path.
func icrc(frame []byte, l *layout) uint32 {
	c := crcPseudoLRH
	hdrEnd := l.bth + BTHLen
	switch {
	case l.v6:
		c = maskedUpdate(c, frame[l.ip:hdrEnd], maskIPv6[:])
	case l.ipLen == IPv4Len:
		c = maskedUpdate(c, frame[l.ip:hdrEnd], maskIPv4[:])
	default: // IPv4 options
		c = maskedUpdate(c, frame[l.ip:l.ip+IPv4Len], maskIPv4[:IPv4Len])
		c = maskedUpdate(c, frame[l.ip+IPv4Len:l.udp], zeroMask[:])
		c = maskedUpdate(c, frame[l.udp:hdrEnd], maskIPv4[IPv4Len:])
	}
	end := l.end - ICRCLen
	if l.intLen > 0 {
		c = update(c, frame[hdrEnd:l.intOff])
		c = update(c, ones[:l.intLen])
		return update(c, frame[l.intOff+l.intLen:end])
	}
	return update(c, frame[hdrEnd:end])
}

// icrcOwned is icrc for a frame that the caller owns (Encode's buffer,
// DecodeOwned's): the variant fields of its headers are set to all
// ones for the time of one hash/crc32 pass over the whole of it, then put
// back, so that the carry-less multiply covers the headers and the payload
// of a small frame in one piece rather than a table loop taking the
// headers, then the short rest (BenchmarkICRCSmall). A frame with an INT
// region or IPv4 options takes icrc.
func icrcOwned(frame []byte, l *layout) uint32 {
	if l.intLen > 0 || (!l.v6 && l.ipLen != IPv4Len) {
		return icrc(frame, l)
	}
	mask := maskIPv4[:]
	if l.v6 {
		mask = maskIPv6[:]
	}
	h := frame[l.ip : l.ip+len(mask)]
	var saved [IPv6Len + UDPLen + BTHLen]byte
	copy(saved[:], h)
	// A word at a time: byte stores under the CRC's wide loads cost a
	// store-forwarding stall each.
	for len(mask) >= 8 {
		binary.LittleEndian.PutUint64(h, binary.LittleEndian.Uint64(h)|binary.LittleEndian.Uint64(mask))
		h, mask = h[8:], mask[8:]
	}
	if len(mask) >= 4 {
		binary.LittleEndian.PutUint32(h, binary.LittleEndian.Uint32(h)|binary.LittleEndian.Uint32(mask))
	}
	c := crc32.Update(crcPseudoLRH, crc32.IEEETable, frame[l.ip:l.end-ICRCLen])
	copy(frame[l.ip:], saved[:l.bth+BTHLen-l.ip])
	return c
}

// update continues CRC-32 (IEEE) crc over p. hash/crc32's carry-less
// multiply runs on whole 64-byte prefixes in 16-byte steps and leaves the
// rest to a table loop that takes a byte at a time below 16 bytes; the
// piece of a small frame (a header, a 64-byte payload) is mostly such
// rest. So the bytes before the last multiple of 16 (all of p below 64
// bytes) go through the slicing-by-8 loop here, and hash/crc32 gets a
// multiple of 16 bytes or nothing (BenchmarkICRCSmall; TestICRC* hold the
// bytes).
func update(crc uint32, p []byte) uint32 {
	head := len(p) & 15
	if len(p) < 64 {
		head = len(p)
	}
	crc = slicingUpdate(crc, p[:head])
	if head == len(p) {
		return crc
	}
	return crc32.Update(crc, crc32.IEEETable, p[head:])
}

// slicingUpdate is maskedUpdate without a mask.
func slicingUpdate(crc uint32, p []byte) uint32 {
	t := &crcTables
	c := ^crc
	for len(p) >= 8 {
		v := binary.LittleEndian.Uint64(p)
		c ^= uint32(v)
		c = t[7][byte(c)] ^ t[6][byte(c>>8)] ^ t[5][byte(c>>16)] ^ t[4][c>>24] ^
			t[3][byte(v>>32)] ^ t[2][byte(v>>40)] ^ t[1][byte(v>>48)] ^ t[0][byte(v>>56)]
		p = p[8:]
	}
	for i := range p {
		c = t[0][byte(c)^p[i]] ^ c>>8
	}
	return ^c
}

// checksum adds b to a one's complement sum (RFC 1071), unfolded.
func checksum(sum uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		sum += v >> 32
		sum += v & 0xFFFFFFFF
		b = b[8:]
	}
	if len(b) >= 4 {
		sum += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	return sum
}

// fold folds a one's complement sum to 16 bits.
func fold(sum uint64) uint16 {
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

// putIPv4Checksum computes the header checksum of the IPv4 header at
// frame[ip:ip+hlen] and stores it.
func putIPv4Checksum(frame []byte, ip, hlen int) {
	h := frame[ip : ip+hlen]
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^fold(checksum(0, h)))
}

// putUDPChecksum6 computes the UDP checksum of the IPv6 packet whose header
// is at frame[ip:] and UDP datagram at frame[udp:end], and stores it.
func putUDPChecksum6(frame []byte, ip, udp, end int) {
	d := frame[udp:end]
	d[6], d[7] = 0, 0
	sum := checksum(0, frame[ip+8:ip+40]) // source and destination address
	sum += uint64(len(d)) + 17            // upper-layer length, next header
	sum = checksum(sum, d)
	c := ^fold(sum)
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(d[6:], c)
}
