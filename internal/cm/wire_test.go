package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/transport"
)

// FuzzConnRequest feeds arbitrary bytes to the listener's decoding: it
// never panics, never reads a body beyond its version's bound (cmMaxBody
// in version 1, cmMaxBody2 in 2, cmMaxBody3 in 3, cmMaxBody4 in 4), and a request, reply or
// rejection it accepts, in any version, encodes back to the same bytes.
func FuzzConnRequest(f *testing.F) {
	good := connReq{qp: transport.QPInfo{QPN: 0x123, PSN: 0xabcdef, MAC: macA, IP: ipA}, service: "train"}
	f.Add(appendMsgV(nil, cmVersion1, msgREQ, good.marshalV(cmVersion1)))
	f.Add(appendMsg(nil, msgREQ, good.marshal()))
	v6 := good
	v6.qp.IP = netip.MustParseAddr("fd00::1")
	f.Add(appendMsgV(nil, cmVersion1, msgREQ, v6.marshalV(cmVersion1)))
	f.Add(appendMsg(nil, msgREQ, connReq{profile: transport.RoCE, qp: transport.QPInfo{QPN: 1, IP: ipB}, service: "x"}.marshal()))
	steered := good
	steered.steer = &transport.Steering{IP: ipA, Table: rss.Spread(4, 128, nil), Queue: 3}
	f.Add(appendMsg(nil, msgREQ, steered.marshal()))
	wide := good
	wide.steer = &transport.Steering{IP: ipA, Table: rss.Spread(300, 2048, nil), Queue: 299}
	f.Add(appendMsg(nil, msgREQ, wide.marshal()))
	f.Add(appendMsgV(nil, cmVersion2, msgREQ, wide.marshalV(cmVersion2)))
	linked := steered
	linked.link = linkInfo{kind: LinkUDP, mtu: 1500, port: 4791, peerPort: 4791}
	f.Add(appendMsgV(nil, cmVersion3, msgREQ, linked.marshalV(cmVersion3)))
	f.Add(appendMsg(nil, msgREQ, linked.marshal()))
	proved := linked
	proved.sec = secBlock{flags: secIntegrityOnly, proof: bytes.Repeat([]byte{7}, pskProofLen)}
	f.Add(appendMsg(nil, msgREQ, proved.marshal()))
	f.Add(appendMsg(nil, msgREP, connRep{qp: good.qp, sec: secBlock{flags: secPackets, proof: proved.sec.proof}}.marshal()))
	f.Add(appendMsg(nil, msgREP, connRep{qp: good.qp, steer: steered.steer}.marshalV(cmVersion)))
	f.Add(appendMsg(nil, msgREJ, rejection{reason: rejService, version: 1, text: "no"}.marshal()))
	f.Add([]byte("SPCM\x01\x01\xff\xff"))
	f.Add([]byte("SPCM\x02\x01\x22\x49"))
	f.Add([]byte("SPCM\x09\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readMsg(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(m.body) > bodyLimit(m.version) || len(m.body) > cmMaxBody4 {
			t.Fatalf("version %d: body of %d bytes accepted", m.version, len(m.body))
		}
		if m.version == cmVersion1 && len(m.body) > cmMaxBody || m.version == cmVersion2 && len(m.body) > cmMaxBody2 {
			t.Fatalf("version %d: body of %d bytes accepted", m.version, len(m.body))
		}
		for _, v := range []uint8{cmVersion1, cmVersion2, cmVersion3, cmVersion} {
			if r, err := parseReq(m.body, v); err == nil {
				if !bytes.Equal(r.marshalV(v), m.body) {
					t.Fatalf("v%d request %x decodes to %+v, which encodes to %x", v, m.body, r, r.marshalV(v))
				}
				if len(r.service) > MaxService || (r.qp.IP.Is4() == r.qp.IP.Is6()) {
					t.Fatalf("accepted request %+v", r)
				}
				if r.steer != nil && (v == cmVersion1 || r.steer.IP != r.qp.IP || len(r.steer.Table.Indir) == 0) {
					t.Fatalf("v%d request with steering %+v", v, r.steer)
				}
			}
			if q, err := parseRep(m.body, v); err == nil && !bytes.Equal(q.marshalV(v), m.body) {
				t.Fatalf("v%d reply %x decodes to %+v", v, m.body, q)
			}
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

// The version-2 steering block, byte for byte: a REP of a QP at 10.9.0.1
// whose engine is queue 1 of a two-queue table with a 2-byte key; and a
// request or reply without steering ends in a zero length.
func TestCMSteeringBlock(t *testing.T) {
	if cmMaxBody2 != 8776 { // the package doc's figure
		t.Fatalf("cmMaxBody2 %d", cmMaxBody2)
	}
	qp := transport.QPInfo{QPN: 0x010203, PSN: 0x040506, MAC: macA, IP: ipA}
	st := &transport.Steering{IP: ipA, Table: rss.Table{Key: []byte{0xaa, 0xbb}, Indir: []uint32{0, 1}}, Queue: 1}
	got := connRep{qp: qp, steer: st}.marshalV(cmVersion2)
	want := append(appendQPInfo(nil, qp),
		0, 10, // block length
		0, 1, // queue
		2, 0xaa, 0xbb, 0, 2, 1, 0, 1) // the table: key, entries, width, queues
	if !bytes.Equal(got, want) {
		t.Fatalf("REP %x, want %x", got, want)
	}
	rep, err := parseRep(got, cmVersion2)
	if err != nil || rep.steer == nil || rep.steer.Queue != 1 || rep.steer.IP != ipA || len(rep.steer.Table.Indir) != 2 {
		t.Fatalf("parsed %+v, %v", rep, err)
	}
	if _, err := parseRep(got, cmVersion1); err == nil {
		t.Fatal("a version-2 reply parsed as version 1")
	}
	none := connRep{qp: qp}.marshalV(cmVersion2)
	if !bytes.Equal(none, append(appendQPInfo(nil, qp), 0, 0)) {
		t.Fatalf("REP without steering %x", none)
	}
	// A steering the block cannot carry goes as none.
	huge := &transport.Steering{IP: ipA, Table: rss.Spread(2, rss.MaxEntries+1, nil), Queue: 1}
	if b := (connRep{qp: qp, steer: huge}).marshalV(cmVersion2); !bytes.Equal(b, none) {
		t.Fatalf("REP with an oversized table %x", b)
	}
	if b := (connReq{qp: qp, service: "s", steer: st}).marshalV(cmVersion1); len(b) != 1+len(appendQPInfo(nil, qp))+2 {
		t.Fatalf("a version-1 request carries %d bytes", len(b))
	}
}

// The version-3 link block, byte for byte: after the steering, the kind
// (udp is 2), the IP MTU, the port received on and the port sent to; a
// version-2 encoding of the same reply has none, and a bad kind does not
// parse.
func TestCMLinkBlock(t *testing.T) {
	if cmMaxBody3 != 8783 { // the package doc's figure
		t.Fatalf("cmMaxBody3 %d", cmMaxBody3)
	}
	qp := transport.QPInfo{QPN: 0x010203, PSN: 0x040506, MAC: macA, IP: ipA}
	rep := connRep{qp: qp, link: linkInfo{kind: LinkUDP, mtu: 9000, port: 4791, peerPort: 4792}}
	got := rep.marshalV(cmVersion3)
	want := append(appendQPInfo(nil, qp), 0, 0, 2, 0x23, 0x28, 0x12, 0xb7, 0x12, 0xb8)
	if !bytes.Equal(got, want) {
		t.Fatalf("REP %x, want %x", got, want)
	}
	back, err := parseRep(got, cmVersion3)
	if err != nil || back.link != rep.link {
		t.Fatalf("parsed %+v, %v", back, err)
	}
	if v2 := rep.marshalV(cmVersion2); !bytes.Equal(v2, want[:len(want)-linkBlockLen]) {
		t.Fatalf("version-2 REP %x", v2)
	}
	bad := bytes.Clone(got)
	bad[len(bad)-linkBlockLen] = 9
	if _, err := parseRep(bad, cmVersion3); !errors.Is(err, errBadMessage) {
		t.Fatalf("link kind 9: %v", err)
	}
}

// The version-4 security block, byte for byte: after the link block, the
// flags (packets protected 1, integrity only 2), the proof's length and
// the proof; a version-3 encoding of the same reply has none, and unknown
// flags or a proof of another length do not parse.
func TestCMSecBlock(t *testing.T) {
	if cmMaxBody4 != 8817 { // the package doc's figure
		t.Fatalf("cmMaxBody4 %d", cmMaxBody4)
	}
	qp := transport.QPInfo{QPN: 0x010203, PSN: 0x040506, MAC: macA, IP: ipA}
	proof := bytes.Repeat([]byte{0xab}, pskProofLen)
	rep := connRep{qp: qp, sec: secBlock{flags: secPackets | secIntegrityOnly, proof: proof}}
	got := rep.marshalV(cmVersion)
	want := append(appendQPInfo(nil, qp), 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 32)
	want = append(want, proof...)
	if !bytes.Equal(got, want) {
		t.Fatalf("REP %x, want %x", got, want)
	}
	back, err := parseRep(got, cmVersion)
	if err != nil || back.sec.flags != rep.sec.flags || !bytes.Equal(back.sec.proof, proof) {
		t.Fatalf("parsed %+v, %v", back, err)
	}
	if v3 := rep.marshalV(cmVersion3); !bytes.Equal(v3, want[:len(want)-2-pskProofLen]) {
		t.Fatalf("version-3 REP %x", v3)
	}
	bad := bytes.Clone(got)
	bad[len(bad)-2-pskProofLen] = 4
	if _, err := parseRep(bad, cmVersion); !errors.Is(err, errBadMessage) {
		t.Fatalf("security flags 4: %v", err)
	}
	short := append(appendQPInfo(nil, qp), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 16)
	short = append(short, proof[:16]...)
	if _, err := parseRep(short, cmVersion); !errors.Is(err, errBadMessage) {
		t.Fatalf("a proof of 16 bytes: %v", err)
	}
}
