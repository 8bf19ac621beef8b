package mem

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
)

// FuzzFabric drives ports with a sequence of operations encoded in the fuzz
// input, misuse included, and checks after every step that no frame and no
// buffer is lost track of.
func FuzzFabric(f *testing.F) {
	f.Add([]byte{0, 4, 1, 0, 2, 4, 40, 2, 1, 3, 1})
	f.Add([]byte{5, 200, 0, 8, 1, 0, 3, 1, 0, 0, 7, 7, 1, 6, 0, 4, 255, 2, 0, 3, 0})
	f.Add([]byte{0, 8, 0, 8, 1, 0, 1, 1, 1, 2, 4, 10, 2, 2, 6, 2, 3, 2, 6, 1, 7, 3, 0, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const nports = 3
		clk := new(clock.Sim)
		fab := NewFabric(Config{Frames: 8, FrameSize: 256, Bandwidth: 1e9, QueueBytes: 1500, Delay: 100}, clk)
		defer fab.Close()
		var ports [nports]*Port
		var txHeld, rxHeld [nports][]link.Frame
		for i := range ports {
			ports[i], _ = fab.NewPort(macOf(i), ipOf(i))
		}
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return int(b)
		}
		fs := make([]link.Frame, 16)
		for len(ops) > 0 {
			op, x := next()%8, next()%nports
			p := ports[x]
			switch op {
			case 0: // Alloc
				n := p.Alloc(fs[:next()%16])
				txHeld[x] = append(txHeld[x], fs[:n]...)
			case 1: // Send k held frames to port d with length l
				k := min(next()%8, len(txHeld[x]))
				d, l := next()%(nports+1), next()
				for i := range txHeld[x][:k] {
					b := txHeld[x][i].Buf
					if l < len(b) {
						b = b[:l]
						if l >= 6 {
							m := macOf(d)
							copy(b, m[:])
						}
					}
					txHeld[x][i].Buf = b
				}
				p.Send(txHeld[x][:k])
				txHeld[x] = txHeld[x][k:]
			case 2: // Recv
				n, _ := p.Recv(fs[:next()%16])
				rxHeld[x] = append(rxHeld[x], fs[:n]...)
			case 3: // Release k held frames through port r (maybe the wrong one)
				k, r := min(next()%8, len(rxHeld[x])), ports[next()%nports]
				r.Release(rxHeld[x][:k])
				rxHeld[x] = rxHeld[x][k:]
			case 4:
				clk.Advance(time.Duration(next()) * 50)
			case 5:
				v := float64(next()) / 255
				fab.SetLoss(v / 4)
				fab.SetDup(v / 2)
				fab.SetReorder(v, time.Duration(next())*10)
				fab.SetBurstLoss(v/8, next()%5)
			case 6:
				if next()%2 == 0 {
					p.Close()
				} else if np, err := fab.NewPort(macOf(x), ipOf(x)); err == nil {
					ports[x] = np
					rxHeld[x], txHeld[x] = nil, nil
				}
			case 7: // made-up IDs
				id := uint64(next())<<32 | uint64(next())
				p.Release([]link.Frame{{ID: id}})
				p.Send([]link.Frame{{ID: id, Buf: make([]byte, 20)}})
				p.Blackhole(next()%4 == 0)
			}
			checkConservation(t, fab)
			checkPools(t, fab)
		}
	})
}
