package wireshark

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/transporttest"
	"github.com/sprayfabric/spray/transport/wire"
)

// A secured QP's close marker (an empty SEND with immediate 0x53504305,
// DREQ, or 0x53504306, DREP) is named in the info column; the same
// immediate on a clear QP, and another immediate on a secured one, are
// not.
func TestDissectorCloseMarker(t *testing.T) {
	bin := tshark(t)
	capture := func(sec *transport.Security, imms ...uint32) [][]byte {
		var frames [][]byte
		mc := mem.Config{Seed: 31, Delay: 5 * time.Microsecond, Filter: func(f []byte) bool {
			var p wire.Packet
			if err := wire.Decode(f, &p); err == nil && p.BTH.Opcode.HasPayload() {
				frames = append(frames, bytes.Clone(f))
			}
			return true
		}}
		p := transporttest.NewPairWith(t, mc, transport.Config{Profile: transport.Spray, Seed: 31, MTU: 1514}, transporttest.Options{Secure: sec})
		for i, imm := range imms {
			if err := p.QA.Post(transport.WorkRequest{ID: uint64(i + 1), Op: transport.OpSendImm, Imm: imm}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Run(clock.Time(10*time.Second), func() bool { return len(p.CA) >= len(imms) }); err != nil {
			t.Fatal(err)
		}
		return frames
	}
	sec := &transport.Security{Send: [32]byte{1}, Recv: [32]byte{2}}
	frames := capture(sec, 0x53504305, 0x53504306, 0xabcd)
	frames = append(frames, capture(nil, 0x53504305)...)
	if len(frames) != 4 {
		t.Fatalf("%d frames with a payload opcode, want 4", len(frames))
	}
	ts := make([]time.Duration, len(frames))
	for i := range ts {
		ts[i] = time.Duration(i)
	}
	path := filepath.Join(t.TempDir(), "close.pcap")
	if err := os.WriteFile(path, writeCapture(t, frames, ts), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(runTshark(t, bin, path, "-T", "fields", "-e", "_ws.col.Info")), "\n"), "\n")
	want := []string{"close marker DREQ", "close marker DREP", "", ""}
	if len(lines) != len(want) {
		t.Fatalf("tshark printed %d lines, want %d: %q", len(lines), len(want), lines)
	}
	for i, w := range want {
		has := strings.Contains(lines[i], "close marker")
		if (w == "") == has || w != "" && !strings.Contains(lines[i], w) {
			t.Errorf("frame %d: info %q, want %q", i+1, lines[i], w)
		}
	}
}
