package pcap_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/internal/wirecheck"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/transporttest"
	"github.com/sprayfabric/spray/transport/wire"
)

// The MAC addresses of the pair's ports.
var macA, macB = transporttest.MACA, transporttest.MACB

// transfer runs a few SENDs, WRITEs and READs from A to B between two engines over
// a link/mem fabric under a simulated clock (a transporttest.Pair), with A's
// link wrapped by Wrap on wa and B's on wb, and checks that every message
// arrives intact.
func transfer(t *testing.T, seed uint64, profile transport.Profile, wa, wb *pcap.Writer) {
	t.Helper()
	p := transporttest.NewPairWith(t,
		mem.Config{
			Seed: seed, Delay: 5 * time.Microsecond, Jitter: 2 * time.Microsecond,
			Reorder: 0.1, ReorderDelay: 20 * time.Microsecond,
		},
		transport.Config{Profile: profile, MTU: 1514, Window: 128, Seed: seed, MinRTO: time.Millisecond},
		transporttest.Options{
			WrapA: func(l link.Link) link.Link { return pcap.Wrap(l, wa) },
			WrapB: func(l link.Link) link.Link { return pcap.Wrap(l, wb) },
		})
	ea, eb, qa := p.A, p.B, p.QA
	region := make([]byte, 64<<10)
	mr := eb.Register(region, transport.AccessRemoteWrite|transport.AccessRemoteRead)

	rng := rand.New(rand.NewPCG(seed, uint64(profile)))
	msg := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	sends := [][]byte{msg(0), msg(3), msg(1000), msg(5000), msg(20000)}
	write := msg(9000)
	var wrs []transport.WorkRequest
	for i, m := range sends {
		op := transport.OpSend
		if i == 2 {
			op = transport.OpSendImm
		}
		wrs = append(wrs, transport.WorkRequest{ID: uint64(len(wrs) + 1), Op: op, Data: m, Imm: 0xabcd})
	}
	wrs = append(wrs,
		transport.WorkRequest{ID: uint64(len(wrs) + 1), Op: transport.OpWrite, Data: write[:100], Remote: mr.Remote(0)},
		transport.WorkRequest{ID: uint64(len(wrs) + 2), Op: transport.OpWriteImm, Data: write, Remote: mr.Remote(100), Imm: 7})
	// READs of what the WRITEs wrote: one response packet, and many.
	reads := [][]byte{make([]byte, 100), make([]byte, len(write))}
	wrs = append(wrs,
		transport.WorkRequest{ID: uint64(len(wrs) + 1), Op: transport.OpRead, Data: reads[0], Remote: mr.Remote(0)},
		transport.WorkRequest{ID: uint64(len(wrs) + 2), Op: transport.OpRead, Data: reads[1], Remote: mr.Remote(100)})
	for _, wr := range wrs {
		if err := qa.Post(wr); err != nil {
			t.Fatal(err)
		}
	}
	limit := clock.Time(10 * time.Second)
	done := func() bool { return len(p.CA) >= len(wrs) && len(p.CB) >= len(sends)+1 }
	if err := p.Run(limit, done); err != nil {
		t.Fatalf("%v: %v with %d/%d sender and %d/%d receiver completions",
			profile, err, len(p.CA), len(wrs), len(p.CB), len(sends)+1)
	}
	// Let the last frames in flight (acknowledgements) arrive, so that both
	// captures hold them.
	if err := p.Run(limit, func() bool { return p.Fabric.NextDelivery() == clock.Never }); err != nil {
		t.Fatalf("%v: draining the fabric: %v", profile, err)
	}
	ca, cb := p.CA, p.CB
	for _, c := range ca {
		if c.Err != nil {
			t.Fatalf("%v: completion %d: %v", profile, c.ID, c.Err)
		}
	}
	for i, m := range sends {
		if !bytes.Equal(cb[i].Data, m) {
			t.Fatalf("%v: message %d: received %d bytes, sent %d, or different bytes", profile, i, len(cb[i].Data), len(m))
		}
	}
	if !bytes.Equal(region[:100], write[:100]) || !bytes.Equal(region[100:100+len(write)], write) {
		t.Fatalf("%v: the WRITEs did not land intact", profile)
	}
	if !bytes.Equal(reads[0], write[:100]) || !bytes.Equal(reads[1], write) {
		t.Fatalf("%v: the READs returned other bytes", profile)
	}
	for _, e := range []*transport.Engine{ea, eb} {
		if s := e.Stats(); s.Malformed() != 0 {
			t.Fatalf("%v: malformed frames %+v", profile, s)
		}
	}
	if s := p.Fabric.Stats(); s.Misuse != 0 {
		t.Fatalf("fabric misuse %+v", s)
	}
}

func createWriter(t *testing.T, path string) *pcap.Writer {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestEndToEnd captures both ends of a RoCE-profile and a Spray-profile
// transfer, checks that the captures agree with each other and with spray's
// decoder, and has tshark and scapy read them (package wirecheck).
func TestEndToEnd(t *testing.T) {
	seed := testutil.Seed(t)
	dir := t.TempDir()
	pathA, pathB := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	wa, wb := createWriter(t, pathA), createWriter(t, pathB)
	transfer(t, seed, transport.RoCE, wa, wb)
	transfer(t, seed, transport.Spray, wa, wb)
	if err := wa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	ra, err := pcap.ReadFile(pathA)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := pcap.ReadFile(pathB)
	if err != nil {
		t.Fatal(err)
	}

	// Every frame decodes, and the frames A sent are the frames B received
	// (as multisets: the fabric reorders), byte for byte; likewise the other
	// way.
	var aSent, aRecv, bSent, bRecv [][]byte
	classic := 0
	var p wire.Packet
	for _, side := range []struct {
		recs       []pcap.Record
		mac        [6]byte
		sent, recv *[][]byte
	}{{ra, macA, &aSent, &aRecv}, {rb, macB, &bSent, &bRecv}} {
		for i, rc := range side.recs {
			if err := wire.Decode(rc.Data, &p); err != nil {
				t.Fatalf("frame %d does not decode: %v", i+1, err)
			}
			if side.mac == macA && p.BTH.Opcode < wire.OpSprayData {
				classic++
			}
			if [6]byte(rc.Data[6:12]) == side.mac {
				*side.sent = append(*side.sent, rc.Data)
			} else {
				*side.recv = append(*side.recv, rc.Data)
			}
		}
	}
	sameFrames := func(what string, x, y [][]byte) {
		t.Helper()
		x, y = slices.Clone(x), slices.Clone(y)
		slices.SortFunc(x, bytes.Compare)
		slices.SortFunc(y, bytes.Compare)
		if !slices.EqualFunc(x, y, bytes.Equal) {
			t.Fatalf("%s: %d and %d frames, not the same bytes", what, len(x), len(y))
		}
	}
	sameFrames("A sent, B received", aSent, bRecv)
	sameFrames("B sent, A received", bSent, aRecv)
	if len(aSent) == 0 || len(aRecv) == 0 || classic == 0 || classic == len(ra) {
		t.Fatalf("capture of A: %d sent, %d received, %d classic", len(aSent), len(aRecv), classic)
	}
	t.Logf("A's capture: %d frames sent, %d received, %d with classic opcodes", len(aSent), len(aRecv), classic)

	t.Run("tshark", func(t *testing.T) {
		fields, err := wirecheck.CheckWithTshark(pathA)
		testutil.SkipIfToolMissing(t, err, wirecheck.ErrToolMissing)
		if err != nil {
			t.Fatal(err)
		}
		if len(fields) != len(ra) {
			t.Fatalf("tshark found a BTH in %d of %d frames", len(fields), len(ra))
		}
		// The classic READs: a request, and responses Only, First, Middle
		// and Last, as tshark names the opcodes.
		seen := map[wire.Opcode]int{}
		for _, f := range fields {
			seen[f.Opcode]++
		}
		for _, op := range []wire.Opcode{wire.OpReadRequest, wire.OpReadResponseFirst, wire.OpReadResponseMiddle, wire.OpReadResponseLast, wire.OpReadResponseOnly} {
			if seen[op] == 0 {
				t.Fatalf("tshark saw no %v", op)
			}
		}
		names, err := wirecheck.TsharkOpcodeNames(pathA)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tshark names %v", names)
		for _, want := range []string{"RC RDMA Read Request", "RC RDMA Read Response First", "RC RDMA Read Response Middle", "RC RDMA Read Response Last", "RC RDMA Read Response Only"} {
			if names[want] == 0 {
				t.Fatalf("tshark named no frame %q; it named %v", want, names)
			}
		}
		t.Logf("tshark reads the opcode, QP and PSN of all %d frames as spray does", len(fields))
	})
	t.Run("scapy", func(t *testing.T) {
		n, err := wirecheck.CheckICRCWithScapy(pathA)
		testutil.SkipIfToolMissing(t, err, wirecheck.ErrToolMissing)
		if err != nil {
			t.Fatal(err)
		}
		if n != classic {
			t.Fatalf("scapy checked %d frames, the capture has %d with classic opcodes", n, classic)
		}
		t.Logf("scapy computes the ICRC spray wrote in all %d classic frames", n)

		// A corrupted payload byte must be caught.
		bad := filepath.Join(t.TempDir(), "bad.pcap")
		w := createWriter(t, bad)
		for _, rc := range ra {
			fr := bytes.Clone(rc.Data)
			if err := wire.Decode(fr, &p); err == nil && p.BTH.Opcode < wire.OpSprayData && len(p.Payload) > 0 {
				p.Payload[0] ^= 1
			}
			if err := w.WritePacket(rc.Time, fr); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := wirecheck.CheckICRCWithScapy(bad); !errors.Is(err, wirecheck.ErrMismatch) {
			t.Fatalf("a corrupted frame passes the scapy check: %v", err)
		}
	})
}
