package cc

import "testing"

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
		if c2 := mk(); n != "fixed" && c2 == c {
			t.Fatalf("%s: the constructor returned a shared controller", n)
		}
	}
	if _, err := ByName("bbr", Params{}); err == nil {
		t.Fatal("unknown controller accepted")
	}
}
