package reorder

import (
	"bytes"
	"errors"
	"testing"
)

// TestMessageInto places a message into the caller's buffer: its bytes
// land there, out of order, nothing past the message's length is touched,
// the buffer does not count against MaxBytes, and a buffer too short is
// refused before anything is created.
func TestMessageInto(t *testing.T) {
	a := newAsm(t, Config{MaxBytes: 8}, 10)
	buf := bytes.Repeat([]byte{0xAA}, 16)
	if _, err := a.MessageInto(10, 17, buf); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("17 bytes into 16: %v, want ErrTooLarge", err)
	}
	if a.Lookup(10) != nil || a.Outstanding() != 0 {
		t.Fatal("a refused MessageInto created the message")
	}
	m, err := a.MessageInto(10, 12, buf) // beyond MaxBytes: the memory is the caller's
	if err != nil {
		t.Fatal(err)
	}
	if a.Bytes() != 0 {
		t.Fatalf("Bytes %d, want 0 for the caller's buffer", a.Bytes())
	}
	if again, err := a.MessageInto(10, 12, nil); err != nil || again != m || a.Lookup(10) != m {
		t.Fatalf("second sight: %v, same message %v", err, again == m)
	}
	if _, err := a.MessageInto(10, 13, buf); !errors.Is(err, ErrLengthMismatch) {
		t.Fatalf("other length: %v, want ErrLengthMismatch", err)
	}
	for _, p := range []struct {
		off  uint32
		data string
	}{{8, "ijkl"}, {0, "abcd"}, {4, "efgh"}} {
		if _, ok := a.Peek(); ok {
			t.Fatal("Peek returned an incomplete message")
		}
		if _, err := a.Place(m, p.off, []byte(p.data)); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok := a.Peek(); !ok || got != m || a.Outstanding() != 1 {
		t.Fatal("Peek did not return the complete message without popping it")
	}
	if got, ok := a.Pop(); !ok || got != m {
		t.Fatal("Pop did not return the message")
	}
	if want := "abcdefghijkl\xaa\xaa\xaa\xaa"; string(buf) != want {
		t.Fatalf("buffer %q, want %q", buf, want)
	}
	if a.Lookup(10) != nil {
		t.Fatal("Lookup found a popped message")
	}
}

// TestAssemblerAlloc: messages created with a buffer take it from
// Config.Alloc, cut to their length.
func TestAssemblerAlloc(t *testing.T) {
	var asked []int
	a := newAsm(t, Config{Alloc: func(n int) []byte { asked = append(asked, n); return make([]byte, n, 2*n+1) }}, 0)
	m := mustMessage(t, a, 0, 5, true)
	mustMessage(t, a, 1, 7, false)
	if len(asked) != 1 || asked[0] != 5 || len(m.Buf) != 5 {
		t.Fatalf("Alloc asked for %v, buffer of %d bytes; want one call for 5", asked, len(m.Buf))
	}
}
