package transport

import (
	"testing"

	"github.com/sprayfabric/spray/transport/wire"
)

// TestDataPayload: a full spray data frame, INT region and RETH/ImmDt
// included, fits the MTU, and 64 bytes more of payload would not.
func TestDataPayload(t *testing.T) {
	for _, mtu := range []int{1514, 4200, 9014} {
		cfg := Config{Profile: Spray, MTU: mtu, INTHops: 5}
		seg := DataPayload(cfg)
		p := wire.Packet{}
		p.BTH.Opcode = wire.OpSprayData
		p.Data = wire.Data{Kind: wire.KindWriteImm, Flags: wire.FlagINT, INTMax: 5}
		if n := wire.FrameLen(&p, seg); n > mtu {
			t.Errorf("MTU %d: a full frame of %d payload bytes is %d bytes", mtu, seg, n)
		}
		if n := wire.FrameLen(&p, seg+64); n <= mtu {
			t.Errorf("MTU %d: payload %d leaves room for 64 more (frame %d)", mtu, seg, n)
		}
	}
}
