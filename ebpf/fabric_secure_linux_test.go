//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"testing"

	"github.com/sprayfabric/spray/transport/wire"
)

// gcm is a wire.Cipher for the tests: AES-128-GCM under a fixed key, the
// counter as the nonce (a QP derives its keys and IV; the tag rules are
// the same).
type gcm struct {
	aead  cipher.AEAD
	nonce [12]byte
}

func newGCM(tb testing.TB) *gcm {
	tb.Helper()
	b, err := aes.NewCipher(bytes.Repeat([]byte{0x5a}, 16))
	if err != nil {
		tb.Fatal(err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		tb.Fatal(err)
	}
	return &gcm{aead: a}
}

func (c *gcm) n(s *wire.Sec) []byte {
	for i := range 8 {
		c.nonce[4+i] = byte(s.Counter >> (56 - 8*i))
	}
	return c.nonce[:]
}

func (c *gcm) Seal(s *wire.Sec, aad, area []byte) { c.aead.Seal(area[:0], c.n(s), area, aad) }

func (c *gcm) Open(s *wire.Sec, aad, area []byte) error {
	_, err := c.aead.Open(area[:0], c.n(s), area[:len(area)+wire.TagLen], aad)
	return err
}

// openFrame decodes frame and checks its tag as a receiving QP does,
// returning the packet with its payload in clear.
func openFrame(tb testing.TB, frame []byte, c wire.Cipher) (*wire.Packet, error) {
	tb.Helper()
	frame = bytes.Clone(frame)
	p := decode(tb, frame)
	return p, wire.Open(frame, p, c)
}

// TestFabricINTSecured: a secured spray data packet (its INT region after
// the security header) gets the same hop record as a clear one, at egress
// and its queue delay at the next ingress, byte for byte what the
// software switch (wire.StampHop) writes; the receiver's tag check still
// passes, as the tag reads the INT region as ones, and the payload comes
// out intact. A bit flipped outside the INT region still fails the check,
// so the check is not vacuous.
func TestFabricINTSecured(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, integrity := range []bool{false, true} {
			t.Run(fmt.Sprintf("v6=%v/integrity=%v", v6, integrity), func(t *testing.T) {
				f := loadFabricRun(t, PortConfig{RateMbps: testRate})
				c := newGCM(t)
				p, payload := sprayData(v6, 3, 0)
				p.BTH.Secured = true
				p.Sec = wire.Sec{Epoch: 1, Counter: 4242}
				if integrity {
					p.Sec.Flags = wire.SecIntegrityOnly
				}
				p.Cipher = c
				orig := encode(t, &p, payload)
				if got, err := openFrame(t, orig, c); err != nil || !bytes.Equal(got.Payload, payload) {
					t.Fatalf("the sealed frame does not open before the fabric: %v", err)
				}

				ret, out := run(t, f.egress, orig)
				if ret != retNext {
					t.Fatalf("egress verdict %d, want TCX_NEXT", int32(ret))
				}
				got := decode(t, out)
				if n := len(got.INT) / wire.HopLen; n != 1 {
					t.Fatalf("%d hop records after egress, want 1", n)
				}
				hop := wire.HopAt(got.INT, 0)
				if hop.Switch != testPort.Switch || hop.Port != testPort.Port || hop.RateMbps != testRate ||
					hop.TS == 0 || hop.TxBytes != uint32(len(orig)) {
					t.Errorf("hop after egress %+v; want switch/port %v, rate %d, a timestamp, TxBytes %d",
						hop, testPort, testRate, len(orig))
				}
				want := bytes.Clone(orig)
				if ok, err := wire.StampHop(want, hop); !ok || err != nil {
					t.Fatalf("StampHop: %v %v", ok, err)
				}
				if !bytes.Equal(out, want) {
					t.Errorf("egress output differs from wire.StampHop's\n got %x\nwant %x", out, want)
				}
				if c := portCounters(t, f, testPort); c.INTStamped != 1 || c.INTFull != 0 {
					t.Errorf("counters after egress: %v; want one record stamped", c)
				}

				ret, out2 := run(t, f.ingress, out)
				if ret != retNext {
					t.Fatalf("ingress verdict %d", int32(ret))
				}
				if c := portCounters(t, f, testPort); c.Measured != 1 {
					t.Fatalf("counters after ingress: %v; want one delay measured", c)
				}
				got = decode(t, out2)
				hop2 := wire.HopAt(got.INT, 0)
				hop.QLen = hop2.QLen
				if hop2 != hop {
					t.Errorf("hop after ingress %+v, want %+v with its QLen", hop2, hop)
				}

				opened, err := openFrame(t, out2, c)
				if err != nil {
					t.Fatalf("the receiver's tag check fails after the fabric stamped INT: %v", err)
				}
				if !bytes.Equal(opened.Payload, payload) {
					t.Error("payload changed")
				}
				if n := len(opened.INT) / wire.HopLen; n != 1 || wire.HopAt(opened.INT, 0) != hop {
					t.Errorf("the opened packet has %d records, first %+v; want %+v", n, wire.HopAt(opened.INT, 0), hop)
				}

				// The data header is authenticated: a flipped bit of its
				// message ID fails the check (after Decode, which would
				// catch it by the ICRC first).
				bad := bytes.Clone(out2)
				q := decode(t, bad)
				ipLen := 20
				if v6 {
					ipLen = 40
				}
				bad[14+ipLen+8+wire.BTHLen+wire.SecLen] ^= 1
				if err := wire.Open(bad, q, c); err == nil {
					t.Error("a frame with a flipped data header bit opened")
				}
			})
		}
	}
}
