package wire

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// addSeeds adds a frame of every kind, in every network variant, to f's
// corpus, with the extra arguments first.
func addSeeds(f *testing.F, extra ...any) {
	r := testutil.Rand(f)
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 48) {
			fr, err := encodeKase(&k)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(append(append([]any{}, extra...), fr)...)
		}
	}
}

// FuzzDecode: Decode never panics; whatever it accepts re-encodes to a frame
// that decodes to the same fields, and stays valid after StampHop. With fix
// set, the IPv4 checksum and the ICRC are recomputed first, so that the
// fuzzer reaches the extension-header decoders behind the ICRC check.
func FuzzDecode(f *testing.F) {
	addSeeds(f, true)
	f.Fuzz(func(t *testing.T, fix bool, data []byte) {
		if fix {
			data = bytes.Clone(data)
			fixChecksums(data)
		}
		var p Packet
		if err := Decode(data, &p); err != nil {
			return
		}
		var l layout
		if err := parse(data, &l); err != nil {
			t.Fatalf("Decode accepted what parse rejects: %v", err)
		}
		if c, err := ICRC(data); err != nil || c != binary.LittleEndian.Uint32(data[l.end-ICRCLen:]) {
			t.Fatalf("Decode accepted, ICRC() = %#x, %v", c, err)
		}
		buf := make([]byte, FrameLen(&p, len(p.Payload)))
		n, err := Encode(buf, &p, p.Payload)
		if err != nil {
			t.Fatalf("re-encode of a decoded packet: %v\n%+v", err, p)
		}
		var q Packet
		if err := Decode(buf[:n], &q); err != nil {
			t.Fatalf("decode of re-encoded frame: %v", err)
		}
		want := p
		if want.IP.TTL == 0 {
			want.IP.TTL = defaultTTL
		}
		if d := diffPacket(&q, &want); d != "" {
			t.Fatalf("re-encoded frame decodes differently:\n%s", d)
		}
		if ok, err := StampHop(buf[:n], Hop{Switch: 1, TS: 2}); err != nil {
			t.Fatalf("StampHop: %v", err)
		} else if ok {
			if err := Decode(buf[:n], &q); err != nil {
				t.Fatalf("decode after StampHop: %v", err)
			}
			if len(q.INT) != len(want.INT)+HopLen {
				t.Fatalf("StampHop: %d INT bytes, had %d", len(q.INT), len(want.INT))
			}
		}
	})
}

// FuzzICRC: ICRC never panics and, when it finds the frame's layout, agrees
// with the slow model (mask a copy, CRC it whole).
func FuzzICRC(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ICRC(data)
		if err != nil {
			return
		}
		if m := modelICRC(data); c != m {
			t.Fatalf("ICRC %#x, model %#x", c, m)
		}
	})
}
