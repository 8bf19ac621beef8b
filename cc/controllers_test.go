package cc

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// FuzzControllers drives every controller through the Controller interface
// with events decoded from the input, time jumps backwards and hostile
// values included, and checks what the transport relies on: a window of 0
// or more, a finite rate of 0 or more, a timer that OnTimer clears.
func FuzzControllers(f *testing.F) {
	f.Add([]byte("\x00\x10\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"))
	f.Add([]byte("\x04\xff\xff\xff\xff\x02\x00\x00\x00\x01\x03\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctrls := []Controller{NewHPCC(HPCCConfig{}), NewSwift(SwiftConfig{}), NewDCQCN(DCQCNConfig{ByteCounter: 4096}), NewAuto(AutoConfig{Swift: SwiftConfig{RelativeTarget: true, EndpointTarget: -1}})}
		rec := make([]byte, 2*hopLen)
		now := clock.Time(1 << 40)
		for len(data) >= 5 {
			op, v := data[0], int32(binary.BigEndian.Uint32(data[1:5]))
			data = data[5:]
			now += clock.Time(v) // may go backwards
			for _, c := range ctrls {
				switch op % 8 {
				case 0:
					c.OnSend(now, int(v))
				case 1:
					copy(rec, data)
					c.OnAck(Sample{Now: now, AckedBytes: int(v), RTT: time.Duration(v), HoldTime: time.Duration(v) / 3, INT: decodeHops(rec[:int(op>>3)%3*hopLen])})
				case 2:
					c.OnLoss(now, int(v))
				case 3:
					c.OnTimeout(now)
				case 4:
					c.OnCNP(now)
				default:
					if c.NextTimer() <= now {
						c.OnTimer(now)
						if next := c.NextTimer(); next <= now {
							t.Fatalf("%T: timer still due at %v after OnTimer at %v", c, next, now)
						}
					}
				}
				if w, r := c.Window(), c.Rate(); w < 0 || r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
					t.Fatalf("%T: window %d rate %v", c, w, r)
				}
			}
		}
	})
}
