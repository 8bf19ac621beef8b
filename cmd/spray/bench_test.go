package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/internal/testutil"
)

// benchRow is one data line of spray bench's table.
type benchRow struct {
	bytes int64
	typ   string
	wrong string
}

// parseBenchTable reads the data lines of the table (those not starting
// with #) and checks they have nccl-tests' columns plus the percentiles.
func parseBenchTable(t *testing.T, out string) []benchRow {
	t.Helper()
	var rows []benchRow
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 12 {
			t.Fatalf("table line with %d fields, want 12: %q\n%s", len(f), line, out)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("size %q: %v", f[0], err)
		}
		for _, x := range []string{f[5], f[6], f[7], f[9], f[10], f[11]} {
			if _, err := strconv.ParseFloat(x, 64); err != nil {
				t.Fatalf("number %q in %q: %v", x, line, err)
			}
		}
		rows = append(rows, benchRow{bytes: n, typ: f[2], wrong: f[8]})
	}
	return rows
}

func runBenchCLI(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := benchMain(args, &stdout, &stderr, -1); err != nil {
		t.Fatalf("spray bench %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// TestBenchLocal runs spray bench in one process over spray and TCP and
// reads the table as a user would: the sizes of the sweep, #wrong 0.
func TestBenchLocal(t *testing.T) {
	for _, tr := range []string{"spray", "roce", "tcp"} {
		out, _ := runBenchCLI(t, "allreduce", "-b", "8", "-e", "256K", "-f", "8", "-w", "1", "-n", "3",
			"-d", "int32", "-o", "max", "--world", "4", "--transport", tr, "--seed", strconv.FormatUint(testutil.Seed(t), 10))
		t.Logf("%s:\n%s", tr, out)
		rows := parseBenchTable(t, out)
		want := []int64{8, 64, 512, 4096, 32768, 262144}
		if len(rows) != len(want) {
			t.Fatalf("%s: %d rows, want %d", tr, len(rows), len(want))
		}
		for i, r := range rows {
			if r.bytes != want[i] || r.typ != "int32" || r.wrong != "0" {
				t.Errorf("%s: row %d: %+v", tr, i, r)
			}
		}
		if !strings.Contains(out, "Out of bounds values : 0 OK") || !strings.Contains(out, "transport "+tr) {
			t.Errorf("%s: no verdict or transport in\n%s", tr, out)
		}
	}
	// Flags before the collective, sizes with suffixes, no check.
	out, _ := runBenchCLI(t, "--world", "3", "-b", "1K", "-e", "1K", "-c", "0", "-n", "2", "-w", "0", "broadcast", "-r", "2")
	rows := parseBenchTable(t, out)
	if len(rows) != 1 || rows[0].bytes != 1024 || rows[0].wrong != "N/A" {
		t.Errorf("broadcast rows %+v in\n%s", rows, out)
	}
}

// TestBenchJSON writes --json to a file and to stdout and decodes both.
func TestBenchJSON(t *testing.T) {
	type result struct {
		Collective string
		World      int
		Rows       []bench.CollRow
	}
	file := filepath.Join(t.TempDir(), "out.json")
	out, _ := runBenchCLI(t, "alltoall", "-b", "64", "-e", "4K", "-f", "4", "-w", "0", "-n", "4", "--world", "4", "--transport", "tcp", "--json", file)
	if len(parseBenchTable(t, out)) != 4 {
		t.Errorf("table with --json FILE:\n%s", out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var fromFile result
	if err := json.Unmarshal(b, &fromFile); err != nil {
		t.Fatal(err)
	}
	out, _ = runBenchCLI(t, "alltoall", "-b", "64", "-e", "4K", "-f", "4", "-w", "0", "-n", "4", "--world", "4", "--transport", "tcp", "--json", "-")
	var fromStdout result
	if err := json.Unmarshal([]byte(out), &fromStdout); err != nil {
		t.Fatalf("--json -: %v\n%s", err, out)
	}
	for _, r := range []result{fromFile, fromStdout} {
		if r.Collective != "alltoall" || r.World != 4 || len(r.Rows) != 4 {
			t.Fatalf("json %+v", r)
		}
		for _, row := range r.Rows {
			if !row.Checked || row.Wrong != 0 || len(row.Samples) != 4 || row.AlgBW <= 0 || row.BusBW >= row.AlgBW {
				t.Errorf("json row %+v", row)
			}
		}
	}
}

func TestBenchErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"gather"},
		{"allreduce", "-b", "1X"},
		{"allreduce", "-b", "1M", "-e", "1K"},
		{"allreduce", "-o", "prod"},
		{"allreduce", "-d", "int8", "--world", "2"},
		{"allreduce", "--transport", "ib"},
		{"allreduce", "--link", "xdp"},
		{"allreduce", "--rank", "0"},
		{"broadcast", "-r", "9", "--world", "4"},
		{"allreduce", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		if err := benchMain(args, &stdout, &stderr, -1); err == nil {
			t.Errorf("spray bench %q: no error", args)
		}
	}
	if err := runBench([]string{"alltoall", "-h"}); !errors.Is(err, errHelp) {
		t.Errorf("spray bench alltoall -h: %v, want the usage and errHelp (exit status 0)", err)
	}
	if _, ok := commands["incast"]; !ok {
		var stdout, stderr bytes.Buffer
		err := benchMain([]string{"incast"}, &stdout, &stderr, -1)
		if err == nil || !strings.Contains(err.Error(), "incast") {
			t.Errorf("bench incast without the incast command: %v", err)
		}
	}
}

// TestBenchTestbed runs "spray bench alltoall --testbed leafspine:2x2x1"
// with the spray binary: four processes, one per host namespace, over
// AF_XDP across the fabric, and reads rank 0's table.
func TestBenchTestbed(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	exe := filepath.Join(t.TempDir(), "spray")
	gobin := testutil.SkipIfMissingTool(t, "go", "golang-go")
	if out, err := exec.Command(gobin, "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tr := range []string{"spray", "tcp"} {
		cmd := exec.CommandContext(ctx, exe, "bench", "alltoall", "--testbed", "leafspine:2x2x1", "--transport", tr,
			"-b", "8", "-e", "1M", "-f", "32", "-w", "1", "-n", "5")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", tr, err, stdout.String(), stderr.String())
		}
		t.Logf("%s:\n%s%s", tr, stderr.String(), stdout.String())
		rows := parseBenchTable(t, stdout.String())
		if len(rows) != 4 { // 16 (one float32 per rank), 256, 8K, 256K
			t.Fatalf("%s: %d rows, want 4", tr, len(rows))
		}
		for _, r := range rows {
			if r.wrong != "0" {
				t.Errorf("%s: row %+v", tr, r)
			}
		}
		if !strings.Contains(stdout.String(), "4 ranks") || !strings.Contains(stderr.String(), "4 ranks") {
			t.Errorf("%s: want 4 ranks in the output", tr)
		}
	}
}

// TestBenchRanks runs the across-hosts mode without root: three ranks
// (here goroutines, each as its own process would) meet at rank 0's
// bootstrap address on loopback and run over kernel TCP, then over spray on
// link/udp sockets at 127.0.0.1-3. Rank 0 prints the table.
func TestBenchRanks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	boot := ln.Addr().String()
	ln.Close() // rank 0 listens there; the others retry until it does
	seed := strconv.FormatUint(testutil.Seed(t), 10)
	for _, tr := range []string{"tcp", "spray"} {
		const n = 3
		var wg sync.WaitGroup
		outs := make([]bytes.Buffer, n)
		errs := make([]bytes.Buffer, n)
		fails := make([]error, n)
		for r := range n {
			wg.Go(func() {
				fails[r] = benchMain([]string{"reducescatter", "-b", "12", "-e", "12K", "-f", "32", "-w", "1", "-n", "3",
					"--transport", tr, "--link", "udp", "--rank", strconv.Itoa(r), "--world", strconv.Itoa(n),
					"--bootstrap", boot, "--ip", fmt.Sprintf("127.0.0.%d", r+1), "--seed", seed, "--timeout", "1m"}, &outs[r], &errs[r], -1)
			})
		}
		wg.Wait()
		for r, err := range fails {
			if err != nil {
				t.Fatalf("%s: rank %d: %v\n%s", tr, r, err, errs[r].String())
			}
		}
		t.Logf("%s:\n%s", tr, outs[0].String())
		rows := parseBenchTable(t, outs[0].String())
		if len(rows) != 3 || rows[0].bytes != 12 || rows[2].bytes != 12<<10 {
			t.Fatalf("%s: rows %+v", tr, rows)
		}
		for _, r := range rows {
			if r.wrong != "0" {
				t.Errorf("%s: row %+v", tr, r)
			}
		}
		if outs[1].Len() != 0 || outs[2].Len() != 0 {
			t.Errorf("%s: ranks 1 and 2 printed %q, %q; only rank 0 should", tr, outs[1].String(), outs[2].String())
		}
	}
}

// TestBenchProgress asks for the progress bar and finds it on stderr, and
// none on stdout.
func TestBenchProgress(t *testing.T) {
	out, errOut := runBenchCLI(t, "allgather", "-b", "64", "-e", "1K", "-f", "4", "-w", "2", "-n", "5", "--world", "2", "--transport", "tcp", "--progress", "on")
	if !strings.Contains(errOut, "100% 24/24 iterations") { // 3 sizes x (1 check + 2 warm-up + 5)
		t.Errorf("no finished progress bar on stderr: %q", errOut)
	}
	if strings.Contains(out, "iterations") {
		t.Errorf("progress on stdout:\n%s", out)
	}
	_, errOut = runBenchCLI(t, "allgather", "-b", "64", "-e", "64", "-n", "1", "--world", "2", "--transport", "tcp")
	if errOut != "" {
		t.Errorf("a progress bar on a stderr that is not a terminal: %q", errOut)
	}
}

// TestBenchMetrics: spray bench --metrics serves the ranks' endpoint
// series while the sweep runs; two scrapes see the bytes sent grow.
func TestBenchMetrics(t *testing.T) {
	urls := make(chan string, 1)
	metricsStarted = func(url string) { urls <- url }
	defer func() { metricsStarted = nil }()
	done := make(chan error, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		// Seconds of all-to-all on the in-memory fabric on a loaded machine.
		done <- benchMain([]string{"alltoall", "-b", "1M", "-e", "1M", "-w", "0", "-n", "150", "-c", "0", "--world", "4",
			"--metrics", "127.0.0.1:0"}, &stdout, &stderr, -1)
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("bench ended before serving metrics: %v", err)
	}
	const name = "spray_qp_tx_bytes_total"
	first := -1.0
	for {
		v, ok := sumFamily(t, url, name)
		if ok && v > 0 && first < 0 {
			first = v
		} else if ok && first > 0 && v > first {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("bench ended (%v) before %s grew past %v", err, name, first)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, ok := sumFamily(t, url, "spray_qp_rtt_smoothed_seconds"); !ok {
		t.Errorf("no RTT series during the run")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// FuzzParseSize: any string gives a size in [0, 1 TiB] or an error, never
// a panic; plain decimal numbers in range parse as themselves.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"8", "64M", "1G", "16KiB", "", "-1", "9999999999999G", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err != nil {
			return
		}
		if n < 0 || n > 1<<40 {
			t.Fatalf("parseSize(%q) = %d", s, n)
		}
		if v, perr := strconv.ParseInt(s, 10, 64); perr == nil && v != n {
			t.Fatalf("parseSize(%q) = %d, want %d", s, n, v)
		}
	})
}

// TestBenchRankMissing: rank 0 of a world of 3 whose rank 2 never comes
// says on stderr, every few seconds, that it waits for rank 2, and gives
// up at --join-timeout with an error naming rank 2 and the flag.
func TestBenchRankMissing(t *testing.T) {
	// A loopback network moved by the process ID: any port serves.
	b, c := testutil.LoopbackNet(testutil.Rand(t))
	boot := fmt.Sprintf("127.%d.%d.1:18516", b, c)
	var stderr bytes.Buffer
	var mu sync.Mutex
	errs := make(chan error, 2)
	start := func(rank int, w *bytes.Buffer) {
		f := []string{"alltoall", "-b", "8", "-e", "8", "-n", "1", "--rank", strconv.Itoa(rank), "--world", "3",
			"--bootstrap", boot, "--ip", "127.0.0.1", "--transport", "tcp", "--join-timeout", "1s"}
		go func() {
			var out bytes.Buffer
			errs <- benchMainWait(f, &out, &lockedWriter{mu: &mu, w: w}, 100*time.Millisecond)
		}()
	}
	start(0, &stderr)
	start(1, &bytes.Buffer{})
	var err0 error
	for range 2 {
		if err := <-errs; err != nil && strings.Contains(err.Error(), "rank(s) 2 never joined") {
			err0 = err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if err0 == nil || !strings.Contains(err0.Error(), "--join-timeout 1s") {
		t.Errorf("rank 0: %v, want the world not assembled within --join-timeout, naming rank 2", err0)
	}
	if !strings.Contains(stderr.String(), "waiting for rank(s) 2 to join") {
		t.Errorf("rank 0 never said it waits for rank 2: %q", stderr.String())
	}
	t.Logf("%s%v", stderr.String(), err0)
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// benchMainWait is benchMain with join's reports every wait.
func benchMainWait(args []string, stdout, stderr io.Writer, wait time.Duration) error {
	benchWaitEvery = wait
	return benchMain(args, stdout, stderr, -1)
}

// TestBenchRowsAsTheyFinish: spray bench prints each row of its table as
// the size finishes, before the next size starts: when the progress
// callback reports the first iteration of a size, the rows of every
// smaller size are on stdout already.
func TestBenchRowsAsTheyFinish(t *testing.T) {
	var stdout, stderr bytes.Buffer
	f := benchFlags{stdout: &stdout, stderr: &stderr, stderrFd: -1, op: bench.OpAllToAll, world: 2, transport: "tcp",
		minB: 64, maxB: 1024, factor: 4, iters: 2, check: 1, redop: "sum", typ: "float32", progress: "off", paths: 8, timeout: time.Minute, joinTimeout: time.Minute}
	cfg, err := f.collConfig()
	if err != nil {
		t.Fatal(err)
	}
	perSize := 1 + cfg.Iters // check + timed
	var seen []int
	f.progressHook = func(done, total int) {
		if done%perSize == 1 { // the first iteration of a size
			seen = append(seen, len(parseBenchTable(t, stdout.String())))
		}
	}
	if err := f.runLocal(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 1, 2}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("rows on stdout at the start of each size: %v, want %v\n%s", seen, want, stdout.String())
	}
	if rows := parseBenchTable(t, stdout.String()); len(rows) != 3 {
		t.Errorf("%d rows at the end, want 3:\n%s", len(rows), stdout.String())
	}
}
