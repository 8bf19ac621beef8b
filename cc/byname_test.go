package cc

import (
	"errors"
	"testing"
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
	if Target("swift", Params{}) != 3*SoftwareSwiftTarget || Target("hpcc", Params{}) != SoftwareBaseRTT || Target("none", Params{}) != 0 {
		t.Fatal("targets")
	}
}
