package reorder

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/psn"
)

// pabs turns an absolute (unwrapped) sequence number into a PSN.
func pabs(abs int64) psn.PSN { return psn.New(uint32(abs)) }

// model is the slow, obvious window: absolute sequence numbers in a map.
type model struct {
	size   int64
	cum    int64
	high   int64
	marked map[int64]bool
}

func newModel(start int64, size int) *model {
	return &model{size: int64(size), cum: start, high: start - 1, marked: map[int64]bool{}}
}

func (m *model) verdict(abs int64) Verdict {
	switch {
	case abs < m.cum:
		return Duplicate
	case abs >= m.cum+m.size:
		return Outside
	case m.marked[abs]:
		return Duplicate
	}
	return New
}

func (m *model) mark(abs int64) Verdict {
	v := m.verdict(abs)
	if v != New {
		return v
	}
	m.marked[abs] = true
	m.high = max(m.high, abs)
	for m.marked[m.cum] {
		delete(m.marked, m.cum)
		m.cum++
	}
	return v
}

func (m *model) has(abs int64) bool { return abs < m.cum || m.marked[abs] }

// sack returns the absolute base and the words the model expects.
func (m *model) sack(recent int64, n int) (int64, []uint64) {
	span := int64(64 * n)
	base := m.cum
	if recent-m.cum >= span {
		base = recent - span + 1
	}
	words := make([]uint64, n)
	for i := range span {
		if m.has(base + i) {
			words[i/64] |= 1 << (i % 64)
		}
	}
	return base, words
}

// check compares every observable of w with the model.
func (m *model) check(t testing.TB, w *Window) {
	t.Helper()
	if got, want := w.Cum(), pabs(m.cum); got != want {
		t.Fatalf("Cum = %d, want %d", got, want)
	}
	if got, want := w.Pending(), len(m.marked); got != want {
		t.Fatalf("Pending = %d, want %d", got, want)
	}
	if got, want := w.Highest(), pabs(max(m.high, m.cum-1)); got != want {
		t.Fatalf("Highest = %d, want %d (cum %d)", got, want, w.Cum())
	}
}

func TestNewWindowSizes(t *testing.T) {
	w, err := NewWindow(7, 0)
	if err != nil || w.Size() != DefaultWindowSize || w.Cum() != 7 || w.Highest() != 6 || w.Pending() != 0 {
		t.Fatalf("NewWindow(7, 0) = %+v, %v; want default size, Cum 7, Highest 6", w, err)
	}
	for _, size := range []int{64, 128, 192, 4096, MaxWindowSize} {
		if w, err := NewWindow(0, size); err != nil || w.Size() != size {
			t.Errorf("NewWindow(0, %d): %v", size, err)
		}
	}
	for _, size := range []int{-64, 1, 63, 65, 100, MaxWindowSize + 64, 1 << 30} {
		if _, err := NewWindow(0, size); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewWindow(0, %d) error = %v, want ErrInvalidConfig", size, err)
		}
	}
	if _, err := NewWindow(psn.Mask+1, 64); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewWindow(1<<24, 64) error = %v, want ErrInvalidConfig", err)
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{New: "new", Duplicate: "duplicate", Outside: "outside", 0: "Verdict(0)", 9: "Verdict(9)"} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", uint8(v), got, want)
		}
	}
}

// TestWindowWrap marks in order through the 24-bit wrap: every PSN is New
// exactly once and no PSN after the wrap looks like a duplicate.
func TestWindowWrap(t *testing.T) {
	start := psn.PSN(1<<24 - 100)
	w, err := NewWindow(start, 128)
	if err != nil {
		t.Fatal(err)
	}
	p := start
	for i := range 1000 {
		if v := w.Mark(p); v != New {
			t.Fatalf("packet %d (PSN %d): Mark = %v, want new", i, p, v)
		}
		if v := w.Mark(p); v != Duplicate {
			t.Fatalf("packet %d (PSN %d): second Mark = %v, want duplicate", i, p, v)
		}
		p = p.Next()
		if w.Cum() != p || w.Highest() != p.Prev() || w.Pending() != 0 {
			t.Fatalf("after PSN %d: Cum %d Highest %d Pending %d", p.Prev(), w.Cum(), w.Highest(), w.Pending())
		}
	}
	if w.Cum() != psn.PSN(900) {
		t.Fatalf("Cum = %d after 1000 PSNs from 2^24-100, want 900", w.Cum())
	}
	// Out of order across the wrap: mark 1<<24-10 .. 1<<24+10 backwards.
	w, _ = NewWindow(psn.PSN(1<<24-10), 64)
	for i := 20; i >= 0; i-- {
		if v := w.Mark(pabs(1<<24 - 10 + int64(i))); v != New {
			t.Fatalf("offset %d: Mark = %v, want new", i, v)
		}
	}
	if w.Cum() != psn.PSN(11) || w.Pending() != 0 {
		t.Fatalf("Cum = %d Pending = %d, want 11 and 0", w.Cum(), w.Pending())
	}
}

func TestWindowDuplicateOutside(t *testing.T) {
	start := psn.PSN(1000)
	w, _ := NewWindow(start, 256)
	if v := w.Mark(start.Add(5)); v != New {
		t.Fatalf("Mark(cum+5) = %v", v)
	}
	if v := w.Mark(start.Add(5)); v != Duplicate {
		t.Fatalf("second Mark(cum+5) = %v, want duplicate", v)
	}
	if v := w.Mark(start.Prev()); v != Duplicate {
		t.Fatalf("Mark(cum-1) = %v, want duplicate", v)
	}
	if v := w.Check(start.Add(256)); v != Outside {
		t.Fatalf("Check(cum+size) = %v, want outside", v)
	}
	if v := w.Mark(start.Add(256)); v != Outside {
		t.Fatalf("Mark(cum+size) = %v, want outside", v)
	}
	if w.Pending() != 1 || w.Has(start.Add(256)) || w.Highest() != start.Add(5) {
		t.Fatalf("Outside recorded something: Pending %d Highest %d", w.Pending(), w.Highest())
	}
	// Far away in both directions (but within 2^23) is also never recorded.
	if v := w.Mark(start.Add(1 << 22)); v != Outside {
		t.Fatalf("Mark(cum+2^22) = %v, want outside", v)
	}
	if v := w.Mark(start.Add(1<<24 - 1<<22)); v != Duplicate {
		t.Fatalf("Mark(cum-2^22) = %v, want duplicate", v)
	}
	if v := w.Check(start.Add(255)); v != New {
		t.Fatalf("Check(cum+size-1) = %v, want new", v)
	}
	if w.Has(start.Add(255)) {
		t.Fatal("Check recorded the PSN")
	}
	if v := w.Mark(start.Add(255)); v != New {
		t.Fatalf("Mark(cum+size-1) = %v, want new", v)
	}
	if v := w.Check(start.Add(255)); v != Duplicate {
		t.Fatalf("Check(marked) = %v, want duplicate", v)
	}
	if w.Pending() != 2 || w.Highest() != start.Add(255) || w.Cum() != start {
		t.Fatalf("Pending %d Highest %d Cum %d", w.Pending(), w.Highest(), w.Cum())
	}
}

// TestWindowCumAdvance fills a whole window behind a hole, then the hole:
// Cum jumps by the full window and the freed ring takes new PSNs.
func TestWindowCumAdvance(t *testing.T) {
	start := psn.PSN(psn.Mask - 30)
	w, _ := NewWindow(start, 192)
	for i := uint32(1); i < 192; i++ {
		if v := w.Mark(start.Add(i)); v != New {
			t.Fatalf("Mark(cum+%d) = %v", i, v)
		}
	}
	if w.Cum() != start || w.Pending() != 191 || w.Highest() != start.Add(191) {
		t.Fatalf("behind the hole: Cum %d Pending %d Highest %d", w.Cum(), w.Pending(), w.Highest())
	}
	if v := w.Mark(start.Add(192)); v != Outside {
		t.Fatalf("Mark(cum+192) = %v, want outside", v)
	}
	if v := w.Mark(start); v != New {
		t.Fatalf("Mark(hole) = %v", v)
	}
	if w.Cum() != start.Add(192) || w.Pending() != 0 || w.Highest() != start.Add(191) {
		t.Fatalf("after the hole: Cum %d Pending %d Highest %d", w.Cum(), w.Pending(), w.Highest())
	}
	for i := uint32(0); i < 2*192; i++ {
		if w.Has(start.Add(192 + i)) {
			t.Fatalf("PSN cum+%d looks arrived after the ring wrapped", i)
		}
	}
	if v := w.Mark(start.Add(192 + 191)); v != New {
		t.Fatalf("Mark(new cum+191) = %v, want new", v)
	}
}

func TestSackBasics(t *testing.T) {
	w, _ := NewWindow(100, 256)
	for _, off := range []uint32{1, 2, 64, 130} {
		w.Mark(psn.PSN(100 + off))
	}
	var words [3]uint64
	base := w.Sack(101, words[:])
	if base != 100 {
		t.Fatalf("base = %d, want Cum 100", base)
	}
	if want := [3]uint64{1<<1 | 1<<2, 1, 1 << 2}; words != want {
		t.Fatalf("words = %x, want %x", words, want)
	}
	// recent far ahead: it becomes the last bit, PSNs beyond the window are 0.
	w.Mark(psn.PSN(100 + 255))
	base = w.Sack(psn.PSN(100+255), words[:1])
	if base != psn.PSN(100+255-63) || words[0] != 1<<63 {
		t.Fatalf("Sack(cum+255, 1 word) = base %d word %x", base, words[0])
	}
	base = w.Sack(psn.PSN(100+1000), words[:])
	if base != psn.PSN(100+1000-191) || words != [3]uint64{} {
		t.Fatalf("Sack(cum+1000) = base %d words %x, want empty", base, words)
	}
	// recent behind Cum: anchored at Cum. Nothing happens without words.
	if base = w.Sack(5, words[:]); base != 100 {
		t.Fatalf("Sack(old) base = %d", base)
	}
	if base = w.Sack(5, nil); base != 100 {
		t.Fatalf("Sack(nil) base = %d", base)
	}
}

// TestWindowModel sprays random arrival orders (local reordering, duplicates,
// a few packets beyond the window) over the wrap, and compares verdicts,
// Cum, Highest, Pending, Has and Sack bit by bit with the slow model.
func TestWindowModel(t *testing.T) {
	rng := testutil.Rand(t)
	for round := range 24 {
		size := 64 * (1 + rng.IntN(8))
		start := int64(1<<24 - rng.IntN(3*size))
		if round%4 == 0 {
			start = rng.Int64N(1 << 24)
		}
		w, err := NewWindow(pabs(start), size)
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(start, size)
		n := 2000 + rng.IntN(2000)
		queue := sprayOrder(rng, n, 1+rng.IntN(size+size/2))
		words := make([]uint64, 4)
		for i := 0; i < len(queue); i++ {
			if i > 100*n {
				t.Fatalf("round %d: no progress, cum %d of %d", round, m.cum-start, n)
			}
			abs := start + int64(queue[i])
			if rng.IntN(10) == 0 { // also a duplicate of something earlier
				queue = append(queue, queue[rng.IntN(i+1)])
			}
			want := m.verdict(abs)
			if want == Outside { // the sender retransmits it later
				queue = append(queue, queue[i])
			}
			if got := w.Check(pabs(abs)); got != want {
				t.Fatalf("round %d: Check(%d) = %v, want %v", round, pabs(abs), got, want)
			}
			if got := w.Mark(pabs(abs)); got != m.mark(abs) {
				t.Fatalf("round %d: Mark(%d) = %v, want %v", round, pabs(abs), got, want)
			}
			m.check(t, w)
			recent := abs
			switch rng.IntN(8) {
			case 0:
				recent = m.cum + int64(rng.IntN(3*size)) // far ahead, maybe outside
			case 1:
				recent = m.cum - int64(rng.IntN(300))
			}
			nw := 1 + rng.IntN(4)
			wantBase, wantWords := m.sack(recent, nw)
			base := w.Sack(pabs(recent), words[:nw])
			if base != pabs(wantBase) {
				t.Fatalf("round %d: Sack(%d, %d words) base = %d, want %d (cum %d)", round, pabs(recent), nw, base, pabs(wantBase), w.Cum())
			}
			for j := range nw {
				if words[j] != wantWords[j] {
					t.Fatalf("round %d: Sack(%d, %d words) word %d = %016x, want %016x (cum %d)", round, pabs(recent), nw, j, words[j], wantWords[j], w.Cum())
				}
			}
			if i%64 == 0 {
				for range 16 {
					q := m.cum + int64(rng.IntN(2*size)) - int64(size/2)
					if w.Has(pabs(q)) != m.has(q) {
						t.Fatalf("round %d: Has(%d) = %v, want %v", round, pabs(q), w.Has(pabs(q)), m.has(q))
					}
				}
			}
		}
		if m.cum != start+int64(n) || w.Cum() != pabs(start+int64(n)) || w.Pending() != 0 {
			t.Fatalf("round %d: at the end Cum %d, Pending %d, want %d, 0", round, w.Cum(), w.Pending(), pabs(start+int64(n)))
		}
	}
}

// sprayOrder returns 0..n-1 with each element moved by up to spread places,
// the arrival order of a sprayed flow over paths of different delay.
func sprayOrder(rng *rand.Rand, n, spread int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	for i := range order {
		j := min(n-1, i+rng.IntN(spread))
		order[i], order[j] = order[j], order[i]
	}
	return order
}

func TestWindowAllocs(t *testing.T) {
	w, _ := NewWindow(psn.Mask-1000, 4096)
	var words [4]uint64
	p := psn.PSN(psn.Mask - 1000)
	allocs := testing.AllocsPerRun(10000, func() {
		w.Mark(p.Add(1))
		w.Mark(p)
		w.Sack(p.Add(1), words[:])
		w.Sack(p.Add(5000), words[:])
		p = p.Add(2)
	})
	if allocs != 0 {
		t.Fatalf("Mark+Sack: %v allocs per run, want 0", allocs)
	}
	if w.Cum() != p {
		t.Fatalf("Cum = %d, want %d", w.Cum(), p)
	}
}

func BenchmarkMark(b *testing.B) {
	b.Run("inorder", func(b *testing.B) {
		w, _ := NewWindow(0, 4096)
		p := psn.PSN(0)
		b.ReportAllocs()
		for b.Loop() {
			w.Mark(p)
			p = p.Next()
		}
	})
	b.Run("spray64", func(b *testing.B) {
		// Blocks of 64 PSNs in a fixed scrambled order.
		w, _ := NewWindow(0, 4096)
		var perm [64]uint32
		for i := range perm {
			perm[i] = uint32(i*37) % 64
		}
		p, i := psn.PSN(0), 0
		b.ReportAllocs()
		for b.Loop() {
			w.Mark(p.Add(perm[i]))
			if i++; i == 64 {
				i, p = 0, p.Add(64)
			}
		}
	})
	b.Run("sack4", func(b *testing.B) {
		w, _ := NewWindow(0, 4096)
		for i := uint32(1); i < 4000; i += 2 {
			w.Mark(psn.PSN(i))
		}
		var words [4]uint64
		b.ReportAllocs()
		for b.Loop() {
			w.Sack(3001, words[:])
		}
	})
}
