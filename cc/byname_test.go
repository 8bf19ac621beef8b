package cc

import (
	"errors"
	"testing"
	"time"
)

func TestByName(t *testing.T) {
	for _, n := range Names {
		mk, err := ByName(n, Params{LineRate: 1.25e9, PacketBytes: 1400})
		if err != nil {
			t.Fatal(err)
		}
		c := mk()
		if c == nil {
			t.Fatalf("%s: nil controller", n)
		}
		if c2 := mk(); n != "fixed" && n != "none" && c2 == c {
			t.Fatalf("%s: the constructor returned a shared controller", n)
		}
	}
	for _, bad := range []string{"bbr", ""} {
		if _, err := ByName(bad, Params{}); !errors.Is(err, ErrUnknown) {
			t.Fatalf("%q: err %v", bad, err)
		}
	}
	mk, _ := ByName("swift", Params{})
	s := mk().(*Swift)
	if !s.relative || s.TargetDelay(1000, 0) != SoftwareSwiftTarget {
		t.Fatalf("swift: relative %v target %v", s.relative, s.TargetDelay(1000, 0))
	}
	mk, _ = ByName("hpcc", Params{})
	if h := mk().(*HPCC); h.BaseRTT() != SoftwareBaseRTT {
		t.Fatalf("hpcc: T %v", h.BaseRTT())
	}
	// A bandwidth-delay product under two frames (200 Mb/s × 100µs = 2500
	// bytes) still lets HPCC keep two full frames in flight; a large one
	// is the paper's W_init.
	mk, _ = ByName("hpcc", Params{LineRate: 25e6, BaseRTT: 100 * time.Microsecond, PacketBytes: 1400})
	if w := mk().Window(); w < 2*(1400+150) || w > 2*(1400+200) {
		t.Fatalf("hpcc on a small BDP: window %d, want two frames of 1400 bytes of payload", w)
	}
	mk, _ = ByName("hpcc", Params{LineRate: 1.25e9, BaseRTT: 100 * time.Microsecond, PacketBytes: 1400})
	if w := mk().Window(); w != 125000 {
		t.Fatalf("hpcc on a large BDP: window %d, want 125000", w)
	}
	if Target("swift", Params{}) != 3*SoftwareSwiftTarget || Target("hpcc", Params{}) != SoftwareBaseRTT || Target("none", Params{}) != 0 {
		t.Fatal("targets")
	}
	// With the line rate known, HPCC's target holds one frame's time more.
	p := Params{LineRate: 25e6, BaseRTT: 100 * time.Microsecond, PacketBytes: 3350}
	if got, want := Target("hpcc", p), 100*time.Microsecond+time.Duration(float64(p.frameBytes())/25e6*1e9); got != want || got < 230*time.Microsecond {
		t.Fatalf("hpcc target at 200 Mbit/s: %v, want %v", got, want)
	}
}
