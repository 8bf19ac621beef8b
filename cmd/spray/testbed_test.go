package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/testbed"

	"golang.org/x/sys/unix"
)

// sprayCLI runs the spray binary and returns its stdout, stderr and error.
func sprayCLI(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func mustCLI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, errs, err := sprayCLI(t, bin, args...)
	if err != nil {
		t.Fatalf("spray %s: %v\n%s", strings.Join(args, " "), err, errs)
	}
	return out
}

func cliStatus(t *testing.T, bin, name string, interval time.Duration) statusResult {
	t.Helper()
	out := mustCLI(t, bin, "testbed", "status", name, "--json", "--interval", interval.String())
	var res statusResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if res.Name != name || len(res.Ports) != 10 {
		t.Fatalf("status of %q: name %q, %d ports, want 10", name, res.Name, len(res.Ports))
	}
	return res
}

func statusPortOf(res statusResult, sw, peer string) statusPort {
	for _, p := range res.Ports {
		if p.Switch == sw && p.Peer == peer {
			return p
		}
	}
	return statusPort{}
}

// udpFlows sends count datagrams of 500 bytes from each of flows sockets
// (so from as many source ports, which pick the spines) in the testbed's
// host0-0 to host1-0, from this process.
func udpFlows(t *testing.T, name string, flows, count int) {
	t.Helper()
	f, err := testbed.OpenLeafSpine(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, b := f.Host(0, 0), f.Host(1, 0)
	var rx net.PacketConn
	if err := b.Do(func() (err error) {
		rx, err = net.ListenPacket("udp4", net.JoinHostPort(b.IP.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.IP, uint16(rx.LocalAddr().(*net.UDPAddr).Port)))
	msg := make([]byte, 500)
	if err := a.Do(func() error {
		for range flows {
			c, err := net.ListenPacket("udp4", net.JoinHostPort(a.IP.String(), "0"))
			if err != nil {
				return err
			}
			for range count {
				if _, err := c.WriteTo(msg, dst); err != nil {
					c.Close()
					return err
				}
			}
			c.Close()
			time.Sleep(time.Millisecond) // let the queues drain
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// privateTestbedState points the persistent testbeds' state directory and
// bpffs at temporary ones, for this process and the spray processes it
// starts: a bpffs of its own, unmounted at the end, so that no state file
// or pin of the test reaches the host's /run/spray or /sys/fs/bpf.
func privateTestbedState(t *testing.T) {
	t.Helper()
	state, bpffs := t.TempDir(), t.TempDir()
	if err := unix.Mount("bpf", bpffs, "bpf", 0, "mode=0700"); err != nil {
		testutil.SkipIfNotSupported(t, fmt.Errorf("mount a bpffs on %s: %w", bpffs, err), unix.ENODEV)
	}
	oldState, oldFS, oldPins := testbed.StateDir, testbed.BPFFS, testbed.PinRoot
	testbed.StateDir, testbed.BPFFS, testbed.PinRoot = state, bpffs, bpffs+"/spray"
	t.Setenv(testbed.EnvStateDir, state)
	t.Setenv(testbed.EnvBPFFS, bpffs)
	t.Cleanup(func() {
		testbed.StateDir, testbed.BPFFS, testbed.PinRoot = oldState, oldFS, oldPins
		_ = unix.Unmount(bpffs, unix.MNT_DETACH)
	})
}

// TestTestbedCLI drives spray testbed end to end with the built binary: up
// returns and leaves a fabric; status shows idle counters, then the
// counters of traffic sent from another process; fault --blackhole on a
// spine port makes that port count drops; bad input is refused with a
// clear message; down leaves no namespace, link, pin, state file or
// program behind.
func TestTestbedCLI(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	bin := filepath.Join(t.TempDir(), "spray")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	privateTestbedState(t)
	name := fmt.Sprintf("c%d", os.Getpid()%100000)
	t.Cleanup(func() { _ = testbed.DownLeafSpine(name) })

	out := mustCLI(t, bin, "testbed", "up", "leafspine:1x2x2,rate=100mbit", "--name", name, "--ecn", "20us,200us,0.2", "--json")
	var up upResult
	if err := json.Unmarshal([]byte(out), &up); err != nil {
		t.Fatalf("up --json: %v\n%s", err, out)
	}
	if up.Name != name || len(up.Hosts) != 2 || up.Hosts[1].IP != "10.80.1.1" || up.PinDir == "" {
		t.Fatalf("up printed %+v", up)
	}
	if _, errs, err := sprayCLI(t, bin, "testbed", "up", "leafspine:1x1x1", "--name", name); err == nil || !strings.Contains(errs, "exists") {
		t.Fatalf("second up of %s: %v, %q; want an error saying it exists", name, err, errs)
	}

	if out := mustCLI(t, bin, "testbed", "list"); !strings.Contains(out, name+"\tleafspine:1x2x2,rate=100mbit") {
		t.Errorf("list does not show %s:\n%s", name, out)
	}
	// status without a name: every testbed, one JSON object per line.
	all := mustCLI(t, bin, "testbed", "status", "--json", "--interval", "0")
	if !strings.Contains(all, `"name":"`+name+`"`) {
		t.Errorf("status of every testbed does not show %s:\n%s", name, all)
	}
	idle := cliStatus(t, bin, name, 0)
	var idlePkts uint64
	for _, p := range idle.Ports {
		idlePkts += p.Packets
	}
	if idlePkts > 20 {
		t.Errorf("an idle fabric counted %d packets", idlePkts)
	}

	udpFlows(t, name, 20, 20)
	busy := cliStatus(t, bin, name, 100*time.Millisecond)
	var pkts uint64
	for _, p := range busy.Ports {
		pkts += p.Packets
	}
	// 400 datagrams, each through a leaf uplink, a spine and leaf1's
	// host port.
	if pkts < idlePkts+3*400 {
		t.Fatalf("after 400 datagrams the ports counted %d packets (idle %d)", pkts, idlePkts)
	}
	for _, sp := range []string{"spine0", "spine1"} {
		if p := statusPortOf(busy, sp, "leaf1"); p.TxBytes == 0 || p.Bytes == 0 {
			t.Errorf("%s's port to leaf1 sent nothing of 20 flows: %+v", sp, p)
		}
	}

	before := statusPortOf(busy, "spine0", "leaf1").DropBlackhole
	mustCLI(t, bin, "testbed", "fault", name, "--port", "spine0:leaf1", "--blackhole")
	udpFlows(t, name, 20, 5)
	broken := cliStatus(t, bin, name, 0)
	p := statusPortOf(broken, "spine0", "leaf1")
	if p.DropBlackhole <= before || !p.Faults.Blackhole {
		t.Fatalf("after fault --blackhole: spine0:leaf1 %+v", p)
	}
	t.Logf("blackhole on spine0:leaf1 dropped %d frames", p.DropBlackhole-before)
	mustCLI(t, bin, "testbed", "fault", name, "--port", "spine0:down1", "--clear")
	if p := statusPortOf(cliStatus(t, bin, name, 0), "spine0", "leaf1"); p.Faults.Blackhole {
		t.Errorf("after fault --clear: %+v", p.Faults)
	}

	// A fault command line that names what the testbed does not have is
	// a usage error (status 2), refused before any port changes.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fault", name, "--port", "spine7:leaf1", "--blackhole"}, "no switch"},
		{[]string{"fault", name, "--port", "spine0:leaf9", "--blackhole"}, "no port"},
		{[]string{"fault", name, "--port", "leaf0:up9", "--down"}, "no port"},
		{[]string{"fault", name, "--port", "spine0:leaf1", "--loss", "1.5"}, "[0, 1]"},
		{[]string{"fault", name, "--port", "spine0:leaf1", "--burst", "0.1"}, "--burst"},
		{[]string{"fault", name, "--port", "spine0:leaf1"}, "nothing to do"},
		{[]string{"fault", "nosuch", "--port", "spine0:leaf1", "--down"}, "no testbed"},
		{[]string{"up", "leafspine:1x2", "--name", "x"}, "leafspine:HOSTS"},
		{[]string{"up", "leafspine:1x1x1", "--name", "a/b"}, "testbed name"},
		{[]string{"up", "leafspine:1x1x1", "--name", "x", "--ecn", "1ms,1us,0.5"}, "KMIN <= KMAX"},
		{[]string{"status", "nosuch"}, "no testbed"},
		{[]string{"down"}, "--all"},
	} {
		_, errs, err := sprayCLI(t, bin, append([]string{"testbed"}, c.args...)...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(errs, c.want) {
			t.Errorf("spray testbed %s: %v, stderr %q; want a failure saying %q", strings.Join(c.args, " "), err, errs, c.want)
		} else if (c.args[0] == "fault" || c.args[0] == "status") && ee.ExitCode() != 2 {
			t.Errorf("spray testbed %s: exit status %d, want 2 (a usage error)", strings.Join(c.args, " "), ee.ExitCode())
		}
	}

	// The kernel objects of the fabric, to look for after down.
	f, err := testbed.OpenLeafSpine(name)
	if err != nil {
		t.Fatal(err)
	}
	prefix := f.Prefix
	ids, err := f.Programs().Objects()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if alive, err := ids.Alive(); err != nil || len(alive) != 20+20+len(ids.Maps) {
		t.Fatalf("before down: %d objects alive (%v), want 20 programs, 20 links and the maps", len(alive), err)
	}

	// A process left running in a host: down --kill stops it.
	sleeper := exec.Command("ip", "netns", "exec", prefix+"host1-0", "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pids, _ := testbed.NamespacePids(name); len(pids) > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("NamespacePids does not see the process started in host1-0")
		}
	}
	if out := mustCLI(t, bin, "testbed", "down", name, "--kill"); !strings.Contains(out, "removed") {
		t.Errorf("down printed %q", out)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		sleeper.Process.Kill()
		t.Error("down --kill left the process in host1-0 running")
	}
	netnsList, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(netnsList), prefix) {
		t.Errorf("ip netns list after down:\n%s", netnsList)
	}
	if left, err := testbed.Leftovers(prefix); err != nil || len(left) > 0 {
		t.Errorf("after down: %v (%v)", left, err)
	}
	for _, path := range []string{up.PinDir, up.State} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after down: %v", path, err)
		}
	}
	assertNoObjects(t, ids)
	if _, errs, err := sprayCLI(t, bin, "testbed", "down", name); err == nil || !strings.Contains(errs, "no testbed") {
		t.Errorf("second down: %v, %q", err, errs)
	}
}

// assertNoObjects waits until none of the fabric's programs, tcx links and
// maps exists (the kernel may free them a little after the last reference
// goes).
func assertNoObjects(t *testing.T, ids ebpf.ObjectIDs) {
	t.Helper()
	var alive []string
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if alive, err = ids.Alive(); err == nil && len(alive) == 0 {
			return
		}
	}
	t.Fatalf("left behind after down: %v (%v)", alive, err)
}

// TestTestbedLeftovers: a spray perf --testbed pair killed with SIGKILL
// (no handler runs) leaves its namespaces; spray testbed list shows them
// as left over by a process that is gone, and spray testbed down PREFIX
// removes them.
func TestTestbedLeftovers(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	cmd, stderr := spraySubprocess(t, "perf", "--testbed", "pair", "--link", "tcp", "--total", "64G", "--size", "1M", "--pings", "0")
	var prefix string
	for end := time.Now().Add(time.Minute); prefix == "" && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, f := range strings.Fields(stderr.String()) {
			if strings.HasPrefix(f, "spt") && strings.HasSuffix(f, "-:") {
				prefix = strings.TrimSuffix(f, ":")
			}
		}
	}
	if prefix == "" {
		t.Fatalf("perf never said its testbed: %s", stderr)
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Cleanup(func() { _ = testbed.Cleanup(prefix) })
	var list bytes.Buffer
	if err := testbedList(&list); err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(list.String()) {
		if strings.HasPrefix(l, prefix) {
			line = l
		}
	}
	if !strings.Contains(line, fmt.Sprintf("left over by process %d, gone", cmd.Process.Pid)) {
		t.Fatalf("testbed list does not show %s as left over by process %d:\n%s", prefix, cmd.Process.Pid, list.String())
	}
	var down bytes.Buffer
	if err := testbedDown([]string{prefix}, &down); err != nil {
		t.Fatalf("testbed down %s: %v", prefix, err)
	}
	if left, _ := testbed.Leftovers(prefix); len(left) > 0 {
		t.Fatalf("left after testbed down %s: %v", prefix, left)
	}
	t.Log(strings.TrimSpace(line), "; ", strings.TrimSpace(down.String()))
}
