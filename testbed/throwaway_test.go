package testbed

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestThrowawaysAfterKill: the testbed of a process killed with SIGKILL
// (no handler runs) is listed by Throwaways with its namespaces and its
// dead owner, a live one as running; RemoveThrowaway removes the first
// and refuses the second.
func TestThrowawaysAfterKill(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	live := testPair(t, PairConfig{})
	cmd, prefix := child(t)
	pid := cmd.Process.Pid
	cmd.Process.Kill()
	cmd.Wait()
	t.Cleanup(func() { _ = Cleanup(prefix) })
	all, err := Throwaways()
	if err != nil {
		t.Fatal(err)
	}
	find := func(p string) *Throwaway {
		i := slices.IndexFunc(all, func(x Throwaway) bool { return x.Prefix == p })
		if i < 0 {
			t.Fatalf("Throwaways does not list %s: %+v", p, all)
		}
		return &all[i]
	}
	dead := find(prefix)
	if dead.Running || dead.Pid != pid || len(dead.Objects) != 2 {
		t.Errorf("killed child's testbed: %+v, want pid %d not running, two namespaces", *dead, pid)
	}
	if l := find(live.Prefix); !l.Running || l.Pid != os.Getpid() {
		t.Errorf("live testbed: %+v, want running as pid %d", *l, os.Getpid())
	}
	if err := RemoveThrowaway(prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix)
	if _, err := os.Stat(ownerDir + "/" + prefix); !os.IsNotExist(err) {
		t.Errorf("owner file of %s left: %v", prefix, err)
	}
	if err := RemoveThrowaway("notaprefix"); err == nil {
		t.Error("RemoveThrowaway took a name that is no prefix")
	}
}

// TestTeardownReportsHiddenNamespace: when something mounts over
// /run/netns after a pair was made, Close cannot see the namespaces'
// files and must say so rather than report success while they stay; the
// owner file stays for CleanupStale. The mount happens in a mount
// namespace of one locked thread, so nothing outside the test sees it.
func TestTeardownReportsHiddenNamespace(t *testing.T) {
	p := testPair(t, PairConfig{})
	t.Cleanup(func() { _ = Cleanup(p.Prefix) })
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("tmpfs", netnsDir, "tmpfs", 0, ""); err != nil {
			errc <- err
			return
		}
		errc <- p.Close()
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "hidden under another mount") {
			t.Fatalf("Close under a mount over %s: %v, want an error saying the namespaces are hidden", netnsDir, err)
		}
		t.Log(err)
	case <-time.After(time.Minute):
		t.Fatal("Close hung")
	}
	if left, _ := Leftovers(p.Prefix); len(left) == 0 {
		t.Fatal("nothing left: the test did not hide the namespaces")
	}
	if _, err := os.Stat(ownerDir + "/" + p.Prefix); err != nil {
		t.Errorf("owner file gone after a failed teardown: %v", err)
	}
	if err := Cleanup(p.Prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, p.Prefix)
}

// TestTeardownStackedNetns: /run/netns bound onto itself after a pair was
// made (as `ip netns add` does when /run/netns is not a mount point) hides
// the namespaces' mounts, and their files can no longer be unlinked
// (EBUSY): Close says so and what to run, naming the testbed's prefix. The
// bind happens in a mount namespace of its own, so the host never sees it.
func TestTeardownStackedNetns(t *testing.T) {
	p := testPair(t, PairConfig{})
	t.Cleanup(func() { _ = Cleanup(p.Prefix) })
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount(netnsDir, netnsDir, "", unix.MS_BIND, ""); err != nil {
			errc <- err
			return
		}
		errc <- p.Close()
	}()
	var err error
	select {
	case err = <-errc:
	case <-time.After(time.Minute):
		t.Fatal("Close hung")
	}
	want := "is hidden under a later mount of " + netnsDir
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "spray testbed down "+p.Prefix) {
		t.Fatalf("Close under a second mount of %s: %v, want an error saying %q and naming spray testbed down %s", netnsDir, err, want, p.Prefix)
	}
	t.Log(err)
	if err := Cleanup(p.Prefix); err != nil {
		t.Fatal(err)
	}
	assertGone(t, p.Prefix)
}
