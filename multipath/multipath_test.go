package multipath

import (
	"slices"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

func TestEntropies(t *testing.T) {
	seed := testutil.Seed(t)
	for _, n := range []int{1, 2, 8, 64, 1000, NumEntropies} {
		e := Entropies(seed, n)
		if len(e) != n {
			t.Fatalf("n=%d: got %d entropies", n, len(e))
		}
		seen := make(map[uint16]bool, n)
		for _, v := range e {
			if v < MinEntropy || seen[v] {
				t.Fatalf("n=%d: entropy %d out of range or repeated", n, v)
			}
			seen[v] = true
		}
		if !slices.Equal(e, Entropies(seed, n)) {
			t.Fatalf("n=%d: not deterministic in the seed", n)
		}
		if n >= 8 && slices.Equal(e, Entropies(seed+1, n)) {
			t.Fatalf("n=%d: seeds %d and %d gave the same entropies", n, seed, seed+1)
		}
		if big := Entropies(seed, 2000); n <= 2000 && !slices.Equal(e, big[:n]) {
			t.Fatalf("n=%d: not a prefix of a longer set", n)
		}
	}
	if e := Entropies(seed, NumEntropies+100); len(e) != NumEntropies {
		t.Fatalf("n beyond the range: got %d, want %d", len(e), NumEntropies)
	}
	if Entropies(seed, 0) != nil || Entropies(seed, -3) != nil {
		t.Fatal("n <= 0 should give nil")
	}
}

func TestECMPIsConstant(t *testing.T) {
	p := NewECMP(50000)
	for i := range 10000 {
		if e := p.Next(clock.Time(i * 1000)); e != 50000 {
			t.Fatalf("packet %d on entropy %d", i, e)
		}
	}
	p.OnAck(5, 50000, 10*time.Microsecond, true)
	p.OnAck(6, 50000, 20*time.Microsecond, false)
	p.OnLoss(7, 50000)
	p.OnAck(8, 1234, time.Second, true) // not ours: ignored
	p.OnLoss(8, 1234)
	got := p.Stats()
	want := []PathStats{{Entropy: 50000, Packets: 10000, Acks: 2, Losses: 1, ECN: 1,
		SRTT: 10*time.Microsecond + 10*time.Microsecond/8, MinRTT: 10 * time.Microsecond, LastAck: 6}}
	if !slices.Equal(got, want) {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	if !slices.Equal(p.Paths(), []uint16{50000}) {
		t.Fatalf("Paths = %v", p.Paths())
	}
}

func TestSprayRounds(t *testing.T) {
	seed := testutil.Seed(t)
	for _, k := range []int{1, 2, 3, 16, 256} {
		set := Entropies(seed, k)
		p, q := NewSpray(set, seed), NewSpray(set, seed)
		const rounds = 200
		var orders [][]uint16
		for r := range rounds {
			round := make([]uint16, k)
			for i := range round {
				round[i] = p.Next(clock.Time(r))
				if q.Next(clock.Time(r)) != round[i] {
					t.Fatalf("k=%d: same seed, different entropy at round %d", k, r)
				}
			}
			sorted := slices.Clone(round)
			slices.Sort(sorted)
			want := slices.Sorted(slices.Values(set))
			if !slices.Equal(sorted, want) {
				t.Fatalf("k=%d: round %d is not a permutation of the set: %v", k, r, round)
			}
			orders = append(orders, round)
		}
		for _, s := range p.Stats() {
			if s.Packets != rounds {
				t.Fatalf("k=%d: entropy %d got %d packets in %d rounds", k, s.Entropy, s.Packets, rounds)
			}
		}
		if k >= 3 {
			distinct := 0
			for i := 1; i < rounds; i++ {
				if !slices.Equal(orders[i], orders[i-1]) {
					distinct++
				}
			}
			if distinct < rounds/2 {
				t.Fatalf("k=%d: only %d of %d rounds changed order", k, distinct, rounds)
			}
			other := NewSpray(set, seed+1)
			same := true
			for range 4 * k {
				same = same && other.Next(0) == q.Next(0)
			}
			if same {
				t.Fatalf("k=%d: seeds %d and %d spray alike", k, seed, seed+1)
			}
		}
		if !slices.Equal(p.Paths(), set) {
			t.Fatalf("k=%d: Paths = %v, want %v", k, p.Paths(), set)
		}
	}
}

// TestSprayPermutationsUniform checks against the obvious model: with 4
// paths, each of the 24 orders is equally likely.
func TestSprayPermutationsUniform(t *testing.T) {
	set := []uint16{50001, 50002, 50003, 50004}
	p := NewSpray(set, testutil.Seed(t))
	const rounds = 24000
	count := map[[4]uint16]int{}
	for range rounds {
		var o [4]uint16
		for i := range o {
			o[i] = p.Next(0)
		}
		count[o]++
	}
	if len(count) != 24 {
		t.Fatalf("%d distinct orders, want 24", len(count))
	}
	for o, c := range count { // mean 1000, sd about 31
		if c < 800 || c > 1200 {
			t.Fatalf("order %v came %d times in %d rounds, want about 1000", o, c, rounds)
		}
	}
}

func TestSprayInputs(t *testing.T) {
	p := NewSpray([]uint16{50000, 50001, 50000, 50001, 50002}, 1)
	if !slices.Equal(p.Paths(), []uint16{50000, 50001, 50002}) {
		t.Fatalf("duplicates kept: %v", p.Paths())
	}
	set := []uint16{60000, 60001}
	p = NewSpray(set, 1)
	set[0] = 1
	if p.Paths()[0] != 60000 {
		t.Fatal("policy shares the caller's slice")
	}
	p = NewSpray(nil, 7)
	if e := p.Next(0); e < MinEntropy || e != Entropies(7, 1)[0] || p.Next(0) != e {
		t.Fatalf("empty set: entropy %d", e)
	}
	p = NewSpray([]uint16{50000, 50001}, 1)
	p.OnLoss(1, 50001)
	p.OnAck(2, 50000, 0, false) // an RTT of 0 is no sample
	p.OnAck(3, 50000, 8*time.Microsecond, false)
	p.OnAck(4, 50000, 16*time.Microsecond, false)
	p.OnAck(5, 50000, 4*time.Microsecond, true)
	s := p.Stats()
	srtt := 8 * time.Microsecond
	srtt += (16*time.Microsecond - srtt) / 8
	srtt += (4*time.Microsecond - srtt) / 8
	if s[0].Acks != 4 || s[0].ECN != 1 || s[0].SRTT != srtt || s[0].MinRTT != 4*time.Microsecond || s[0].LastAck != 5 || s[1].Losses != 1 {
		t.Fatalf("Stats = %+v (want SRTT %v)", s, srtt)
	}
	s[0].Acks = 99
	if p.Stats()[0].Acks != 4 {
		t.Fatal("Stats returned the policy's own slice")
	}
}

func TestNoAllocs(t *testing.T) {
	for name, p := range map[string]Policy{
		"ecmp":  NewECMP(50000),
		"spray": NewSpray(Entropies(1, 64), 1),
	} {
		var now clock.Time
		allocs := testing.AllocsPerRun(10000, func() {
			now++
			e := p.Next(now)
			p.OnAck(now, e, time.Microsecond, false)
			p.OnLoss(now, e)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per packet", name, allocs)
		}
	}
}

func BenchmarkSprayNext(b *testing.B) {
	p := NewSpray(Entropies(1, 64), 1)
	b.ReportAllocs()
	for b.Loop() {
		p.Next(0)
	}
}

// TestPathsIndex: newPaths drops duplicates keeping the first of each in
// order, and find returns every entropy's position and nothing for one
// outside the set, whether the set is scanned (up to indexAbove) or
// searched in its sorted index of four bytes a path.
func TestPathsIndex(t *testing.T) {
	r := testutil.Rand(t)
	for _, n := range []int{1, 5, indexAbove, indexAbove + 1, 32, 100, 3000} {
		in := make([]uint16, n)
		for i := range in {
			in[i] = uint16(MinEntropy + r.IntN(max(n, 2))) // duplicates at every size
		}
		p := newPaths(in)
		var want []uint16
		for _, e := range in {
			if !slices.Contains(want, e) {
				want = append(want, e)
			}
		}
		if !slices.Equal(p.set, want) {
			t.Fatalf("n=%d: set %v, want %v", n, p.set, want)
		}
		if (len(p.set) > indexAbove) != (p.index != nil) || (p.index != nil && cap(p.index) != len(p.set)) {
			t.Fatalf("n=%d: %d paths, index of %d (cap %d)", n, len(p.set), len(p.index), cap(p.index))
		}
		for i, e := range p.set {
			if j, ok := p.find(e); !ok || j != i {
				t.Fatalf("n=%d: find(%d) = %d, %v, want %d", n, e, j, ok, i)
			}
		}
		for e := MinEntropy; e <= MinEntropy+n+1; e++ {
			if _, ok := p.find(uint16(e)); ok != slices.Contains(p.set, uint16(e)) {
				t.Fatalf("n=%d: find(%d) found %v", n, e, ok)
			}
		}
		if _, ok := p.find(0); ok {
			t.Fatalf("n=%d: found entropy 0", n)
		}
	}
}
