package wire

import (
	"encoding/binary"
	"errors"
)

// Security header (SecLen bytes), after the BTH of a packet whose BTH has
// the Secured bit (byte 8, bit 6); the extension headers follow it, and
// the TagLen-byte authentication tag sits between the pad and the ICRC:
//
//	off size field
//	  0    1 version (bits 7-4, SecVersion) | flags (bits 3-0: SecIntegrityOnly)
//	  1    3 reserved, 0
//	  4    4 Epoch: key epoch the packet is sealed under
//	  8    8 Counter: the sender's per-direction transmit counter
//
// The additional authenticated data is the BTH, the security header and the
// extension headers, as they are on the wire except for the variant fields,
// read as all ones as the ICRC reads them (BTH byte 4: FECN, BECN; the INT
// region, shim and slots, that switches stamp). The protected area is the
// payload and its pad: encrypted, or, with SecIntegrityOnly, authenticated
// in clear (then it belongs to the additional data and nothing is
// encrypted). Ethernet, IP and UDP stay outside both: switches route on
// them, rewrite TTL and ECN, and hash the UDP source port as path entropy.
const (
	SecVersion = 1
	// SecIntegrityOnly says the payload is authenticated but not encrypted.
	SecIntegrityOnly uint8 = 1 << 0
	// secBit is the Secured bit in BTH byte 8.
	secBit = 0x40
)

// Sec is spray's security header.
type Sec struct {
	Flags   uint8 // SecIntegrityOnly
	Epoch   uint32
	Counter uint64
}

// Cipher seals and opens the protected parts of secured frames (Encode,
// Open). aad and the area are slices of the frame, adjacent; the TagLen
// bytes after area are the tag's place.
type Cipher interface {
	// Seal authenticates aad and area, encrypts area in place unless s
	// says integrity only (area is then empty: it is part of aad), and
	// writes the tag into area[len(area):len(area)+TagLen].
	Seal(s *Sec, aad, area []byte)
	// Open checks the tag at area[len(area):len(area)+TagLen] against aad
	// and area and decrypts area in place; it returns an error, and may
	// leave area garbled, when the tag does not match.
	Open(s *Sec, aad, area []byte) error
}

// SourceSealer is a Cipher that can also seal a payload from where it
// lies: SealFrom is Seal with the plaintext read from src (len(area)
// bytes, the same memory as area or none of it), so that Encode does not
// first copy the payload into the frame (TestEncodeSealFrom).
type SourceSealer interface {
	SealFrom(s *Sec, aad, area, src []byte)
}

// ErrNotSecured is Open's error for a frame whose BTH has no Secured bit.
var ErrNotSecured = errors.New("wire: packet is not secured")

// secLayout locates the parts of a secured frame: the BTH, the start of the
// payload area, its end (the tag's start), the INT region, 0 if none.
type secLayout struct {
	bth, area, tag int
	intOff, intLen int
}

// putSec writes s at the front of x.
func putSec(x []byte, s *Sec) {
	x[0] = SecVersion<<4 | s.Flags&0x0F
	x[1], x[2], x[3] = 0, 0, 0
	binary.BigEndian.PutUint32(x[4:], s.Epoch)
	binary.BigEndian.PutUint64(x[8:], s.Counter)
}

// getSec reads the security header at the front of x.
func getSec(x []byte, s *Sec) error {
	if x[0]>>4 != SecVersion {
		return errSecVersion
	}
	if x[0]&0x0F&^SecIntegrityOnly != 0 || x[1]|x[2]|x[3] != 0 {
		return errSecFlags
	}
	s.Flags = x[0] & 0x0F
	s.Epoch = binary.BigEndian.Uint32(x[4:])
	s.Counter = binary.BigEndian.Uint64(x[8:])
	return nil
}

// seal seals (open false) or opens the secured frame laid out by l with c:
// c sees the additional data with the variant fields read as all ones,
// which are restored before seal returns. src, when not nil, is the
// plaintext of the area, sealed from there (c is a SourceSealer).
func seal(frame []byte, l *secLayout, s *Sec, c Cipher, open bool, src []byte) error {
	var save [INTRegionMaxLen]byte
	b4 := frame[l.bth+4]
	frame[l.bth+4] = 0xFF
	if l.intLen > 0 {
		copy(save[:l.intLen], frame[l.intOff:])
		copy(frame[l.intOff:l.intOff+l.intLen], ones[:l.intLen])
	}
	aad, area := frame[l.bth:l.area], frame[l.area:l.tag]
	if s.Flags&SecIntegrityOnly != 0 {
		aad, area = frame[l.bth:l.tag], frame[l.tag:l.tag]
	}
	var err error
	switch {
	case open:
		err = c.Open(s, aad, area)
	case src != nil:
		c.(SourceSealer).SealFrom(s, aad, area, src)
	default:
		c.Seal(s, aad, area)
	}
	frame[l.bth+4] = b4
	if l.intLen > 0 {
		copy(frame[l.intOff:l.intOff+l.intLen], save[:l.intLen])
	}
	return err
}

// Open checks the tag of frame, which Decode decoded into p, with c, and
// decrypts its payload in place, so that p.Payload holds the plaintext. It
// returns ErrNotSecured for a frame without the Secured bit and c's error
// for a tag that does not match (p.Payload is then garbage). p must be the
// result of Decode(frame, p), unchanged since.
func Open(frame []byte, p *Packet, c Cipher) error {
	if !p.BTH.Secured {
		return ErrNotSecured
	}
	return seal(frame, &p.sec, &p.Sec, c, true, nil)
}
