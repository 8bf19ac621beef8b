package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/internal/wirecheck"
)

// TestPerfMem runs the README's main command, shortened, and reads the
// JSON it prints: a result per default link (mem, then kernel TCP), each
// with the bytes asked for, intact, at a goodput, and the pings timed.
func TestPerfMem(t *testing.T) {
	const total = 8388608
	rs := runPerfJSON(t, "--total", fmt.Sprint(total), "--pings", "50")
	var links []string
	for _, r := range rs {
		links = append(links, fmt.Sprint(r["link"]))
		if r["bytes"] != float64(total) || r["integrity_ok"] != true || r["pings"] != float64(50) {
			t.Errorf("%v: bytes %v, intact %v, pings %v; want %d, true, 50", r["link"], r["bytes"], r["integrity_ok"], r["pings"], total)
		}
		if g, _ := r["goodput_gbps"].(float64); g <= 0 {
			t.Errorf("%v: goodput %v Gbit/s", r["link"], r["goodput_gbps"])
		}
		if p50, _ := r["rtt_p50_us"].(float64); p50 <= 0 || r["rtt_p99_us"].(float64) < p50 {
			t.Errorf("%v: ping p50 %v µs, p99 %v", r["link"], r["rtt_p50_us"], r["rtt_p99_us"])
		}
		if sum, _ := r["sha256"].(string); len(sum) != 64 {
			t.Errorf("%v: sha256 %q", r["link"], r["sha256"])
		}
	}
	if fmt.Sprint(links) != "[mem tcp]" {
		t.Errorf("links %v, want [mem tcp]", links)
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
	for tb, want := range map[string]string{"pair,": `option ""`, "pair,queues=0": "queues must be 1 to 64",
		"pair,mtu=9000,speed=1": `option "speed=1": unknown option`, "pairs": `--testbed "pairs"`} {
		checkUsage(t, runPerf([]string{"--testbed", tb}), want)
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
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--fault", "leaf0:up1@1s"}, "need a leafspine testbed"},                      // no testbed
		{[]string{"--testbed", "pair", "--fault", "leaf0:up1@1s"}, "need a leafspine testbed"}, // not a leaf-spine
		{[]string{"--testbed", "leafspine:1x2x2", "--restore", "2s"}, "--restore needs --fault"},
		{[]string{"--testbed", "leafspine:1x2x2", "--fault", "leaf0"}, "want PORT@TIME"}, // no time
		{[]string{"--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1@-1s"}, "not a positive duration"},
		{[]string{"--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1@2s", "--restore", "1s"}, "must come after the failure"},
		{[]string{"--total", "12Q"}, `bad size "12Q"`},
	} {
		checkUsage(t, runPerf(c.args), c.want)
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

// checkUsage fails the test unless err is a usage error (exit status 2)
// whose message holds want.
func checkUsage(t *testing.T, err error, want string) {
	t.Helper()
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want a usage error saying %q", err, want)
	}
}
