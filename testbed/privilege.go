package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrPrivilege is returned (wrapped) when the process lacks a capability
// that building a testbed needs; the message names the missing ones.
var ErrPrivilege = errors.New("testbed: not privileged")

// Capabilities a testbed needs: namespaces, their bind mounts and the
// fabric programs (CAP_SYS_ADMIN, which covers CAP_BPF on every kernel),
// links, addresses, qdiscs and routes (CAP_NET_ADMIN).
var testbedCaps = []Cap{{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}, {unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}}

// Cap is a Linux capability: its number and its name.
type Cap struct {
	Num  int
	Name string
}

// MissingCaps returns the names of the capabilities of caps that the
// calling process does not have in its effective set (/proc/self/status
// CapEff). A process whose set cannot be read is taken to have none.
func MissingCaps(caps ...Cap) []string {
	eff := effectiveCaps()
	var out []string
	for _, c := range caps {
		if eff&(1<<uint(c.Num)) == 0 {
			out = append(out, c.Name)
		}
	}
	return out
}

func effectiveCaps() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// CheckPrivilege returns nil when the process may build a testbed, or an
// error wrapping ErrPrivilege that names what is missing and how to get
// it: "run as root (with sudo if you are not)". NewPair, NewLeafSpine and
// UpLeafSpine call it first, so that a user sees the cause rather than
// the first "operation not permitted" (TestCheckPrivilegeNames).
func CheckPrivilege() error {
	missing := MissingCaps(testbedCaps...)
	if len(missing) == 0 {
		return nil
	}
	need := strings.Join(missing, ", ")
	if os.Geteuid() == 0 {
		return fmt.Errorf("%w: building a testbed (network namespaces, links, eBPF) needs %s, which this root process lacks: in a container, run it with --privileged (or --cap-add SYS_ADMIN --cap-add NET_ADMIN)",
			ErrPrivilege, need)
	}
	return fmt.Errorf("%w: building a testbed (network namespaces, links, eBPF) needs %s, which uid %d lacks: run it as root (with sudo if you are not)",
		ErrPrivilege, need, os.Geteuid())
}
