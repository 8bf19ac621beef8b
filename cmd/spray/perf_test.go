package main

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/pcap"
)

// TestPerfMem runs the README's main command, shortened.
func TestPerfMem(t *testing.T) {
	if err := runPerf([]string{"--total", "8388608", "--pings", "50", "--json"}); err != nil {
		t.Fatal(err)
	}
}

// TestPerfPairPcap: spray perf --testbed pair --pcap F over AF_XDP in the
// classic profile writes a capture in which tshark finds the BTH opcodes,
// QPs and PSNs spray sent, and scapy computes the same ICRC as spray for
// every classic packet.
func TestPerfPairPcap(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	f := filepath.Join(t.TempDir(), "perf.pcap")
	if err := runPerf([]string{"--testbed", "pair", "--link", "xdp", "--profile", "roce", "--total", "4194304",
		"--size", "65536", "--pings", "20", "--pcap", f, "--json"}); err != nil {
		t.Fatal(err)
	}
	fields, err := pcap.CheckWithTshark(f)
	switch {
	case errors.Is(err, pcap.ErrToolMissing):
		t.Log("tshark not installed: BTH check skipped")
	case err != nil:
		t.Fatal(err)
	default:
		if len(fields) < 1000 {
			t.Fatalf("tshark decoded %d BTH frames, want the whole transfer", len(fields))
		}
		t.Logf("tshark agrees with spray on %d frames", len(fields))
	}
	n, err := pcap.CheckICRCWithScapy(f)
	switch {
	case errors.Is(err, pcap.ErrToolMissing):
		t.Log("scapy not installed: ICRC check skipped")
	case err != nil:
		t.Fatal(err)
	default:
		if n < 1000 {
			t.Fatalf("scapy checked %d classic frames", n)
		}
		t.Logf("scapy's ICRC agrees with spray's on %d frames", n)
	}
}
