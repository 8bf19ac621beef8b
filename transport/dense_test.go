package transport

import (
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
)

// TestEngineDenseLookup: QP finds every live QP by number and no destroyed
// or unknown one, on an engine that numbers its QPs in sequence (all in the
// dense table) and on one that draws them at random (few in it), and the
// dense table stays within denseSlots slots per QP.
func TestEngineDenseLookup(t *testing.T) {
	for _, seed := range []uint64{7, 0} {
		fab := mem.NewFabric(mem.Config{Seed: 1}, &clock.Sim{})
		p, err := fab.NewPort([6]byte{2, 0, 0, 0, 0, 1}, netip.AddrFrom4([4]byte{10, 0, 0, 1}))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		e, err := NewEngine(p, Config{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		var live, dead []*QP
		for k := range 300 {
			q, err := e.CreateQP()
			if err != nil {
				t.Fatal(err)
			}
			if k%3 == 1 {
				e.DestroyQP(q)
				dead = append(dead, q)
			} else {
				live = append(live, q)
			}
		}
		for _, q := range live {
			if e.QP(q.QPN()) != q {
				t.Fatalf("seed %d: QP %#x not found", seed, q.QPN())
			}
		}
		for _, q := range dead {
			if got := e.QP(q.QPN()); got != nil {
				t.Fatalf("seed %d: destroyed QP %#x found", seed, q.QPN())
			}
		}
		if e.QP(maxQPN+1) != nil || e.QP(0) != nil {
			t.Fatalf("seed %d: a QP number no QP has found a QP", seed)
		}
		if n := len(e.dense); n > denseSlots*(300+8) {
			t.Fatalf("seed %d: dense table of %d slots for 300 QPs", seed, n)
		}
		if seed != 0 && e.dense[live[len(live)-1].QPN()-e.denseBase] == nil {
			t.Fatalf("seed %d: sequential QP numbers left out of the dense table", seed)
		}
	}
}
