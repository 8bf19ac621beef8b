package wirelayers

import (
	"encoding/binary"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/sprayfabric/spray/transport/wire"
)

// Layer types, registered with gopacket under the numbers 1791-1799.
var (
	LayerTypeBTH   = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{Name: "BTH", Decoder: gopacket.DecodeFunc(decodeRoCE)})
	LayerTypeRETH  = gopacket.RegisterLayerType(1792, gopacket.LayerTypeMetadata{Name: "RETH", Decoder: decoderOf[RETH]()})
	LayerTypeAETH  = gopacket.RegisterLayerType(1793, gopacket.LayerTypeMetadata{Name: "AETH", Decoder: decoderOf[AETH]()})
	LayerTypeImmDt = gopacket.RegisterLayerType(1794, gopacket.LayerTypeMetadata{Name: "ImmDt", Decoder: decoderOf[ImmDt]()})
	LayerTypeCNP   = gopacket.RegisterLayerType(1795, gopacket.LayerTypeMetadata{Name: "CNP", Decoder: decoderOf[CNP]()})
	LayerTypeData  = gopacket.RegisterLayerType(1796, gopacket.LayerTypeMetadata{Name: "SprayData", Decoder: decoderOf[Data]()})
	LayerTypeAck   = gopacket.RegisterLayerType(1797, gopacket.LayerTypeMetadata{Name: "SprayAck", Decoder: decoderOf[Ack]()})
	LayerTypeINT   = gopacket.RegisterLayerType(1798, gopacket.LayerTypeMetadata{Name: "SprayINT", Decoder: decoderOf[INT]()})
	// LayerTypeCredit is the header of a credit grant or request.
	LayerTypeCredit = gopacket.RegisterLayerType(1799, gopacket.LayerTypeMetadata{Name: "SprayCredit", Decoder: decoderOf[Credit]()})
)

func init() {
	layers.RegisterUDPPortLayerType(layers.UDPPort(wire.UDPPort), LayerTypeBTH)
}

// decodingLayer is what every layer of this package implements.
type decodingLayer interface {
	gopacket.DecodingLayer
	gopacket.Layer
	setNext(gopacket.LayerType)
}

// decoderOf returns a gopacket decoder for one extension header on its own
// (gopacket.NewPacket with that layer type first): it decodes the header and
// hands its payload to the header's default next layer.
func decoderOf[T any, P interface {
	*T
	decodingLayer
}]() gopacket.Decoder {
	return gopacket.DecodeFunc(func(data []byte, pb gopacket.PacketBuilder) error {
		l := P(new(T))
		if err := l.DecodeFromBytes(data, pb); err != nil {
			return err
		}
		pb.AddLayer(l)
		if next := l.NextLayerType(); next != gopacket.LayerTypeZero {
			return pb.NextDecoder(next)
		}
		return nil
	})
}

// next is embedded in every layer: the layer type that follows it.
type next struct{ nextType gopacket.LayerType }

func (n *next) setNext(t gopacket.LayerType) { n.nextType = t }

// NextLayerType returns the type of the layer that follows: set from the
// opcode and the data header when the layer was decoded as part of a whole
// packet, and otherwise guessed from the header alone (see the package doc).
func (n *next) NextLayerType() gopacket.LayerType { return n.nextType }

// payloadOrZero is the default successor of a header: the payload if bytes
// are left, nothing otherwise.
func payloadOrZero(rest []byte) gopacket.LayerType {
	if len(rest) > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

func truncated(what string, need, have int) error {
	return fmt.Errorf("%w: %s needs %d bytes, %d left", wire.ErrTruncated, what, need, have)
}

// BTH is the base transport header layer. It decodes the whole UDP payload:
// the ICRC at its end goes to the ICRC field, the pad before it is dropped,
// and Payload is what lies between (extension headers and payload).
type BTH struct {
	layers.BaseLayer
	wire.BTH
	// ICRC is the frame's ICRC as stored (little-endian). The layer cannot
	// verify it: that needs the IP header (use wire.Decode or wire.ICRC).
	ICRC uint32
	next
}

// LayerType returns LayerTypeBTH.
func (b *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (b *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// DecodeFromBytes decodes a BTH from a UDP payload (BTH ... ICRC).
func (b *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.BTHLen+wire.ICRCLen {
		df.SetTruncated()
		return truncated("BTH and ICRC", wire.BTHLen+wire.ICRCLen, len(data))
	}
	b.BTH = wire.BTH{
		Opcode:  wire.Opcode(data[0]),
		SE:      data[1]&0x80 != 0,
		M:       data[1]&0x40 != 0,
		PadCnt:  data[1] >> 4 & 3,
		TVer:    data[1] & 0x0F,
		PKey:    binary.BigEndian.Uint16(data[2:]),
		FECN:    data[4]&0x80 != 0,
		BECN:    data[4]&0x40 != 0,
		DestQP:  binary.BigEndian.Uint32(data[4:]) & 0xFFFFFF,
		AckReq:  data[8]&0x80 != 0,
		PSN:     binary.BigEndian.Uint32(data[8:]) & 0xFFFFFF,
		Trimmed: data[4]&0x20 != 0,
	}
	end := len(data) - wire.ICRCLen
	b.ICRC = binary.LittleEndian.Uint32(data[end:])
	pad := int(b.PadCnt)
	if end-wire.BTHLen < pad {
		return fmt.Errorf("%w: pad count %d, %d bytes after the BTH", wire.ErrBadLength, pad, end-wire.BTHLen)
	}
	b.Contents, b.Payload = data[:wire.BTHLen], data[wire.BTHLen:end-pad]
	b.nextType = firstAfterBTH(b.Opcode, b.Payload)
	return nil
}

// firstAfterBTH returns the first layer after the BTH of an opcode.
func firstAfterBTH(op wire.Opcode, rest []byte) gopacket.LayerType {
	switch op {
	case wire.OpWriteFirst, wire.OpWriteOnly, wire.OpWriteOnlyImm, wire.OpReadRequest:
		return LayerTypeRETH
	case wire.OpSendLastImm, wire.OpSendOnlyImm, wire.OpWriteLastImm:
		return LayerTypeImmDt
	case wire.OpReadResponseFirst, wire.OpReadResponseLast, wire.OpReadResponseOnly, wire.OpAcknowledge:
		return LayerTypeAETH
	case wire.OpCNP:
		return LayerTypeCNP
	case wire.OpSprayData:
		return LayerTypeData
	case wire.OpSprayAck:
		return LayerTypeAck
	case wire.OpCreditGrant, wire.OpCreditRequest:
		return LayerTypeCredit
	}
	return payloadOrZero(rest)
}

// RETH is the RDMA extended transport header layer.
type RETH struct {
	layers.BaseLayer
	wire.RETH
	next
}

// LayerType returns LayerTypeRETH.
func (r *RETH) LayerType() gopacket.LayerType { return LayerTypeRETH }

// CanDecode returns LayerTypeRETH.
func (r *RETH) CanDecode() gopacket.LayerClass { return LayerTypeRETH }

// DecodeFromBytes decodes a RETH.
func (r *RETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.RETHLen {
		df.SetTruncated()
		return truncated("RETH", wire.RETHLen, len(data))
	}
	r.RETH = wire.RETH{
		VA:   binary.BigEndian.Uint64(data[0:]),
		RKey: binary.BigEndian.Uint32(data[8:]),
		Len:  binary.BigEndian.Uint32(data[12:]),
	}
	r.Contents, r.Payload = data[:wire.RETHLen], data[wire.RETHLen:]
	r.nextType = payloadOrZero(r.Payload)
	return nil
}

// AETH is the ACK extended transport header layer.
type AETH struct {
	layers.BaseLayer
	wire.AETH
	// NAK says the syndrome is a NAK.
	NAK bool
	next
}

// LayerType returns LayerTypeAETH.
func (a *AETH) LayerType() gopacket.LayerType { return LayerTypeAETH }

// CanDecode returns LayerTypeAETH.
func (a *AETH) CanDecode() gopacket.LayerClass { return LayerTypeAETH }

// DecodeFromBytes decodes an AETH.
func (a *AETH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.AETHLen {
		df.SetTruncated()
		return truncated("AETH", wire.AETHLen, len(data))
	}
	w := binary.BigEndian.Uint32(data)
	a.AETH = wire.AETH{Syndrome: uint8(w >> 24), MSN: w & 0xFFFFFF}
	a.NAK = wire.IsNak(a.Syndrome)
	a.Contents, a.Payload = data[:wire.AETHLen], data[wire.AETHLen:]
	a.nextType = payloadOrZero(a.Payload)
	return nil
}

// ImmDt is the immediate data layer.
type ImmDt struct {
	layers.BaseLayer
	Imm uint32
	next
}

// LayerType returns LayerTypeImmDt.
func (i *ImmDt) LayerType() gopacket.LayerType { return LayerTypeImmDt }

// CanDecode returns LayerTypeImmDt.
func (i *ImmDt) CanDecode() gopacket.LayerClass { return LayerTypeImmDt }

// DecodeFromBytes decodes an ImmDt.
func (i *ImmDt) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.ImmLen {
		df.SetTruncated()
		return truncated("ImmDt", wire.ImmLen, len(data))
	}
	i.Imm = binary.BigEndian.Uint32(data)
	i.Contents, i.Payload = data[:wire.ImmLen], data[wire.ImmLen:]
	i.nextType = payloadOrZero(i.Payload)
	return nil
}

// CNP is the 16 reserved bytes after the BTH of a RoCEv2 CNP.
type CNP struct {
	layers.BaseLayer
	next
}

// LayerType returns LayerTypeCNP.
func (c *CNP) LayerType() gopacket.LayerType { return LayerTypeCNP }

// CanDecode returns LayerTypeCNP.
func (c *CNP) CanDecode() gopacket.LayerClass { return LayerTypeCNP }

// DecodeFromBytes decodes the CNP's reserved bytes.
func (c *CNP) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.CNPPadLen {
		df.SetTruncated()
		return truncated("CNP", wire.CNPPadLen, len(data))
	}
	c.Contents, c.Payload = data[:wire.CNPPadLen], data[wire.CNPPadLen:]
	c.nextType = payloadOrZero(c.Payload)
	return nil
}

// Data is spray's data header layer.
type Data struct {
	layers.BaseLayer
	wire.Data
	next
}

// LayerType returns LayerTypeData.
func (d *Data) LayerType() gopacket.LayerType { return LayerTypeData }

// CanDecode returns LayerTypeData.
func (d *Data) CanDecode() gopacket.LayerClass { return LayerTypeData }

// DecodeFromBytes decodes a spray data header. Its next layer is INT,
// RETH, ImmDt or the payload, as its flags and kind say.
func (d *Data) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.DataHdrLen {
		df.SetTruncated()
		return truncated("spray data header", wire.DataHdrLen, len(data))
	}
	d.Data = wire.Data{
		MsgID:  binary.BigEndian.Uint32(data[0:]),
		Offset: binary.BigEndian.Uint32(data[4:]),
		MsgLen: binary.BigEndian.Uint32(data[8:]),
		Kind:   wire.OpKind(data[12]),
		Flags:  data[13],
		INTMax: data[14],
		Credit: data[15],
		TxTime: binary.BigEndian.Uint64(data[16:]),
	}
	d.Contents, d.Payload = data[:wire.DataHdrLen], data[wire.DataHdrLen:]
	switch {
	case len(d.Payload) == 0:
		// A trimmed packet (wire.Trim): the header alone.
		d.nextType = gopacket.LayerTypeZero
	case d.Flags&wire.FlagINT != 0:
		d.nextType = LayerTypeINT
	default:
		d.nextType = afterINT(d.Kind, d.Payload)
	}
	return nil
}

// afterINT returns the layer after a data header and its INT region.
func afterINT(k wire.OpKind, rest []byte) gopacket.LayerType {
	switch {
	case k.HasRETH():
		return LayerTypeRETH
	case k.HasImm():
		return LayerTypeImmDt
	}
	return payloadOrZero(rest)
}

// INT is the INT region of a spray data packet: the shim and the hop slots
// reserved after it. Hops holds the filled ones.
type INT struct {
	layers.BaseLayer
	Version, Count, Max uint8
	Hops                []wire.Hop
	next
}

// LayerType returns LayerTypeINT.
func (n *INT) LayerType() gopacket.LayerType { return LayerTypeINT }

// CanDecode returns LayerTypeINT.
func (n *INT) CanDecode() gopacket.LayerClass { return LayerTypeINT }

// DecodeFromBytes decodes an INT shim and its Max slots.
func (n *INT) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.INTShimLen {
		df.SetTruncated()
		return truncated("INT shim", wire.INTShimLen, len(data))
	}
	n.Version, n.Count, n.Max = data[wire.INTShimVersionOff], data[wire.INTShimCountOff], data[wire.INTShimMaxOff]
	if n.Max > wire.MaxINTHops || n.Count > n.Max {
		return fmt.Errorf("%w: INT shim count %d, max %d", wire.ErrBadHeader, n.Count, n.Max)
	}
	size := wire.INTShimLen + int(n.Max)*wire.HopLen
	if len(data) < size {
		df.SetTruncated()
		return truncated("INT region", size, len(data))
	}
	n.Hops = n.Hops[:0]
	for i := range int(n.Count) {
		n.Hops = append(n.Hops, wire.HopAt(data[wire.INTShimLen:], i))
	}
	n.Contents, n.Payload = data[:size], data[size:]
	n.nextType = payloadOrZero(n.Payload)
	return nil
}

// Ack is spray's ACK header layer, with its SACK words and echoed hop
// records.
type Ack struct {
	layers.BaseLayer
	wire.Ack
	Hops []wire.Hop
	next
}

// LayerType returns LayerTypeAck.
func (a *Ack) LayerType() gopacket.LayerType { return LayerTypeAck }

// CanDecode returns LayerTypeAck.
func (a *Ack) CanDecode() gopacket.LayerClass { return LayerTypeAck }

// DecodeFromBytes decodes a spray ACK header, its SACK words and hop records.
func (a *Ack) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.AckHdrLen {
		df.SetTruncated()
		return truncated("spray ACK header", wire.AckHdrLen, len(data))
	}
	a.Ack = wire.Ack{
		CumPSN:    binary.BigEndian.Uint32(data[0:]),
		AckedPSN:  binary.BigEndian.Uint32(data[4:]),
		SackBase:  binary.BigEndian.Uint32(data[8:]),
		MsgID:     binary.BigEndian.Uint32(data[12:]),
		EchoTime:  binary.BigEndian.Uint64(data[16:]),
		HoldNs:    binary.BigEndian.Uint32(data[24:]),
		ECNCount:  binary.BigEndian.Uint16(data[28:]),
		Entropy:   binary.BigEndian.Uint16(data[30:]),
		Syndrome:  data[32],
		SackWords: data[33],
		INTHops:   data[34],
		Flags:     data[35],
		Credit:    binary.BigEndian.Uint32(data[36:]),
	}
	if a.SackWords == 0 || a.SackWords > wire.MaxSackWords || a.INTHops > wire.MaxINTHops {
		return fmt.Errorf("%w: spray ACK with %d SACK words, %d hops", wire.ErrBadHeader, a.SackWords, a.INTHops)
	}
	size := wire.AckHdrLen + int(a.SackWords)*8 + int(a.INTHops)*wire.HopLen
	if len(data) < size {
		df.SetTruncated()
		return truncated("spray ACK", size, len(data))
	}
	for i := range int(a.SackWords) {
		a.Sack[i] = binary.BigEndian.Uint64(data[wire.AckHdrLen+8*i:])
	}
	hops := data[wire.AckHdrLen+int(a.SackWords)*8 : size]
	a.Hops = a.Hops[:0]
	for i := range int(a.INTHops) {
		a.Hops = append(a.Hops, wire.HopAt(hops, i))
	}
	a.Contents, a.Payload = data[:size], data[size:]
	a.nextType = payloadOrZero(a.Payload)
	return nil
}

// decodeRoCE decodes a UDP 4791 payload into the BTH layer, its extension
// header layers and a payload layer. Unlike a DecodingLayerParser, it knows
// the opcode while it decodes the extension headers, so every layer's
// NextLayerType is right.
func decodeRoCE(data []byte, pb gopacket.PacketBuilder) error {
	b := &BTH{}
	if err := b.DecodeFromBytes(data, pb); err != nil {
		return err
	}
	pb.AddLayer(b)
	var chain [4]decodingLayer
	n := 0
	rest := b.Payload
	op := b.Opcode
	switch {
	case op == wire.OpSprayData:
		d := &Data{}
		if err := d.DecodeFromBytes(rest, pb); err != nil {
			return err
		}
		pb.AddLayer(d)
		rest = d.Payload
		if b.Trimmed {
			break // a switch cut what followed the data header (wire.Trim)
		}
		if d.Flags&wire.FlagINT != 0 {
			chain[n], n = &INT{}, n+1
		}
		if d.Kind.HasRETH() {
			chain[n], n = &RETH{}, n+1
		}
		if d.Kind.HasImm() {
			chain[n], n = &ImmDt{}, n+1
		}
	case op == wire.OpSprayAck:
		chain[n], n = &Ack{}, n+1
	case op == wire.OpCNP:
		chain[n], n = &CNP{}, n+1
	case op == wire.OpCreditGrant || op == wire.OpCreditRequest:
		chain[n], n = &Credit{}, n+1
	default:
		switch firstAfterBTH(op, nil) {
		case LayerTypeRETH:
			chain[n], n = &RETH{}, n+1
			if op == wire.OpWriteOnlyImm {
				chain[n], n = &ImmDt{}, n+1
			}
		case LayerTypeImmDt:
			chain[n], n = &ImmDt{}, n+1
		case LayerTypeAETH:
			chain[n], n = &AETH{}, n+1
		}
	}
	for i, l := range chain[:n] {
		if err := l.DecodeFromBytes(rest, pb); err != nil {
			return err
		}
		rest = l.LayerPayload()
		if i+1 < n {
			l.setNext(chain[i+1].(gopacket.Layer).LayerType())
		} else {
			l.setNext(payloadOrZero(rest))
		}
		pb.AddLayer(l)
	}
	if len(rest) == 0 {
		return nil
	}
	return pb.NextDecoder(gopacket.LayerTypePayload)
}

// Credit is the header layer of a credit grant or request.
type Credit struct {
	layers.BaseLayer
	wire.Credit
	next
}

// LayerType returns LayerTypeCredit.
func (c *Credit) LayerType() gopacket.LayerType { return LayerTypeCredit }

// CanDecode returns LayerTypeCredit.
func (c *Credit) CanDecode() gopacket.LayerClass { return LayerTypeCredit }

// DecodeFromBytes decodes a credit header.
func (c *Credit) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < wire.CreditLen {
		df.SetTruncated()
		return truncated("spray credit header", wire.CreditLen, len(data))
	}
	c.Credit = wire.Credit{
		Count: binary.BigEndian.Uint32(data[0:]),
		Used:  binary.BigEndian.Uint32(data[4:]),
		Flags: data[8],
	}
	c.Contents, c.Payload = data[:wire.CreditLen], data[wire.CreditLen:]
	c.nextType = payloadOrZero(c.Payload)
	return nil
}
