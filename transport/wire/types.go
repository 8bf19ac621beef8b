package wire

import "net/netip"

// UDPPort is the RoCEv2 UDP destination port.
const UDPPort = 4791

// Opcode is a BTH opcode: the classic RC opcodes, the RoCEv2 CNP and spray's
// own opcodes in the manufacturer-specific range 0xE0-0xFF.
type Opcode uint8

// Reliable Connection opcodes (IBA 9.2, table 38), the RoCEv2 CNP (annex
// A17.9.3) and spray's opcodes.
const (
	OpSendFirst          Opcode = 0x00
	OpSendMiddle         Opcode = 0x01
	OpSendLast           Opcode = 0x02
	OpSendLastImm        Opcode = 0x03
	OpSendOnly           Opcode = 0x04
	OpSendOnlyImm        Opcode = 0x05
	OpWriteFirst         Opcode = 0x06
	OpWriteMiddle        Opcode = 0x07
	OpWriteLast          Opcode = 0x08
	OpWriteLastImm       Opcode = 0x09
	OpWriteOnly          Opcode = 0x0A
	OpWriteOnlyImm       Opcode = 0x0B
	OpReadRequest        Opcode = 0x0C
	OpReadResponseFirst  Opcode = 0x0D
	OpReadResponseMiddle Opcode = 0x0E
	OpReadResponseLast   Opcode = 0x0F
	OpReadResponseOnly   Opcode = 0x10
	OpAcknowledge        Opcode = 0x11
	OpCNP                Opcode = 0x81
	OpSprayData          Opcode = 0xE0
	OpSprayAck           Opcode = 0xE1
	// OpCreditGrant carries a receiver's credit for a spray sender: the
	// cumulative count of data packets it may have sent (Credit).
	OpCreditGrant Opcode = 0xE2
	// OpCreditRequest carries a spray sender's demand: the cumulative
	// count of data packets it wants credit for (Credit).
	OpCreditRequest Opcode = 0xE3
)

// OpKind is the operation a spray data packet belongs to.
type OpKind uint8

// Spray operation kinds.
const (
	KindSend     OpKind = 0
	KindSendImm  OpKind = 1
	KindWrite    OpKind = 2
	KindWriteImm OpKind = 3
	KindReadResp OpKind = 4 // ImmDt: the MsgID of the READ request it answers
	KindReadReq  OpKind = 5 // RETH: the region read; no payload
)

// AETH syndromes (IBA 9.7.5.1). A syndrome whose top three bits are 011 is a
// NAK; the low bits say which.
const (
	SyndromeAck          uint8 = 0x00 // ACK, with credit count in the low 5 bits (0x1F: invalid)
	SyndromeRNR          uint8 = 0x20 // RNR NAK, timer in the low 5 bits
	NakPSNSequenceError  uint8 = 0x60
	NakInvalidRequest    uint8 = 0x61
	NakRemoteAccessError uint8 = 0x62
	NakRemoteOperational uint8 = 0x63
	NakInvalidRDRequest  uint8 = 0x64
	syndromeKindMask     uint8 = 0x60
)

// IsNak reports whether an AETH or spray ACK syndrome is a NAK.
func IsNak(s uint8) bool { return s&0xE0 == 0x60 }

// ECN codepoints in the low two bits of the IPv4 TOS / IPv6 traffic class.
const (
	ECNNotECT uint8 = 0
	ECNECT1   uint8 = 1
	ECNECT0   uint8 = 2
	ECNCE     uint8 = 3
)

// Header sizes in bytes.
const (
	EthLen       = 14
	VLANLen      = 4
	IPv4Len      = 20
	IPv6Len      = 40
	UDPLen       = 8
	BTHLen       = 12
	RETHLen      = 16
	AETHLen      = 4
	ImmLen       = 4
	ICRCLen      = 4
	CNPPadLen    = 16 // reserved bytes after the BTH of a CNP
	DataHdrLen   = 24 // spray data header
	AckHdrLen    = 40 // spray ACK header, before its SACK words and hop records
	CreditLen    = 12 // credit grant and request header
	INTShimLen   = 4
	HopLen       = 24
	MaxINTHops   = 8
	MaxSackWords = 4
	SecLen       = 16 // spray security header, after the BTH of a secured packet
	TagLen       = 16 // authentication tag of a secured packet, before the ICRC
)

// Data header flags.
const (
	// FlagINT says an INT region (shim + Data.INTMax hop slots) follows the
	// data header.
	FlagINT uint8 = 1 << 0
)

// Data.Credit bits: how a data packet stands towards its receiver's credit.
// A packet with neither bit comes from a sender that does not use credits.
const (
	// DataUnsolicited: sent without credit, in the unsolicited window a
	// sender may send at the start of a burst.
	DataUnsolicited uint8 = 1 << 0
	// DataCredited: sent against credit the receiver granted.
	DataCredited uint8 = 1 << 1
)

// Ack.Flags bits.
const (
	// AckCredit says Ack.Credit holds the receiver's credit for the
	// sender: the receiver paces its senders with credit grants.
	AckCredit uint8 = 1 << 0
	// AckMsgLimit says Ack.MsgID holds the receiver's message limit: the
	// ID of the first message it has no room for (end-to-end flow
	// control, as IBA's AETH credit count and TCP's receive window). Only
	// a plain ACK (Syndrome SyndromeAck) carries it: a NAK's MsgID names
	// the message it refers to.
	AckMsgLimit uint8 = 1 << 1
)

// Credit.Flags bits.
const (
	// CreditRetry marks a request sent again because no credit came for
	// a while: the receiver answers it at once with a grant.
	CreditRetry uint8 = 1 << 0
)

// Ack.HoldNs: the hold time in the low 31 bits (up to 2.1 s), and a flag.
const (
	HoldMask        uint32 = 1<<31 - 1
	HoldFromArrival uint32 = 1 << 31
)

// Eth is an Ethernet II header, with at most one 802.1Q tag.
type Eth struct {
	Dst, Src [6]byte
	// HasVLAN says an 802.1Q tag is present; VLAN is its TCI (PCP, DEI, VID).
	HasVLAN bool
	VLAN    uint16
}

// IP is an IPv4 (no options on encode; options skipped on decode) or IPv6
// (no extension headers) header. The version follows from Src and Dst, which
// must be both IPv4 or both IPv6.
type IP struct {
	Src, Dst netip.Addr
	// TOS is the IPv4 type of service or IPv6 traffic class: DSCP<<2 | ECN.
	TOS uint8
	// TTL is the IPv4 time to live or IPv6 hop limit; 0 encodes as 64.
	TTL uint8
	// FlowLabel is the IPv6 flow label (20 bits); unused for IPv4.
	FlowLabel uint32
	// ID is the IPv4 identification field.
	ID uint16
}

// UDP is a UDP header; the length and checksum are computed by Encode.
type UDP struct {
	Src, Dst uint16
}

// BTH is the InfiniBand base transport header (IBA 9.2).
type BTH struct {
	Opcode Opcode
	SE     bool  // solicited event
	M      bool  // migration request
	PadCnt uint8 // pad bytes (0-3) before the ICRC; Encode computes it
	TVer   uint8 // transport header version, 0
	PKey   uint16
	FECN   bool // BTH byte 4 is variant: masked in the ICRC
	BECN   bool
	DestQP uint32 // 24 bits
	AckReq bool
	// Secured says a security header (Sec) follows the BTH and an
	// authentication tag precedes the ICRC: bit 6 of byte 8, reserved in
	// IBA, in the invariant part of the BTH (sec.go).
	Secured bool
	PSN     uint32 // 24 bits
	// Trimmed says a switch cut the packet to its headers (Trim): bit 5
	// of byte 4, reserved in IBA, in the variant byte that the ICRC and
	// the tag mask. Only spray data packets are trimmed; Decode gives
	// their headers and no payload, and Encode refuses the flag.
	Trimmed bool
	// Conn says a connect header (Packet.Conn) follows the opcode's
	// extension headers: bit 5 of byte 8, reserved in IBA, invariant
	// (conn.go).
	Conn bool
}

// RETH is the RDMA extended transport header.
type RETH struct {
	VA   uint64
	RKey uint32
	Len  uint32 // DMA length: the whole operation's length
}

// AETH is the ACK extended transport header.
type AETH struct {
	Syndrome uint8
	MSN      uint32 // 24 bits
}

// Data is spray's data header, after the BTH of an OpSprayData packet.
type Data struct {
	MsgID  uint32 // per-QP message sequence number
	Offset uint32 // byte offset of this packet's payload in the message
	MsgLen uint32 // length of the whole message
	Kind   OpKind
	Flags  uint8
	// INTMax is the number of hop slots reserved after the INT shim when
	// Flags has FlagINT (at most MaxINTHops).
	INTMax uint8
	// TxTime is the sender's transmit timestamp (its own clock, ns).
	TxTime uint64
	// Credit says whether the packet was sent unsolicited or against a
	// grant (DataUnsolicited, DataCredited); 0 from a sender without
	// credits. It is the header's byte 15, which peers that do not know
	// it ignore.
	Credit uint8
}

// Ack is spray's acknowledgement header, after the BTH of an OpSprayAck
// packet. It is followed by SackWords 64-bit SACK words and INTHops echoed
// hop records.
type Ack struct {
	// CumPSN is the next PSN the receiver expects: every PSN before it has
	// arrived.
	CumPSN uint32
	// AckedPSN is the PSN of the data packet whose send time, entropy and
	// INT records this ACK echoes: the one that triggered it, or (spray
	// transport with INT records on some packets only) the latest with
	// records that arrived since the previous ACK.
	AckedPSN uint32
	// SackBase is the PSN of bit 0 of Sack[0]; bit i of word w is PSN
	// SackBase+64w+i.
	SackBase uint32
	// MsgID is the message a NAK refers to, or with AckMsgLimit in a
	// plain ACK the receiver's message limit.
	MsgID uint32
	// EchoTime is the TxTime of the packet AckedPSN.
	EchoTime uint64
	// HoldNs is how long the receiver held that packet before acknowledging,
	// in its low 31 bits (HoldMask); HoldFromArrival set means the hold
	// counts from the packet's arrival at the receiving host (its link
	// stamped it), the time it waited there for the transport included.
	HoldNs uint32
	// ECNCount is the number of CE-marked data packets since the last ACK.
	ECNCount uint16
	// Entropy is the UDP source port of the packet AckedPSN.
	Entropy uint16
	// Syndrome is SyndromeAck or a NAK code.
	Syndrome  uint8
	SackWords uint8 // 1..MaxSackWords
	INTHops   uint8 // echoed hop records, at most MaxINTHops
	Sack      [MaxSackWords]uint64
	// Flags holds AckCredit and AckMsgLimit; Credit, with AckCredit, the receiver's
	// cumulative credit for the sender (as Credit.Count of a grant). A
	// receiver without credits leaves both 0 (bytes 35-39, reserved
	// before, which older peers ignore).
	Flags  uint8
	Credit uint32
}

// Credit is the header of OpCreditGrant and OpCreditRequest, after the BTH.
// Counts are of data packets, cumulative over the QP's life and wrapping
// at 2^32 (compared as serial numbers): a grant or request lost is
// replaced by any later one, and a duplicate changes nothing.
type Credit struct {
	// Count is, in a grant, the data packets the sender may have sent
	// against credit in all; in a request, the data packets the sender
	// wants that count to reach.
	Count uint32
	// Used is, in a request, the data packets the sender has sent against
	// credit so far; 0 in a grant.
	Used uint32
	// Flags holds CreditRetry (requests); other bits must be 0.
	Flags uint8
}

// Hop is one INT hop record, written in place by a switch (HPCC's fields).
type Hop struct {
	Switch   uint16
	Port     uint16
	RateMbps uint32 // egress link rate
	TS       uint64 // ns, egress timestamp of the switch's clock
	QLen     uint32 // queue depth in bytes
	TxBytes  uint32 // transmitted-bytes counter of the egress port (wraps)
}

// Packet is a decoded or to-be-encoded frame. Decode resets it and fills it
// with the frame's fields and slices into the frame (no copies, no
// allocations), so fields that do not apply to the opcode are zero after
// Decode; Encode reads it and ignores fields that do not apply. The zero
// value is usable (as a Decode target); a Packet is not safe for concurrent
// use, and after Decode it aliases the frame.
type Packet struct {
	Eth  Eth
	IP   IP
	UDP  UDP
	BTH  BTH
	RETH RETH   // RDMA WRITE first/only (classic); KindWrite/KindWriteImm (spray)
	AETH AETH   // OpAcknowledge
	Imm  uint32 // classic *Imm opcodes; spray KindSendImm/KindWriteImm
	Data Data   // OpSprayData
	Ack  Ack    // OpSprayAck
	// Credit is the header of OpCreditGrant and OpCreditRequest.
	Credit Credit
	// Conn is the connect header of a packet whose BTH.Conn is set.
	Conn Conn

	// INT is, after Decode of a spray data packet with FlagINT, the filled hop
	// records (the shim's hop count of them); after Decode of a spray ACK, the
	// echoed records. For Encode of a spray ACK, the records to echo (len =
	// 24*Ack.INTHops). Encode of a data packet with FlagINT reserves
	// Data.INTMax slots, copies INT (normally empty; at most INTMax whole
	// records) into the first ones, sets the shim's hop count to them and
	// zeroes the rest. Read records with HopAt.
	INT []byte

	// Payload is the payload, without pad and ICRC. Decode sets it to a slice
	// of the frame.
	Payload []byte

	// Sec is the security header of a packet whose BTH.Secured is set.
	Sec Sec
	// Cipher, when set, seals a secured packet as Encode writes it: it
	// authenticates the headers and the payload and encrypts the payload
	// in place (unless Sec says integrity only). Without it Encode leaves
	// the tag zero. Decode leaves it alone; see Open.
	Cipher Cipher

	// sec holds, after Decode of a secured frame, where Open finds its parts.
	sec secLayout
}
