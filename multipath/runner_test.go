package multipath

import (
	"testing"

	"github.com/sprayfabric/spray/clock"
)

// A Runner's Next keeps its pick for n packets in a row, counts each, and
// still covers the set at run granularity; the adaptive policy ends a run
// whose path it takes out of the set.
func TestRunnerRuns(t *testing.T) {
	const n = 16
	set := Entropies(7, 8)
	for name, p := range map[string]Policy{
		"spray":    NewSpray(set, 11),
		"adaptive": NewAdaptive(set, 11, AdaptiveConfig{}),
	} {
		p.(Runner).SetRun(n)
		seen := map[uint16]bool{}
		now := clock.Time(1000)
		for r := range len(set) {
			first := p.Next(now)
			seen[first] = true
			for k := 1; k < n; k++ {
				if e := p.Next(now); e != first {
					t.Fatalf("%s: run %d packet %d on %d, the run's on %d", name, r, k, e, first)
				}
			}
		}
		if len(seen) != len(set) {
			t.Fatalf("%s: %d runs covered %d of %d entropies", name, len(set), len(seen), len(set))
		}
		var sum uint64
		for _, s := range p.Stats() {
			sum += s.Packets
		}
		if sum != n*uint64(len(set)) {
			t.Fatalf("%s: Packets sum to %d, want %d", name, sum, n*len(set))
		}
	}

	a := NewAdaptive(set, 11, AdaptiveConfig{LossLimit: 2})
	a.(Runner).SetRun(n)
	now := clock.Time(1000)
	e := a.Next(now)
	a.OnLoss(now, e)
	a.OnLoss(now, e)
	if st := a.Stats(); !st[indexOf(set, e)].Down {
		t.Fatalf("path %d not taken out after LossLimit losses", e)
	}
	if next := a.Next(now); next == e {
		t.Fatalf("the run went on on %d after its path was taken out", e)
	}
}

func indexOf(set []uint16, e uint16) int {
	for i, x := range set {
		if x == e {
			return i
		}
	}
	return -1
}
