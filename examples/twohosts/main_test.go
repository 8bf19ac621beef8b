package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/testbed"
)

// in returns a command maker that runs in the network namespace ns (the
// caller's own when ns is empty).
func in(ns string) func(bin string, args ...string) *exec.Cmd {
	return func(bin string, args ...string) *exec.Cmd {
		if ns == "" {
			return exec.Command(bin, args...)
		}
		return exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	}
}

// runTwoHosts builds the example, starts the listening side at addrB and
// the dialling side at addrA (again while the listener is not up yet), and
// returns what each printed, stdout then stderr.
func runTwoHosts(t *testing.T, hostB, hostA func(string, ...string) *exec.Cmd, addrB, addrA string) (outB, errB, outA, errA string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "twohosts")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var ob, eb bytes.Buffer
	b := hostB(bin, addrB)
	b.Stdout, b.Stderr = &ob, &eb
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Process.Kill()
	deadline := time.Now().Add(time.Minute)
	for {
		var oa, ea bytes.Buffer
		a := hostA(bin, addrA, addrB)
		a.Stdout, a.Stderr = &oa, &ea
		err := a.Run()
		if err == nil {
			outA, errA = oa.String(), ea.String()
			break
		}
		if !strings.Contains(ea.String(), "nothing listens") || time.Now().After(deadline) {
			t.Fatalf("dialling side: %v\n%s\nlistening side:\n%s", err, ea.String(), eb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := b.Wait(); err != nil {
		t.Fatalf("listening side: %v\n%s", err, eb.String())
	}
	return ob.String(), eb.String(), outA, errA
}

func checkEcho(t *testing.T, outB, outA, addrB, addrA string) {
	t.Helper()
	want := func(peer string) string {
		return fmt.Sprintf("received %q, read %q\n", "hello from "+peer, "hello from "+peer)
	}
	if outB != want(addrA) || outA != want(addrB) {
		t.Fatalf("listening side printed %q, dialling side %q", outB, outA)
	}
}

// TestTwoHostsUDP runs the example as its doc says, on loopback.
func TestTwoHostsUDP(t *testing.T) {
	// A loopback network moved by the process ID: two runs at once bind
	// apart.
	x, y := testutil.LoopbackNet(testutil.Rand(t))
	addrA, addrB := fmt.Sprintf("127.%d.%d.1", x, y), fmt.Sprintf("127.%d.%d.2", x, y)
	outB, errB, outA, _ := runTwoHosts(t, in(""), in(""), addrB, addrA)
	checkEcho(t, outB, outA, addrB, addrA)
	if !strings.Contains(errB, "udp link, loopback interface") {
		t.Fatalf("listening side did not log its link choice:\n%s", errB)
	}
}

// TestTwoHostsXDP runs the example between two network namespaces joined
// by a veth pair: as root, Open picks AF_XDP on each side.
func TestTwoHostsXDP(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	addrA, addrB := p.A.IP.String(), p.B.IP.String()
	outB, errB, outA, errA := runTwoHosts(t, in(p.B.Name), in(p.A.Name), addrB, addrA)
	for side, log := range map[string]string{"listening": errB, "dialling": errA} {
		if strings.Contains(log, "AF_XDP unavailable") && strings.Contains(log, "not supported") {
			testutil.SkipIfNotSupported(t, fmt.Errorf("%s side: the kernel lacks AF_XDP: %s: %w", side, log, errors.ErrUnsupported))
		}
		if !strings.Contains(log, "xdp link, AF_XDP available") {
			t.Fatalf("%s side did not run AF_XDP:\n%s", side, log)
		}
		t.Logf("%s side: %s", side, log)
	}
	checkEcho(t, outB, outA, addrB, addrA)
}
