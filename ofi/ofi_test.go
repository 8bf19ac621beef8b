package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
)

// buildProvider builds the provider into a temporary directory once per
// test binary and returns the directory, for FI_PROVIDER_PATH.
var buildProvider = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "spray-ofi-")
	if err != nil {
		return "", err
	}
	out, err := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libspray-fi.so"), ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	return dir, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := buildProvider(); err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// provider skips t when tool is missing and returns the provider's
// directory.
func provider(t *testing.T, tools ...string) string {
	t.Helper()
	for _, tool := range tools {
		testutil.SkipIfMissingTool(t, tool, toolPackages[tool])
	}
	testutil.SkipIfNoCgo(t, "the provider")
	dir, err := buildProvider()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// toolPackages names the Debian package of each tool the tests run.
var toolPackages = map[string]string{
	"fi_info":     "libfabric-bin",
	"fi_pingpong": "libfabric-bin",
	"cc":          "gcc",
	"mpicc":       "libopenmpi-dev",
	"mpirun":      "openmpi-bin",
}

func providerEnv(dir string) []string {
	return append(os.Environ(), "FI_PROVIDER_PATH="+dir)
}

// TestFiInfo: libfabric's fi_info loads the provider from
// FI_PROVIDER_PATH and lists it with its endpoint type and capabilities.
func TestFiInfo(t *testing.T) {
	dir := provider(t, "fi_info")
	cmd := exec.Command("fi_info", "-p", "spray", "-v")
	cmd.Env = providerEnv(dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fi_info -p spray: %v\n%s", err, out)
	}
	for _, want := range []string{"prov_name: spray", "type: FI_EP_RDM", "FI_TAGGED", "FI_MSG", "FI_DIRECTED_RECV", "FI_SOURCE", "mr_mode: [ FI_MR_PROV_KEY ]"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("fi_info output lacks %q:\n%s", want, out)
		}
	}
	// A capability the provider lacks gives no provider.
	cmd = exec.Command("fi_info", "-p", "spray", "-c", "FI_ATOMIC")
	cmd.Env = providerEnv(dir)
	out, err = cmd.CombinedOutput()
	if err == nil || bytes.Contains(out, []byte("provider: spray")) {
		t.Errorf("fi_info -p spray -c FI_ATOMIC: err %v, want none listed:\n%s", err, out)
	}
}

// TestBadInput compiles testdata/badinput.c against libfabric's headers
// and runs it: refused hints, invalid and removed addresses, truncation,
// cancel, peek and claim, closing out of order, calls on a closed
// endpoint, each answered with libfabric's error.
func TestBadInput(t *testing.T) {
	dir := provider(t, "cc")
	testutil.SkipIfMissingFile(t, "/usr/include/rdma/fabric.h", "libfabric-dev")
	bin := filepath.Join(t.TempDir(), "badinput")
	if out, err := exec.Command("cc", "-Wall", "-o", bin, "testdata/badinput.c", "-lfabric").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	// A small unexpected-message bound, so that the program's 40
	// unreceived messages reach it; the log line counts the waits.
	cmd.Env = append(providerEnv(dir), "FI_SPRAY_UNEXPECTED=8", "FI_SPRAY_LOG=1")
	out, err := cmd.CombinedOutput()
	sc := bufio.NewScanner(bytes.NewReader(out))
	oks := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		}
		if strings.HasPrefix(line, "ok ") {
			oks++
		}
	}
	if err != nil || oks < 40 {
		t.Fatalf("badinput: %v, %d checks passed\n%s", err, oks, out)
	}
	if !bytes.Contains(out, []byte("deliveries waited for room among unexpected messages")) {
		t.Errorf("no delivery waited at the unexpected-message bound:\n%s", out)
	}
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListen polls /proc/net/tcp until a socket listens on port.
func waitListen(t *testing.T, port int, done <-chan struct{}) {
	t.Helper()
	want := fmt.Sprintf(":%04X 00000000:0000 0A", port)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile("/proc/net/tcp")
		if bytes.Contains(b, []byte(want)) {
			return
		}
		select {
		case <-done:
			t.Fatal("the fi_pingpong server ended before it listened")
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("nothing listens on port %d after 30 s", port)
}

// TestPingpong runs libfabric's fi_pingpong over the provider between two
// processes on loopback: every size from 64 B to 1 MiB arrives and is
// acknowledged (fi_pingpong checks the counts), for messages and tagged
// messages.
func TestPingpong(t *testing.T) {
	dir := provider(t, "fi_pingpong")
	for _, mode := range []string{"msg", "tagged"} {
		t.Run(mode, func(t *testing.T) {
			port := fmt.Sprint(freePort(t))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{"-p", "spray", "-e", "rdm", "-m", mode, "-I", "20"}
			var srvOut bytes.Buffer
			srv := exec.CommandContext(ctx, "fi_pingpong", append(args, "-B", port)...)
			srv.Env, srv.Stdout, srv.Stderr = providerEnv(dir), &srvOut, &srvOut
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var srvErr error
			go func() { srvErr = srv.Wait(); close(done) }()
			waitListen(t, atoi(port), done)
			cli := exec.CommandContext(ctx, "fi_pingpong", append(args, "-P", port, "127.0.0.1")...)
			cli.Env = providerEnv(dir)
			out, err := cli.CombinedOutput()
			<-done
			if err != nil || srvErr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", err, out, srvErr, srvOut.String())
			}
			for _, size := range []string{"64 ", "1k ", "64k ", "1m "} {
				if !bytes.Contains(out, []byte("\n"+size)) {
					t.Errorf("no %q row in the client's output:\n%s", size, out)
				}
			}
			if bytes.Contains(out, []byte("+")) || !bytes.Contains(out, []byte("=20")) {
				t.Errorf("messages not all acknowledged:\n%s", out)
			}
		})
	}
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// TestMPI compiles testdata/mpicheck.c with mpicc and runs it on four
// ranks of this host under Open MPI's cm PML and ofi MTL over the
// provider: wildcard receives, probes, MPI_Alltoall, MPI_Alltoallv and a
// 12 MiB MPI_Allreduce, every byte checked by the program.
func TestMPI(t *testing.T) {
	testutil.SkipIfShort(t, "four MPI ranks take seconds")
	dir := provider(t, "mpicc", "mpirun")
	bin := filepath.Join(t.TempDir(), "mpicheck")
	if out, err := exec.Command("mpicc", "-O2", "-o", bin, "testdata/mpicheck.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
		"--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", "spray",
		"-x", "FI_PROVIDER_PATH", bin, "65536", "2")
	cmd.Env = providerEnv(dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PASS: 4 ranks, 0 checks failed")) {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
	for _, want := range []string{"ok p2p-wildcard", "ok probe-mprobe", "ok alltoall-65536", "ok alltoallv", "ok allreduce-12MiB"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
