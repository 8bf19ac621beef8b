package wire

import "errors"

// Sentinel errors. Decode, ICRC and Encode wrap them with context; test with
// errors.Is. Decode returns preallocated wrapped values, so a rejected frame
// costs no allocation.
var (
	// ErrTruncated: the frame ends before a header does, or before the
	// length that its IP header announces.
	ErrTruncated = errors.New("wire: truncated")
	// ErrNotRoCE: not Ethernet | IPv4/IPv6 | UDP to port 4791 (another
	// EtherType, a second VLAN tag, IP extension headers or fragments,
	// another protocol or port).
	ErrNotRoCE = errors.New("wire: not RoCEv2")
	// ErrIPChecksum: the IPv4 header checksum is wrong.
	ErrIPChecksum = errors.New("wire: bad IPv4 header checksum")
	// ErrBadLength: length fields disagree with each other, with the frame or
	// with the opcode (bytes left over, bad pad count, payload not allowed).
	ErrBadLength = errors.New("wire: inconsistent length")
	// ErrBadOpcode: an opcode that spray does not know. spray counts and
	// drops such packets.
	ErrBadOpcode = errors.New("wire: unknown opcode")
	// ErrBadHeader: a header field out of range or inconsistent with another
	// (BTH version, SackWords 0 or > MaxSackWords, a PSN wider than 24
	// bits, ...). Encode also returns it for an inconsistent Packet.
	ErrBadHeader = errors.New("wire: bad header field")
	// ErrBadICRC: the invariant CRC does not match the frame.
	ErrBadICRC = errors.New("wire: bad ICRC")
	// ErrTooSmall: the buffer given to Encode cannot hold the frame.
	ErrTooSmall = errors.New("wire: buffer too small")
)

// wireError wraps a sentinel with context. Decode only returns the
// preallocated values below, so that rejecting a frame does not allocate.
type wireError struct {
	kind error
	msg  string
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.kind }

func wrap(kind error, context string) *wireError {
	return &wireError{kind: kind, msg: kind.Error() + ": " + context}
}

// Preallocated decode errors.
var (
	errEthShort     = wrap(ErrTruncated, "Ethernet header")
	errVLANShort    = wrap(ErrTruncated, "802.1Q tag")
	errEtherType    = wrap(ErrNotRoCE, "EtherType is not IPv4 or IPv6")
	errTwoVLANs     = wrap(ErrNotRoCE, "more than one VLAN tag")
	errIPv4Short    = wrap(ErrTruncated, "IPv4 header")
	errIPv4Version  = wrap(ErrNotRoCE, "IPv4 EtherType but IP version is not 4")
	errIPv4Proto    = wrap(ErrNotRoCE, "IPv4 protocol is not UDP")
	errIPv4Frag     = wrap(ErrNotRoCE, "IPv4 fragment")
	errIPv4IHL      = wrap(ErrBadLength, "IPv4 IHL < 5")
	errIPv4Options  = wrap(ErrTruncated, "IPv4 options")
	errIPv4TotLen   = wrap(ErrBadLength, "IPv4 total length shorter than its headers")
	errIPv4Beyond   = wrap(ErrTruncated, "frame shorter than IPv4 total length")
	errIPv4Trailer  = wrap(ErrBadLength, "frame longer than IPv4 total length")
	errIPv4Checksum = wrap(ErrIPChecksum, "IPv4 header")
	errIPv6Short    = wrap(ErrTruncated, "IPv6 header")
	errIPv6Version  = wrap(ErrNotRoCE, "IPv6 EtherType but IP version is not 6")
	errIPv6Next     = wrap(ErrNotRoCE, "IPv6 next header is not UDP (extension headers are not supported)")
	errIPv6PayLen   = wrap(ErrBadLength, "IPv6 payload length shorter than a UDP header")
	errIPv6Beyond   = wrap(ErrTruncated, "frame shorter than IPv6 payload length")
	errIPv6Trailer  = wrap(ErrBadLength, "frame longer than IPv6 payload length")
	errUDPPort      = wrap(ErrNotRoCE, "UDP destination port is not 4791")
	errUDPLen       = wrap(ErrBadLength, "UDP length differs from the IP payload length")
	errBTHShort     = wrap(ErrTruncated, "UDP payload shorter than BTH + ICRC")
	errICRC         = wrap(ErrBadICRC, "ICRC mismatch")
	errOpcode       = wrap(ErrBadOpcode, "BTH opcode")
	errTVer         = wrap(ErrBadHeader, "BTH transport version is not 0")
	errExtShort     = wrap(ErrTruncated, "packet shorter than its extension headers")
	errDataShort    = wrap(ErrTruncated, "spray data header")
	errINTShort     = wrap(ErrTruncated, "spray INT region")
	errINTMax       = wrap(ErrBadHeader, "spray data INTMax > MaxINTHops")
	errINTNoFlag    = wrap(ErrBadHeader, "spray data INTMax set without FlagINT")
	errINTVersion   = wrap(ErrBadHeader, "INT shim version")
	errSecShort     = wrap(ErrTruncated, "security header and tag")
	errSecVersion   = wrap(ErrBadHeader, "security header version")
	errSecFlags     = wrap(ErrBadHeader, "security header flags or reserved bytes")
	errINTShimMax   = wrap(ErrBadHeader, "INT shim max differs from data header INTMax")
	errINTCount     = wrap(ErrBadHeader, "INT shim hop count > max")
	errDataKind     = wrap(ErrBadHeader, "spray data kind")
	errDataFlags    = wrap(ErrBadHeader, "spray data flags: unknown bits")
	errTrimmed      = wrap(ErrBadHeader, "trimmed packet: not a spray data header alone, or flags or pad set")
	errAckSack      = wrap(ErrBadHeader, "spray ACK SackWords not in 1..MaxSackWords")
	errAckHops      = wrap(ErrBadHeader, "spray ACK INTHops > MaxINTHops")
	errAckPSN       = wrap(ErrBadHeader, "spray ACK PSN field wider than 24 bits")
	errAckFlags     = wrap(ErrBadHeader, "spray ACK flags: unknown bits, credit without AckCredit, or a NAK with AckMsgLimit")
	errDataCredit   = wrap(ErrBadHeader, "spray data credit byte: unknown bits, or both")
	errCreditFlags  = wrap(ErrBadHeader, "spray credit flags or reserved bytes")
	errAreaAlign    = wrap(ErrBadLength, "payload + pad not a multiple of 4 bytes")
	errPadTooLarge  = wrap(ErrBadLength, "BTH pad count larger than the payload")
	errNoPayload    = wrap(ErrBadLength, "bytes after the headers of an opcode that carries no payload")
	errPadNoPayload = wrap(ErrBadHeader, "BTH pad count set on an opcode that carries no payload")
)
