package udp

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestUnprivileged runs the loopback tests again as nobody (uid 65534), to
// show that the link needs no privilege. It runs only as root, which can
// switch users; the child runs the tests as a normal user would.
func TestUnprivileged(t *testing.T) {
	testutil.SkipIfNotRoot(t) // to switch users; unprivileged, the other tests cover it
	testutil.SkipIfShort(t, "runs the package's tests again")
	// The test binary lives in a directory only root may enter: copy it.
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	bin := filepath.Join(dir, "udp.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command(bin, "-test.run=^(TestIPv6|TestTOS|TestBadInput|TestKernelDrops|TestWaitWakeClose|TestNoAllocs)$", "-test.count=1", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GOCOVERDIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
	for _, name := range []string{"TestIPv6", "TestTOS", "TestBadInput", "TestKernelDrops", "TestNoAllocs"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Errorf("%s did not pass as uid 65534:\n%s", name, out)
		}
	}
}
