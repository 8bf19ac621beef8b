package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/internal/wirecheck"
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
	fields, err := wirecheck.CheckWithTshark(f)
	switch {
	case errors.Is(err, wirecheck.ErrToolMissing):
		t.Log("tshark not installed: BTH check skipped")
	case err != nil:
		t.Fatal(err)
	default:
		if len(fields) < 1000 {
			t.Fatalf("tshark decoded %d BTH frames, want the whole transfer", len(fields))
		}
		t.Logf("tshark agrees with spray on %d frames", len(fields))
	}
	n, err := wirecheck.CheckICRCWithScapy(f)
	switch {
	case errors.Is(err, wirecheck.ErrToolMissing):
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

// TestPerfPairOptions: --testbed pair,mtu=9000,queues=2 runs AF_XDP with
// jumbo frames over two queues per end; bad pair options are refused
// before anything runs.
func TestPerfPairOptions(t *testing.T) {
	for _, tb := range []string{"pair,", "pair,queues=0", "pair,mtu=9000,speed=1", "pairs"} {
		if err := runPerf([]string{"--testbed", tb}); err == nil {
			t.Errorf("perf --testbed %s: no error", tb)
		}
	}
	testutil.SkipIfNotRoot(t)
	if err := runPerf([]string{"--testbed", "pair,mtu=9000,queues=2", "--link", "xdp", "--total", "8388608",
		"--pings", "20", "--json"}); err != nil {
		t.Fatal(err)
	}
}

// TestPerfFaultFlags: --fault and --restore are refused, with an error and
// before anything runs, where they cannot apply.
func TestPerfFaultFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--fault", "leaf0:up1@1s"},                          // no testbed
		{"--testbed", "pair", "--fault", "leaf0:up1@1s"},     // not a leaf-spine
		{"--testbed", "leafspine:1x2x2", "--restore", "2s"},  // restore without fault
		{"--testbed", "leafspine:1x2x2", "--fault", "leaf0"}, // no time
		{"--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1@-1s"},
		{"--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1@2s", "--restore", "1s"},
		{"--total", "12Q"},
	} {
		if err := runPerf(args); err == nil {
			t.Errorf("perf %v: no error", args)
		}
	}
}

// TestPerfFailover: spray perf --fault on a small fabric: the transfer is
// byte-exact, the blackhole drops frames, paths leave the spray set, the
// goodput recovers, and the link is probed back in after the restore. Four
// spines, so that the dead one holds a quarter of the paths: with two, a
// dead spine is half of them, where one live path that a loaded CPU makes
// look stalled or lossy tips the policy's "more than half at once: a host
// pause, not a failure" rule (multipath/adaptive.go) and no path leaves.
func TestPerfFailover(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	out, err := os.CreateTemp(t.TempDir(), "perf")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = runPerf([]string{"--testbed", "leafspine:1x2x4,rate=50mbit,mtu=3500", "--total", "48M",
		"--fault", "leaf0:up1@500ms", "--restore", "1s", "--json"})
	os.Stdout = stdout
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	var r failoverReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	t.Logf("%s", b)
	switch {
	case !r.Integrity || r.Bytes != 48<<20:
		t.Errorf("transfer: %d bytes, sha256 ok %v", r.Bytes, r.Integrity)
	case r.Blackholed == 0 || r.PathsOut == 0:
		t.Errorf("the blackhole dropped %d frames and took %d paths out", r.Blackholed, r.PathsOut)
	case r.RecoveryMs < 0 && r.Recovery90Ms < 0:
		t.Errorf("goodput never recovered after the failure")
	case !r.ProbedBack || r.DeadSpine != 1:
		t.Errorf("spine %d not probed back in: shares after the restore %v", r.DeadSpine, r.SharesAfter)
	}
}
