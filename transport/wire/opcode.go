package wire

import "strconv"

// Per-opcode layout of the classic opcodes: which extension headers follow
// the BTH and whether a payload may follow them. OpSprayData and OpSprayAck
// have their own layouts (see doc.go).
const (
	opKnown uint8 = 1 << iota
	opRETH
	opImm
	opAETH
	opPayload
	opCNP
)

var opTable = [256]uint8{
	OpSendFirst:          opKnown | opPayload,
	OpSendMiddle:         opKnown | opPayload,
	OpSendLast:           opKnown | opPayload,
	OpSendLastImm:        opKnown | opImm | opPayload,
	OpSendOnly:           opKnown | opPayload,
	OpSendOnlyImm:        opKnown | opImm | opPayload,
	OpWriteFirst:         opKnown | opRETH | opPayload,
	OpWriteMiddle:        opKnown | opPayload,
	OpWriteLast:          opKnown | opPayload,
	OpWriteLastImm:       opKnown | opImm | opPayload,
	OpWriteOnly:          opKnown | opRETH | opPayload,
	OpWriteOnlyImm:       opKnown | opRETH | opImm | opPayload,
	OpReadRequest:        opKnown | opRETH,
	OpReadResponseFirst:  opKnown | opAETH | opPayload,
	OpReadResponseMiddle: opKnown | opPayload,
	OpReadResponseLast:   opKnown | opAETH | opPayload,
	OpReadResponseOnly:   opKnown | opAETH | opPayload,
	OpAcknowledge:        opKnown | opAETH,
	OpCNP:                opKnown | opCNP,
	OpSprayData:          opKnown | opPayload,
	OpSprayAck:           opKnown,
	OpCreditGrant:        opKnown,
	OpCreditRequest:      opKnown,
}

// Known reports whether Encode and Decode handle the opcode.
func (o Opcode) Known() bool { return opTable[o]&opKnown != 0 }

// HasPayload reports whether packets with this opcode may carry a payload.
func (o Opcode) HasPayload() bool { return opTable[o]&opPayload != 0 }

var opNames = [256]string{
	OpSendFirst:          "SEND First",
	OpSendMiddle:         "SEND Middle",
	OpSendLast:           "SEND Last",
	OpSendLastImm:        "SEND Last with Immediate",
	OpSendOnly:           "SEND Only",
	OpSendOnlyImm:        "SEND Only with Immediate",
	OpWriteFirst:         "RDMA WRITE First",
	OpWriteMiddle:        "RDMA WRITE Middle",
	OpWriteLast:          "RDMA WRITE Last",
	OpWriteLastImm:       "RDMA WRITE Last with Immediate",
	OpWriteOnly:          "RDMA WRITE Only",
	OpWriteOnlyImm:       "RDMA WRITE Only with Immediate",
	OpReadRequest:        "RDMA READ Request",
	OpReadResponseFirst:  "RDMA READ Response First",
	OpReadResponseMiddle: "RDMA READ Response Middle",
	OpReadResponseLast:   "RDMA READ Response Last",
	OpReadResponseOnly:   "RDMA READ Response Only",
	OpAcknowledge:        "Acknowledge",
	OpCNP:                "CNP",
	OpSprayData:          "spray Data",
	OpSprayAck:           "spray ACK",
	OpCreditGrant:        "spray Credit Grant",
	OpCreditRequest:      "spray Credit Request",
}

// String returns the opcode's name, or its number for an unknown opcode.
func (o Opcode) String() string {
	if s := opNames[o]; s != "" {
		return s
	}
	return "Opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}

// String returns the kind's name.
func (k OpKind) String() string {
	switch k {
	case KindSend:
		return "Send"
	case KindSendImm:
		return "SendImm"
	case KindWrite:
		return "Write"
	case KindWriteImm:
		return "WriteImm"
	case KindReadResp:
		return "ReadResp"
	case KindReadReq:
		return "ReadReq"
	}
	return "OpKind(" + strconv.Itoa(int(k)) + ")"
}

// HasRETH reports whether a RETH follows the spray data header (and its
// INT region) of kind k: KindWrite, KindWriteImm and KindReadReq.
func (k OpKind) HasRETH() bool { return k == KindWrite || k == KindWriteImm || k == KindReadReq }

// HasImm reports whether ImmDt follows the spray data header (and RETH) of
// kind k: KindSendImm, KindWriteImm and KindReadResp.
func (k OpKind) HasImm() bool { return k == KindSendImm || k == KindWriteImm || k == KindReadResp }

func kindRETH(k OpKind) bool { return k.HasRETH() }
func kindImm(k OpKind) bool  { return k.HasImm() }
