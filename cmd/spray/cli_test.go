package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runCaptured runs the command line args as main does and returns its exit
// status, what it printed on its error stream and what the commands
// printed on os.Stderr (their usage).
func runCaptured(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stderr
	os.Stderr = f
	var errOut bytes.Buffer
	code := run(args, &errOut)
	os.Stderr = saved
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, errOut.String(), string(b)
}

// TestCLIRefusesNonsense: stray arguments, zero or negative sizes and
// counts, probabilities outside [0, 1] and unknown flags are refused before
// anything runs, with exit status 2, one line that names the culprit and a
// pointer to the command's -h, and no usage dump.
func TestCLIRefusesNonsense(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error line
	}{
		{[]string{"perf", "bogusmode"}, `"bogusmode"`},
		{[]string{"perf", "--link", "udp", "client", "--peer", "10.0.0.1"}, `"client"`},
		{[]string{"perf", "--size", "0"}, "--size 0: want at least 1"},
		{[]string{"perf", "--size", "-1"}, "--size -1: want at least 1"},
		{[]string{"perf", "--total", "0"}, "--total 0: want at least 1"},
		{[]string{"perf", "--total", "-5"}, "-total"},
		{[]string{"perf", "--paths", "0"}, "--paths 0: want at least 1"},
		{[]string{"perf", "--loss", "2"}, "--loss 2: want a probability in [0, 1]"},
		{[]string{"perf", "--loss", "-0.1"}, "--loss"},
		{[]string{"perf", "--gbps", "-1"}, "--gbps"},
		{[]string{"perf", "--timeout", "0s"}, "--timeout"},
		{[]string{"perf", "--profile", "infiniband"}, "--profile"},
		{[]string{"perf", "--no-such-flag"}, "no-such-flag"},
		{[]string{"perf", "client"}, "--peer"},
		{[]string{"compare", "--iters", "0"}, "--iters 0: want at least 1"},
		{[]string{"compare", "--warmup", "-1"}, "--warmup -1"},
		{[]string{"compare", "--size", "0"}, "--size"},
		{[]string{"compare", "extra"}, `"extra"`},
		{[]string{"sim", "extra"}, `"extra"`},
		{[]string{"sim", "--window", "0"}, "--window 0: want at least 1"},
		{[]string{"sim", "--limit", "0s"}, "--limit"},
		{[]string{"sim", "--pfc", "maybe"}, "--pfc maybe: want on or off"},
		{[]string{"sim", "--topo", "leafspine:0x0x0"}, "--topo"},
		{[]string{"sim", "--bogus"}, "bogus"},
		{[]string{"bench", "alltoall", "-n", "0"}, "--n 0: want at least 1"},
		{[]string{"bench", "alltoall", "--paths", "0"}, "--paths 0"},
		{[]string{"bench", "alltoall", "-c", "2"}, "--c 2: want 0 or 1"},
		{[]string{"bench", "alltoall", "stray"}, `"stray"`},
		{[]string{"bench"}, "which collective"},
		{[]string{"incast", "--senders", "0"}, "--senders 0"},
		{[]string{"incast", "stray"}, `"stray"`},
		{[]string{"testbed"}, "want up"},
		{[]string{"testbed", "sideways"}, `"sideways"`},
		{[]string{"testbed", "up"}, "want one topology"},
		{[]string{"testbed", "up", "leafspine:0x1x1"}, "testbed up"},
		{[]string{"testbed", "fault", "lab", "--port", "leaf0:up1", "--loss", "2"}, "probability"},
		{[]string{"testbed", "down"}, "NAME"},
		{[]string{"testbed", "list", "x"}, `"x"`},
		{[]string{"nosuchcommand"}, "unknown command"},
	} {
		code, errOut, usage := runCaptured(t, tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		switch {
		case code != 2:
			t.Errorf("spray %q: exit status %d, want 2 (%s)", tc.args, code, errOut)
		case !strings.Contains(lines[0], tc.want):
			t.Errorf("spray %q: %q does not name %q", tc.args, lines[0], tc.want)
		case len(lines) > 2:
			t.Errorf("spray %q: %d lines of error, want the error and a pointer to -h:\n%s", tc.args, len(lines), errOut)
		case usage != "":
			t.Errorf("spray %q: printed the usage on a bad command line:\n%s", tc.args, usage)
		case tc.args[0] != "nosuchcommand" && !strings.Contains(errOut, "run 'spray "+tc.args[0]+" -h'"):
			t.Errorf("spray %q: no pointer to -h: %s", tc.args, errOut)
		}
	}
}

// TestCLIHelp: CMD -h prints the command's usage and exits 0, without the
// flag package's "help requested".
func TestCLIHelp(t *testing.T) {
	for _, args := range [][]string{
		{"perf", "-h"}, {"perf", "server", "-h"}, {"perf", "client", "--help"},
		{"bench", "-h"}, {"bench", "alltoall", "-h"}, {"compare", "-h"}, {"sim", "-h"}, {"incast", "-h"},
		{"testbed", "-h"}, {"testbed", "up", "-h"}, {"testbed", "down", "-h"}, {"testbed", "fault", "-h"},
		{"testbed", "status", "-h"},
	} {
		code, errOut, usage := runCaptured(t, args...)
		if code != 0 || errOut != "" {
			t.Errorf("spray %q: exit status %d, error %q; want 0 and none", args, code, errOut)
		}
		if !strings.Contains(usage, "usage: ") {
			t.Errorf("spray %q: no usage printed: %q", args, usage)
		}
		if strings.Contains(usage+errOut, "help requested") {
			t.Errorf("spray %q: says help requested", args)
		}
	}
}

// cliEnv makes the test binary run a spray command line (cliSep-separated)
// instead of the tests: TestMain hands it to run.
const cliEnv = "SPRAY_CLI_ARGS"

// cliSep separates the arguments in cliEnv.
const cliSep = "\x1f"

func TestMain(m *testing.M) {
	if args := os.Getenv(cliEnv); args != "" {
		os.Exit(run(strings.Split(args, cliSep), os.Stderr))
	}
	os.Exit(m.Run())
}

// spraySubprocess starts the command line args in a child process.
func spraySubprocess(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), cliEnv+"="+strings.Join(args, cliSep))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &stderr
}

// TestPerfClientSignal: a perf client whose server accepted the control
// connection and then says nothing exits on SIGTERM within a second or so
// (bound: 3 s on a loaded machine) with "interrupted" and status 143; one
// whose server hangs up exits with the error at once.
func TestPerfClientSignal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	cmd, stderr := spraySubprocess(t, "perf", "client", "--peer", ln.Addr().String(), "--link", "tcp")
	var c net.Conn
	select {
	case c = <-accepted:
		defer c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the client never connected")
	}
	time.Sleep(200 * time.Millisecond) // it waits for the server's answer
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	err = cmd.Wait()
	took := time.Since(sent)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit: %v, want status %d; stderr: %s", err, 128+int(syscall.SIGTERM), stderr)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr %q does not say interrupted", stderr)
	}
	t.Logf("exited %v after SIGTERM: %s", took, strings.TrimSpace(stderr.String()))
	if took > 3*time.Second {
		t.Errorf("exited %v after SIGTERM", took)
	}

	// The server hangs up.
	cmd, stderr = spraySubprocess(t, "perf", "client", "--peer", ln.Addr().String(), "--link", "tcp")
	select {
	case c := <-accepted:
		time.Sleep(100 * time.Millisecond)
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the client never connected")
	}
	hung := time.Now()
	err = cmd.Wait()
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || time.Since(hung) > 3*time.Second {
		t.Fatalf("after the server hung up: %v after %v; stderr %s", err, time.Since(hung), stderr)
	}
	t.Logf("server hung up: %s", strings.TrimSpace(stderr.String()))
}
