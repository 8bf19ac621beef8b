package rss

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// The encoding of two small tables, byte for byte: one-byte entries while
// every queue is below 256, two-byte ones beyond; and each parses back.
func TestTableEncoding(t *testing.T) {
	cases := []struct {
		tab  Table
		want []byte
	}{
		{Table{Key: []byte{0xaa, 0xbb, 0xcc}, Indir: []uint32{0, 1, 2, 1}},
			[]byte{3, 0xaa, 0xbb, 0xcc, 0, 4, 1, 0, 1, 2, 1}},
		{Table{Key: []byte{7}, Indir: []uint32{300, 2}},
			[]byte{1, 7, 0, 2, 2, 0x01, 0x2c, 0x00, 0x02}},
	}
	for _, c := range cases {
		got, err := c.tab.MarshalBinary()
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("%+v encodes to %x, %v; want %x", c.tab, got, err, c.want)
		}
		back, err := ParseTable(got)
		if err != nil || !bytes.Equal(back.Key, c.tab.Key) || !slices.Equal(back.Indir, c.tab.Indir) {
			t.Fatalf("%x parses to %+v, %v", got, back, err)
		}
	}
	// A real-sized table fits the bound.
	big := Spread(4096, MaxEntries, make([]byte, MaxKeyLen))
	b, err := big.AppendBinary([]byte("x"))
	if err != nil || len(b) != 1+MaxEncodedLen || b[0] != 'x' {
		t.Fatalf("the largest table: %d bytes, %v; want %d after the prefix", len(b)-1, err, MaxEncodedLen)
	}
}

// Tables the encoding cannot carry, and encodings that are malformed,
// are errors wrapping ErrBadTable.
func TestTableEncodingErrors(t *testing.T) {
	for _, tab := range []Table{
		{},
		{Key: DefaultKey},
		{Indir: []uint32{0}},
		{Key: make([]byte, MaxKeyLen+1), Indir: []uint32{0}},
		{Key: DefaultKey, Indir: make([]uint32, MaxEntries+1)},
		{Key: DefaultKey, Indir: []uint32{MaxQueue + 1}},
	} {
		if _, err := tab.MarshalBinary(); !errors.Is(err, ErrBadTable) {
			t.Errorf("%d-byte key, %d entries: %v, want ErrBadTable", len(tab.Key), len(tab.Indir), err)
		}
	}
	good := []byte{3, 0xaa, 0xbb, 0xcc, 0, 4, 1, 0, 1, 2, 1}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"no key":         {0, 0, 1, 1, 0},
		"key too long":   append([]byte{MaxKeyLen + 1}, make([]byte, MaxKeyLen+4)...),
		"short key":      good[:3],
		"no size":        good[:5],
		"no entries":     {1, 7, 0, 0, 1},
		"too many":       {1, 7, 0x10, 0x01, 1},
		"width 3":        {1, 7, 0, 1, 3, 0, 0, 0},
		"width 0":        {1, 7, 0, 1, 0},
		"short entries":  good[:len(good)-1],
		"trailing":       append(append([]byte(nil), good...), 0),
		"wide for small": {1, 7, 0, 1, 2, 0, 5},
	} {
		if _, err := ParseTable(b); !errors.Is(err, ErrBadTable) {
			t.Errorf("%s: %v, want ErrBadTable", name, err)
		}
	}
	var tab Table
	if err := tab.UnmarshalBinary(good); err != nil || len(tab.Indir) != 4 {
		t.Errorf("UnmarshalBinary: %+v, %v", tab, err)
	}
}

// FuzzParseTable: a table survives its round trip; arbitrary bytes never
// panic ParseTable, and what it accepts encodes back to the same bytes.
func FuzzParseTable(f *testing.F) {
	for _, tab := range []Table{
		Spread(4, 128, nil),
		Spread(300, 512, nil),
		{Key: []byte{1}, Indir: []uint32{0}},
	} {
		b, _ := tab.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{1, 7, 0, 1, 2, 0, 5})
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := ParseTable(b)
		if err != nil {
			if !errors.Is(err, ErrBadTable) {
				t.Fatalf("error %v does not wrap ErrBadTable", err)
			}
			// Reinterpret the bytes as a table: it round-trips if it encodes.
			tab = Table{Key: b[:min(len(b), 40)]}
			for i := 0; i+1 < len(b); i += 2 {
				tab.Indir = append(tab.Indir, uint32(b[i])<<8|uint32(b[i+1]))
			}
			enc, err := tab.MarshalBinary()
			if err != nil {
				return
			}
			back, err := ParseTable(enc)
			if err != nil || !bytes.Equal(back.Key, tab.Key) || !slices.Equal(back.Indir, tab.Indir) {
				t.Fatalf("%+v encodes to %x, which parses to %+v, %v", tab, enc, back, err)
			}
			return
		}
		if len(tab.Key) > MaxKeyLen || len(tab.Indir) > MaxEntries {
			t.Fatalf("accepted a %d-byte key and %d entries", len(tab.Key), len(tab.Indir))
		}
		enc, err := tab.MarshalBinary()
		if err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("%x parses to %+v, which encodes to %x, %v", b, tab, enc, err)
		}
	})
}
