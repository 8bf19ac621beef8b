package wire

import "encoding/binary"

// Connect header (ConnLen bytes), on the packets of a QP made on demand
// (package transport, "Peers on demand") until its peer has shown it knows
// the QP: BTH byte 8, bit 5 (BTH.Conn; reserved in IBA, in the invariant
// part of the BTH) says it is there, after every other extension header of
// the opcode and before the payload, so that the INT region, the RETH and
// the ImmDt keep their offsets (a switch that stamps hop records or trims
// needs nothing new). Only spray data and ACK packets carry it.
//
//	off size field
//	  0    1 version (bits 7-4, ConnVersion) | flags (bits 3-0: ConnReply, ConnClose)
//	  1    3 reserved, 0
//	  4    4 SrcQP: the sender's QP number (24 bits, top byte 0)
//	  8    4 PSN: the initiator's first PSN (24 bits)
//	 12    4 PeerPSN: the first PSN of the acceptor, which the initiator
//	         chose (24 bits)
//	 16    8 Token: random, chosen by the initiator, echoed by the acceptor
//	 24    8 Ports: four UDP source ports (entropies) for the acceptor's
//	         packets to the initiator, big endian; 0: any
//
// An initiator's packets carry it with flags 0 and BTH destination QP
// ConnQP until the acceptor's QP number is known; the acceptor's carry it
// with ConnReply (SrcQP its own QP, the other fields echoed) until a packet
// of the initiator arrives without it. ConnClose, with ConnReply or not,
// on a spray ACK: the sender closed its QP for idleness.
const (
	ConnLen     = 32
	ConnVersion = 1
	// ConnQP is the destination QP of an initiator's packets before it
	// knows its peer's QP. The transport allocates no QP below 0x100.
	ConnQP = 0
	// ConnReply marks the acceptor's packets.
	ConnReply uint8 = 1 << 0
	// ConnClose says the sender closed the QP (idle).
	ConnClose uint8 = 1 << 1
	// ConnPorts is the number of entropies a connect header carries.
	ConnPorts = 4
	// connBit is the Conn bit in BTH byte 8.
	connBit = 0x20
)

// Conn is the connect header.
type Conn struct {
	Flags   uint8
	SrcQP   uint32
	PSN     uint32
	PeerPSN uint32
	Token   uint64
	Ports   [ConnPorts]uint16
}

var (
	errConnShort   = wrap(ErrTruncated, "connect header")
	errConnOpcode  = wrap(ErrBadHeader, "connect header on an opcode other than spray data or ACK")
	errConnVersion = wrap(ErrBadHeader, "connect header version, flags or reserved bytes")
	errConnField   = wrap(ErrBadHeader, "connect header QP or PSN wider than 24 bits")
)

// connOpcode says whether op may carry a connect header.
func connOpcode(op Opcode) bool { return op == OpSprayData || op == OpSprayAck }

func decodeConn(rest []byte, p *Packet) ([]byte, error) {
	if !connOpcode(p.BTH.Opcode) {
		return nil, errConnOpcode
	}
	if len(rest) < ConnLen {
		return nil, errConnShort
	}
	if rest[0]>>4 != ConnVersion || rest[0]&^(0xF0|ConnReply|ConnClose) != 0 || rest[1]|rest[2]|rest[3] != 0 {
		return nil, errConnVersion
	}
	c := &p.Conn
	c.Flags = rest[0] & 0x0F
	c.SrcQP = binary.BigEndian.Uint32(rest[4:])
	c.PSN = binary.BigEndian.Uint32(rest[8:])
	c.PeerPSN = binary.BigEndian.Uint32(rest[12:])
	if (c.SrcQP|c.PSN|c.PeerPSN)>>24 != 0 {
		return nil, errConnField
	}
	c.Token = binary.BigEndian.Uint64(rest[16:])
	for i := range c.Ports {
		c.Ports[i] = binary.BigEndian.Uint16(rest[24+2*i:])
	}
	return rest[ConnLen:], nil
}

func encodeConn(x []byte, c *Conn) {
	x[0] = ConnVersion<<4 | c.Flags
	x[1], x[2], x[3] = 0, 0, 0
	binary.BigEndian.PutUint32(x[4:], c.SrcQP)
	binary.BigEndian.PutUint32(x[8:], c.PSN)
	binary.BigEndian.PutUint32(x[12:], c.PeerPSN)
	binary.BigEndian.PutUint64(x[16:], c.Token)
	for i, pt := range c.Ports {
		binary.BigEndian.PutUint16(x[24+2*i:], pt)
	}
}
