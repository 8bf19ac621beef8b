package reorder

import (
	"testing"

	"github.com/sprayfabric/spray/psn"
)

// TestWindowGrowsAndTrims: a window that sees PSNs in order holds no ring;
// one held ahead of a hole grows it to span that PSN, marks survive the
// growth (also across the PSN wrap), and Trim gives the ring back once the
// hole is filled.
func TestWindowGrowsAndTrims(t *testing.T) {
	start := psn.New(psn.Mask - 100)
	w, err := NewWindow(start, 4096)
	if err != nil {
		t.Fatal(err)
	}
	p := start
	for range 500 {
		if v := w.Mark(p); v != New {
			t.Fatalf("in-order PSN %v: %v", p, v)
		}
		p = p.Next()
	}
	if len(w.bits) != 0 || w.Cum() != p {
		t.Fatalf("in order: %d ring words, cum %v want %v", len(w.bits), w.Cum(), p)
	}
	hole := p
	for d := uint32(1); d < 300; d += 3 {
		if v := w.Mark(hole.Add(d)); v != New {
			t.Fatalf("PSN hole+%d: %v", d, v)
		}
	}
	if n := 64 * len(w.bits); n < 300 || n > 1024 {
		t.Fatalf("ring of %d bits for a span of 300", n)
	}
	var sack [4]uint64
	if base := w.Sack(hole.Add(1), sack[:]); base != hole || sack[0] != 0x2492492492492492 {
		t.Fatalf("sack base %v word %#x", base, sack[0])
	}
	if w.Trim() {
		t.Fatal("Trim with PSNs held ahead of a hole")
	}
	for d := uint32(0); d < 300; d++ {
		if !w.Has(hole.Add(d)) {
			w.Mark(hole.Add(d))
		}
	}
	if w.Pending() != 0 || w.Cum() != hole.Add(300) || !w.Trim() || len(w.bits) != 0 {
		t.Fatalf("pending %d cum %v ring %d after filling the hole", w.Pending(), w.Cum(), len(w.bits))
	}
	if v := w.Mark(hole.Add(300 + 4095)); v != New || w.Mark(hole.Add(300+4096)) != Outside {
		t.Fatal("the last PSN of the window after Trim")
	}
}

// TestAssemblerGrowsAndTrims: the ring of slots grows to the span of
// message IDs in progress, up to MaxMessages, keeps their bytes, and Trim
// gives it back when none is outstanding.
func TestAssemblerGrowsAndTrims(t *testing.T) {
	a, err := NewAssembler(Config{MaxMessages: 100}, ^uint32(0)-5)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.slots) != 0 {
		t.Fatalf("new assembler holds %d slots", len(a.slots))
	}
	first := a.Next()
	for k := uint32(99); ; k -= 7 { // from the furthest down
		m, err := a.Message(first+k, 2, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Place(m, 0, []byte{byte(k), 1}); err != nil {
			t.Fatal(err)
		}
		if k < 7 {
			break
		}
	}
	if len(a.slots) != 100 {
		t.Fatalf("%d slots, want MaxMessages 100", len(a.slots))
	}
	if _, err := a.Message(first+100, 1, true); err == nil {
		t.Fatal("a message beyond MaxMessages")
	}
	for k := uint32(0); k < 100; k++ {
		if k%7 != 99%7 {
			m, _ := a.Message(first+k, 2, true)
			a.Place(m, 0, []byte{byte(k), 1})
		}
		m, ok := a.Pop()
		if !ok || m.ID != first+k || m.Buf[0] != byte(k) {
			t.Fatalf("message %d: %v %+v", k, ok, m)
		}
	}
	if !a.Trim() || len(a.slots) != 0 {
		t.Fatal("Trim with nothing outstanding")
	}
	if _, ok := a.Peek(); ok {
		t.Fatal("Peek after Trim")
	}
}
