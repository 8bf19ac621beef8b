package reorder

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzWindow decodes the fuzz bytes into a window (size and start PSN) and a
// sequence of Mark, Check and Sack operations at offsets near Cum, far
// ahead and far behind, and compares every result with the slow model.
//
// Layout: byte 0 size (64..512), bytes 1-3 start PSN, then 3 bytes per
// operation: an op byte and a 16-bit argument.
func FuzzWindow(f *testing.F) {
	f.Add([]byte{0, 0xff, 0xff, 0xf0, 0, 1, 0, 0, 0, 0, 3, 0, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0, 5, 0, 4, 200, 0, 0, 0, 0, 7, 0x10, 0x20, 2, 0xff, 0xff})
	f.Add(bytes.Repeat([]byte{3, 0, 0x81, 0x40, 0x33, 0x02}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		size := 64 * (1 + int(data[0]%8))
		start := int64(data[1])<<16 | int64(data[2])<<8 | int64(data[3])
		w, err := NewWindow(pabs(start), size)
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(start, size)
		var words [4]uint64
		for ops := data[4:]; len(ops) >= 3; ops = ops[3:] {
			op, arg := ops[0], int64(ops[1])<<8|int64(ops[2])
			// near: [-256, 3*size) around Cum; far: up to +-2^23.
			near := m.cum - 256 + arg%int64(3*size+256)
			far := m.cum + (arg<<8 | int64(op)) - 1<<23
			switch op % 4 {
			case 0, 1:
				if got, want := w.Mark(pabs(near)), m.mark(near); got != want {
					t.Fatalf("Mark(cum%+d) = %v, want %v", near-m.cum, got, want)
				}
			case 2:
				if got, want := w.Mark(pabs(far)), m.mark(far); got != want {
					t.Fatalf("Mark(cum%+d) = %v, want %v", far-m.cum, got, want)
				}
				if got, want := w.Check(pabs(near)), m.verdict(near); got != want {
					t.Fatalf("Check(cum%+d) = %v, want %v", near-m.cum, got, want)
				}
				if got, want := w.Has(pabs(near)), m.has(near); got != want {
					t.Fatalf("Has(cum%+d) = %v, want %v", near-m.cum, got, want)
				}
			case 3:
				n := 1 + int(op>>2)%4
				recent := near
				if op&0x80 != 0 {
					recent = far
				}
				wantBase, wantWords := m.sack(recent, n)
				if base := w.Sack(pabs(recent), words[:n]); base != pabs(wantBase) {
					t.Fatalf("Sack(cum%+d, %d) base = %d, want %d", recent-m.cum, n, base, pabs(wantBase))
				}
				for j := range n {
					if words[j] != wantWords[j] {
						t.Fatalf("Sack(cum%+d, %d) word %d = %016x, want %016x", recent-m.cum, n, j, words[j], wantWords[j])
					}
				}
			}
			m.check(t, w)
		}
	})
}

// FuzzAssembler runs Message, Place and Pop with arbitrary ids, offsets and
// lengths (bounded small) against a model of the messages, and checks that
// nothing panics, bounds hold, errors are the documented ones, and popped
// messages come in order with the bytes the model expects.
//
// Layout: byte 0 MaxMessages (1..8), byte 1 first id, then 4 bytes per
// operation: op, id offset (signed), and two argument bytes.
func FuzzAssembler(f *testing.F) {
	f.Add([]byte{3, 0xfe, 0, 0, 10, 1, 1, 0, 0, 10, 1, 0, 0, 4, 2, 0, 0, 0})
	f.Add([]byte{1, 0xff, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0, 0, 0, 1, 1, 0, 0, 2, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 2, 60, 5, 1, 2, 7, 9, 1, 0, 30, 40, 2, 0, 0, 0}, 10))
	f.Add(bytes.Repeat([]byte{0x40, 1, 20, 30, 1, 1, 7, 9, 0x40, 0, 10, 9, 1, 0, 10, 3, 2, 0, 0, 0}, 6))
	const (
		maxSize  = 64
		maxBytes = 128
	)
	type mmsg struct {
		length  uint32
		withBuf bool
		buf     []byte
		got     uint32
		done    bool
		into    []byte // MessageInto: the caller's memory, beyond the message a guard
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		maxMsgs := 1 + int(data[0]%8)
		first := uint32(0xFFFFFFF0) + uint32(data[1])
		a, err := NewAssembler(Config{MaxMessages: maxMsgs, MaxMessageSize: maxSize, MaxBytes: maxBytes}, first)
		if err != nil {
			t.Fatal(err)
		}
		live := map[uint32]*mmsg{}
		next := first
		var bytesUsed int64
		for ops := data[2:]; len(ops) >= 4; ops = ops[4:] {
			op, id := ops[0], next+uint32(int32(int8(ops[1])))
			length := uint32(ops[2]) % (maxSize + 16)
			switch op % 3 {
			case 0:
				if op&0x40 == 0 {
					break
				}
				// MessageInto a caller's buffer of blen bytes, followed by
				// guard bytes that must stay untouched.
				blen := uint32(ops[3]) % (maxSize + 16)
				into := bytes.Repeat([]byte{0xEE}, int(blen)+8)
				m, err := a.MessageInto(id, length, into[:blen])
				d := int32(id - next)
				mm := live[id]
				var want error
				switch {
				case mm != nil && mm.length != length:
					want = ErrLengthMismatch
				case mm != nil:
				case blen < length:
					want = ErrTooLarge
				case d < 0:
					want = ErrStale
				case int(d) >= maxMsgs:
					want = ErrTooManyMessages
				case length > maxSize:
					want = ErrTooLarge
				}
				if want == nil && err != nil || want != nil && !errors.Is(err, want) {
					t.Fatalf("MessageInto(next%+d, %d, %d bytes) = %v, want %v", d, length, blen, err, want)
				}
				if err == nil && mm == nil {
					// Bytes no Place wrote keep the caller's: the model
					// starts from them (Place counts bytes, it does not
					// look for overlaps; the transport places each once).
					live[id] = &mmsg{length: length, withBuf: true, buf: bytes.Clone(into[:length]), into: into[:length]}
				}
				if err == nil && (m.ID != id || m.Len != length) {
					t.Fatalf("MessageInto(%d, %d) returned id %d length %d", id, length, m.ID, m.Len)
				}
				continue
			}
			switch op % 3 {
			case 0: // Message
				withBuf := op&0x80 == 0
				m, err := a.Message(id, length, withBuf)
				d := int32(id - next)
				mm := live[id]
				var want error
				switch {
				case d < 0:
					want = ErrStale
				case int(d) >= maxMsgs:
					want = ErrTooManyMessages
				case mm != nil && mm.length != length:
					want = ErrLengthMismatch
				case mm != nil:
				case length > maxSize || withBuf && length > maxBytes:
					want = ErrTooLarge
				case withBuf && length > 0 && d != 0 && bytesUsed+int64(length) > maxBytes:
					want = ErrTooManyMessages
				}
				if want == nil && err != nil || want != nil && !errors.Is(err, want) {
					t.Fatalf("Message(next%+d, %d, %v) = %v, want %v", d, length, withBuf, err, want)
				}
				if err != nil {
					continue
				}
				if m.ID != id || m.Len != length {
					t.Fatalf("Message(%d, %d) returned id %d length %d", id, length, m.ID, m.Len)
				}
				if mm == nil {
					mm = &mmsg{length: length, withBuf: withBuf}
					if withBuf {
						mm.buf = make([]byte, length)
						bytesUsed += int64(length)
					}
					live[id] = mm
				}
			case 1: // Place into a live message
				mm := live[id]
				if mm == nil {
					continue
				}
				m, err := a.Message(id, mm.length, mm.withBuf)
				if err != nil {
					t.Fatalf("Message on a live id %d: %v", id, err)
				}
				off := uint32(ops[3]) % (mm.length + 8)
				payload := bytes.Repeat([]byte{ops[3] ^ op}, int(length%24))
				end := off + uint32(len(payload))
				done, err := a.Place(m, off, payload)
				var want error
				switch {
				case end > mm.length:
					want = ErrOutOfBounds
				case mm.done && len(payload) == 0:
				case mm.got+uint32(len(payload)) > mm.length:
					want = ErrOverflow
				}
				if want == nil && err != nil || want != nil && !errors.Is(err, want) {
					t.Fatalf("Place(%d, %d, %d bytes) into %d/%d = %v, want %v", id, off, len(payload), mm.got, mm.length, err, want)
				}
				if err != nil {
					continue
				}
				wantDone := !mm.done && mm.got+uint32(len(payload)) == mm.length
				if done != wantDone {
					t.Fatalf("Place(%d, %d, %d bytes) complete = %v, want %v", id, off, len(payload), done, wantDone)
				}
				if mm.buf != nil {
					copy(mm.buf[off:end], payload)
				}
				mm.got += uint32(len(payload))
				mm.done = mm.done || done
			case 2: // Pop
				m, ok := a.Pop()
				mm := live[next]
				if want := mm != nil && mm.done; ok != want {
					t.Fatalf("Pop = %v, want %v", ok, want)
				}
				if !ok {
					continue
				}
				if m.ID != next || m.Got != m.Len || !bytes.Equal(m.Buf, mm.buf) || (m.Buf == nil) != (mm.buf == nil) && mm.into == nil {
					t.Fatalf("Pop returned id %d (want %d) with %q, want %q", m.ID, next, m.Buf, mm.buf)
				}
				if mm.into != nil {
					full := mm.into[:cap(mm.into)]
					if !bytes.Equal(mm.into, mm.buf) || !bytes.Equal(full[len(mm.into):], bytes.Repeat([]byte{0xEE}, len(full)-len(mm.into))) {
						t.Fatalf("message %d in the caller's buffer: %q, want %q and the guard untouched", m.ID, full, mm.buf)
					}
				} else {
					bytesUsed -= int64(len(mm.buf))
				}
				delete(live, next)
				next++
			}
			if a.Next() != next || a.Outstanding() != len(live) || a.Bytes() != bytesUsed {
				t.Fatalf("Next %d Outstanding %d Bytes %d, want %d %d %d", a.Next(), a.Outstanding(), a.Bytes(), next, len(live), bytesUsed)
			}
			if a.Outstanding() > maxMsgs || a.Bytes() > maxBytes+maxSize {
				t.Fatalf("bounds exceeded: Outstanding %d Bytes %d", a.Outstanding(), a.Bytes())
			}
		}
	})
}
