package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/bench"
)

// runPerfJSON runs spray perf with args and --json, and returns the
// results it printed.
func runPerfJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "perf")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = runPerf(append(args, "--json"))
	os.Stdout = stdout
	if err != nil {
		t.Fatalf("perf %v: %v", args, err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	var rs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		rs = append(rs, r)
	}
	return rs
}

// spray perf --psk FILE secures the QP of an in-process run: the report
// says so, the bytes arrive intact, and the capture of the client's link
// shows none of the payload; --integrity-only leaves it readable, as a
// clear run does. A key too short, and --integrity-only without a key,
// are refused before anything runs.
func TestPerfSecure(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The payload's first 32 bytes: bench's payloads for --seed 7.
	rng := rand.New(rand.NewPCG(7, 0x7065726670))
	var head []byte
	for range 4 {
		head = binary.LittleEndian.AppendUint64(head, rng.Uint64())
	}
	for _, tc := range []struct {
		args     []string
		want     string
		readable bool
	}{
		{nil, "clear", true},
		{[]string{"--psk", psk}, "encrypted", false},
		{[]string{"--psk", psk, "--integrity-only"}, "integrity", true},
	} {
		capture := filepath.Join(dir, tc.want+".pcap")
		args := append([]string{"--link", "mem", "--total", "1M", "--size", "64K", "--pings", "10", "--seed", "7", "--pcap", capture}, tc.args...)
		rs := runPerfJSON(t, args...)
		if len(rs) != 1 || rs[0]["protection"] != tc.want || rs[0]["integrity_ok"] != true {
			t.Fatalf("perf %v: %v, want protection %s and the bytes intact", tc.args, rs, tc.want)
		}
		pc, err := os.ReadFile(capture)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(pc, head); got != tc.readable {
			t.Fatalf("perf %v: the payload readable in the capture's %d bytes: %v, want %v", tc.args, len(pc), got, tc.readable)
		}
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--psk", short},
		{"--psk", filepath.Join(dir, "missing")},
		{"--integrity-only"},
	} {
		if err := runPerf(append(args, "--link", "mem", "--total", "1M")); err == nil {
			t.Errorf("perf %v: no error", args)
		}
	}
}

// spray bench --psk FILE runs a collective over secured QPs, every rank
// with the key: the header says the protection and every result checks
// (#wrong 0); --integrity-only without a key, a key with kernel TCP, and
// a key too short are refused before anything runs.
func TestBenchSecure(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--psk", psk}, "encrypted"},
		{[]string{"--psk", psk, "--integrity-only"}, "integrity"},
	} {
		out, _ := runBenchCLI(t, append([]string{"alltoall", "-b", "4K", "-e", "256K", "-f", "8", "-w", "1", "-n", "3", "--world", "3"}, tc.args...)...)
		if !strings.Contains(strings.SplitN(out, "\n", 2)[0], ", "+tc.want) {
			t.Fatalf("bench %v: the header does not say %s:\n%s", tc.args, tc.want, out)
		}
		rows := parseBenchTable(t, out)
		if len(rows) != 3 {
			t.Fatalf("bench %v: %d rows, want 3:\n%s", tc.args, len(rows), out)
		}
		for _, r := range rows {
			if r.wrong != "0" {
				t.Fatalf("bench %v: row %+v", tc.args, r)
			}
		}
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"alltoall", "--integrity-only"},
		{"alltoall", "--psk", psk, "--transport", "tcp"},
		{"alltoall", "--psk", short},
	} {
		var stdout, stderr bytes.Buffer
		if err := benchMain(args, &stdout, &stderr, -1); err == nil {
			t.Errorf("spray bench %q: no error", args)
		}
	}
}

// spray compare --psk FILE --loopback runs the spray and roce rows over
// secured QPs, every element right, and its JSON says the protection; a
// key in the simulator, and --integrity-only without one, are refused.
func TestCompareSecure(t *testing.T) {
	dir := t.TempDir()
	psk := filepath.Join(dir, "psk")
	if err := os.WriteFile(psk, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := runCompare([]string{"--loopback", "--scenarios", "lossless", "--size", "64K", "--iters", "3",
		"--psk", psk, "--integrity-only", "--png", "", "--out", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "compare.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res bench.CompareResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Protection != bench.ProtectionIntegrity || len(res.Rows) != 3 {
		t.Fatalf("protection %q, %d rows, want integrity and 3", res.Protection, len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Err != "" || r.Wrong != 0 || r.Iters != 3 {
			t.Errorf("%s: %d iterations, %d wrong, error %q", r.Profile, r.Iters, r.Wrong, r.Err)
		}
	}
	for _, args := range [][]string{
		{"--sim", "--psk", psk},
		{"--loopback", "--integrity-only"},
	} {
		if err := runCompare(args); err == nil {
			t.Errorf("compare %v: no error", args)
		}
	}
}
