package reorder

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/psn"
)

func newAsm(t testing.TB, cfg Config, first uint32) *Assembler {
	t.Helper()
	a, err := NewAssembler(cfg, first)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustMessage(t testing.TB, a *Assembler, id, length uint32, withBuf bool) *Msg {
	t.Helper()
	m, err := a.Message(id, length, withBuf)
	if err != nil {
		t.Fatalf("Message(%d, %d): %v", id, length, err)
	}
	return m
}

func TestConfigValidate(t *testing.T) {
	good := []Config{{}, {MaxMessages: 1, MaxMessageSize: 1, MaxBytes: 1}, {MaxMessages: MaxMaxMessages, MaxMessageSize: math.MaxUint32}}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []Config{{MaxMessages: -1}, {MaxMessages: MaxMaxMessages + 1}, {MaxMessageSize: -1}, {MaxMessageSize: math.MaxUint32 + 1}, {MaxBytes: -1}}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: Validate = %v, want ErrInvalidConfig", c, err)
		}
		if _, err := NewAssembler(c, 0); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: NewAssembler error = %v, want ErrInvalidConfig", c, err)
		}
	}
	a := newAsm(t, Config{}, 0)
	if a.cfg.MaxMessages != DefaultMaxMessages || a.cfg.MaxMessageSize != DefaultMaxMessageSize || a.cfg.MaxBytes != DefaultMaxBytes {
		t.Fatalf("defaults not applied: %+v", a.cfg)
	}
}

// TestAssemblerInOrder completes messages out of order (across the id wrap)
// and gets them from Pop in id order, with their bytes.
func TestAssemblerInOrder(t *testing.T) {
	first := uint32(math.MaxUint32 - 1)
	a := newAsm(t, Config{}, first)
	mustMessage(t, a, first, 4, true)
	mustMessage(t, a, first+1, 3, true)
	m2 := mustMessage(t, a, first+2, 2, true) // id 0 after the wrap
	// A new message may move the ring: fetch the earlier ones again.
	m0, m1 := mustMessage(t, a, first, 4, true), mustMessage(t, a, first+1, 3, true)
	if m2.ID != 0 || a.Outstanding() != 3 || a.Bytes() != 9 || a.Next() != first {
		t.Fatalf("ID %d Outstanding %d Bytes %d Next %d", m2.ID, a.Outstanding(), a.Bytes(), a.Next())
	}
	for _, c := range []struct {
		m    *Msg
		off  uint32
		data string
		done bool
	}{{m2, 0, "yz", true}, {m1, 1, "bc", false}, {m0, 2, "st", false}, {m1, 0, "a", true}} {
		done, err := a.Place(c.m, c.off, []byte(c.data))
		if err != nil || done != c.done {
			t.Fatalf("Place(%d, %d, %q) = %v, %v; want %v", c.m.ID, c.off, c.data, done, err, c.done)
		}
	}
	if _, ok := a.Pop(); ok {
		t.Fatal("Pop returned a message while the oldest is incomplete")
	}
	if again := mustMessage(t, a, first, 4, false); again != m0 || m0.Got != 2 {
		t.Fatalf("Message on a known id returned another message or lost Got (%d)", m0.Got)
	}
	if done, err := a.Place(m0, 0, []byte("qr")); !done || err != nil {
		t.Fatalf("last Place = %v, %v", done, err)
	}
	for i, want := range []string{"qrst", "abc", "yz"} {
		m, ok := a.Pop()
		if !ok || m.ID != first+uint32(i) || string(m.Buf) != want || m.Got != m.Len {
			t.Fatalf("Pop %d = %v %+v, want id %d %q", i, ok, m, first+uint32(i), want)
		}
	}
	if _, ok := a.Pop(); ok || a.Outstanding() != 0 || a.Bytes() != 0 || a.Next() != 1 {
		t.Fatalf("after popping all: Outstanding %d Bytes %d Next %d", a.Outstanding(), a.Bytes(), a.Next())
	}
}

func TestAssemblerErrors(t *testing.T) {
	a := newAsm(t, Config{MaxMessageSize: 100}, 10)
	mustMessage(t, a, 10, 8, true)
	if _, err := a.Message(10, 9, true); !errors.Is(err, ErrLengthMismatch) {
		t.Errorf("other length: %v, want ErrLengthMismatch", err)
	}
	if _, err := a.Message(11, 101, true); !errors.Is(err, ErrTooLarge) {
		t.Errorf("101 bytes: %v, want ErrTooLarge", err)
	}
	if _, err := a.Message(9, 8, true); !errors.Is(err, ErrStale) {
		t.Errorf("id before first: %v, want ErrStale", err)
	}
	m := mustMessage(t, a, 10, 8, true) // the calls above may have moved the ring
	for _, c := range []struct {
		off uint32
		n   int
	}{{0, 9}, {8, 1}, {7, 2}, {math.MaxUint32, 2}, {9, 0}} {
		if _, err := a.Place(m, c.off, make([]byte, c.n)); !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("Place(off %d, %d bytes): %v, want ErrOutOfBounds", c.off, c.n, err)
		}
	}
	if _, err := a.Place(m, 0, []byte("abcdef")); err != nil {
		t.Fatal(err)
	}
	// The same bytes again (a duplicate that slipped past the window).
	if _, err := a.Place(m, 0, []byte("XXXXXX")); !errors.Is(err, ErrOverflow) {
		t.Errorf("placing 12 bytes into 8: %v, want ErrOverflow", err)
	}
	if string(m.Buf) != "abcdef\x00\x00" || m.Got != 6 {
		t.Errorf("a refused Place changed the message: %q Got %d", m.Buf, m.Got)
	}
	if done, err := a.Place(m, 6, []byte("gh")); !done || err != nil {
		t.Fatalf("completing Place = %v, %v", done, err)
	}
	if done, err := a.Place(m, 0, []byte("z")); done || !errors.Is(err, ErrOverflow) {
		t.Errorf("Place into a complete message = %v, %v; want ErrOverflow", done, err)
	}
	if done, err := a.Place(m, 0, nil); done || err != nil {
		t.Errorf("empty Place into a complete message = %v, %v; want false, nil", done, err)
	}
	popped, ok := a.Pop()
	if !ok || string(popped.Buf) != "abcdefgh" {
		t.Fatalf("Pop = %v %q", ok, popped.Buf)
	}
	if _, err := a.Message(10, 8, true); !errors.Is(err, ErrStale) {
		t.Errorf("popped id: %v, want ErrStale", err)
	}
	if _, err := a.Place(popped, 0, nil); !errors.Is(err, ErrStale) {
		t.Errorf("Place into a popped message: %v, want ErrStale", err)
	}
	if _, err := a.Place(nil, 0, nil); !errors.Is(err, ErrStale) {
		t.Errorf("Place(nil): %v, want ErrStale", err)
	}
	// Scribbling on the exported fields does not let Place out of bounds.
	m = mustMessage(t, a, 11, 4, true)
	m.Len, m.Buf = 1000, nil
	if _, err := a.Place(m, 4, []byte("x")); !errors.Is(err, ErrOutOfBounds) {
		t.Errorf("Place beyond the real length after m.Len was changed: %v", err)
	}
}

func TestAssemblerZeroLength(t *testing.T) {
	a := newAsm(t, Config{}, 0)
	m1 := mustMessage(t, a, 1, 0, true)
	if done, err := a.Place(m1, 0, nil); !done || err != nil {
		t.Fatalf("Place(0-length) = %v, %v; want complete", done, err)
	}
	if done, err := a.Place(m1, 0, nil); done || err != nil {
		t.Fatalf("second Place(0-length) = %v, %v; want not complete again", done, err)
	}
	if _, err := a.Place(m1, 0, []byte{1}); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("1 byte into a 0-length message: %v", err)
	}
	if _, ok := a.Pop(); ok {
		t.Fatal("0-length message 1 popped before message 0")
	}
	m0 := mustMessage(t, a, 0, 0, false)
	if _, ok := a.Pop(); ok {
		t.Fatal("message 0 popped before its packet was placed")
	}
	if done, _ := a.Place(m0, 0, nil); !done {
		t.Fatal("0-length message without buffer did not complete")
	}
	for id := range uint32(2) {
		if m, ok := a.Pop(); !ok || m.ID != id || m.Len != 0 {
			t.Fatalf("Pop = %v %+v, want id %d", ok, m, id)
		}
	}
}

// TestAssemblerLimits exhausts MaxMessages and MaxBytes, then recovers after
// Pop.
func TestAssemblerLimits(t *testing.T) {
	a := newAsm(t, Config{MaxMessages: 4, MaxBytes: 1000}, 100)
	if _, err := a.Message(104, 1, true); !errors.Is(err, ErrTooManyMessages) {
		t.Fatalf("id next+MaxMessages: %v, want ErrTooManyMessages", err)
	}
	if _, err := a.Message(100+1<<31, 1, true); err == nil {
		t.Fatal("id 2^31 ahead accepted")
	}
	if _, err := a.Message(100, 1001, true); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("message above MaxBytes: %v, want ErrTooLarge", err)
	}
	mustMessage(t, a, 101, 600, true)
	mustMessage(t, a, 103, 5000, false) // no buffer: not counted, not too large
	if _, err := a.Message(102, 401, true); !errors.Is(err, ErrTooManyMessages) {
		t.Fatalf("601+400 bytes: %v, want ErrTooManyMessages", err)
	}
	if a.Bytes() != 600 || a.Outstanding() != 2 {
		t.Fatalf("a refused message was counted: Bytes %d Outstanding %d", a.Bytes(), a.Outstanding())
	}
	// The oldest message is admitted beyond MaxBytes: later messages must
	// not block it.
	m0 := mustMessage(t, a, 100, 900, true)
	if a.Bytes() != 1500 {
		t.Fatalf("Bytes = %d, want 1500", a.Bytes())
	}
	m1 := mustMessage(t, a, 101, 600, true) // the ring may have moved
	a.Place(m0, 0, make([]byte, 900))
	a.Place(m1, 0, make([]byte, 600))
	if m, ok := a.Pop(); !ok || m.ID != 100 {
		t.Fatal("message 100 did not pop")
	}
	if _, err := a.Message(104, 1, true); err != nil {
		t.Fatalf("id 104 after a Pop: %v", err)
	}
	if _, err := a.Message(102, 401, true); !errors.Is(err, ErrTooManyMessages) {
		t.Fatalf("600+1+401 bytes: %v, want ErrTooManyMessages", err)
	}
	if m, ok := a.Pop(); !ok || m.ID != 101 || a.Bytes() != 1 || a.Next() != 102 {
		t.Fatalf("Pop 101: Bytes %d Next %d", a.Bytes(), a.Next())
	}
	if _, err := a.Message(102, 401, true); err != nil {
		t.Fatalf("id 102 after Pops: %v", err)
	}
	if a.Outstanding() != 3 || a.Bytes() != 402 {
		t.Fatalf("Outstanding %d Bytes %d, want 3 and 402", a.Outstanding(), a.Bytes())
	}
}

// TestAssemblerRandom sends random messages split into random packets over a
// lossy, reordering, duplicating network into a Window and an Assembler with
// small limits, retransmitting what the receiver refused, and checks that
// every message comes out once, in order, with its bytes.
func TestAssemblerRandom(t *testing.T) {
	rng := testutil.Rand(t)
	const (
		nmsg   = 300
		window = 1024
	)
	type packet struct {
		psn  int64 // absolute
		id   uint32
		off  uint32
		data []byte
	}
	first := uint32(math.MaxUint32 - 100 + rng.IntN(200))
	startPSN := int64(psn.Mask - rng.IntN(2000))
	var (
		sums    [nmsg][32]byte
		lens    [nmsg]uint32
		packets []packet
	)
	for i := range nmsg {
		n := rng.IntN(20000)
		switch rng.IntN(10) {
		case 0:
			n = 0
		case 1:
			n = 1 + rng.IntN(3)
		}
		msg := make([]byte, n)
		for j := range msg {
			msg[j] = byte(rng.Uint32())
		}
		sums[i], lens[i] = sha256.Sum256(msg), uint32(n)
		for off := 0; off == 0 || off < n; {
			c := min(n-off, 1+rng.IntN(1500))
			packets = append(packets, packet{startPSN + int64(len(packets)), first + uint32(i), uint32(off), msg[off : off+c]})
			off += c
			if n == 0 {
				break
			}
		}
	}
	w, _ := NewWindow(pabs(startPSN), window)
	a := newAsm(t, Config{MaxMessages: 16, MaxBytes: 64 << 10, MaxMessageSize: 20000}, first)

	var (
		inflight          []packet
		sent              int // packets sent for the first time
		cumAbs            = startPSN
		popped            int
		dups, refused     int
		deliveries, limit = 0, 100 * len(packets)
	)
	for popped < nmsg {
		if deliveries++; deliveries > limit {
			t.Fatalf("no progress: %d of %d messages after %d deliveries", popped, nmsg, limit)
		}
		// The sender keeps up to 400 packets in flight, within the window.
		for sent < len(packets) && len(inflight) < 400 && packets[sent].psn < cumAbs+window {
			inflight = append(inflight, packets[sent])
			sent++
		}
		if len(inflight) == 0 {
			t.Fatalf("stuck: nothing in flight, %d of %d messages, cum %d of %d packets", popped, nmsg, cumAbs-startPSN, len(packets))
		}
		k := rng.IntN(len(inflight))
		p := inflight[k]
		if rng.IntN(8) == 0 { // delivered twice
			dups++
		} else {
			inflight[k] = inflight[len(inflight)-1]
			inflight = inflight[:len(inflight)-1]
		}
		switch w.Check(pabs(p.psn)) {
		case Outside:
			t.Fatalf("PSN %d outside the window at cum %d", p.psn, cumAbs)
		case Duplicate:
			continue
		}
		m, err := a.Message(p.id, lens[p.id-first], true)
		if errors.Is(err, ErrTooManyMessages) {
			refused++
			inflight = append(inflight, p) // the sender retransmits it
			continue
		}
		if err != nil {
			t.Fatalf("Message(%d): %v", p.id, err)
		}
		if _, err := a.Place(m, p.off, p.data); err != nil {
			t.Fatalf("Place(%d, %d, %d bytes): %v", p.id, p.off, len(p.data), err)
		}
		if v := w.Mark(pabs(p.psn)); v != New {
			t.Fatalf("Mark after Check = %v", v)
		}
		cumAbs += int64(w.Cum().Diff(pabs(cumAbs)))
		if a.Outstanding() > 16 || a.Bytes() > 64<<10+20000 {
			t.Fatalf("bounds exceeded: Outstanding %d Bytes %d", a.Outstanding(), a.Bytes())
		}
		for m, ok := a.Pop(); ok; m, ok = a.Pop() {
			if want := first + uint32(popped); m.ID != want {
				t.Fatalf("popped message %d, want %d", m.ID, want)
			}
			if sha256.Sum256(m.Buf) != sums[popped] || m.Len != lens[popped] {
				t.Fatalf("message %d: contents differ from what was sent (%d bytes)", m.ID, m.Len)
			}
			popped++
		}
	}
	if cumAbs != startPSN+int64(len(packets)) || w.Pending() != 0 || a.Outstanding() != 0 || a.Bytes() != 0 {
		t.Fatalf("at the end: cum %d of %d, Pending %d, Outstanding %d, Bytes %d", cumAbs-startPSN, len(packets), w.Pending(), a.Outstanding(), a.Bytes())
	}
	if refused == 0 || dups == 0 {
		t.Fatalf("the test did not exercise the limits (%d refused) or duplicates (%d)", refused, dups)
	}
	t.Logf("%d messages, %d packets, %d duplicates, %d refused and retransmitted", nmsg, len(packets), dups, refused)
}

func TestPlaceAllocs(t *testing.T) {
	a := newAsm(t, Config{}, 0)
	m := mustMessage(t, a, 0, 1<<20, true)
	payload := bytes.Repeat([]byte{7}, 1024)
	off := uint32(0)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := a.Place(m, off, payload); err != nil {
			t.Fatal(err)
		}
		off += 1024
	})
	if allocs != 0 {
		t.Fatalf("Place: %v allocs per run, want 0", allocs)
	}
}

func BenchmarkPlace(b *testing.B) {
	a, _ := NewAssembler(Config{MaxMessages: 4}, 0)
	payload := make([]byte, 4096)
	id := uint32(0)
	m, _ := a.Message(id, 1<<20, true)
	off := uint32(0)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if done, _ := a.Place(m, off, payload); done {
			a.Pop()
			id++
			m, _ = a.Message(id, 1<<20, true)
			off = 0
			continue
		}
		off += uint32(len(payload))
	}
}

// TestAssemblerGrowsFromOne: the ring holds one message until a second
// is outstanding; messages started out of order grow it and keep their
// bytes, and Pop returns them in id order.
func TestAssemblerGrowsFromOne(t *testing.T) {
	a := newAsm(t, Config{}, 10)
	m := mustMessage(t, a, 10, 3, true)
	if len(a.slots) != 1 {
		t.Fatalf("%d slots for one message, want 1", len(a.slots))
	}
	if done, err := a.Place(m, 0, []byte("abc")); !done || err != nil {
		t.Fatalf("Place = %v, %v", done, err)
	}
	if got, ok := a.Pop(); !ok || string(got.Buf) != "abc" {
		t.Fatalf("Pop = %v %q", ok, got.Buf)
	}
	want := []string{"k", "lm", "nop", "qrst", "uvwxy"}
	for _, i := range []int{4, 1, 0, 3, 2} {
		m := mustMessage(t, a, 11+uint32(i), uint32(len(want[i])), true)
		if _, err := a.Place(m, 1, []byte(want[i][1:])); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.slots) < len(want) {
		t.Fatalf("%d slots for %d messages", len(a.slots), len(want))
	}
	for i := range want {
		m := mustMessage(t, a, 11+uint32(i), uint32(len(want[i])), true)
		if done, err := a.Place(m, 0, []byte(want[i][:1])); !done || err != nil {
			t.Fatalf("Place %d = %v, %v", i, done, err)
		}
	}
	for i, w := range want {
		if got, ok := a.Pop(); !ok || got.ID != 11+uint32(i) || string(got.Buf) != w {
			t.Fatalf("Pop %d = %v id %d %q, want %q", i, ok, got.ID, got.Buf, w)
		}
	}
}

// TestAssemblerRefusedKeepsRing: a message refused for its size or its
// bytes leaves the ring as it was, so the *Msg the caller holds still
// takes its bytes (a hostile peer cannot move it, nor grow every QP's
// ring with messages that are refused).
func TestAssemblerRefusedKeepsRing(t *testing.T) {
	a := newAsm(t, Config{MaxMessageSize: 200, MaxBytes: 150}, 0)
	m := mustMessage(t, a, 0, 3, true)
	slots := len(a.slots)
	for _, c := range []struct {
		id, length uint32
		want       error
	}{
		{5, 201, ErrTooLarge},         // above MaxMessageSize
		{40, 148, ErrTooManyMessages}, // 3 + 148 bytes above MaxBytes
	} {
		if _, err := a.Message(c.id, c.length, true); !errors.Is(err, c.want) {
			t.Fatalf("Message(%d, %d) = %v, want %v", c.id, c.length, err, c.want)
		}
		if len(a.slots) != slots {
			t.Fatalf("refused message %d grew the ring from %d to %d slots", c.id, slots, len(a.slots))
		}
	}
	if done, err := a.Place(m, 0, []byte("abc")); !done || err != nil {
		t.Fatalf("Place = %v, %v", done, err)
	}
	if got, ok := a.Pop(); !ok || string(got.Buf) != "abc" {
		t.Fatalf("Pop = %v %q", ok, got.Buf)
	}
	// The same message accepted grows the ring: the check above can fail.
	mustMessage(t, a, 40, 100, true)
	if len(a.slots) == slots {
		t.Fatalf("message 40 accepted, ring still %d slots", slots)
	}
}
