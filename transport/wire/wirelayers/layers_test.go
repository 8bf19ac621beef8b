package wirelayers

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport/wire"
)

type kase struct {
	p       wire.Packet
	payload []byte
	want    []gopacket.LayerType // after UDP
}

func kinds(r *rand.Rand, v6 bool) []kase {
	var ks []kase
	base := func(op wire.Opcode) wire.Packet {
		p := wire.Packet{
			Eth: wire.Eth{HasVLAN: r.IntN(2) == 0, VLAN: uint16(r.Uint32())},
			IP:  wire.IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
			UDP: wire.UDP{Src: uint16(r.Uint32())},
			BTH: wire.BTH{Opcode: op, DestQP: r.Uint32() & 0xFFFFFF, PSN: r.Uint32() & 0xFFFFFF, PKey: 0xFFFF, BECN: true},
		}
		if v6 {
			p.IP = wire.IP{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), FlowLabel: 0x12345}
		}
		return p
	}
	pl := func() []byte {
		b := make([]byte, 1+r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	P, R, A, I, C := gopacket.LayerTypePayload, LayerTypeRETH, LayerTypeAETH, LayerTypeImmDt, LayerTypeCNP
	B := LayerTypeBTH
	add := func(op wire.Opcode, payload []byte, edit func(p *wire.Packet), want ...gopacket.LayerType) {
		p := base(op)
		p.RETH = wire.RETH{VA: r.Uint64(), RKey: r.Uint32(), Len: r.Uint32()}
		p.Imm = r.Uint32()
		p.AETH = wire.AETH{Syndrome: wire.NakRemoteAccessError, MSN: 77}
		if edit != nil {
			edit(&p)
		}
		if len(payload) == 0 && want[len(want)-1] == P {
			want = want[:len(want)-1]
		}
		ks = append(ks, kase{p, payload, append([]gopacket.LayerType{B}, want...)})
	}
	add(wire.OpSendFirst, pl(), nil, P)
	add(wire.OpSendMiddle, pl(), nil, P)
	add(wire.OpSendLast, pl(), nil, P)
	add(wire.OpSendLastImm, pl(), nil, I, P)
	add(wire.OpSendOnly, nil, nil, P)
	add(wire.OpSendOnlyImm, pl(), nil, I, P)
	add(wire.OpWriteFirst, pl(), nil, R, P)
	add(wire.OpWriteMiddle, pl(), nil, P)
	add(wire.OpWriteLast, pl(), nil, P)
	add(wire.OpWriteLastImm, pl(), nil, I, P)
	add(wire.OpWriteOnly, pl(), nil, R, P)
	add(wire.OpWriteOnlyImm, pl(), nil, R, I, P)
	add(wire.OpReadRequest, nil, nil, R)
	add(wire.OpReadResponseFirst, pl(), nil, A, P)
	add(wire.OpReadResponseMiddle, pl(), nil, P)
	add(wire.OpReadResponseLast, pl(), nil, A, P)
	add(wire.OpReadResponseOnly, pl(), nil, A, P)
	add(wire.OpAcknowledge, nil, nil, A)
	add(wire.OpCNP, nil, nil, C)
	for k := wire.KindSend; k <= wire.KindReadReq; k++ {
		for _, withINT := range []bool{false, true} {
			want := []gopacket.LayerType{LayerTypeData}
			if withINT {
				want = append(want, LayerTypeINT)
			}
			if k.HasRETH() {
				want = append(want, R)
			}
			if k.HasImm() {
				want = append(want, I)
			}
			add(wire.OpSprayData, pl(), func(p *wire.Packet) {
				p.Data = wire.Data{MsgID: 5, Offset: 4096, MsgLen: 1 << 20, Kind: k, TxTime: r.Uint64(), Credit: uint8(k) % 3}
				if withINT {
					p.Data.Flags, p.Data.INTMax = wire.FlagINT, 5
					p.INT = make([]byte, 2*wire.HopLen)
					wire.PutHop(p.INT, 1, wire.Hop{Switch: 9, Port: 3, RateMbps: 100000, TS: 42, QLen: 1500, TxBytes: 7})
				}
			}, append(want, P)...)
		}
	}
	for w := 1; w <= wire.MaxSackWords; w++ {
		add(wire.OpSprayAck, nil, func(p *wire.Packet) {
			p.Ack = wire.Ack{CumPSN: 100, AckedPSN: 105, SackBase: 100, SackWords: uint8(w), INTHops: uint8(w - 1), EchoTime: 12345}
			p.Ack.Sack[w-1] = 0xF0F0
			p.INT = make([]byte, (w-1)*wire.HopLen)
			if w%2 == 0 {
				p.Ack.Flags, p.Ack.Credit = wire.AckCredit, 77
			}
		}, LayerTypeAck)
	}
	for _, op := range []wire.Opcode{wire.OpCreditGrant, wire.OpCreditRequest} {
		add(op, nil, func(p *wire.Packet) {
			p.Credit = wire.Credit{Count: 9, Used: 7, Flags: wire.CreditRetry}
		}, LayerTypeCredit)
	}
	return ks
}

// Every kind of frame decodes in gopacket to the expected layers, with the
// fields that wire.Decode finds.
func TestNewPacket(t *testing.T) {
	r := testutil.Rand(t)
	for _, v6 := range []bool{false, true} {
		for _, k := range kinds(r, v6) {
			buf := make([]byte, wire.FrameLen(&k.p, len(k.payload)))
			if _, err := wire.Encode(buf, &k.p, k.payload); err != nil {
				t.Fatal(err)
			}
			var wp wire.Packet
			if err := wire.Decode(buf, &wp); err != nil {
				t.Fatal(err)
			}
			pkt := gopacket.NewPacket(buf, layers.LayerTypeEthernet, gopacket.Default)
			name := fmt.Sprintf("%v ipv6=%v", k.p.BTH.Opcode, v6)
			if e := pkt.ErrorLayer(); e != nil {
				t.Fatalf("%s: %v\n%v", name, e.Error(), pkt)
			}
			var got []gopacket.LayerType
			seen := false
			for _, l := range pkt.Layers() {
				if seen {
					got = append(got, l.LayerType())
				}
				seen = seen || l.LayerType() == layers.LayerTypeUDP
			}
			if fmt.Sprint(got) != fmt.Sprint(k.want) {
				t.Fatalf("%s: layers %v, want %v\n%v", name, got, k.want, pkt)
			}
			// Each of our layers names the next one (none after the last).
			ls := pkt.Layers()
			for i, l := range ls {
				dl, ok := l.(decodingLayer)
				if !ok {
					continue
				}
				want := gopacket.LayerTypeZero
				if i+1 < len(ls) {
					want = ls[i+1].LayerType()
				}
				if dl.NextLayerType() != want {
					t.Fatalf("%s: %v.NextLayerType() = %v, next layer is %v", name, l.LayerType(), dl.NextLayerType(), want)
				}
			}
			b := pkt.Layer(LayerTypeBTH).(*BTH)
			if b.BTH != wp.BTH {
				t.Fatalf("%s: BTH %+v, wire %+v", name, b.BTH, wp.BTH)
			}
			if b.CanDecode() != LayerTypeBTH || b.ICRC == 0 {
				t.Fatalf("%s: CanDecode %v, ICRC %#x", name, b.CanDecode(), b.ICRC)
			}
			if l, ok := pkt.Layer(LayerTypeRETH).(*RETH); ok && l.RETH != wp.RETH {
				t.Fatalf("%s: RETH %+v, wire %+v", name, l.RETH, wp.RETH)
			}
			if l, ok := pkt.Layer(LayerTypeAETH).(*AETH); ok && (l.AETH != wp.AETH || !l.NAK) {
				t.Fatalf("%s: AETH %+v, wire %+v", name, l.AETH, wp.AETH)
			}
			if l, ok := pkt.Layer(LayerTypeImmDt).(*ImmDt); ok && l.Imm != wp.Imm {
				t.Fatalf("%s: Imm %#x, wire %#x", name, l.Imm, wp.Imm)
			}
			if l, ok := pkt.Layer(LayerTypeData).(*Data); ok && l.Data != wp.Data {
				t.Fatalf("%s: Data %+v, wire %+v", name, l.Data, wp.Data)
			}
			if l, ok := pkt.Layer(LayerTypeINT).(*INT); ok {
				if l.Version != wire.INTVersion || int(l.Count)*wire.HopLen != len(wp.INT) || l.Max != 5 ||
					l.Hops[1] != wire.HopAt(wp.INT, 1) || l.Hops[1].Switch != 9 {
					t.Fatalf("%s: INT %+v", name, l)
				}
			}
			if l, ok := pkt.Layer(LayerTypeAck).(*Ack); ok {
				if l.Ack != wp.Ack || len(l.Hops)*wire.HopLen != len(wp.INT) {
					t.Fatalf("%s: Ack %+v, wire %+v", name, l.Ack, wp.Ack)
				}
			}
			if l, ok := pkt.Layer(LayerTypeCredit).(*Credit); ok && l.Credit != wp.Credit {
				t.Fatalf("%s: Credit %+v, wire %+v", name, l.Credit, wp.Credit)
			}
			if len(k.payload) > 0 {
				app := pkt.ApplicationLayer()
				if app == nil || !bytes.Equal(app.Payload(), k.payload) {
					t.Fatalf("%s: application payload %v, want %x", name, app, k.payload)
				}
			} else if pkt.ApplicationLayer() != nil {
				t.Fatalf("%s: payload layer without payload", name)
			}
			s := pkt.String()
			if !strings.Contains(s, "Opcode="+k.p.BTH.Opcode.String()) || !strings.Contains(s, "DestQP=") {
				t.Fatalf("%s: packet string lacks BTH fields:\n%s", name, s)
			}
		}
	}
}

// Truncated frames give a decode failure layer, never a panic; a RoCE payload
// too short for the opcode's headers gives wire.ErrTruncated.
func TestTruncated(t *testing.T) {
	r := testutil.Rand(t)
	for _, k := range kinds(r, false) {
		buf := make([]byte, wire.FrameLen(&k.p, len(k.payload)))
		if _, err := wire.Encode(buf, &k.p, k.payload); err != nil {
			t.Fatal(err)
		}
		for n := range len(buf) {
			pkt := gopacket.NewPacket(buf[:n], layers.LayerTypeEthernet, gopacket.Default)
			_ = pkt.String()
		}
		if len(k.want) < 2 || k.want[1] == gopacket.LayerTypePayload {
			continue
		}
		off := wire.EthLen + wire.IPv4Len + wire.UDPLen
		if k.p.Eth.HasVLAN {
			off += wire.VLANLen
		}
		bth := buf[off:]
		short := append(append([]byte{}, bth[:wire.BTHLen]...), 1, 2, 3, 4)
		short[1] &^= 0x30 // no pad
		pkt := gopacket.NewPacket(short, LayerTypeBTH, gopacket.Default)
		fail := pkt.ErrorLayer()
		if fail == nil || !errors.Is(fail.Error(), wire.ErrTruncated) {
			t.Fatalf("%v: BTH+ICRC only: error layer %v", k.p.BTH.Opcode, fail)
		}
		if b, ok := pkt.Layer(LayerTypeBTH).(*BTH); !ok || b.Opcode != k.p.BTH.Opcode || b.ICRC != 0x04030201 {
			t.Fatalf("%v: BTH layer of short packet: %+v", k.p.BTH.Opcode, pkt.Layer(LayerTypeBTH))
		}
	}
}

// Each layer works in a DecodingLayerParser too.
func TestDecodingLayerParser(t *testing.T) {
	var (
		eth  layers.Ethernet
		ip4  layers.IPv4
		udp  layers.UDP
		bth  BTH
		reth RETH
		aeth AETH
		imm  ImmDt
		cnp  CNP
		data Data
		in   INT
		ack  Ack
		crd  Credit
		pl   gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &udp, &bth, &reth, &aeth, &imm, &cnp, &data, &in, &ack, &crd, &pl)
	r := testutil.Rand(t)
	for _, k := range kinds(r, false) {
		k.p.Eth.HasVLAN = false
		switch {
		case k.p.BTH.Opcode == wire.OpWriteOnlyImm:
			continue // documented: RETH cannot know that ImmDt follows
		case k.p.BTH.Opcode == wire.OpSprayData && (k.p.Data.Kind == wire.KindWriteImm || (k.p.Data.Flags != 0 && (k.p.Data.Kind.HasRETH() || k.p.Data.Kind.HasImm()))):
			continue // same for INT followed by RETH or ImmDt
		}
		buf := make([]byte, wire.FrameLen(&k.p, len(k.payload)))
		if _, err := wire.Encode(buf, &k.p, k.payload); err != nil {
			t.Fatal(err)
		}
		var got []gopacket.LayerType
		if err := parser.DecodeLayers(buf, &got); err != nil {
			t.Fatalf("%v: %v", k.p.BTH.Opcode, err)
		}
		if fmt.Sprint(got[3:]) != fmt.Sprint(k.want) {
			t.Fatalf("%v: layers %v, want %v", k.p.BTH.Opcode, got[3:], k.want)
		}
		if bth.BTH.PSN != k.p.BTH.PSN || bth.BTH.DestQP != k.p.BTH.DestQP {
			t.Fatalf("%v: BTH %+v", k.p.BTH.Opcode, bth.BTH)
		}
		if len(k.payload) > 0 && !bytes.Equal(pl, k.payload) {
			t.Fatalf("%v: payload %x, want %x", k.p.BTH.Opcode, []byte(pl), k.payload)
		}
	}
}

// A trimmed spray data packet (wire.Trim) decodes as a BTH with Trimmed
// set and the data header alone, as wire.Decode gives them.
func TestTrimmed(t *testing.T) {
	r := testutil.Rand(t)
	n := 0
	for _, v6 := range []bool{false, true} {
		for _, k := range kinds(r, v6) {
			if k.p.BTH.Opcode != wire.OpSprayData {
				continue
			}
			buf := make([]byte, wire.FrameLen(&k.p, len(k.payload)))
			if _, err := wire.Encode(buf, &k.p, k.payload); err != nil {
				t.Fatal(err)
			}
			m, err := wire.Trim(buf)
			if err != nil {
				t.Fatal(err)
			}
			var wp wire.Packet
			if err := wire.Decode(buf[:m], &wp); err != nil {
				t.Fatal(err)
			}
			pkt := gopacket.NewPacket(buf[:m], layers.LayerTypeEthernet, gopacket.Default)
			if e := pkt.ErrorLayer(); e != nil {
				t.Fatalf("%v: %v", k.p.Data.Kind, e.Error())
			}
			b, ok1 := pkt.Layer(LayerTypeBTH).(*BTH)
			d, ok2 := pkt.Layer(LayerTypeData).(*Data)
			if !ok1 || !ok2 || !b.Trimmed || b.BTH != wp.BTH || d.Data != wp.Data || d.NextLayerType() != gopacket.LayerTypeZero || pkt.ApplicationLayer() != nil {
				t.Fatalf("%v: layers %v", k.p.Data.Kind, pkt)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no spray data packet in the kinds")
	}
}
