package wire

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"net/netip"
	"testing"
)

// gcmCipher is a test Cipher: AES-128-GCM with the counter as the nonce.
type gcmCipher struct {
	aead  cipher.AEAD
	nonce [12]byte
}

func newGCM(t testing.TB, key byte) *gcmCipher {
	b, err := aes.NewCipher(bytes.Repeat([]byte{key}, 16))
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return &gcmCipher{aead: g}
}

func (c *gcmCipher) n(s *Sec) []byte {
	for i := range 8 {
		c.nonce[4+i] = byte(s.Counter >> (56 - 8*i))
	}
	return c.nonce[:]
}

func (c *gcmCipher) Seal(s *Sec, aad, area []byte) { c.aead.Seal(area[:0], c.n(s), area, aad) }

func (c *gcmCipher) Open(s *Sec, aad, area []byte) error {
	_, err := c.aead.Open(area[:0], c.n(s), area[:len(area)+TagLen], aad)
	return err
}

// securedData is a spray data packet with an INT region and a RETH,
// secured (integrity only if integrity).
func securedData(integrity bool) Packet {
	p := Packet{
		IP:   IP{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")},
		UDP:  UDP{Src: 49152},
		BTH:  BTH{Opcode: OpSprayData, DestQP: 0x123, PSN: 77, Secured: true},
		Data: Data{MsgID: 3, MsgLen: 1001, Kind: KindWrite, Flags: FlagINT, INTMax: 2},
		RETH: RETH{VA: 0x1000, RKey: 0xabcd, Len: 1001},
		Sec:  Sec{Epoch: 2, Counter: 99},
	}
	if integrity {
		p.Sec.Flags = SecIntegrityOnly
	}
	return p
}

// TestSecRoundTrip: a secured packet encodes with its security header
// after the BTH and its tag before the ICRC; it decodes to the same
// fields, with the payload encrypted (or in clear with integrity only);
// Open restores the payload; a hop stamped into its INT region, ECN and
// FECN marks leave the tag valid; any other edited byte (ICRC fixed) or
// another key fails Open.
func TestSecRoundTrip(t *testing.T) {
	payload := make([]byte, 1001)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	for _, integrity := range []bool{false, true} {
		p := securedData(integrity)
		p.Cipher = newGCM(t, 1)
		buf := make([]byte, 2048)
		n, err := Encode(buf, &p, payload)
		if err != nil {
			t.Fatal(err)
		}
		f := buf[:n]
		if want := FrameLen(&p, len(payload)); n != want || n != HeaderLen(&p)+1001+3+TagLen+ICRCLen {
			t.Fatalf("frame %d bytes, FrameLen %d", n, want)
		}
		var q Packet
		if err := Decode(f, &q); err != nil {
			t.Fatal(err)
		}
		if !q.BTH.Secured || q.Sec != p.Sec || q.Data != p.Data || q.RETH != p.RETH || len(q.Payload) != len(payload) {
			t.Fatalf("decoded %+v %+v", q.BTH, q.Sec)
		}
		if clear := bytes.Contains(f, payload[100:140]); clear != integrity {
			t.Fatalf("integrity %v: payload in clear %v", integrity, clear)
		}
		if ok, err := StampHop(f, Hop{Switch: 9, QLen: 5}); !ok || err != nil {
			t.Fatalf("StampHop: %v %v", ok, err)
		}
		const bth = EthLen + IPv4Len + UDPLen
		f[EthLen+1] |= ECNCE
		putIPv4Checksum(f, EthLen, IPv4Len)
		f[bth+4] |= 0x80 // FECN
		fixChecksums(f)
		orig := bytes.Clone(f)
		if err := Decode(f, &q); err != nil {
			t.Fatal(err)
		}
		if err := Open(f, &q, newGCM(t, 1)); err != nil {
			t.Fatalf("integrity %v: Open after INT, ECN, FECN: %v", integrity, err)
		}
		if !bytes.Equal(q.Payload, payload) || len(q.INT) != HopLen {
			t.Fatalf("opened payload differs, or %d INT bytes", len(q.INT))
		}
		if err := Decode(orig, &q); err != nil || Open(orig, &q, newGCM(t, 2)) == nil {
			t.Fatal("Open under another key succeeded")
		}
		// Every authenticated byte: BTH (but byte 4), security header,
		// data header, RETH, payload, pad, tag.
		for off := bth; off < len(orig)-ICRCLen; off++ {
			if off == bth+4 || (off >= bth+BTHLen+SecLen+DataHdrLen && off < bth+BTHLen+SecLen+DataHdrLen+INTShimLen+2*HopLen) {
				continue
			}
			if off == bth+8 {
				continue // the Secured bit: flipped, the frame is no longer secured
			}
			g := bytes.Clone(orig)
			g[off] ^= 0x01
			if !fixChecksums(g) {
				continue
			}
			if err := Decode(g, &q); err != nil {
				continue // rejected before Open: fine
			}
			if err := Open(g, &q, newGCM(t, 1)); err == nil {
				t.Fatalf("integrity %v: byte %d flipped, Open accepts it", integrity, off-bth)
			}
		}
	}
	var q Packet
	p := securedData(false)
	p.BTH.Secured = false
	buf := make([]byte, 2048)
	n, _ := Encode(buf, &p, payload)
	if err := Decode(buf[:n], &q); err != nil || !errors.Is(Open(buf[:n], &q, newGCM(t, 1)), ErrNotSecured) {
		t.Fatalf("Open of a clear frame: %v", err)
	}
}

// TestSecNoAlloc: sealing (Encode with a Cipher), Decode and Open do not
// allocate.
func TestSecNoAlloc(t *testing.T) {
	p := securedData(false)
	p.Cipher = newGCM(t, 1)
	payload := make([]byte, 1001)
	buf := make([]byte, 2048)
	c := newGCM(t, 1)
	var q Packet
	if a := testing.AllocsPerRun(100, func() {
		n, err := Encode(buf, &p, payload)
		if err != nil {
			t.Fatal(err)
		}
		if err := Decode(buf[:n], &q); err != nil {
			t.Fatal(err)
		}
		if err := Open(buf[:n], &q, c); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%v allocations per seal, decode and open", a)
	}
}

// srcCipher is gcmCipher that also seals from the payload's own memory.
type srcCipher struct {
	gcmCipher
	calls int
}

func (c *srcCipher) SealFrom(s *Sec, aad, area, src []byte) {
	c.calls++
	c.aead.Seal(area[:0], c.n(s), src, aad)
}

// A SourceSealer seals the payload from where it lies: the frame is
// byte for byte the one sealed after a copy, for payloads with and without
// pad, encrypted and integrity only (only an encrypted payload without
// pad is sealed from its memory), the payload the caller gave is left
// unchanged, and the frame opens to it.
func TestEncodeSealFrom(t *testing.T) {
	for _, integrity := range []bool{false, true} {
		for _, n := range []int{1, 3, 4, 1000, 1001, 4096} {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*31 + 7)
			}
			orig := bytes.Clone(payload)
			p := securedData(integrity)
			p.Cipher = newGCM(t, 9)
			want := make([]byte, 9000)
			wn, err := Encode(want, &p, payload)
			if err != nil {
				t.Fatal(err)
			}
			sc := &srcCipher{gcmCipher: *newGCM(t, 9)}
			p.Cipher = sc
			got := make([]byte, 9000)
			gn, err := Encode(got, &p, payload)
			if err != nil {
				t.Fatal(err)
			}
			if fromSrc := !integrity && n%4 == 0; (sc.calls == 1) != fromSrc {
				t.Fatalf("integrity %v, %d bytes: sealed from the payload %d times, want %v", integrity, n, sc.calls, fromSrc)
			}
			if !bytes.Equal(got[:gn], want[:wn]) {
				t.Fatalf("integrity %v, %d bytes: the frame sealed from the payload differs from the one sealed after a copy", integrity, n)
			}
			if !bytes.Equal(payload, orig) {
				t.Fatalf("integrity %v, %d bytes: the caller's payload changed", integrity, n)
			}
			var d Packet
			if err := Decode(got[:gn], &d); err != nil {
				t.Fatal(err)
			}
			if err := Open(got[:gn], &d, newGCM(t, 9)); err != nil || !bytes.Equal(d.Payload, orig) {
				t.Fatalf("integrity %v, %d bytes: opened %v, payload intact %v", integrity, n, err, bytes.Equal(d.Payload, orig))
			}
		}
	}
}

// BenchmarkEncodeSealed encodes an encrypted data packet of 8192 bytes of
// payload: sealed after a copy into the frame, and from the payload where
// it lies (SourceSealer). docs/results.md has the figures.
func BenchmarkEncodeSealed(b *testing.B) {
	payload := make([]byte, 8192)
	for _, from := range []bool{false, true} {
		b.Run(map[bool]string{false: "copy", true: "from-source"}[from], func(b *testing.B) {
			p := securedData(false)
			var c Cipher = newGCM(b, 9)
			if from {
				c = &srcCipher{gcmCipher: *newGCM(b, 9)}
			}
			p.Cipher = c
			buf := make([]byte, 9014)
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if _, err := Encode(buf, &p, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
