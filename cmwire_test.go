package spray

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/transport"
)

// FuzzConnRequest feeds arbitrary bytes to the listener's decoding: it
// never panics, never reads a body beyond cmMaxBody, and a request it
// accepts encodes back to the same bytes.
func FuzzConnRequest(f *testing.F) {
	good := connReq{qp: transport.QPInfo{QPN: 0x123, PSN: 0xabcdef, MAC: macA, IP: ipA}, service: "train"}
	f.Add(appendMsg(nil, msgREQ, good.marshal()))
	v6 := good
	v6.qp.IP = netip.MustParseAddr("fd00::1")
	f.Add(appendMsg(nil, msgREQ, v6.marshal()))
	f.Add(appendMsg(nil, msgREQ, connReq{profile: transport.RoCE, qp: transport.QPInfo{QPN: 1, IP: ipB}, service: "x"}.marshal()))
	f.Add(appendMsg(nil, msgREJ, rejection{reason: rejService, version: 1, text: "no"}.marshal()))
	f.Add([]byte("SPCM\x01\x01\xff\xff"))
	f.Add([]byte("SPCM\x09\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readMsg(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(m.body) > cmMaxBody {
			t.Fatalf("body of %d bytes accepted", len(m.body))
		}
		if r, err := parseReq(m.body); err == nil {
			if !bytes.Equal(r.marshal(), m.body) {
				t.Fatalf("request %x decodes to %+v, which encodes to %x", m.body, r, r.marshal())
			}
			if len(r.service) > MaxService || (r.qp.IP.Is4() == r.qp.IP.Is6()) {
				t.Fatalf("accepted request %+v", r)
			}
		}
		if q, err := parseRep(m.body); err == nil && !bytes.Equal(appendQPInfo(nil, q), m.body) {
			t.Fatalf("reply %x decodes to %+v", m.body, q)
		}
		if r, err := parseRej(m.body); err == nil {
			if !bytes.Equal(r.marshal(), m.body) {
				t.Fatalf("rejection %x decodes to %+v", m.body, r)
			}
			if r.err() == nil {
				t.Fatal("rejection without an error")
			}
		}
	})
}
