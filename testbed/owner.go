package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ownerDir holds one owner file per throw-away testbed, named by its
// prefix. The process that makes the testbed holds an exclusive flock on
// the file for the testbed's life; the kernel releases it when that
// process ends, however it ends, in whatever PID namespace it ran. A free
// lock is the proof that a testbed is abandoned: a PID is not, since it
// means another process in another PID namespace and is reused
// (TestCleanupStalePIDNamespaces).
const ownerDir = "/run/spray-testbed"

// ownerTag starts the contents of a locked owner file; a file without it
// (an older spray's, holding a bare PID) is never taken for abandoned.
const ownerTag = "spray-testbed-owner"

// ownerLock is this process's claim on a testbed's prefix.
type ownerLock struct {
	f    *os.File
	path string
}

// lockOwner claims prefix: it writes and locks a temporary file, then
// links it to the owner file's name, so that the name never shows an
// unlocked or empty file. It returns an error wrapping os.ErrExist when
// another owner file holds the name, live or abandoned.
func lockOwner(prefix string) (*ownerLock, error) {
	if err := os.MkdirAll(ownerDir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: owner directory: %w", err)
	}
	tmp, err := os.CreateTemp(ownerDir, ".new-")
	if err != nil {
		return nil, fmt.Errorf("testbed: owner file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("testbed: lock owner file: %w", err)
	}
	if _, err := tmp.WriteString(ownerLine()); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("testbed: owner file: %w", err)
	}
	path := filepath.Join(ownerDir, prefix)
	if err := os.Link(tmp.Name(), path); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("testbed: owner file %s: %w", path, err)
	}
	return &ownerLock{f: tmp, path: path}, nil
}

// ownerLine describes this process: its PID in its own PID namespace, that
// namespace, its user and login user.
func ownerLine() string {
	pidns, _ := os.Readlink("/proc/self/ns/pid")
	return fmt.Sprintf("%s pid=%d pidns=%s uid=%d login=%d\n", ownerTag, os.Getpid(), pidns, os.Getuid(), CallerLogin())
}

// release removes the owner file and drops the lock; keep leaves the file
// (unlocked: abandoned) for what could not be removed, for CleanupStale or
// spray testbed down to find.
func (o *ownerLock) release(keep bool) {
	if o == nil {
		return
	}
	if !keep {
		_ = os.Remove(o.path)
	}
	_ = o.f.Close()
}

// owner is what an owner file says.
type owner struct {
	Pid, Login int
	// Tagged is set for a file in this version's format, whose lock
	// tells whether its testbed is in use.
	Tagged bool
}

func parseOwner(b []byte) owner {
	s := strings.TrimSpace(string(b))
	rest, tagged := strings.CutPrefix(s, ownerTag+" ")
	if !tagged {
		pid, _ := strconv.Atoi(s) // an older spray's: the PID alone
		return owner{Pid: pid, Login: -1}
	}
	o := owner{Tagged: true, Login: -1}
	for _, kv := range strings.Fields(rest) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "pid":
			o.Pid, _ = strconv.Atoi(v)
		case "login":
			o.Login, _ = strconv.Atoi(v)
		}
	}
	return o
}

// claimAbandoned takes the lock of prefix's owner file when its owner is
// gone: the file is in this version's format, its lock is free, and the
// name still refers to the file locked. It returns the owner, the claim
// (release it, removing the file once the testbed is gone) and true; or
// false when the testbed is in use, has no owner file, or cannot be
// proven abandoned.
func claimAbandoned(prefix string) (owner, *ownerLock, bool) {
	path := filepath.Join(ownerDir, prefix)
	f, err := os.Open(path)
	if err != nil {
		return owner{}, nil, false
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return owner{}, nil, false
	}
	var held, named unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &named) != nil || held.Ino != named.Ino || held.Dev != named.Dev {
		f.Close() // released and removed meanwhile; a new owner may hold the name
		return owner{}, nil, false
	}
	b := make([]byte, 512)
	n, _ := f.ReadAt(b, 0)
	o := parseOwner(b[:n])
	if !o.Tagged {
		f.Close()
		return o, nil, false
	}
	return o, &ownerLock{f: f, path: path}, true
}

// readOwner reads prefix's owner file, and tells whether its testbed is in
// use: a tagged file's lock is held, or an older file's PID runs.
func readOwner(prefix string) (o owner, inUse, ok bool) {
	path := filepath.Join(ownerDir, prefix)
	b, err := os.ReadFile(path)
	if err != nil {
		return owner{}, false, false
	}
	o = parseOwner(b)
	if !o.Tagged {
		return o, o.Pid > 0 && unix.Kill(o.Pid, 0) != unix.ESRCH, true
	}
	if _, c, free := claimAbandoned(prefix); free {
		c.release(true)
		return o, false, true
	}
	return o, true, true
}

// CallerLogin returns the login user of the calling process: the audit
// login UID, which sudo keeps; else SUDO_UID; else the real UID. It tells
// whose a testbed is, where every testbed is made as root.
func CallerLogin() int {
	if b, err := os.ReadFile("/proc/self/loginuid"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil && v != 1<<32-1 {
			return int(v)
		}
	}
	if v, err := strconv.Atoi(os.Getenv("SUDO_UID")); err == nil && v >= 0 {
		return v
	}
	return os.Getuid()
}
