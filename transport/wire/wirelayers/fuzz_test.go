package wirelayers

import (
	"testing"

	"github.com/gopacket/gopacket"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport/wire"
)

// FuzzLayers: the layers never panic on any UDP 4791 payload (gopacket's
// panic recovery is switched off so that a panic fails the fuzzer), and every
// layer's contents lie within the input.
func FuzzLayers(f *testing.F) {
	r := testutil.Rand(f)
	for _, v6 := range []bool{false, true} {
		for _, k := range kinds(r, v6) {
			buf := make([]byte, wire.FrameLen(&k.p, len(k.payload)))
			if _, err := wire.Encode(buf, &k.p, k.payload); err != nil {
				f.Fatal(err)
			}
			f.Add(buf[wire.HeaderLen(&wire.Packet{Eth: k.p.Eth, IP: k.p.IP})-wire.BTHLen:]) // the UDP payload
		}
	}
	opts := gopacket.DecodeOptions{SkipDecodeRecovery: true, NoCopy: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		pkt := gopacket.NewPacket(data, LayerTypeBTH, opts)
		total := 0
		for _, l := range pkt.Layers() {
			total += len(l.LayerContents())
		}
		if total > len(data) {
			t.Fatalf("layers hold %d bytes of a %d-byte input", total, len(data))
		}
		_ = pkt.String()
	})
}
