package psn

import "testing"

func TestWrap(t *testing.T) {
	a := PSN(Mask - 1)
	b := a.Add(3) // 1
	if b != 1 {
		t.Fatalf("Add across wrap = %d, want 1", b)
	}
	if !a.Less(b) || b.Less(a) {
		t.Fatalf("%d should be before %d across the wrap", a, b)
	}
	if d := b.Diff(a); d != 3 {
		t.Fatalf("Diff = %d, want 3", d)
	}
	if d := a.Diff(b); d != -3 {
		t.Fatalf("Diff = %d, want -3", d)
	}
	if PSN(0).Prev() != Mask {
		t.Fatalf("Prev(0) = %d", PSN(0).Prev())
	}
	if !PSN(2).InWindow(a, 5) || PSN(3).InWindow(a, 5) || a.Prev().InWindow(a, 5) {
		t.Fatal("InWindow wrong across wrap")
	}
	if Max(a, b) != b || Min(a, b) != a {
		t.Fatal("Max/Min wrong across wrap")
	}
}

// TestModel compares Diff with a plain 64-bit model for random pairs.
func TestModel(t *testing.T) {
	x := uint32(12345)
	for i := 0; i < 100000; i++ {
		x = x*1664525 + 1013904223
		base := PSN(x & Mask)
		d := int32(x>>8)%(Half-1) - (Half/2 - 1)
		q := PSN((int64(base) + int64(d) + (1 << 24)) % (1 << 24))
		if got := q.Diff(base); got != d {
			t.Fatalf("Diff(%d,%d)=%d want %d", q, base, got, d)
		}
		if q.Less(base) != (d < 0) {
			t.Fatalf("Less(%d,%d) wrong", q, base)
		}
	}
}
