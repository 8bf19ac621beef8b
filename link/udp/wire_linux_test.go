package udp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock/socktest"
	"github.com/sprayfabric/spray/transport/wire"
)

// TestWireCodec encodes spray data packets with the transport's codec, sends
// them through the link and decodes what arrives: the synthesized headers
// must pass the codec's strict checks (IPv4 header checksum, ICRC over the
// IP and UDP headers, lengths) for both address families.
func TestWireCodec(t *testing.T) {
	r := testutil.Rand(t)
	ipA, ipB := loopbackPair(r)
	p0 := testutil.LoopbackPort(r, 20000, 20000)
	for _, v6 := range []bool{false, true} {
		ca := Config{Local: ipA, Entropies: []uint16{p0, p0 + 1, p0 + 2}}
		cb := Config{Local: ipB}
		if v6 {
			lo := netip.IPv6Loopback()
			ca = Config{Local: lo, Port: p0 + 10, PeerPort: p0 + 11, Entropies: []uint16{p0 + 12, p0 + 13}}
			cb = Config{Local: lo, Port: p0 + 11, PeerPort: p0 + 10}
		}
		a, b := open(t, ca), open(t, cb)
		fs := make([]link.Frame, 1)
		in := make([]link.Frame, 1)
		for i := range 200 {
			if a.Alloc(fs) != 1 {
				t.Fatal("Alloc")
			}
			ent := ca.Entropies[i%len(ca.Entropies)]
			payload := make([]byte, r.IntN(1200))
			socktest.Content(payload, uint32(i))
			pk := wire.Packet{
				Eth:  wire.Eth{Src: a.Info().MAC},
				IP:   wire.IP{Src: a.Info().IP, Dst: b.Info().IP, TOS: uint8(i % 4), FlowLabel: uint32(i)},
				UDP:  wire.UDP{Src: ent},
				BTH:  wire.BTH{Opcode: wire.OpSprayData, DestQP: 77, PSN: uint32(i)},
				Data: wire.Data{MsgID: 1, Offset: uint32(i), MsgLen: 1 << 20, TxTime: uint64(i)},
			}
			n, err := wire.Encode(fs[0].Buf, &pk, payload)
			if err != nil {
				t.Fatal(err)
			}
			fs[0].Buf = fs[0].Buf[:n]
			if m, err := a.Send(fs); m != 1 || err != nil {
				t.Fatalf("Send = %d, %v", m, err)
			}
			k, err := socktest.Recv(b, in, 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if k != 1 {
				t.Fatalf("packet %d not received", i)
			}
			var q wire.Packet
			if err := wire.Decode(in[0].Buf, &q); err != nil {
				t.Fatalf("v6 %v packet %d: Decode: %v", v6, i, err)
			}
			if string(q.Payload) != string(payload) || q.BTH.PSN != uint32(i) || q.UDP.Src != ent ||
				q.IP.Src != a.Info().IP || q.IP.Dst != b.Info().IP || q.IP.TOS != uint8(i%4) || q.Data.Offset != uint32(i) {
				t.Fatalf("v6 %v packet %d: decoded %+v", v6, i, q)
			}
			b.Release(in)
		}
	}
}
