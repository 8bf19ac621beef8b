package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Throwaway is a testbed that NewPair or NewLeafSpine made, found by its
// name prefix ("spt<pid%1000>-<n>-") in /run/netns, among the links of
// the calling thread's namespace and in the owner files: what a process
// that was killed (SIGKILL skips every cleanup) or whose teardown failed
// left behind, or one that runs now.
type Throwaway struct {
	// Prefix names everything the testbed made.
	Prefix string
	// Pid is the process that made it (in its own PID namespace), 0 when
	// its owner file is gone.
	Pid int
	// Running is set while that process holds it (its owner file's lock).
	Running bool
	// Login is the login user of the process that made it (its audit
	// login UID, which sudo keeps), -1 when unknown; Mine is set when
	// that is the calling process's.
	Login int
	Mine  bool
	// Objects are its namespaces and links: "netns NAME", "link NAME".
	Objects []string
}

// throwawayPrefix matches the prefix of a throw-away testbed at the start
// of a namespace, link or owner file name.
var throwawayPrefix = regexp.MustCompile(`^spt[0-9]{1,3}-[0-9]{1,5}-`)

// Throwaways lists the throw-away testbeds there are, sorted by prefix.
// spray testbed list shows them and spray testbed down --all removes those
// whose process is gone (TestThrowawaysAfterKill).
func Throwaways() ([]Throwaway, error) {
	byPrefix := map[string]*Throwaway{}
	get := func(name string) *Throwaway {
		p := throwawayPrefix.FindString(name)
		if p == "" {
			return nil
		}
		if byPrefix[p] == nil {
			byPrefix[p] = &Throwaway{Prefix: p, Login: -1}
		}
		return byPrefix[p]
	}
	owners, err := os.ReadDir(ownerDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range owners {
		if t := get(e.Name()); t != nil && t.Prefix == e.Name() {
			if o, inUse, ok := readOwner(t.Prefix); ok {
				t.Pid, t.Running, t.Login = o.Pid, inUse, o.Login
			}
		}
	}
	left, err := leftoversMatching(func(n string) bool { return throwawayPrefix.MatchString(n) })
	if err != nil {
		return nil, err
	}
	for _, o := range left {
		_, name, _ := strings.Cut(o, " ")
		if t := get(name); t != nil {
			t.Objects = append(t.Objects, o)
		}
	}
	var out []Throwaway
	me := CallerLogin()
	for _, t := range byPrefix {
		t.Mine = t.Login == me
		if len(t.Objects) == 0 && t.Running {
			continue // still building, or its owner file outlived nothing
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix < out[j].Prefix })
	return out, nil
}

// IsThrowawayPrefix tells whether s is the prefix of a throw-away testbed,
// as Throwaway.Prefix holds it.
func IsThrowawayPrefix(s string) bool { return throwawayPrefix.FindString(s) == s }

// RemoveThrowaway removes the throw-away testbed prefix (its namespaces,
// links and owner file), and refuses one whose process still holds it:
// that process removes it when it ends.
func RemoveThrowaway(prefix string) error {
	if !IsThrowawayPrefix(prefix) {
		return fmt.Errorf("%w: %q is not a throw-away testbed's prefix (sptN-N-)", ErrConfig, prefix)
	}
	if err := CheckPrivilege(); err != nil {
		return err
	}
	owner := filepath.Join(ownerDir, prefix)
	_, claim, free := claimAbandoned(prefix)
	if !free {
		if o, inUse, ok := readOwner(prefix); ok && inUse {
			return fmt.Errorf("testbed %s: process %d that made it still holds it (it removes the testbed when it ends; stop it first)", prefix, o.Pid)
		}
	}
	defer claim.release(true) // the file goes below, once all else has
	if err := Cleanup(prefix); err != nil {
		return err
	}
	if left, err := Leftovers(prefix); err != nil {
		return err
	} else if len(left) > 0 {
		return fmt.Errorf("testbed %s: still there after removal: %s", prefix, strings.Join(left, ", "))
	}
	if err := os.Remove(owner); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
