package rss

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Bounds of a Table's wire encoding (AppendBinary, ParseTable). Real NICs
// have keys of 40 or 52 bytes and tables of 64 to 2048 entries.
const (
	// MaxKeyLen is the longest key the encoding carries.
	MaxKeyLen = 64
	// MaxEntries is the largest indirection table the encoding carries.
	MaxEntries = 4096
	// MaxQueue is the highest queue number the encoding carries.
	MaxQueue = 1<<16 - 1
	// MaxEncodedLen is the longest encoding of a Table.
	MaxEncodedLen = 1 + MaxKeyLen + 2 + 1 + 2*MaxEntries
)

// ErrBadTable is wrapped by the errors of ParseTable and AppendBinary: an
// encoding that is malformed or out of bounds, or a table that has none.
var ErrBadTable = errors.New("rss: bad table encoding")

// AppendBinary appends the wire encoding of t to b, so that a receiver
// can send its key and indirection table to the senders that steer to it:
//
//	offset  size  field
//	0       1     key length K, 1..MaxKeyLen
//	1       K     key
//	1+K     2     entries N, 1..MaxEntries, big endian
//	3+K     1     entry width W: 1 when every queue is below 256, else 2
//	4+K     N*W   the queue of each bucket, big endian
//
// The width is the smallest that holds every queue, so that a table has
// exactly one encoding (FuzzParseTable). A table without a key or entries,
// or beyond the bounds, is an error wrapping ErrBadTable.
func (t Table) AppendBinary(b []byte) ([]byte, error) {
	if len(t.Key) == 0 || len(t.Key) > MaxKeyLen {
		return b, fmt.Errorf("%w: %d-byte key (1 to %d)", ErrBadTable, len(t.Key), MaxKeyLen)
	}
	if len(t.Indir) == 0 || len(t.Indir) > MaxEntries {
		return b, fmt.Errorf("%w: %d-entry table (1 to %d)", ErrBadTable, len(t.Indir), MaxEntries)
	}
	w := 1
	for _, q := range t.Indir {
		if q > MaxQueue {
			return b, fmt.Errorf("%w: queue %d beyond %d", ErrBadTable, q, MaxQueue)
		}
		if q > 0xff {
			w = 2
		}
	}
	b = append(b, byte(len(t.Key)))
	b = append(b, t.Key...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.Indir)))
	b = append(b, byte(w))
	for _, q := range t.Indir {
		if w == 1 {
			b = append(b, byte(q))
		} else {
			b = binary.BigEndian.AppendUint16(b, uint16(q))
		}
	}
	return b, nil
}

// MarshalBinary returns the wire encoding of t (see AppendBinary).
func (t Table) MarshalBinary() ([]byte, error) { return t.AppendBinary(nil) }

// UnmarshalBinary sets t to the table b encodes (see ParseTable).
func (t *Table) UnmarshalBinary(b []byte) error {
	p, err := ParseTable(b)
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// ParseTable decodes a table that AppendBinary encoded; b must hold
// exactly one encoding. Every malformed input (short, trailing bytes,
// lengths out of bounds, a width other than 1 or 2, a width of 2 that 1
// would do) is an error wrapping ErrBadTable; the allocation is bounded
// by MaxEncodedLen whatever b says.
func ParseTable(b []byte) (Table, error) {
	if len(b) < 1 {
		return Table{}, fmt.Errorf("%w: empty", ErrBadTable)
	}
	k := int(b[0])
	if k == 0 || k > MaxKeyLen {
		return Table{}, fmt.Errorf("%w: %d-byte key (1 to %d)", ErrBadTable, k, MaxKeyLen)
	}
	if len(b) < 1+k+3 {
		return Table{}, fmt.Errorf("%w: %d bytes, short of a %d-byte key and the table's size", ErrBadTable, len(b), k)
	}
	n := int(binary.BigEndian.Uint16(b[1+k:]))
	w := int(b[3+k])
	if n == 0 || n > MaxEntries {
		return Table{}, fmt.Errorf("%w: %d-entry table (1 to %d)", ErrBadTable, n, MaxEntries)
	}
	if w != 1 && w != 2 {
		return Table{}, fmt.Errorf("%w: entry width %d (1 or 2)", ErrBadTable, w)
	}
	body := b[4+k:]
	if len(body) != n*w {
		return Table{}, fmt.Errorf("%w: %d bytes of entries, want %d×%d", ErrBadTable, len(body), n, w)
	}
	t := Table{Key: append([]byte(nil), b[1:1+k]...), Indir: make([]uint32, n)}
	wide := false
	for i := range t.Indir {
		if w == 1 {
			t.Indir[i] = uint32(body[i])
		} else {
			t.Indir[i] = uint32(binary.BigEndian.Uint16(body[2*i:]))
			wide = wide || t.Indir[i] > 0xff
		}
	}
	if w == 2 && !wide {
		return Table{}, fmt.Errorf("%w: 2-byte entries where every queue fits one", ErrBadTable)
	}
	return t, nil
}
