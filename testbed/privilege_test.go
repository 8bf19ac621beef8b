package testbed

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
)

// privChildEnv makes the test binary run privilegeChild instead of the
// tests, in a process started without capabilities.
const privChildEnv = "SPRAY_TESTBED_PRIV_CHILD"

// privilegeChild tries to build a pair and prints the error.
func privilegeChild() {
	_, err := NewPair(context.Background(), PairConfig{})
	if err == nil {
		os.Stdout.WriteString("built a pair without capabilities\n")
		os.Exit(1)
	}
	os.Stdout.WriteString(err.Error() + "\n")
	if !errors.Is(err, ErrPrivilege) {
		os.Exit(1)
	}
	os.Exit(0)
}

func init() {
	if os.Getenv(privChildEnv) != "" {
		privilegeChild()
	}
}

// TestCheckPrivilegeNames: building a testbed without the capabilities it
// needs fails before anything is made with ErrPrivilege, naming
// CAP_SYS_ADMIN and CAP_NET_ADMIN and saying how to get them, not with the
// kernel's bare "operation not permitted". As root, the test drops every
// capability of a child process (setpriv) and asks it.
func TestCheckPrivilegeNames(t *testing.T) {
	var msg string
	if os.Geteuid() != 0 {
		_, err := NewPair(context.Background(), PairConfig{})
		if !errors.Is(err, ErrPrivilege) {
			t.Fatalf("NewPair without root: %v, want ErrPrivilege", err)
		}
		msg = err.Error()
	} else {
		testutil.SkipIfMissingTool(t, "setpriv", "util-linux")
		cmd := exec.Command("setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--", os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), privChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child without capabilities: %v\n%s", err, out)
		}
		msg = string(out)
	}
	t.Log(strings.TrimSpace(msg))
	how := "as root (with sudo if you are not)"
	if os.Geteuid() == 0 {
		how = "--cap-add SYS_ADMIN --cap-add NET_ADMIN" // root, but not in its capabilities
	}
	for _, want := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", how} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if os.Geteuid() == 0 && CheckPrivilege() != nil {
		t.Errorf("root with every capability: %v", CheckPrivilege())
	}
}
