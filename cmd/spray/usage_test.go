package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runCapturedAll runs the command line args as main does and returns its
// exit status, its error line(s) and everything the command wrote to
// os.Stdout and os.Stderr.
func runCapturedAll(t *testing.T, args ...string) (code int, errOut, out string) {
	t.Helper()
	dir := t.TempDir()
	files := [2]*os.File{}
	for i := range files {
		f, err := os.Create(filepath.Join(dir, []string{"stdout", "stderr"}[i]))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	savedOut, savedErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = files[0], files[1]
	var b strings.Builder
	code = run(args, &b)
	os.Stdout, os.Stderr = savedOut, savedErr
	for _, f := range files {
		data, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		out += string(data)
	}
	return code, b.String(), out
}

// TestCLIUsageErrorsBeforeWork: every command line below is refused with
// exit status 2 and one line that names the culprit, before any work: no
// output from a run (a table, progress lines), no file written, no key
// file read to its end or waited on. Among them: a PSK that is a device, a
// FIFO or too large; values that overflow (--gbps 1e308, --host-window
// 1e308, --window 2147483647); an output path whose directory is missing
// (checked before the run, not after it); an --ip of another host; a
// simulation estimated far above --mem.
func TestCLIUsageErrorsBeforeWork(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.key")
	if err := os.WriteFile(big, []byte(strings.Repeat("k", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing", "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "--mtu", "10", "--link", "mem"}, "--mtu 10"},
		{[]string{"perf", "--gbps", "1e308", "--link", "mem"}, "--gbps"},
		{[]string{"perf", "--gbps", "NaN"}, "--gbps"},
		{[]string{"perf", "--window", "100", "--link", "mem"}, "--window 100"},
		{[]string{"perf", "--paths", "65536", "--link", "mem"}, "--paths 65536"},
		{[]string{"perf", "--engines", "5", "--link", "mem"}, "--engines 5"},
		{[]string{"perf", "--psk", "/dev/zero", "--link", "mem"}, "a device"},
		{[]string{"perf", "--psk", fifo, "--link", "mem"}, "a FIFO"},
		{[]string{"perf", "--psk", big, "--link", "mem"}, "at most 4096"},
		{[]string{"perf", "--psk", dir, "--link", "mem"}, "a directory"},
		{[]string{"perf", "--pcap", missing, "--link", "mem"}, "--pcap"},
		{[]string{"perf", "--cpuprofile", dir, "--link", "mem"}, "a directory"},
		{[]string{"sim", "--window", "2147483647"}, "--window 2147483647"},
		{[]string{"sim", "--memprofile-at", "-1s"}, "--memprofile-at -1s"},
		{[]string{"sim", "--topo", "leafspine:2x2x2,pfc=2/3k"}, `XOFF "2"`},
		{[]string{"sim", "--host-window", "1e308"}, "--host-window"},
		{[]string{"sim", "--queues", "5000"}, "--queues 5000"},
		{[]string{"sim", "--json", "/nonexistent/x"}, "--json /nonexistent/x"},
		{[]string{"sim", "--png", missing}, "--png"},
		{[]string{"sim", "--memprofile", missing}, "--memprofile"},
		{[]string{"sim", "--write-cm", missing}, "--write-cm"},
		{[]string{"sim", "--topo", "leafspine:1000x1000x1000", "--workload", "alltoall:1G", "--mem", "2G"}, "does not fit in memory"},
		{[]string{"sim", "--topo", "leafspine:1000x1000x1000", "--workload", "alltoall:1G", "--write-cm", filepath.Join(dir, "x.cm")}, "more than 8388608"},
		{[]string{"perf", "--busy-poll=1000h", "--link", "mem"}, "--busy-poll"},
		{[]string{"compare", "--warmup", "100000000"}, "--warmup"},
		{[]string{"compare", "--json", "/nonexistent/x"}, "--json /nonexistent/x"},
		{[]string{"compare", "--out", dir, "--png", "missing/x.png"}, "--png"},
		{[]string{"bench", "alltoall", "-n", "1000000000"}, "--n 1000000000"},
		{[]string{"bench", "alltoall", "-r", "-1"}, "--r -1"},
		{[]string{"bench", "alltoall", "--paths", "100000"}, "--paths 100000"},
		{[]string{"bench", "alltoall", "--json", missing}, "--json"},
		{[]string{"bench", "alltoall", "--rank", "0", "--world", "2", "--bootstrap", "127.0.0.1:1", "--ip", "192.0.2.77"}, "not an address of this host"},
		{[]string{"incast", "--senders", "100000"}, "--senders 100000"},
		{[]string{"incast", "--join", "-1s"}, "--join -1s"},
		{[]string{"testbed", "fault", "lab", "--port", "leaf0", "--down"}, "SWITCH:PORT"},
		{[]string{"testbed", "up", "leafspine:1x1x1", "--timeout", "-1s"}, "--timeout"},
	} {
		code, errOut, out := runCapturedAll(t, tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		switch {
		case code != 2:
			t.Errorf("spray %q: exit status %d, want 2 (%s)", tc.args, code, errOut)
		case len(lines) != 1:
			t.Errorf("spray %q: %d lines of error, want one:\n%s", tc.args, len(lines), errOut)
		case !strings.Contains(lines[0], tc.want):
			t.Errorf("spray %q: %q does not name %q", tc.args, lines[0], tc.want)
		case !strings.Contains(lines[0], "run 'spray "+tc.args[0]+" -h'"):
			t.Errorf("spray %q: no pointer to -h: %s", tc.args, lines[0])
		case out != "":
			t.Errorf("spray %q: did work before refusing; it printed:\n%s", tc.args, out)
		}
	}
	// Nothing was written where the paths pointed.
	for _, p := range []string{missing, filepath.Dir(missing)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after the refused runs: %v", p, err)
		}
	}
}

// TestSignalEndsEveryCommand: SIGTERM ends a perf server waiting for
// clients, a simulation and a simulated comparison in their runs with
// status 143 and the line
// "spray CMD: interrupted by terminated"; as root, also a perf run on a
// testbed, which tears its testbed down first. Each child signals that it
// is running by its first line on stderr; a child that does not end is a
// hang (bound: 20 s, the CLI's own forced exit).
func TestSignalEndsEveryCommand(t *testing.T) {
	cases := [][]string{
		{"perf", "server", "--listen", "127.0.0.1:0"},
		{"sim", "--topo", "leafspine:16x8x8", "--workload", "alltoall:64M"},
		{"compare", "--sim", "--iters", "1000", "--out", t.TempDir()},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, []string{"perf", "--testbed", "pair", "--link", "udp", "--size", "64M", "--total", "512G", "--pings", "0"})
	}
	for _, args := range cases {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), cliEnv+"="+strings.Join(args, cliSep))
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		lines := make(chan string, 64)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var all []string
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("spray %q: ended before it ran", args)
			}
			all = append(all, l)
		case <-time.After(2 * time.Minute):
			t.Fatalf("spray %q: no line on stderr", args)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		done := make(chan error, 1)
		go func() {
			for l := range lines {
				all = append(all, l)
			}
			done <- cmd.Wait()
		}()
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("spray %q: still running 20 s after SIGTERM", args)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Errorf("spray %q: %v after SIGTERM, want exit status 143:\n%s", args, err, strings.Join(all, "\n"))
		}
		want := "spray " + args[0] + ": interrupted by terminated"
		if all[len(all)-1] != want {
			t.Errorf("spray %q: last line %q, want %q", args, all[len(all)-1], want)
		}
		t.Logf("spray %s: exited %v after SIGTERM", strings.Join(args, " "), time.Since(sent).Round(time.Millisecond))
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the testbed case did not run")
	}
}
