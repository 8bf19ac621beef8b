package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// EtherTypes and the IP protocol number of UDP.
const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
	protoUDP      = 17
	// minFrame is the shortest Ethernet frame without FCS: shorter packets
	// are padded up to it, so Decode accepts bytes after the IP packet in
	// frames of at most this length.
	minFrame = 60
	// defaultTTL is the TTL (hop limit) that IP.TTL 0 encodes as.
	defaultTTL = 64
	// ipv4DF is the IPv4 Don't Fragment flag that Encode sets.
	ipv4DF = 0x4000
)

// layout holds the offsets in a frame that parse found.
type layout struct {
	ip, ipLen int  // IP header and its length (IPv4 options included)
	v6        bool // IPv6, else IPv4
	udp       int  // UDP header
	bth       int  // BTH, = udp+8
	end       int  // end of the UDP datagram; the ICRC is the 4 bytes before
	intOff    int  // INT shim of a spray data packet with FlagINT
	intLen    int  // INT region length (shim and slots), 0 if none
	sec       bool // BTH.Secured: a security header and a tag (sec.go)
	trimmed   bool // BTH.Trimmed: headers through the data header, no tag
	ext       int  // extension headers: after the BTH and security header
	tag       int  // end of the payload area: the tag or the ICRC
	// bad is a secured frame's layout error, which Decode reports after
	// the ICRC check: a bit flipped into the Secured bit is a bad ICRC.
	bad error
}

// parse checks the Ethernet, IP and UDP headers and the lengths they carry,
// finds the BTH and, for spray data, the INT region. It reads no checksum.
func parse(frame []byte, l *layout) error {
	if len(frame) < EthLen {
		return errEthShort
	}
	off := 12
	et := binary.BigEndian.Uint16(frame[off:])
	if et == etherTypeVLAN {
		if len(frame) < EthLen+VLANLen {
			return errVLANShort
		}
		off += VLANLen
		et = binary.BigEndian.Uint16(frame[off:])
		if et == etherTypeVLAN {
			return errTwoVLANs
		}
	}
	ip := off + 2
	l.ip = ip
	var ipEnd int
	switch et {
	case etherTypeIPv4:
		if len(frame) < ip+IPv4Len {
			return errIPv4Short
		}
		h := frame[ip:]
		if h[0]>>4 != 4 {
			return errIPv4Version
		}
		if h[9] != protoUDP {
			return errIPv4Proto
		}
		if binary.BigEndian.Uint16(h[6:])&0x3FFF != 0 { // MF or fragment offset
			return errIPv4Frag
		}
		hlen := int(h[0]&0x0F) * 4
		if hlen < IPv4Len {
			return errIPv4IHL
		}
		if len(frame) < ip+hlen {
			return errIPv4Options
		}
		tot := int(binary.BigEndian.Uint16(h[2:]))
		if tot < hlen+UDPLen {
			return errIPv4TotLen
		}
		ipEnd = ip + tot
		if ipEnd > len(frame) {
			return errIPv4Beyond
		}
		if ipEnd < len(frame) && len(frame) > minFrame {
			return errIPv4Trailer
		}
		l.v6, l.ipLen = false, hlen
	case etherTypeIPv6:
		if len(frame) < ip+IPv6Len {
			return errIPv6Short
		}
		h := frame[ip:]
		if h[0]>>4 != 6 {
			return errIPv6Version
		}
		if h[6] != protoUDP {
			return errIPv6Next
		}
		plen := int(binary.BigEndian.Uint16(h[4:]))
		if plen < UDPLen {
			return errIPv6PayLen
		}
		ipEnd = ip + IPv6Len + plen
		if ipEnd > len(frame) {
			return errIPv6Beyond
		}
		if ipEnd < len(frame) && len(frame) > minFrame {
			return errIPv6Trailer
		}
		l.v6, l.ipLen = true, IPv6Len
	default:
		return errEtherType
	}
	udp := ip + l.ipLen
	u := frame[udp:ipEnd]
	if binary.BigEndian.Uint16(u[2:]) != UDPPort {
		return errUDPPort
	}
	if int(binary.BigEndian.Uint16(u[4:])) != len(u) {
		return errUDPLen
	}
	if len(u) < UDPLen+BTHLen+ICRCLen {
		return errBTHShort
	}
	l.udp, l.bth, l.end = udp, udp+UDPLen, ipEnd
	l.intOff, l.intLen = 0, 0
	l.ext, l.tag = l.bth+BTHLen, l.end-ICRCLen
	l.sec, l.bad = false, nil
	l.trimmed = frame[l.bth+4]&trimBit != 0
	if frame[l.bth+8]&secBit != 0 {
		if len(u) < UDPLen+BTHLen+SecLen+TagLen+ICRCLen {
			l.bad = errSecShort
			return nil
		}
		l.sec = true
		l.ext += SecLen
		if !l.trimmed {
			l.tag -= TagLen
		}
	}
	if l.trimmed {
		// A switch cut the packet after its data header: no INT region,
		// payload or tag (Trim).
		if Opcode(frame[l.bth]) != OpSprayData || l.tag-l.ext != DataHdrLen {
			l.bad = errTrimmed
		}
		return nil
	}
	if err := parseINT(frame, l); err != nil {
		if l.sec {
			l.bad, l.intOff, l.intLen = err, 0, 0
			return nil
		}
		return err
	}
	return nil
}

// parseINT finds the INT region of a spray data packet.
func parseINT(frame []byte, l *layout) error {
	if Opcode(frame[l.bth]) == OpSprayData {
		d := l.ext
		if d+DataHdrLen > l.tag {
			return errDataShort
		}
		if frame[d+13]&FlagINT != 0 {
			max := int(frame[d+14])
			if max > MaxINTHops {
				return errINTMax
			}
			n := INTShimLen + max*HopLen
			if d+DataHdrLen+n > l.tag {
				return errINTShort
			}
			l.intOff, l.intLen = d+DataHdrLen, n
		}
	}
	return nil
}

// Decode parses a whole frame into p, strictly: Ethernet with at most one
// 802.1Q tag; IPv4 (options skipped, header checksum verified, no fragments)
// or IPv6 (no extension headers); UDP to port 4791 with a length that agrees
// with the IP header; BTH; the extension headers of its opcode; payload; pad;
// ICRC (verified). Bytes after the IP packet are accepted only as the padding
// of a minimum-size (60-byte) Ethernet frame. The UDP checksum is not
// verified (switches rewrite INT records in place; the ICRC covers
// everything it would).
//
// Decode first resets *p; on success p.Payload and p.INT are slices of
// frame, so nothing is copied or allocated. On error, which wraps one of the
// package's sentinel errors, *p holds whatever was decoded before the
// problem was found. Decode does not allocate, even on error.
func Decode(frame []byte, p *Packet) error { return decode(frame, p, false) }

// DecodeOwned is Decode for a frame that the caller may write and that
// nothing else reads or writes during the call (a receive buffer the link
// lent the caller): the ICRC check sets the variant header fields to ones
// for one pass of hash/crc32 over the frame, then puts them back, which
// costs a small frame less than masking them in a table loop. The frame's
// bytes are the same after the call.
func DecodeOwned(frame []byte, p *Packet) error { return decode(frame, p, true) }

func decode(frame []byte, p *Packet, owned bool) error {
	*p = Packet{}
	var l layout
	if err := parse(frame, &l); err != nil {
		return err
	}
	if !l.v6 && fold(checksum(0, frame[l.ip:l.ip+l.ipLen])) != 0xFFFF {
		return errIPv4Checksum
	}
	var c uint32
	if owned {
		c = icrcOwned(frame, &l)
	} else {
		c = icrc(frame, &l)
	}
	if c != binary.LittleEndian.Uint32(frame[l.end-ICRCLen:]) {
		return errICRC
	}
	if l.bad != nil {
		return l.bad
	}

	copy(p.Eth.Dst[:], frame[0:6])
	copy(p.Eth.Src[:], frame[6:12])
	if l.ip == EthLen+VLANLen {
		p.Eth.HasVLAN = true
		p.Eth.VLAN = binary.BigEndian.Uint16(frame[14:])
	}
	h := frame[l.ip:]
	if l.v6 {
		w := binary.BigEndian.Uint32(h)
		p.IP.TOS = uint8(w >> 20)
		p.IP.FlowLabel = w & 0xFFFFF
		p.IP.TTL = h[7]
		p.IP.Src = netip.AddrFrom16([16]byte(h[8:24]))
		p.IP.Dst = netip.AddrFrom16([16]byte(h[24:40]))
	} else {
		p.IP.TOS = h[1]
		p.IP.ID = binary.BigEndian.Uint16(h[4:])
		p.IP.TTL = h[8]
		p.IP.Src = netip.AddrFrom4([4]byte(h[12:16]))
		p.IP.Dst = netip.AddrFrom4([4]byte(h[16:20]))
	}
	p.UDP.Src = binary.BigEndian.Uint16(frame[l.udp:])
	p.UDP.Dst = binary.BigEndian.Uint16(frame[l.udp+2:])

	b := frame[l.bth : l.bth+BTHLen]
	op := Opcode(b[0])
	p.BTH = BTH{
		Opcode:  op,
		SE:      b[1]&0x80 != 0,
		M:       b[1]&0x40 != 0,
		PadCnt:  b[1] >> 4 & 3,
		TVer:    b[1] & 0x0F,
		PKey:    binary.BigEndian.Uint16(b[2:]),
		FECN:    b[4]&0x80 != 0,
		BECN:    b[4]&0x40 != 0,
		DestQP:  binary.BigEndian.Uint32(b[4:]) & 0xFFFFFF,
		AckReq:  b[8]&0x80 != 0,
		Secured: l.sec,
		PSN:     binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF,
		Trimmed: l.trimmed,
		Conn:    b[8]&connBit != 0,
	}
	if !op.Known() {
		return errOpcode
	}
	if p.BTH.TVer != 0 {
		return errTVer
	}

	if l.sec {
		if err := getSec(frame[l.bth+BTHLen:], &p.Sec); err != nil {
			return err
		}
	}

	// rest: extension headers, payload and pad.
	rest := frame[l.ext:l.tag]
	if l.trimmed {
		// parse checked the opcode and that rest is the data header.
		if p.BTH.PadCnt != 0 {
			return errTrimmed
		}
		if _, err := decodeData(rest, p); err != nil {
			return err
		}
		if p.Data.Flags != 0 {
			return errTrimmed
		}
		p.RETH, p.Imm, p.Payload = RETH{}, 0, rest[:0]
		return nil
	}
	var err error
	switch op {
	case OpSprayData:
		rest, err = decodeData(rest, p)
	case OpSprayAck:
		rest, err = decodeAck(rest, p)
	case OpCreditGrant, OpCreditRequest:
		rest, err = decodeCredit(rest, p)
	default:
		rest, err = decodeClassic(rest, p, opTable[op])
	}
	if err != nil {
		return err
	}
	if p.BTH.Conn {
		if rest, err = decodeConn(rest, p); err != nil {
			return err
		}
	}

	if l.sec {
		p.sec = secLayout{bth: l.bth, area: l.tag - len(rest), tag: l.tag, intOff: l.intOff, intLen: l.intLen}
	}
	pad := int(p.BTH.PadCnt)
	if !op.HasPayload() {
		if len(rest) != 0 {
			return errNoPayload
		}
		if pad != 0 {
			return errPadNoPayload
		}
		p.Payload = rest
		return nil
	}
	if len(rest)%4 != 0 {
		return errAreaAlign
	}
	if pad > len(rest) {
		return errPadTooLarge
	}
	p.Payload = rest[:len(rest)-pad]
	return nil
}

func decodeClassic(rest []byte, p *Packet, f uint8) ([]byte, error) {
	n := 0
	if f&opRETH != 0 {
		n += RETHLen
	}
	if f&opImm != 0 {
		n += ImmLen
	}
	if f&opAETH != 0 {
		n += AETHLen
	}
	if f&opCNP != 0 {
		n += CNPPadLen
	}
	if len(rest) < n {
		return nil, errExtShort
	}
	if f&opRETH != 0 {
		p.RETH = getRETH(rest)
		rest = rest[RETHLen:]
	}
	if f&opImm != 0 {
		p.Imm = binary.BigEndian.Uint32(rest)
		rest = rest[ImmLen:]
	}
	if f&opAETH != 0 {
		w := binary.BigEndian.Uint32(rest)
		p.AETH = AETH{Syndrome: uint8(w >> 24), MSN: w & 0xFFFFFF}
		rest = rest[AETHLen:]
	}
	if f&opCNP != 0 {
		rest = rest[CNPPadLen:]
	}
	return rest, nil
}

func getRETH(b []byte) RETH {
	return RETH{
		VA:   binary.BigEndian.Uint64(b[0:]),
		RKey: binary.BigEndian.Uint32(b[8:]),
		Len:  binary.BigEndian.Uint32(b[12:]),
	}
}

func decodeData(rest []byte, p *Packet) ([]byte, error) {
	// parse has checked that the data header and the INT region fit.
	d := &p.Data
	d.MsgID = binary.BigEndian.Uint32(rest[0:])
	d.Offset = binary.BigEndian.Uint32(rest[4:])
	d.MsgLen = binary.BigEndian.Uint32(rest[8:])
	d.Kind = OpKind(rest[12])
	d.Flags = rest[13]
	d.INTMax = rest[14]
	d.Credit = rest[15]
	d.TxTime = binary.BigEndian.Uint64(rest[16:])
	rest = rest[DataHdrLen:]
	if d.Kind > KindReadReq {
		return nil, errDataKind
	}
	if !validDataCredit(d.Credit) {
		return nil, errDataCredit
	}
	if d.Flags&^FlagINT != 0 {
		return nil, errDataFlags
	}
	if d.Flags&FlagINT != 0 {
		n := INTShimLen + int(d.INTMax)*HopLen
		shim := rest[:n]
		if shim[INTShimVersionOff] != INTVersion {
			return nil, errINTVersion
		}
		if shim[INTShimMaxOff] != d.INTMax {
			return nil, errINTShimMax
		}
		cnt := int(shim[INTShimCountOff])
		if cnt > int(d.INTMax) {
			return nil, errINTCount
		}
		p.INT = shim[INTShimLen : INTShimLen+cnt*HopLen]
		rest = rest[n:]
	} else if d.INTMax != 0 {
		return nil, errINTNoFlag
	}
	if p.BTH.Trimmed {
		return rest, nil // the switch cut what followed the data header
	}
	n := 0
	if kindRETH(d.Kind) {
		n += RETHLen
	}
	if kindImm(d.Kind) {
		n += ImmLen
	}
	if len(rest) < n {
		return nil, errExtShort
	}
	if kindRETH(d.Kind) {
		p.RETH = getRETH(rest)
		rest = rest[RETHLen:]
	}
	if kindImm(d.Kind) {
		p.Imm = binary.BigEndian.Uint32(rest)
		rest = rest[ImmLen:]
	}
	return rest, nil
}

func decodeAck(rest []byte, p *Packet) ([]byte, error) {
	if len(rest) < AckHdrLen {
		return nil, errExtShort
	}
	a := &p.Ack
	a.CumPSN = binary.BigEndian.Uint32(rest[0:])
	a.AckedPSN = binary.BigEndian.Uint32(rest[4:])
	a.SackBase = binary.BigEndian.Uint32(rest[8:])
	a.MsgID = binary.BigEndian.Uint32(rest[12:])
	a.EchoTime = binary.BigEndian.Uint64(rest[16:])
	a.HoldNs = binary.BigEndian.Uint32(rest[24:])
	a.ECNCount = binary.BigEndian.Uint16(rest[28:])
	a.Entropy = binary.BigEndian.Uint16(rest[30:])
	a.Syndrome = rest[32]
	a.SackWords = rest[33]
	a.INTHops = rest[34]
	a.Flags = rest[35]
	a.Credit = binary.BigEndian.Uint32(rest[36:])
	rest = rest[AckHdrLen:]
	if !validAckCredit(a) {
		return nil, errAckFlags
	}
	if (a.CumPSN|a.AckedPSN|a.SackBase)>>24 != 0 {
		return nil, errAckPSN
	}
	if a.SackWords == 0 || a.SackWords > MaxSackWords {
		return nil, errAckSack
	}
	if a.INTHops > MaxINTHops {
		return nil, errAckHops
	}
	ns, nh := int(a.SackWords)*8, int(a.INTHops)*HopLen
	if len(rest) < ns+nh {
		return nil, errExtShort
	}
	for i := range int(a.SackWords) {
		a.Sack[i] = binary.BigEndian.Uint64(rest[8*i:])
	}
	p.INT = rest[ns : ns+nh]
	return rest[ns+nh:], nil
}

// validDataCredit reports whether a data header's credit byte is 0 or one
// of its bits.
func validDataCredit(c uint8) bool { return c == 0 || c == DataUnsolicited || c == DataCredited }

// validAckCredit reports whether an ACK's flags are known, its credit 0
// without AckCredit, and AckMsgLimit only on a plain ACK.
func validAckCredit(a *Ack) bool {
	return a.Flags&^(AckCredit|AckMsgLimit) == 0 && (a.Flags&AckCredit != 0 || a.Credit == 0) &&
		(a.Flags&AckMsgLimit == 0 || a.Syndrome&0xE0 == SyndromeAck)
}

func decodeCredit(rest []byte, p *Packet) ([]byte, error) {
	if len(rest) < CreditLen {
		return nil, errExtShort
	}
	c := &p.Credit
	c.Count = binary.BigEndian.Uint32(rest[0:])
	c.Used = binary.BigEndian.Uint32(rest[4:])
	c.Flags = rest[8]
	if c.Flags&^CreditRetry != 0 || rest[9]|rest[10]|rest[11] != 0 {
		return nil, errCreditFlags
	}
	return rest[CreditLen:], nil
}

func encodeCredit(x []byte, p *Packet) []byte {
	c := &p.Credit
	binary.BigEndian.PutUint32(x[0:], c.Count)
	binary.BigEndian.PutUint32(x[4:], c.Used)
	x[8] = c.Flags
	clear(x[9:CreditLen])
	return x[CreditLen:]
}

// extLen returns the length of the extension headers that follow the BTH of
// p, from the fields of p, without validating them.
func extLen(p *Packet) int {
	switch p.BTH.Opcode {
	case OpSprayData:
		n := DataHdrLen
		if p.Data.Flags&FlagINT != 0 {
			n += INTShimLen + int(p.Data.INTMax)*HopLen
		}
		if kindRETH(p.Data.Kind) {
			n += RETHLen
		}
		if kindImm(p.Data.Kind) {
			n += ImmLen
		}
		return n
	case OpSprayAck:
		return AckHdrLen + int(p.Ack.SackWords)*8 + int(p.Ack.INTHops)*HopLen
	case OpCreditGrant, OpCreditRequest:
		return CreditLen
	}
	f, n := opTable[p.BTH.Opcode], 0
	if f&opRETH != 0 {
		n += RETHLen
	}
	if f&opImm != 0 {
		n += ImmLen
	}
	if f&opAETH != 0 {
		n += AETHLen
	}
	if f&opCNP != 0 {
		n += CNPPadLen
	}
	return n
}

// HeaderLen returns the number of bytes that Encode writes before the
// payload of p: Ethernet (and VLAN tag), IP, UDP, BTH and extension headers.
// It does not validate p (Encode does); IPv4 is assumed unless p.IP.Src is
// an IPv6 address.
func HeaderLen(p *Packet) int {
	n := EthLen + UDPLen + BTHLen + extLen(p)
	if p.BTH.Conn {
		n += ConnLen
	}
	if p.BTH.Secured {
		n += SecLen
	}
	if p.Eth.HasVLAN {
		n += VLANLen
	}
	if p.IP.Src.Is6() {
		n += IPv6Len
	} else {
		n += IPv4Len
	}
	return n
}

// padLen returns the pad that brings a payload to a multiple of 4 bytes.
func padLen(payloadLen int) int { return -payloadLen & 3 }

// FrameLen returns the length of the frame that Encode writes for p and a
// payload of payloadLen bytes: HeaderLen, payload, pad, the tag of a
// secured packet and ICRC.
func FrameLen(p *Packet, payloadLen int) int {
	return HeaderLen(p) + payloadLen + padLen(payloadLen) + tagLen(p) + ICRCLen
}

// tagLen is the length of p's authentication tag: TagLen if it is secured.
func tagLen(p *Packet) int {
	if p.BTH.Secured {
		return TagLen
	}
	return 0
}

// validate checks that Encode can encode p with a payload of n bytes.
func validate(p *Packet, n int) error {
	op := p.BTH.Opcode
	if !op.Known() {
		return fmt.Errorf("%w: %v", ErrBadOpcode, op)
	}
	ip := &p.IP
	switch {
	case ip.Src.Is4() && ip.Dst.Is4():
	case ip.Src.Is6() && ip.Dst.Is6():
		if ip.FlowLabel > 0xFFFFF {
			return fmt.Errorf("%w: IPv6 flow label %#x wider than 20 bits", ErrBadHeader, ip.FlowLabel)
		}
	default:
		return fmt.Errorf("%w: IP source %v and destination %v are not both IPv4 or both IPv6", ErrBadHeader, ip.Src, ip.Dst)
	}
	b := &p.BTH
	if b.Trimmed {
		return fmt.Errorf("%w: BTH Trimmed: encode the packet whole, then Trim it", ErrBadHeader)
	}
	if b.DestQP > 0xFFFFFF || b.PSN > 0xFFFFFF {
		return fmt.Errorf("%w: BTH DestQP %#x or PSN %#x wider than 24 bits", ErrBadHeader, b.DestQP, b.PSN)
	}
	if b.Conn && (!connOpcode(op) || p.Conn.Flags&^(ConnReply|ConnClose) != 0 || (p.Conn.SrcQP|p.Conn.PSN|p.Conn.PeerPSN)>>24 != 0) {
		return fmt.Errorf("%w: connect header on %v with flags %#x, QP %#x, PSNs %#x %#x", ErrBadHeader, op, p.Conn.Flags, p.Conn.SrcQP, p.Conn.PSN, p.Conn.PeerPSN)
	}
	if b.TVer > 0x0F {
		return fmt.Errorf("%w: BTH TVer %d wider than 4 bits", ErrBadHeader, b.TVer)
	}
	if n > 0 && !op.HasPayload() {
		return fmt.Errorf("%w: %v carries no payload, got %d bytes", ErrBadHeader, op, n)
	}
	if b.Secured && p.Sec.Flags&^SecIntegrityOnly != 0 {
		return fmt.Errorf("%w: security header flags %#x", ErrBadHeader, p.Sec.Flags)
	}
	if opTable[op]&opAETH != 0 && p.AETH.MSN > 0xFFFFFF {
		return fmt.Errorf("%w: AETH MSN %#x wider than 24 bits", ErrBadHeader, p.AETH.MSN)
	}
	switch op {
	case OpSprayData:
		d := &p.Data
		if d.Kind > KindReadReq {
			return fmt.Errorf("%w: spray data kind %d", ErrBadHeader, d.Kind)
		}
		if d.Flags&^FlagINT != 0 {
			return fmt.Errorf("%w: spray data flags %#x", ErrBadHeader, d.Flags)
		}
		if !validDataCredit(d.Credit) {
			return fmt.Errorf("%w: spray data credit byte %#x", ErrBadHeader, d.Credit)
		}
		if d.Flags&FlagINT == 0 {
			if d.INTMax != 0 || len(p.INT) != 0 {
				return fmt.Errorf("%w: spray data INTMax %d or %d INT bytes without FlagINT", ErrBadHeader, d.INTMax, len(p.INT))
			}
		} else if d.INTMax > MaxINTHops || len(p.INT)%HopLen != 0 || len(p.INT) > int(d.INTMax)*HopLen {
			return fmt.Errorf("%w: spray data INTMax %d (max %d) with %d INT bytes", ErrBadHeader, d.INTMax, MaxINTHops, len(p.INT))
		}
	case OpSprayAck:
		a := &p.Ack
		if (a.CumPSN|a.AckedPSN|a.SackBase)>>24 != 0 {
			return fmt.Errorf("%w: spray ACK PSN wider than 24 bits", ErrBadHeader)
		}
		if a.SackWords == 0 || a.SackWords > MaxSackWords {
			return fmt.Errorf("%w: spray ACK SackWords %d not in 1..%d", ErrBadHeader, a.SackWords, MaxSackWords)
		}
		if a.INTHops > MaxINTHops || len(p.INT) != int(a.INTHops)*HopLen {
			return fmt.Errorf("%w: spray ACK INTHops %d (max %d) with %d INT bytes", ErrBadHeader, a.INTHops, MaxINTHops, len(p.INT))
		}
		if !validAckCredit(a) {
			return fmt.Errorf("%w: spray ACK flags %#x with credit %d", ErrBadHeader, a.Flags, a.Credit)
		}
	case OpCreditGrant, OpCreditRequest:
		if p.Credit.Flags&^CreditRetry != 0 {
			return fmt.Errorf("%w: spray credit flags %#x", ErrBadHeader, p.Credit.Flags)
		}
	}
	return nil
}

// Encode writes the frame for p and payload to the front of buf and returns
// its length, FrameLen(p, len(payload)): Ethernet (with an 802.1Q tag if
// p.Eth.HasVLAN), IPv4 (no options, DF set, header checksum) or IPv6, UDP
// (source p.UDP.Src, destination p.UDP.Dst or 4791 if 0, checksum 0 for IPv4
// and computed for IPv6), BTH (PadCnt computed, p.BTH.PadCnt ignored), the
// extension headers of the opcode, payload, zero pad to a multiple of 4
// bytes, and the ICRC. p.Payload is ignored: the payload is the argument, and
// it may already sit in place at buf[HeaderLen(p):], in which case it is not
// copied. Fields that do not apply to the opcode are ignored.
//
// Encode returns an error wrapping ErrTooSmall if buf is shorter than the
// frame, ErrBadOpcode for an opcode it does not know, ErrBadHeader for an
// inconsistent Packet (mixed address families, a field wider than its wire
// field, a payload on an opcode that carries none, ...), and ErrBadLength
// for a frame too long for IP. It does not allocate unless it fails.
func Encode(buf []byte, p *Packet, payload []byte) (int, error) {
	if err := validate(p, len(payload)); err != nil {
		return 0, err
	}
	hl := HeaderLen(p)
	pad := padLen(len(payload))
	n := hl + len(payload) + pad + tagLen(p) + ICRCLen
	if len(buf) < n {
		return 0, fmt.Errorf("%w: frame needs %d bytes, buffer has %d", ErrTooSmall, n, len(buf))
	}
	v6 := p.IP.Src.Is6()
	var l layout
	off := 12
	if p.Eth.HasVLAN {
		off += VLANLen
	}
	l.ip, l.v6 = off+2, v6
	if v6 {
		l.ipLen = IPv6Len
	} else {
		l.ipLen = IPv4Len
	}
	l.udp = l.ip + l.ipLen
	l.bth = l.udp + UDPLen
	l.end = n
	l.sec, l.ext, l.tag = p.BTH.Secured, l.bth+BTHLen, n-ICRCLen-tagLen(p)
	if l.sec {
		l.ext += SecLen
	}
	if (v6 && n-l.udp > 0xFFFF) || (!v6 && n-l.ip > 0xFFFF) {
		return 0, fmt.Errorf("%w: a %d-byte IP packet overflows the IP length field", ErrBadLength, n-l.ip)
	}

	copy(buf[0:6], p.Eth.Dst[:])
	copy(buf[6:12], p.Eth.Src[:])
	if p.Eth.HasVLAN {
		binary.BigEndian.PutUint16(buf[12:], etherTypeVLAN)
		binary.BigEndian.PutUint16(buf[14:], p.Eth.VLAN)
	}
	ttl := p.IP.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	h := buf[l.ip:l.udp]
	udpLen := n - l.udp
	if v6 {
		binary.BigEndian.PutUint16(buf[off:], etherTypeIPv6)
		binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(p.IP.TOS)<<20|p.IP.FlowLabel)
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = protoUDP
		h[7] = ttl
		s, d := p.IP.Src.As16(), p.IP.Dst.As16()
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
	} else {
		binary.BigEndian.PutUint16(buf[off:], etherTypeIPv4)
		h[0] = 4<<4 | IPv4Len/4
		h[1] = p.IP.TOS
		binary.BigEndian.PutUint16(h[2:], uint16(n-l.ip))
		binary.BigEndian.PutUint16(h[4:], p.IP.ID)
		binary.BigEndian.PutUint16(h[6:], ipv4DF)
		h[8] = ttl
		h[9] = protoUDP
		s, d := p.IP.Src.As4(), p.IP.Dst.As4()
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		putIPv4Checksum(buf, l.ip, IPv4Len)
	}
	u := buf[l.udp:l.bth]
	dst := p.UDP.Dst
	if dst == 0 {
		dst = UDPPort
	}
	binary.BigEndian.PutUint16(u[0:], p.UDP.Src)
	binary.BigEndian.PutUint16(u[2:], dst)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0

	b := buf[l.bth : l.bth+BTHLen]
	bt := &p.BTH
	b[0] = byte(bt.Opcode)
	b[1] = bit(bt.SE, 0x80) | bit(bt.M, 0x40) | byte(pad)<<4 | bt.TVer
	binary.BigEndian.PutUint16(b[2:], bt.PKey)
	binary.BigEndian.PutUint32(b[4:], uint32(bit(bt.FECN, 0x80)|bit(bt.BECN, 0x40))<<24|bt.DestQP)
	binary.BigEndian.PutUint32(b[8:], uint32(bit(bt.AckReq, 0x80)|bit(bt.Secured, secBit)|bit(bt.Conn, connBit))<<24|bt.PSN)
	if l.sec {
		putSec(buf[l.bth+BTHLen:], &p.Sec)
	}

	// The extension headers fill buf[l.ext:hl] exactly, the connect
	// header last.
	x := buf[l.ext:hl]
	if bt.Conn {
		encodeConn(x[len(x)-ConnLen:], &p.Conn)
		x = x[:len(x)-ConnLen]
	}
	switch bt.Opcode {
	case OpSprayData:
		encodeData(x, p, &l)
	case OpSprayAck:
		encodeAck(x, p)
	case OpCreditGrant, OpCreditRequest:
		encodeCredit(x, p)
	default:
		encodeClassic(x, p, opTable[bt.Opcode])
	}

	// An encrypted payload without pad is sealed from where it lies: the
	// cipher's pass writes it into the frame, and no copy comes first.
	var src []byte
	if _, ok := p.Cipher.(SourceSealer); ok && l.sec && pad == 0 && p.Sec.Flags&SecIntegrityOnly == 0 && len(payload) > 0 {
		src = payload
	} else if len(payload) > 0 && &buf[hl] != &payload[0] {
		copy(buf[hl:], payload)
	}
	clear(buf[hl+len(payload) : n-ICRCLen])
	if l.sec && p.Cipher != nil {
		sl := secLayout{bth: l.bth, area: hl, tag: l.tag, intOff: l.intOff, intLen: l.intLen}
		seal(buf[:n], &sl, &p.Sec, p.Cipher, false, src)
	}
	binary.LittleEndian.PutUint32(buf[n-ICRCLen:], icrcOwned(buf[:n], &l))
	if v6 {
		putUDPChecksum6(buf, l.ip, l.udp, n)
	}
	return n, nil
}

func bit(b bool, v byte) byte {
	if b {
		return v
	}
	return 0
}

func putRETH(x []byte, r *RETH) []byte {
	binary.BigEndian.PutUint64(x[0:], r.VA)
	binary.BigEndian.PutUint32(x[8:], r.RKey)
	binary.BigEndian.PutUint32(x[12:], r.Len)
	return x[RETHLen:]
}

func encodeClassic(x []byte, p *Packet, f uint8) []byte {
	if f&opRETH != 0 {
		x = putRETH(x, &p.RETH)
	}
	if f&opImm != 0 {
		binary.BigEndian.PutUint32(x, p.Imm)
		x = x[ImmLen:]
	}
	if f&opAETH != 0 {
		binary.BigEndian.PutUint32(x, uint32(p.AETH.Syndrome)<<24|p.AETH.MSN)
		x = x[AETHLen:]
	}
	if f&opCNP != 0 {
		clear(x[:CNPPadLen])
		x = x[CNPPadLen:]
	}
	return x
}

func encodeData(x []byte, p *Packet, l *layout) []byte {
	d := &p.Data
	binary.BigEndian.PutUint32(x[0:], d.MsgID)
	binary.BigEndian.PutUint32(x[4:], d.Offset)
	binary.BigEndian.PutUint32(x[8:], d.MsgLen)
	x[12] = byte(d.Kind)
	x[13] = d.Flags
	x[14] = d.INTMax
	x[15] = d.Credit
	binary.BigEndian.PutUint64(x[16:], d.TxTime)
	x = x[DataHdrLen:]
	if d.Flags&FlagINT != 0 {
		n := INTShimLen + int(d.INTMax)*HopLen
		l.intOff, l.intLen = l.ext+DataHdrLen, n
		shim := x[:n]
		shim[INTShimVersionOff] = INTVersion
		shim[INTShimCountOff] = byte(len(p.INT) / HopLen)
		shim[INTShimMaxOff] = d.INTMax
		shim[3] = 0
		c := copy(shim[INTShimLen:], p.INT)
		clear(shim[INTShimLen+c:])
		x = x[n:]
	}
	if kindRETH(d.Kind) {
		x = putRETH(x, &p.RETH)
	}
	if kindImm(d.Kind) {
		binary.BigEndian.PutUint32(x, p.Imm)
		x = x[ImmLen:]
	}
	return x
}

func encodeAck(x []byte, p *Packet) []byte {
	a := &p.Ack
	binary.BigEndian.PutUint32(x[0:], a.CumPSN)
	binary.BigEndian.PutUint32(x[4:], a.AckedPSN)
	binary.BigEndian.PutUint32(x[8:], a.SackBase)
	binary.BigEndian.PutUint32(x[12:], a.MsgID)
	binary.BigEndian.PutUint64(x[16:], a.EchoTime)
	binary.BigEndian.PutUint32(x[24:], a.HoldNs)
	binary.BigEndian.PutUint16(x[28:], a.ECNCount)
	binary.BigEndian.PutUint16(x[30:], a.Entropy)
	x[32] = a.Syndrome
	x[33] = a.SackWords
	x[34] = a.INTHops
	x[35] = a.Flags
	binary.BigEndian.PutUint32(x[36:], a.Credit)
	x = x[AckHdrLen:]
	for i := range int(a.SackWords) {
		binary.BigEndian.PutUint64(x[8*i:], a.Sack[i])
	}
	x = x[int(a.SackWords)*8:]
	copy(x, p.INT)
	return x[len(p.INT):]
}

// trimBit is the Trimmed bit in BTH byte 4 (reserved in IBA). Byte 4 is
// variant: the ICRC and a secured packet's tag read it as all ones, so
// setting the bit changes neither.
const trimBit = 0x20

// Trim cuts the spray data packet in frame (a whole frame, as Decode
// takes it) to its headers in place, as a switch does with a packet its
// queue has no room for (NDP, Ultra Ethernet's packet trimming), and
// returns the trimmed frame's length. The trimmed packet is Ethernet, IP,
// UDP, the BTH with Trimmed set and PadCnt 0, the security header if the
// packet has one, and the data header with Flags and INTMax 0, then an
// ICRC computed over those; INT region, RETH, ImmDt, payload, pad and tag
// are gone, and the IP and UDP lengths say so, with the IPv4 header
// checksum, no UDP checksum over IPv4 and a new one over IPv6. A secured
// packet's tag is gone with its payload, so nothing authenticates the
// trimmed one: receivers of secured QPs drop it. Trim fails on a frame
// Decode would reject before its opcode, on any other opcode and on a
// packet already trimmed. Guarded by TestTrim.
func Trim(frame []byte) (int, error) {
	var l layout
	if err := parse(frame, &l); err != nil {
		return 0, err
	}
	if l.bad != nil {
		return 0, l.bad
	}
	if Opcode(frame[l.bth]) != OpSprayData || l.trimmed {
		return 0, fmt.Errorf("%w: only a whole spray data packet can be trimmed", ErrBadHeader)
	}
	if l.ext+DataHdrLen > l.tag {
		return 0, errDataShort
	}
	end := l.ext + DataHdrLen + ICRCLen
	frame[l.bth+1] &^= 0x30 // PadCnt
	frame[l.bth+4] |= trimBit
	frame[l.ext+13], frame[l.ext+14] = 0, 0 // Flags, INTMax
	if l.v6 {
		binary.BigEndian.PutUint16(frame[l.ip+4:], uint16(end-l.udp))
	} else {
		binary.BigEndian.PutUint16(frame[l.ip+2:], uint16(end-l.ip))
		putIPv4Checksum(frame, l.ip, l.ipLen)
		// None over IPv4: a sender's checksum no longer holds, and a
		// receiving kernel would drop the packet for it (TestTrimIPv4Checksum).
		frame[l.udp+6], frame[l.udp+7] = 0, 0
	}
	binary.BigEndian.PutUint16(frame[l.udp+4:], uint16(end-l.udp))
	l.end, l.intOff, l.intLen, l.trimmed, l.tag = end, 0, 0, true, end-ICRCLen
	binary.LittleEndian.PutUint32(frame[end-ICRCLen:], icrc(frame[:end], &l))
	if l.v6 {
		putUDPChecksum6(frame, l.ip, l.udp, end)
	}
	return end, nil
}
