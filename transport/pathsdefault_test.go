package transport

import (
	"testing"

	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/multipath"
)

// TestSprayDefaultsToAdaptive: a zero Config's Spray QP sprays adaptively
// (its policy picks resend and acknowledgement paths, which only the
// adaptive one does), RoCE's keeps one path, and OnINTFabric changes the
// INT room of Spray only.
func TestSprayDefaultsToAdaptive(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		s := newSimPair(t, mem.Config{Seed: 1}, Config{Profile: prof, Seed: 1})
		_, adaptive := s.qa.paths.(multipath.Resender)
		if adaptive != (prof == Spray) {
			t.Errorf("%v: adaptive path policy %v", prof, adaptive)
		}
		if n := len(s.qa.PathStats()); prof == RoCE && n != 1 {
			t.Errorf("RoCE QP on %d paths", n)
		}
	}
	if c := (Config{Profile: Spray}).OnINTFabric(0); c.INTHops != FabricINTHops || c.Paths != PathsDefault {
		t.Errorf("Spray OnINTFabric(0) = INTHops %d, Paths %v", c.INTHops, c.Paths)
	}
	if c := (Config{Profile: Spray}).OnINTFabric(3); c.INTHops != 3 {
		t.Errorf("Spray OnINTFabric(3) = INTHops %d", c.INTHops)
	}
	if c := (Config{Profile: RoCE}).OnINTFabric(0); c.INTHops != 0 {
		t.Errorf("RoCE OnINTFabric = INTHops %d", c.INTHops)
	}
}
