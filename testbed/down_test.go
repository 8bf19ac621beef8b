package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
)

// mountNSEnv marks the re-executed test binary that runs in a mount
// namespace of its own.
const mountNSEnv = "SPRAY_TESTBED_MOUNTNS"

// inPrivateMountNS runs the test named by t in a child process with its
// own mount namespace (the kernel copies the mounts, Go's exec makes them
// private, so nothing it mounts reaches this machine's /run/netns), and
// reports whether the caller is that child, which then runs the body. The
// mount state is restored by the child's exit.
func inPrivateMountNS(t *testing.T) bool {
	t.Helper()
	if os.Getenv(mountNSEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mountNSEnv+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	return false
}

// shareNetnsDir leaves /run/netns as `ip netns add` leaves it: bound onto
// itself and shared (stacked: twice, peers of one another).
func shareNetnsDir(t *testing.T, stacked bool) {
	t.Helper()
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	binds := 1
	if stacked {
		binds = 2
	}
	for range binds {
		if err := unix.Mount(netnsDir, netnsDir, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("", netnsDir, "", unix.MS_SHARED, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDownSharedNetns: with /run/netns a shared bind mount (plain, and
// bound twice with every namespace's mount stacked on itself), a persistent
// fabric comes down completely: no namespace, link or pin is left, and the
// state file is gone; LeftoverNames finds nothing. Then a fabric whose
// state file was lost is still found by name prefix and removed.
func TestDownSharedNetns(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	if !inPrivateMountNS(t) {
		return
	}
	privateState(t)
	for _, stacked := range []bool{false, true} {
		shareNetnsDir(t, stacked)
		name := fmt.Sprintf("tbd%d-%v", os.Getpid()%100000, stacked)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		f, err := UpLeafSpine(ctx, name, LeafSpineConfig{Hosts: 1, Leaves: 1, Spines: 1}, ebpf.ECNConfig{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = DownLeafSpine(name) })
		prefix := f.Prefix
		f.Close()
		if stacked {
			// Every namespace mounted twice on its path: one lazy unmount
			// leaves a mount point that unlink refuses (EBUSY).
			entries, _ := os.ReadDir(netnsDir)
			for _, e := range entries {
				if p := filepath.Join(netnsDir, e.Name()); strings.HasPrefix(e.Name(), prefix) {
					if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
						t.Fatal(err)
					}
				}
			}
			mi, _ := os.ReadFile("/proc/self/mountinfo")
			if n := strings.Count(string(mi), prefix+"host0-0 "); n < 2 {
				t.Fatalf("stacked: %s mounted %d times, want 2 or more", prefix+"host0-0", n)
			}
		}
		if err := DownLeafSpine(name); err != nil {
			t.Fatalf("stacked %v: down: %v", stacked, err)
		}
		if left, err := Leftovers(prefix); err != nil || len(left) > 0 {
			t.Fatalf("stacked %v: after down: %v (%v)", stacked, left, err)
		}
		if _, err := os.Stat(statePath(name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stacked %v: state file: %v", stacked, err)
		}
		if names, _ := LeftoverNames(); len(names) > 0 {
			for _, n := range names {
				if n == name {
					t.Fatalf("stacked %v: LeftoverNames still has %q", stacked, name)
				}
			}
		}
	}

	// A fabric without its state file (a crashed up, a lost /run/spray)
	// is found by its namespaces' names and removed.
	name := fmt.Sprintf("tbl%d", os.Getpid()%100000)
	f, err := UpLeafSpine(context.Background(), name, LeafSpineConfig{Hosts: 1, Leaves: 1, Spines: 1}, ebpf.ECNConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DownLeafSpine(name) })
	prefix := f.Prefix
	f.Close()
	if err := os.Remove(statePath(name)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(PinRoot, prefix)); err != nil {
		t.Fatal(err)
	}
	names, err := LeftoverNames()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range names {
		found = found || n == name
	}
	if !found {
		t.Fatalf("LeftoverNames = %v, without %q", names, name)
	}
	if err := DownLeafSpine(name); err != nil {
		t.Fatal(err)
	}
	if left, _ := Leftovers(prefix); len(left) > 0 {
		t.Fatalf("after down: %v", left)
	}
}

// TestFabricName: the fabric name of a persistent fabric's objects.
func TestFabricName(t *testing.T) {
	for in, want := range map[string]string{
		"spf-lab-host0-0": "lab", "spf-lab-leaf1": "lab", "spf-lab-spine0": "lab", "spf-lab-": "lab",
		"spf-my-lab-host1-2": "my-lab", "spf-a_b-spine3": "a_b", "spf-x-leaf0-up1": "x",
	} {
		if got, ok := fabricName(in); !ok || got != want {
			t.Errorf("fabricName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"spt123-a", "spf-", "spf--host0", "lab-host0", "spf-host0"} {
		if got, ok := fabricName(in); ok {
			t.Errorf("fabricName(%q) = %q, want none", in, got)
		}
	}
}

// TestDownLeavesNamesake: taking fabric N down leaves fabric N-2 (whose
// objects' names also start with N's prefix) whole: its namespaces, state
// and pins stay, and it reopens.
func TestDownLeavesNamesake(t *testing.T) {
	if !ofFabric("lab")("spf-lab-host0-0") || ofFabric("lab")("spf-lab-2-host0-0") || ofFabric("lab")("spf-lab-2-") {
		t.Fatal("ofFabric(\"lab\") does not tell lab's objects from lab-2's")
	}
	testutil.SkipIfNotRoot(t)
	privateState(t)
	name := fmt.Sprintf("tbn%d", os.Getpid()%100000)
	other := name + "-2"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range []string{other, name} {
		f, err := UpLeafSpine(ctx, n, LeafSpineConfig{Hosts: 1, Leaves: 1, Spines: 1}, ebpf.ECNConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = DownLeafSpine(n) })
		f.Close()
	}
	before, err := leftoversMatching(ofFabric(other))
	if err != nil || len(before) == 0 {
		t.Fatalf("%s before down: %v (%v)", other, before, err)
	}
	if err := DownLeafSpine(name); err != nil {
		t.Fatal(err)
	}
	if left, _ := leftoversMatching(ofFabric(name)); len(left) > 0 {
		t.Fatalf("%s after down: %v", name, left)
	}
	after, err := leftoversMatching(ofFabric(other))
	if err != nil || len(after) != len(before) {
		t.Fatalf("%s after downing %s: %v, want %v (%v)", other, name, after, before, err)
	}
	f, err := OpenLeafSpine(other)
	if err != nil {
		t.Fatalf("reopen %s: %v", other, err)
	}
	f.Close()
	if err := DownLeafSpine(other); err != nil {
		t.Fatal(err)
	}
}
