package wire

import (
	"errors"
	"net/netip"
	"testing"
)

// creditFrame encodes a spray packet of op with every credit field set.
func creditFrame(t *testing.T, op Opcode) []byte {
	t.Helper()
	p := Packet{
		IP:  IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
		BTH: BTH{Opcode: op, DestQP: 0x123},
	}
	switch op {
	case OpSprayData:
		p.Data = Data{MsgID: 1, MsgLen: 8, Credit: DataCredited}
	case OpSprayAck:
		p.Ack = Ack{SackWords: 1, Flags: AckCredit, Credit: 77}
	default:
		p.Credit = Credit{Count: 9, Used: 7, Flags: CreditRetry}
	}
	var payload []byte
	if op == OpSprayData {
		payload = make([]byte, 8)
	}
	buf := make([]byte, 256)
	n, err := Encode(buf, &p, payload)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// TestCreditFields: the credit fields round-trip, and a frame whose
// credit bytes are nonsense (unknown bits, both data bits, a credit
// without AckCredit, reserved bytes set) is ErrBadHeader.
func TestCreditFields(t *testing.T) {
	ext := EthLen + IPv4Len + UDPLen + BTHLen
	cases := []struct {
		op   Opcode
		off  int // from the extension headers
		val  byte
		name string
	}{
		{OpSprayData, 15, DataUnsolicited | DataCredited, "data both bits"},
		{OpSprayData, 15, 0x80, "data unknown bit"},
		{OpSprayAck, 35, 0x04, "ack unknown flag"},
		{OpSprayAck, 35, AckMsgLimit, "ack credit without flag, with message limit"},
		{OpSprayAck, 35, 0, "ack credit without flag"},
		{OpCreditGrant, 8, 0x80, "grant unknown flag"},
		{OpCreditRequest, 10, 1, "request reserved byte"},
	}
	for _, op := range []Opcode{OpSprayData, OpSprayAck, OpCreditGrant, OpCreditRequest} {
		var p Packet
		if err := Decode(creditFrame(t, op), &p); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		switch op {
		case OpSprayData:
			if p.Data.Credit != DataCredited {
				t.Errorf("data credit %#x", p.Data.Credit)
			}
		case OpSprayAck:
			if p.Ack.Flags != AckCredit || p.Ack.Credit != 77 {
				t.Errorf("ack flags %#x credit %d", p.Ack.Flags, p.Ack.Credit)
			}
		default:
			if p.Credit != (Credit{Count: 9, Used: 7, Flags: CreditRetry}) {
				t.Errorf("%v: %+v", op, p.Credit)
			}
		}
	}
	for _, c := range cases {
		f := creditFrame(t, c.op)
		f[ext+c.off] = c.val
		fixChecksums(f)
		var p Packet
		if err := Decode(f, &p); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: Decode = %v, want ErrBadHeader", c.name, err)
		}
	}
}

// TestCreditTruncated: a grant shorter than its header is ErrTruncated.
func TestCreditTruncated(t *testing.T) {
	f := creditFrame(t, OpCreditGrant)
	ext := EthLen + IPv4Len + UDPLen + BTHLen
	short := append(append([]byte{}, f[:ext+4]...), 0, 0, 0, 0)
	// Fix the IP and UDP lengths of the shortened frame.
	short[EthLen+2], short[EthLen+3] = 0, byte(len(short)-EthLen)
	short[EthLen+IPv4Len+4], short[EthLen+IPv4Len+5] = 0, byte(len(short)-EthLen-IPv4Len)
	fixChecksums(short)
	var p Packet
	if err := Decode(short, &p); !errors.Is(err, ErrTruncated) {
		t.Errorf("Decode = %v, want ErrTruncated", err)
	}
}

// TestAckMsgLimit: a plain ACK's message limit round-trips in MsgID; a
// NAK with the flag is ErrBadHeader, to Encode and to Decode.
func TestAckMsgLimit(t *testing.T) {
	p := Packet{
		IP:  IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
		BTH: BTH{Opcode: OpSprayAck, DestQP: 0x123},
		Ack: Ack{SackWords: 1, Flags: AckMsgLimit, MsgID: 0xFFFFFFF0},
	}
	buf := make([]byte, 256)
	n, err := Encode(buf, &p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var q Packet
	if err := Decode(buf[:n], &q); err != nil {
		t.Fatal(err)
	}
	if q.Ack.Flags != AckMsgLimit || q.Ack.MsgID != 0xFFFFFFF0 {
		t.Fatalf("flags %#x limit %d, want %#x %d", q.Ack.Flags, q.Ack.MsgID, AckMsgLimit, uint32(0xFFFFFFF0))
	}
	nak := p
	nak.Ack.Syndrome = NakPSNSequenceError
	if _, err := Encode(make([]byte, 256), &nak, nil); !errors.Is(err, ErrBadHeader) {
		t.Errorf("Encode of a NAK with a message limit = %v, want ErrBadHeader", err)
	}
	f := buf[:n]
	f[EthLen+IPv4Len+UDPLen+BTHLen+32] = NakPSNSequenceError
	fixChecksums(f)
	if err := Decode(f, &q); !errors.Is(err, ErrBadHeader) {
		t.Errorf("Decode of a NAK with a message limit = %v, want ErrBadHeader", err)
	}
}
