// Package testutil holds helpers for spray's tests: seeded randomness that is
// fixed by default, logged and replayable; polls with a deadline; and the
// only ways a test may skip (skip.go).
//
// Seeds come from the environment:
//
//   - by default each test's seed is derived from its name, so every run of
//     the suite draws the same numbers and a failure repeats;
//   - SPRAY_SEED=N gives every test the seed N (to replay a failure, run the
//     one failing test with the seed it logged);
//   - SPRAY_RANDOM_SEEDS=1 draws a fresh random seed per test, to search for
//     seeds that break a test (scripts/soak-seeds runs this in a loop).
//
// A test that fails logs its seed and the command that replays it.
package testutil

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables read by Seed.
const (
	// EnvSeed replays one seed: every test that calls Seed gets its value.
	EnvSeed = "SPRAY_SEED"
	// EnvRandomSeeds, set to 1, gives each test a fresh random seed.
	EnvRandomSeeds = "SPRAY_RANDOM_SEEDS"
)

var (
	seedsMu   sync.Mutex
	seeds     = map[testing.TB]uint64{}
	realClock = map[testing.TB]bool{}
)

// RealClock marks a test that runs on the real clock (a testbed, kernel
// sockets, the scheduler): its seed still picks what it draws, but the
// machine's timing decides the rest, so on failure it logs no replay
// line, which would promise what no seed can give.
func RealClock(tb testing.TB) {
	seedsMu.Lock()
	realClock[tb] = true
	seedsMu.Unlock()
	tb.Cleanup(func() {
		// Seed's cleanup reads and drops the mark when it runs after
		// this one (Seed called first); drop it here otherwise.
		seedsMu.Lock()
		if _, seeded := seeds[tb]; !seeded {
			delete(realClock, tb)
		}
		seedsMu.Unlock()
	})
}

// Seed returns the seed for a randomized test. Every call within one test
// returns the same value, so that a replay with SPRAY_SEED reproduces the
// whole test. The seed is:
//
//   - SPRAY_SEED when set;
//   - otherwise a random one when SPRAY_RANDOM_SEEDS=1;
//   - otherwise fixed, derived from the test's name.
//
// It logs the seed once per test and, should the test fail, the command
// that replays it.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	seedsMu.Lock()
	v, ok := seeds[tb]
	seedsMu.Unlock()
	if ok {
		return v
	}
	v, how, err := pick(tb.Name())
	if err != nil {
		tb.Fatal(err)
	}
	seedsMu.Lock()
	seeds[tb] = v
	seedsMu.Unlock()
	tb.Logf("seed %d (%s)", v, how)
	tb.Cleanup(func() {
		seedsMu.Lock()
		delete(seeds, tb)
		real := realClock[tb]
		delete(realClock, tb)
		seedsMu.Unlock()
		switch {
		case !tb.Failed():
		case real:
			tb.Logf("seed %d; no replay line: the test runs on the real clock", v)
		default:
			tb.Logf("replay: %s=%d go test -count=1 -run '%s' %s", EnvSeed, v, RunPattern(tb.Name()), packageDir())
		}
	})
	return v
}

// pick chooses the seed for the test named name, and says where it came from.
func pick(name string) (uint64, string, error) {
	if s := os.Getenv(EnvSeed); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			return 0, "", fmt.Errorf("%s=%q: %v", EnvSeed, s, err)
		}
		return v, "from " + EnvSeed, nil
	}
	if r := os.Getenv(EnvRandomSeeds); r != "" && r != "0" {
		var b [8]byte
		if _, err := crand.Read(b[:]); err != nil {
			return 0, "", fmt.Errorf("drawing a random seed: %v", err)
		}
		v := binary.LittleEndian.Uint64(b[:])
		return v, fmt.Sprintf("random: replay with %s=%d", EnvSeed, v), nil
	}
	return NameSeed(name), "fixed by the test's name", nil
}

// NameSeed is the default seed of the test named name: FNV-1a of the name.
func NameSeed(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// RunPattern returns a -run pattern that selects exactly the test (or
// subtest) named name.
func RunPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// packageDir returns the test's package directory relative to the module
// root ("./transport"), where go test runs the test binary; "." when the
// module root cannot be found.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "."
		}
		dir = up
	}
}

// Rand returns a PCG source seeded by Seed.
func Rand(tb testing.TB) *rand.Rand {
	tb.Helper()
	s := Seed(tb)
	return rand.New(rand.NewPCG(s, s^0x9E3779B97F4A7C15))
}

// LoopbackNet returns b and c of a 127.b.c.0/24 loopback network for a test
// to bind in, drawn from r and moved by the process ID: the seed alone gives
// a test the same network in every run, so two test processes at once (two
// suites on one machine) would bind the same addresses and ports.
func LoopbackNet(r *rand.Rand) (b, c byte) {
	pid := os.Getpid()
	return byte(1 + (r.IntN(250)+pid)%250), byte(1 + (r.IntN(250)+pid/250)%250)
}

// LoopbackPort returns a port in [lo, lo+n) for a test to bind on an
// address every process shares (::1), drawn from r and moved by the
// process ID, as LoopbackNet moves networks: two runs at once bind apart.
func LoopbackPort(r *rand.Rand, lo, n int) uint16 {
	return uint16(lo + (r.IntN(n)+os.Getpid())%n)
}

// Poll calls cond every few milliseconds until it returns true or d has
// passed, and returns its last result. Tests wait on the condition itself
// (a count reached, a frame arrived), never on a fixed sleep: a sleep that
// is too short on a loaded machine fails a correct test, and one that is
// long enough passes a late frame. Guarded by TestPoll.
func Poll(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return cond()
		}
		time.Sleep(wait)
	}
}
