package socktest

import (
	"encoding/binary"
	"testing"
)

func TestContent(t *testing.T) {
	a, b := make([]byte, 100), make([]byte, 100)
	Content(a, 7)
	Content(b, 7)
	if string(a) != string(b) || binary.BigEndian.Uint32(a) != 7 {
		t.Fatalf("Content(7) is not stable or lacks its seq: % x", a[:8])
	}
	Content(b, 8)
	if string(a[4:]) == string(b[4:]) {
		t.Fatal("Content(7) and Content(8) agree past the seq")
	}
	Content(a[:3], 1) // too short for the seq: no panic
}
