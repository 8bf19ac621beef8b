package peek

import (
	"io"
	"net"
	"testing"
)

// TestConnReadsPrefixFirst reads the peeked byte, then the rest of the
// stream, in order, through reads smaller than what is buffered.
func TestConnReadsPrefixFirst(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		a.Write([]byte("\x16rest of the hello"))
		a.Close()
	}()
	var first [1]byte
	if _, err := io.ReadFull(b, first[:]); err != nil {
		t.Fatal(err)
	}
	if first[0] != TLSHandshake {
		t.Fatalf("first byte %#x", first[0])
	}
	got, err := io.ReadAll(io.LimitReader(Prefixed(b, first[:]), 1<<10))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "\x16rest of the hello" {
		t.Fatalf("read %q", got)
	}
}
