package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// Independent checks of the codec with Wireshark's dissector (tshark) and
// scapy's contrib.roce. CI installs Debian's tshark and python3-scapy; the
// tests skip with a message when they are missing.

// writePcap writes frames as a classic pcap file (LINKTYPE_ETHERNET). It is
// written by hand because gopacket's pcapgo needs golang.org/x/net, which
// go.sum does not hold.
func writePcap(t *testing.T, frames [][]byte) string {
	t.Helper()
	le := binary.LittleEndian
	var b []byte
	b = le.AppendUint32(b, 0xA1B2C3D4) // magic, microsecond timestamps
	b = le.AppendUint16(b, 2)          // version 2.4
	b = le.AppendUint16(b, 4)
	b = le.AppendUint32(b, 0)     // thiszone
	b = le.AppendUint32(b, 0)     // sigfigs
	b = le.AppendUint32(b, 65535) // snaplen
	b = le.AppendUint32(b, 1)     // LINKTYPE_ETHERNET
	for i, f := range frames {
		b = le.AppendUint32(b, uint32(1_700_000_000+i))
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, uint32(len(f)))
		b = le.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	path := filepath.Join(t.TempDir(), "wire.pcap")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// toolFrames encodes one frame of every kind in every network variant.
func toolFrames(t *testing.T) ([]kase, [][]byte) {
	r := testutil.Rand(t)
	var ks []kase
	var fs [][]byte
	for _, nv := range netVariants {
		for _, k := range allKinds(r, nv, 64) {
			// Source ports in the dynamic range, as RoCE NICs use: a lower
			// one can be a well-known port that the tools prefer to 4791
			// (tshark tries the lower port first; scapy binds by sport too).
			k.p.UDP.Src |= 0xC000
			f, err := encodeKase(&k)
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, k)
			fs = append(fs, f)
		}
	}
	return ks, fs
}

func TestTshark(t *testing.T) {
	tshark := testutil.SkipIfMissingTool(t, "tshark", "tshark")
	ks, fs := toolFrames(t)
	path := writePcap(t, fs)
	fields := []string{"frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
		"infiniband.bth.p_key", "infiniband.bth.padcnt", "infiniband.reth.va", "infiniband.reth.r_key",
		"infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.immdt", "infiniband.invariant.crc",
		"ip.checksum.status", "udp.checksum.status"}
	args := []string{"-r", path, "-n", "-d", "udp.port==4791,infiniband",
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(fs) {
		t.Fatalf("tshark printed %d lines for %d frames:\n%s", len(lines), len(fs), out)
	}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("tshark field %q: %v", s, err)
		}
		return v
	}
	for i, line := range lines {
		v := strings.Split(line, "\t")
		if len(v) != len(fields) {
			t.Fatalf("frame %d: tshark line %q", i+1, line)
		}
		f := map[string]string{}
		for j, name := range fields {
			f[name] = v[j]
		}
		k := &ks[i]
		p := &k.p
		where := k.name + " (frame " + f["frame.number"] + ")"
		if num(f["infiniband.bth.opcode"]) != uint64(p.BTH.Opcode) || num(f["infiniband.bth.destqp"]) != uint64(p.BTH.DestQP) ||
			num(f["infiniband.bth.psn"]) != uint64(p.BTH.PSN) || num(f["infiniband.bth.p_key"]) != uint64(p.BTH.PKey) ||
			num(f["infiniband.bth.padcnt"]) != uint64(p.BTH.PadCnt) {
			t.Fatalf("%s: tshark says %q, wrote opcode %d QP %d PSN %d PKey %d PadCnt %d",
				where, line, p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN, p.BTH.PKey, p.BTH.PadCnt)
		}
		// Extension headers of the classic opcodes (tshark does not know
		// spray's).
		fl := opTable[p.BTH.Opcode]
		if p.BTH.Opcode < OpCNP {
			if fl&opRETH != 0 && (num(f["infiniband.reth.va"]) != p.RETH.VA || num(f["infiniband.reth.r_key"]) != uint64(p.RETH.RKey)) {
				t.Fatalf("%s: tshark RETH %q, wrote %+v", where, line, p.RETH)
			}
			if fl&opAETH != 0 && (num(f["infiniband.aeth.syndrome"]) != uint64(p.AETH.Syndrome) || num(f["infiniband.aeth.msn"]) != uint64(p.AETH.MSN)) {
				t.Fatalf("%s: tshark AETH %q, wrote %+v", where, line, p.AETH)
			}
			if fl&opImm != 0 && f["infiniband.immdt"] != hex.EncodeToString(binary.BigEndian.AppendUint32(nil, p.Imm)) {
				t.Fatalf("%s: tshark ImmDt %q, wrote %#x", where, f["infiniband.immdt"], p.Imm)
			}
		}
		// tshark shows the ICRC bytes (of packets with a payload) read
		// big-endian; the ICRC value is stored little-endian.
		fr := fs[i]
		if s := f["infiniband.invariant.crc"]; s != "" && num(s) != uint64(binary.BigEndian.Uint32(fr[len(fr)-4:])) {
			t.Fatalf("%s: tshark ICRC %s, frame ends %x", where, s, fr[len(fr)-4:])
		}
		// Checksum status: 1 good, 3 not present (UDP over IPv4).
		if s := f["ip.checksum.status"]; s != "" && s != "1" {
			t.Fatalf("%s: tshark IPv4 checksum status %s", where, s)
		}
		wantUDP := "3"
		if p.IP.Src.Is6() {
			wantUDP = "1"
		}
		if s := f["udp.checksum.status"]; s != wantUDP {
			t.Fatalf("%s: tshark UDP checksum status %s, want %s", where, s, wantUDP)
		}
	}
	t.Logf("tshark agrees on %d frames", len(lines))
}

// scapyICRC recomputes the ICRC of every frame of a pcap with scapy: for IPv4
// scapy's own BTH.compute_icrc (rebuilding the packet with icrc=None); for
// IPv6, which scapy's BTH leaves as a TODO, by masking the variant fields with
// scapy's field names and CRCing with zlib. Spray data frames with an INT
// region are skipped: scapy does not know that region is variant.
const scapyICRC = `
import struct, sys, zlib
from scapy.all import rdpcap, IP, IPv6, UDP, conf
from scapy.contrib.roce import BTH
conf.verb = 0
for i, p in enumerate(rdpcap(sys.argv[1])):
    if BTH not in p:
        print(i, "nobth"); continue
    b = p[BTH]
    raw = bytes(b)
    if b.opcode == 0xE0 and raw[12 + 13] & 1:
        print(i, "int"); continue
    if IP in p:
        q = p.copy()
        q[BTH].icrc = None
        icrc = bytes(q)[-4:]
    else:
        ip6 = p[IPv6].copy()
        ip6.tc, ip6.fl, ip6.hlim = 0xff, 0xfffff, 0xff
        ip6[UDP].chksum = 0xffff
        ip6[BTH].fecn, ip6[BTH].becn, ip6[BTH].resv6 = 1, 1, 0x3f
        icrc = struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(ip6)[:-4]) & 0xffffffff)
    print(i, icrc.hex())
`

func TestScapyICRC(t *testing.T) {
	const py = "/usr/bin/python3" // Debian's python, which has python3-scapy
	if _, err := os.Stat(py); err != nil {
		testutil.SkipIfToolMissing(t, fmt.Errorf("%v (Debian python3-scapy): %w", err, testutil.ErrToolMissing))
	}
	if err := exec.Command(py, "-c", "import scapy.contrib.roce").Run(); err != nil {
		testutil.SkipIfToolMissing(t, fmt.Errorf("scapy.contrib.roce not importable by %s (Debian python3-scapy): %v: %w", py, err, testutil.ErrToolMissing))
	}
	ks, fs := toolFrames(t)
	path := writePcap(t, fs)
	cmd := exec.Command(py, "-c", scapyICRC, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scapy: %v\n%s", err, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(fs) {
		t.Fatalf("scapy printed %d lines for %d frames:\n%s\n%s", len(lines), len(fs), out, stderr.Bytes())
	}
	checked, v6 := 0, 0
	for i, line := range lines {
		idx, val, _ := strings.Cut(line, " ")
		if idx != strconv.Itoa(i) {
			t.Fatalf("scapy line %d: %q", i, line)
		}
		k, f := &ks[i], fs[i]
		if val == "int" && k.p.BTH.Opcode == OpSprayData && k.p.Data.Flags&FlagINT != 0 {
			continue
		}
		got := hex.EncodeToString(f[len(f)-4:])
		if val != got {
			t.Fatalf("%s: ICRC bytes %s, scapy computes %s\n%x", k.name, got, val, f)
		}
		checked++
		if k.p.IP.Src.Is6() {
			v6++
		}
	}
	if checked < len(fs)/2 || v6 == 0 {
		t.Fatalf("scapy checked only %d frames (%d IPv6)", checked, v6)
	}
	t.Logf("scapy agrees on the ICRC of %d frames (%d IPv6); skipped %d with INT", checked, v6, len(fs)-checked)
}
