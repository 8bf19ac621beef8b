// Package wirecheck cross-checks spray's wire codec with two reference
// dissectors: Wireshark's InfiniBand dissector (tshark) and scapy's
// contrib.roce. Tests capture a transfer with link/pcap and hand the file to
// CheckWithTshark and CheckICRCWithScapy.
//
// The checks need the Debian packages tshark and python3-scapy; without them
// they return an error wrapping ErrToolMissing, on which a test skips.
package wirecheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/transport/wire"
)

// Errors of the cross-checks.
var (
	// ErrToolMissing is wrapped by the error of a check whose tool (tshark,
	// or /usr/bin/python3 with scapy) is not installed.
	ErrToolMissing = errors.New("wirecheck: cross-check tool not installed")
	// ErrMismatch is wrapped by the error of a check that found a frame on
	// which the tool and spray's codec disagree.
	ErrMismatch = errors.New("wirecheck: tool disagrees with spray's codec")
)

// Python is the interpreter CheckICRCWithScapy runs: Debian's, which has the
// python3-scapy package.
const Python = "/usr/bin/python3"

// toolTimeout bounds one run of tshark or python.
const toolTimeout = 5 * time.Minute

// BTHFields are the base transport header fields of one frame as tshark
// dissected them.
type BTHFields struct {
	Frame  int // 1-based frame number in the file
	Opcode wire.Opcode
	DestQP uint32
	PSN    uint32
}

// CheckWithTshark runs tshark on the pcap file at path and compares the BTH
// opcode, destination QP and PSN that Wireshark's InfiniBand dissector reads
// in every frame with what wire.Decode reads in the same frame. It returns
// the fields of every frame in which tshark found a BTH, and an error
// wrapping ErrMismatch when a frame that wire.Decode accepts has no BTH for
// tshark or different fields. Frames that wire.Decode rejects are not
// compared. Without tshark in PATH it returns an error wrapping
// ErrToolMissing; for a file that is not a classic pcap file of Ethernet
// frames, one wrapping pcap.ErrFormat.
func CheckWithTshark(path string) ([]BTHFields, error) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		return nil, fmt.Errorf("%w: tshark (Debian package tshark): %v", ErrToolMissing, err)
	}
	recs, err := pcap.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out, err := runTool(tshark, "-r", path, "-n", "-d", "udp.port==4791,infiniband",
		"-T", "fields", "-E", "separator=/t", "-E", "occurrence=f",
		"-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn")
	if err != nil {
		return nil, err
	}
	lines := toolLines(out)
	if len(lines) != len(recs) {
		return nil, fmt.Errorf("%w: tshark printed %d lines for %d frames", ErrMismatch, len(lines), len(recs))
	}
	var fields []BTHFields
	var p wire.Packet
	for i, line := range lines {
		v := strings.Split(line, "\t")
		if len(v) != 4 || v[0] != strconv.Itoa(i+1) {
			return nil, fmt.Errorf("wirecheck: unexpected tshark output for frame %d: %q", i+1, line)
		}
		f := BTHFields{Frame: i + 1}
		found := v[1] != ""
		if found {
			var op, qp, psn uint64
			for _, x := range []struct {
				s   string
				dst *uint64
				max uint64
			}{{v[1], &op, 0xFF}, {v[2], &qp, 1<<24 - 1}, {v[3], &psn, 1<<24 - 1}} {
				if *x.dst, err = strconv.ParseUint(x.s, 0, 32); err != nil || *x.dst > x.max {
					return nil, fmt.Errorf("wirecheck: unexpected tshark output for frame %d: %q", i+1, line)
				}
			}
			f.Opcode, f.DestQP, f.PSN = wire.Opcode(op), uint32(qp), uint32(psn)
			fields = append(fields, f)
		}
		if wire.Decode(recs[i].Data, &p) != nil {
			continue
		}
		if !found {
			return fields, fmt.Errorf("%w: frame %d: tshark finds no BTH, spray decodes opcode %#x QP %#x PSN %#x",
				ErrMismatch, i+1, uint8(p.BTH.Opcode), p.BTH.DestQP, p.BTH.PSN)
		}
		if f.Opcode != p.BTH.Opcode || f.DestQP != p.BTH.DestQP || f.PSN != p.BTH.PSN {
			return fields, fmt.Errorf("%w: frame %d: tshark reads opcode %#x QP %#x PSN %#x, spray %#x %#x %#x",
				ErrMismatch, i+1, uint8(f.Opcode), f.DestQP, f.PSN, uint8(p.BTH.Opcode), p.BTH.DestQP, p.BTH.PSN)
		}
	}
	return fields, nil
}

// scapyICRC prints, for every frame of the pcap file argv[1], its index and
// either "-" (no BTH) or the BTH opcode and the ICRC that scapy computes, as
// the hex of the 4 bytes that end the packet. For IPv4 it is scapy's own
// BTH.compute_icrc; for IPv6, which that method does not support, the same
// masking applied with scapy's IPv6 and UDP fields and CRC-32 from zlib.
const scapyICRC = `
import sys, zlib, struct
from scapy.all import conf, rdpcap, IP, IPv6, UDP
from scapy.contrib.roce import BTH
conf.verb = 0
for n, pkt in enumerate(rdpcap(sys.argv[1])):
    if BTH not in pkt:
        print(n, "-")
        continue
    bth = pkt[BTH]
    if isinstance(bth.underlayer, UDP) and isinstance(bth.underlayer.underlayer, IP):
        crc = bth.compute_icrc(None)
    elif isinstance(bth.underlayer, UDP) and isinstance(bth.underlayer.underlayer, IPv6):
        v6 = bth.underlayer.underlayer.copy()
        v6.tc, v6.fl, v6.hlim = 0xFF, 0xFFFFF, 0xFF
        v6[UDP].chksum = 0xFFFF
        v6[BTH].fecn, v6[BTH].becn, v6[BTH].resv6 = 1, 1, 0x3F
        crc = struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(v6)[:-4]) & 0xFFFFFFFF)
    else:
        print(n, "-")
        continue
    print(n, bth.opcode, crc.hex())
`

// CheckICRCWithScapy runs scapy's contrib.roce (with /usr/bin/python3) on the
// pcap file at path, computes the ICRC of every frame with a classic RoCEv2
// opcode (below 0xE0; scapy does not know that spray's data packets mask
// their INT region) or that is a trimmed spray data packet (wire.Trim: no
// INT region left) and compares it with the last 4 bytes of the frame's
// IP packet, as spray wrote them. It returns how many frames it compared,
// and an error wrapping ErrMismatch at the first difference. Without
// /usr/bin/python3 or its scapy it returns an error wrapping ErrToolMissing;
// for a file that is not a classic pcap file of Ethernet frames, one
// wrapping pcap.ErrFormat.
func CheckICRCWithScapy(path string) (checked int, err error) {
	if _, err := os.Stat(Python); err != nil {
		return 0, fmt.Errorf("%w: %s (Debian package python3-scapy): %v", ErrToolMissing, Python, err)
	}
	if out, err := exec.Command(Python, "-c", "import scapy.contrib.roce").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%w: %s cannot import scapy.contrib.roce (Debian package python3-scapy): %v: %s",
			ErrToolMissing, Python, err, bytes.TrimSpace(out))
	}
	recs, err := pcap.ReadFile(path)
	if err != nil {
		return 0, err
	}
	out, err := runTool(Python, "-c", scapyICRC, path)
	if err != nil {
		return 0, err
	}
	lines := toolLines(out)
	if len(lines) != len(recs) {
		return 0, fmt.Errorf("%w: scapy printed %d lines for %d frames", ErrMismatch, len(lines), len(recs))
	}
	for i, line := range lines {
		v := strings.Fields(line)
		if len(v) == 0 || v[0] != strconv.Itoa(i) {
			return checked, fmt.Errorf("wirecheck: unexpected scapy output for frame %d: %q", i+1, line)
		}
		if len(v) == 2 && v[1] == "-" {
			continue
		}
		if len(v) != 3 {
			return checked, fmt.Errorf("wirecheck: unexpected scapy output for frame %d: %q", i+1, line)
		}
		op, err := strconv.ParseUint(v[1], 10, 8)
		if err != nil {
			return checked, fmt.Errorf("wirecheck: unexpected scapy output for frame %d: %q", i+1, line)
		}
		if wire.Opcode(op) >= wire.OpSprayData && !trimmedData(recs[i].Data) {
			continue
		}
		icrc, ok := icrcBytes(recs[i].Data)
		if !ok {
			return checked, fmt.Errorf("%w: frame %d: scapy finds a BTH, spray finds no IP/UDP packet", ErrMismatch, i+1)
		}
		if got := hex.EncodeToString(icrc); got != v[2] {
			return checked, fmt.Errorf("%w: frame %d (opcode %#x): ICRC bytes %s, scapy computes %s",
				ErrMismatch, i+1, op, got, v[2])
		}
		checked++
	}
	return checked, nil
}

// trimmedData reports whether frame is a trimmed spray data packet.
func trimmedData(frame []byte) bool {
	var p wire.Packet
	return wire.Decode(frame, &p) == nil && p.BTH.Opcode == wire.OpSprayData && p.BTH.Trimmed
}

// icrcBytes returns the last 4 bytes of the IP packet in an Ethernet frame
// (the ICRC of a RoCEv2 packet), ignoring Ethernet padding.
func icrcBytes(frame []byte) ([]byte, bool) {
	off := wire.EthLen
	if len(frame) < off {
		return nil, false
	}
	et := binary.BigEndian.Uint16(frame[12:])
	if et == 0x8100 {
		off += wire.VLANLen
		if len(frame) < off {
			return nil, false
		}
		et = binary.BigEndian.Uint16(frame[16:])
	}
	var end int
	switch et {
	case 0x0800:
		if len(frame) < off+wire.IPv4Len {
			return nil, false
		}
		end = off + int(binary.BigEndian.Uint16(frame[off+2:]))
	case 0x86DD:
		if len(frame) < off+wire.IPv6Len {
			return nil, false
		}
		end = off + wire.IPv6Len + int(binary.BigEndian.Uint16(frame[off+4:]))
	default:
		return nil, false
	}
	if end > len(frame) || end < off+wire.ICRCLen {
		return nil, false
	}
	return frame[end-wire.ICRCLen : end], true
}

// runTool runs a command with a time limit and returns its standard output.
func runTool(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("wirecheck: %s: %w: %s", name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

func toolLines(out []byte) []string {
	s := strings.TrimRight(string(out), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TsharkOpcodeNames runs tshark's detailed dissection on the pcap file at
// path and counts the frames by the name Wireshark's InfiniBand dissector
// gives their BTH opcode, without the transport prefix: "RC RDMA Read
// Request" for "Reliable Connection (RC) - RDMA READ Request" (Wireshark's
// capitalisation varies between releases; the names are normalised to
// title case words). Without tshark it returns an error wrapping
// ErrToolMissing.
func TsharkOpcodeNames(path string) (map[string]int, error) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		return nil, fmt.Errorf("%w: tshark (Debian package tshark): %v", ErrToolMissing, err)
	}
	out, err := runTool(tshark, "-r", path, "-n", "-d", "udp.port==4791,infiniband", "-V", "-O", "infiniband")
	if err != nil {
		return nil, err
	}
	names := map[string]int{}
	for _, line := range toolLines(out) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "Opcode: Reliable Connection (RC) - ")
		if !ok {
			continue
		}
		if i := strings.LastIndex(rest, " ("); i > 0 {
			rest = rest[:i]
		}
		words := strings.Fields(rest)
		for i, w := range words {
			if w != "RDMA" && w != "ACK" && w != "SEND" {
				words[i] = strings.ToUpper(w[:1]) + strings.ToLower(w[1:])
			}
		}
		names["RC "+strings.Join(words, " ")]++
	}
	return names, nil
}
