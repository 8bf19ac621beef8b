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

	"github.com/sprayfabric/spray/internal/testutil"
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

// TestCLIRefusesNonsense: for every subcommand, stray arguments, sizes
// out of bounds or beyond --total, unknown names (controllers, link kinds,
// profiles, scenarios, testbeds), probabilities outside [0, 1], flags that
// do not fit together and unknown flags are refused before anything runs
// (no testbed is built, nothing is allocated), with exit status 2, one
// line that names the culprit and ends with a pointer to the command's
// -h, and no usage dump.
func TestCLIRefusesNonsense(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error line
	}{
		{[]string{"perf", "bogusmode"}, `"bogusmode"`},
		{[]string{"perf", "--link", "udp", "client", "--peer", "10.0.0.1"}, `"client"`},
		{[]string{"perf", "--size", "0"}, "--size 0: want at least 1"},
		{[]string{"perf", "--size", "-1"}, "-size"},
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
		{[]string{"sim", "--window", "0"}, "--window 0: want a multiple of 64"},
		{[]string{"sim", "--limit", "0s"}, "--limit"},
		{[]string{"sim", "--pfc", "maybe"}, "--pfc maybe: want on or off"},
		{[]string{"sim", "--topo", "leafspine:0x0x0"}, "--topo"},
		{[]string{"sim", "--topo", "htsim:/nonexistent/spray.topo"}, "--topo htsim:/nonexistent/spray.topo: open"},
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
		// Sizes: bounded, checked against each other, K/M/G everywhere.
		{[]string{"perf", "--size", "99999999999", "--link", "mem", "--total", "1M"}, "--size 99999999999: want at most 256M"},
		{[]string{"perf", "--size", "1G", "--total", "1M"}, "--size 1G: want at most 256M"},
		{[]string{"perf", "--size", "2M", "--total", "1M"}, "--size 2M: want at most --total (1M)"},
		{[]string{"perf", "--total", "2000G"}, "-total"},
		{[]string{"perf", "--size", "1.5M"}, "-size"},
		{[]string{"perf", "--window-bytes", "2G"}, "--window-bytes 2G: want at most 1G"},
		{[]string{"perf", "--mtu", "70000"}, "--mtu"},
		{[]string{"compare", "--size", "2G"}, "--size 2G: want at most 1G"},
		{[]string{"compare", "--size", "1X"}, "-size"},
		{[]string{"bench", "alltoall", "-e", "1025G"}, "-e"},
		{[]string{"bench", "alltoall", "-e", "8G"}, "--e 8G: want at most 4G"},
		{[]string{"bench", "alltoall", "--chunk", "2G"}, "--chunk 2G"},
		// Names and specs, refused before a testbed is built.
		{[]string{"perf", "--cc", "bogus"}, "--cc"},
		{[]string{"perf", "--testbed", "leafspine:0x0x0"}, "--testbed"},
		{[]string{"perf", "--testbed", "pair", "--link", "bogus"}, `--link "bogus"`},
		{[]string{"perf", "--testbed", "pair,mtu=1"}, "--testbed"},
		{[]string{"perf", "--testbed", "ring"}, `--testbed "ring"`},
		{[]string{"perf", "--link", "xdp"}, "needs --testbed pair"},
		{[]string{"perf", "client", "--peer", "h", "--link", "mem"}, `--link "mem"`},
		{[]string{"perf", "server", "--testbed", "pair"}, "--testbed"},
		{[]string{"perf", "--restore", "1s"}, "--restore"},
		{[]string{"perf", "--testbed", "leafspine:1x2x2", "--restore", "1s"}, "--restore needs --fault"},
		{[]string{"perf", "--fault", "leaf0:up1@5s"}, "leafspine"},
		{[]string{"perf", "--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1"}, "PORT@TIME"},
		{[]string{"perf", "--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1@-1s"}, "positive duration"},
		{[]string{"perf", "--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1@5s", "--restore", "2s"}, "must come after"},
		{[]string{"perf", "--testbed", "leafspine:1x1x1", "--fault", "leaf0:up0@5s"}, "two leaves and two spines"},
		{[]string{"perf", "--testbed", "leafspine:1x2x2", "--fault", "leaf0:up1@5s", "--link", "tcp"}, "one link kind"},
		{[]string{"compare", "--testbed", "leafspine:0x0x0"}, "--testbed"},
		{[]string{"compare", "--scenarios", "bogus"}, `scenario "bogus"`},
		{[]string{"compare", "--profiles", "bogus"}, `profile "bogus"`},
		{[]string{"compare", "--link", "bogus"}, `link "bogus"`},
		{[]string{"compare", "--cc-spray", "bogus"}, `"bogus"`},
		{[]string{"compare", "--cc-roce", "bogus"}, `"bogus"`},
		{[]string{"compare", "--roce-ack-timeout", "0"}, "--roce-ack-timeout"},
		{[]string{"incast", "--cc", "bogus"}, "--cc"},
		{[]string{"incast", "--link", "bogus"}, "--link"},
		{[]string{"incast", "--testbed", "leafspine:0x1x1"}, "--testbed"},
		{[]string{"bench", "alltoall", "--cc", "bogus"}, "--cc"},
		{[]string{"bench", "alltoall", "-d", "bogus"}, `-d "bogus"`},
		{[]string{"bench", "gather"}, `collective "gather"`},
		{[]string{"bench", "alltoall", "--transport", "bogus"}, "--transport"},
		{[]string{"bench", "alltoall", "--link", "bogus"}, "--link"},
		{[]string{"bench", "alltoall", "--link", "udp"}, "needs --testbed or --rank"},
		{[]string{"bench", "alltoall", "--testbed", "leafspine:0x1x1"}, "--testbed"},
		{[]string{"bench", "alltoall", "--testbed", "ring"}, "--testbed"},
		{[]string{"bench", "alltoall", "--testbed", "leafspine:1x2x1", "--metrics", ":0"}, "--metrics"},
		{[]string{"bench", "broadcast", "--testbed", "leafspine:1x2x1", "-r", "5"}, "-r 5"},
		{[]string{"bench", "alltoall", "--rank", "0"}, "--bootstrap"},
		{[]string{"bench", "alltoall", "--rank", "3", "--world", "2", "--bootstrap", "127.0.0.1:1"}, "--rank 3"},
		{[]string{"bench", "alltoall", "--rank", "1", "--world", "2", "--bootstrap", "nohostport"}, "--bootstrap"},
		{[]string{"bench", "alltoall", "--rank", "1", "--world", "2", "--bootstrap", "127.0.0.1:1", "--ip", "x"}, "--ip"},
		{[]string{"bench", "alltoall", "--bootstrap-file", "/tmp/b"}, "--bootstrap-file needs --rank"},
		{[]string{"bench", "alltoall", "--progress", "maybe"}, "--progress"},
		{[]string{"bench", "alltoall", "--join-timeout", "0s"}, "--join-timeout"},
		{[]string{"sim", "--profiles", "bogus"}, `"bogus"`},
		{[]string{"sim", "--scenarios", "bogus"}, `"bogus"`},
		{[]string{"sim", "--workload", "bogus"}, "--workload"},
		{[]string{"soak", "--paths", "x"}, "--paths"},
		{[]string{"soak", "--bogus"}, "bogus"},
		{[]string{"testbed", "up", "leafspine:1x1x1", "--ecn", "bogus"}, "--ecn"},
		{[]string{"testbed", "status", "--interval", "-1s"}, "--interval"},
		{[]string{"testbed", "fault", "lab", "--port", "x", "--burst", "bad"}, "--burst"},
		{[]string{"testbed", "fault", "lab", "--port", "x", "--down", "--up"}, "--down"},
	} {
		code, errOut, usage := runCaptured(t, tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		switch {
		case code != 2:
			t.Errorf("spray %q: exit status %d, want 2 (%s)", tc.args, code, errOut)
		case !strings.Contains(lines[0], tc.want):
			t.Errorf("spray %q: %q does not name %q", tc.args, lines[0], tc.want)
		case len(lines) > 1:
			t.Errorf("spray %q: %d lines of error, want one, ending with a pointer to -h:\n%s", tc.args, len(lines), errOut)
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
		os.Exit(runMain(strings.Split(args, cliSep)))
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

// TestPerfSignalLargeMessages: a perf run of large messages over the
// in-memory fabric ends on SIGTERM with "interrupted" and status 143
// within a few seconds (bound: 5 s on a loaded machine), wherever it is:
// hashing the payload, sending, waiting.
func TestPerfSignalLargeMessages(t *testing.T) {
	for _, wait := range []time.Duration{300 * time.Millisecond, 3 * time.Second} {
		cmd, stderr := spraySubprocess(t, "perf", "--link", "mem", "--size", "64M", "--total", "512G", "--pings", "0")
		time.Sleep(wait)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		err := cmd.Wait()
		took := time.Since(sent)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Fatalf("SIGTERM after %v: exit %v, want status %d; stderr: %s", wait, err, 128+int(syscall.SIGTERM), stderr)
		}
		if !strings.Contains(stderr.String(), "interrupted") {
			t.Errorf("stderr %q does not say interrupted", stderr)
		}
		t.Logf("SIGTERM after %v: exited %v later", wait, took)
		if took > 5*time.Second {
			t.Errorf("SIGTERM after %v: exited %v later", wait, took)
		}
	}
}

// TestLinkPrivilegeNamesCaps: perf client --link xdp (and raw) without the
// capabilities they need fails at once with status 1, naming the missing
// capabilities and --link udp, not a socket's "operation not permitted"
// nor RLIMIT_MEMLOCK. As root, the test drops every capability of the
// child (setpriv).
func TestLinkPrivilegeNamesCaps(t *testing.T) {
	var wrap []string
	if os.Geteuid() == 0 {
		testutil.SkipIfMissingTool(t, "setpriv", "util-linux")
		wrap = []string{"setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"}
	}
	for kind, want := range map[string]string{"xdp": "CAP_NET_RAW", "raw": "CAP_NET_RAW"} {
		args := append(wrap, os.Args[0])
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), cliEnv+"="+strings.Join([]string{"perf", "client", "--peer", "127.0.0.1:1", "--link", kind}, cliSep))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("--link %s: %v, want status 1\n%s", kind, err, out)
		}
		for _, w := range []string{want, "--link udp"} {
			if !strings.Contains(string(out), w) {
				t.Errorf("--link %s: %q does not say %q", kind, out, w)
			}
		}
		if strings.Contains(strings.ToLower(string(out)), "memlock") {
			t.Errorf("--link %s: blames MEMLOCK: %q", kind, out)
		}
		t.Logf("--link %s: %s", kind, strings.TrimSpace(string(out)))
	}
}
