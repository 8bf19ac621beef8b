package testutil

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
)

// A test skips only when what it needs is missing: a privilege, a kernel
// feature, a tool, a platform, or it was asked to (-short, SPRAY_SKIP_PERF,
// a subprocess run). Any other condition fails it, so that a regression
// never turns into a skip. Tests call the helpers below and never
// t.Skip directly; TestSkipPolicy walks every test file and holds them to it.

// EnvSkipPerf, set to 1, skips the tests that judge a speed on a shared
// testbed (SkipIfPerfOptOut): on a loaded machine they cannot.
const EnvSkipPerf = "SPRAY_SKIP_PERF"

// ErrToolMissing is for an error saying that a tool, or a part of it (a
// module, a build option), is not installed: SkipIfToolMissing skips on it.
var ErrToolMissing = errors.New("tool missing")

// SkipIfNotRoot skips the test with a clear reason when not run as root.
func SkipIfNotRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, eBPF, AF_XDP): run the tests as root")
	}
}

// SkipIfShort skips the test in -short mode; why says what it would cost.
func SkipIfShort(tb testing.TB, why string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: " + why)
	}
}

// SkipIfMissingTool returns the path of the program name, or skips the
// test when it is not installed; pkg is the Debian package that has it.
func SkipIfMissingTool(tb testing.TB, name, pkg string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Skipf("%s not installed (Debian package %s): %v", name, pkg, err)
	}
	return path
}

// SkipIfToolMissing skips the test when err says that a tool, or a part of
// it, is not installed: exec.ErrNotFound or one of missing (a package's
// sentinel, such as wirecheck.ErrToolMissing). Any other non-nil err fails
// the test.
func SkipIfToolMissing(tb testing.TB, err error, missing ...error) {
	tb.Helper()
	if err == nil {
		return
	}
	for _, m := range append(missing, exec.ErrNotFound, ErrToolMissing) {
		if errors.Is(err, m) {
			tb.Skipf("tool missing: %v", err)
		}
	}
	tb.Fatal(err)
}

// SkipIfNotSupported skips the test when err says that the kernel or the
// platform lacks a feature: errors.ErrUnsupported, cilium/ebpf's
// ErrNotSupported, EOPNOTSUPP, EAFNOSUPPORT, EPROTONOSUPPORT, or one of
// also (a package's own sentinel, such as xdp.ErrNotSupported). Any other
// non-nil err fails the test; a nil err does nothing.
func SkipIfNotSupported(tb testing.TB, err error, also ...error) {
	tb.Helper()
	if err == nil {
		return
	}
	if notSupported(err, also...) {
		tb.Skipf("not supported here: %v", err)
	}
	tb.Fatal(err)
}

func notSupported(err error, also ...error) bool {
	for _, s := range append(also, errors.ErrUnsupported, ebpf.ErrNotSupported,
		syscall.EOPNOTSUPP, syscall.EAFNOSUPPORT, syscall.EPROTONOSUPPORT) {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// SkipUnlessLinux skips the test on other systems; what names the Linux
// feature it needs.
func SkipUnlessLinux(tb testing.TB, what string) {
	tb.Helper()
	if runtime.GOOS != "linux" {
		tb.Skipf("%s is Linux only", what)
	}
}

// SkipIfInstrumented skips the test under the race detector or coverage,
// which allocate and slow down what it counts (allocations).
func SkipIfInstrumented(tb testing.TB) {
	tb.Helper()
	if raceEnabled || testing.CoverMode() != "" {
		tb.Skip("allocation counts differ under coverage and the race detector")
	}
}

// SkipIfPerfOptOut skips a test that judges a speed measured on a real
// (shared) fabric when SPRAY_SKIP_PERF=1: on a machine too loaded to judge,
// the user opts out explicitly; without it the test fails, never skips.
func SkipIfPerfOptOut(tb testing.TB) {
	tb.Helper()
	if v := os.Getenv(EnvSkipPerf); v != "" && v != "0" {
		tb.Skipf("%s=%s: speed checks on the testbed are opted out", EnvSkipPerf, v)
	}
}

// SkipUnlessSubprocess skips a test that only runs as the subprocess of
// another test, which sets env.
func SkipUnlessSubprocess(tb testing.TB, env string) {
	tb.Helper()
	if os.Getenv(env) == "" {
		tb.Skipf("runs only as a subprocess of another test (%s set)", env)
	}
}

// SkipIfSubprocess skips a test inside the subprocess of another test
// (env set), which runs only that one.
func SkipIfSubprocess(tb testing.TB, env string) {
	tb.Helper()
	if os.Getenv(env) != "" {
		tb.Skipf("inside a subprocess (%s set)", env)
	}
}

// SkipIfMissingFile skips the test when path (a header, a library) is not
// installed; pkg is the Debian package that has it.
func SkipIfMissingFile(tb testing.TB, path, pkg string) {
	tb.Helper()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		tb.Skipf("%s not installed (Debian package %s)", path, pkg)
	} else if err != nil {
		tb.Fatal(err)
	}
}

// SkipIfNoCgo skips the test when the go command builds without cgo
// (CGO_ENABLED=0 or no C compiler); what names what needs it.
func SkipIfNoCgo(tb testing.TB, what string) {
	tb.Helper()
	out, err := exec.Command("go", "env", "CGO_ENABLED").Output()
	if err != nil {
		tb.Fatalf("go env CGO_ENABLED: %v", err)
	}
	if string(bytes.TrimSpace(out)) != "1" {
		tb.Skipf("cgo is off (CGO_ENABLED=0): %s is a cgo build", what)
	}
}
