package cc

import "encoding/binary"

// hopLen is the size of a hop record in the fuzz targets' bytes: the INT
// record layout of the wire (switch, port, rate, timestamp, queue, bytes).
const hopLen = 24

// decodeHops reads the whole records of b.
func decodeHops(b []byte) []Hop {
	hs := make([]Hop, len(b)/hopLen)
	for i := range hs {
		r := b[i*hopLen:]
		hs[i] = Hop{
			Switch: binary.BigEndian.Uint16(r[0:]), Port: binary.BigEndian.Uint16(r[2:]),
			RateMbps: binary.BigEndian.Uint32(r[4:]), TS: binary.BigEndian.Uint64(r[8:]),
			QLen: binary.BigEndian.Uint32(r[16:]), TxBytes: binary.BigEndian.Uint32(r[20:]),
		}
	}
	return hs
}

// encodeHops is decodeHops's inverse.
func encodeHops(hs ...Hop) []byte {
	b := make([]byte, len(hs)*hopLen)
	for i, h := range hs {
		r := b[i*hopLen:]
		binary.BigEndian.PutUint16(r[0:], h.Switch)
		binary.BigEndian.PutUint16(r[2:], h.Port)
		binary.BigEndian.PutUint32(r[4:], h.RateMbps)
		binary.BigEndian.PutUint64(r[8:], h.TS)
		binary.BigEndian.PutUint32(r[16:], h.QLen)
		binary.BigEndian.PutUint32(r[20:], h.TxBytes)
	}
	return b
}
