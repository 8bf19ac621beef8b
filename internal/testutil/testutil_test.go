package testutil

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSeedFixedByName(t *testing.T) {
	t.Setenv(EnvSeed, "")
	t.Setenv(EnvRandomSeeds, "")
	a := Seed(t)
	if b := Seed(t); b != a {
		t.Fatalf("second call in one test returned %d, first %d", b, a)
	}
	if want := NameSeed(t.Name()); a != want {
		t.Fatalf("default seed %d, want %d (FNV-1a of %q)", a, want, t.Name())
	}
	var sub uint64
	t.Run("sub", func(t *testing.T) { sub = Seed(t) })
	if sub == a || sub != NameSeed(t.Name()+"/sub") {
		t.Fatalf("subtest seed %d, parent %d: want the subtest's own fixed seed", sub, a)
	}
	r1, r2 := Rand(t), Rand(t)
	if r1.Uint64() != r2.Uint64() {
		t.Fatal("two Rand calls in one test draw different streams")
	}
}

func TestSeedFromEnv(t *testing.T) {
	t.Setenv(EnvSeed, "0x2a")
	t.Setenv(EnvRandomSeeds, "1")
	t.Run("replay", func(t *testing.T) {
		if s := Seed(t); s != 42 {
			t.Fatalf("SPRAY_SEED=0x2a gave %d (it must win over SPRAY_RANDOM_SEEDS)", s)
		}
	})
	if _, _, err := pick("x"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvSeed, "forty-two")
	if _, _, err := pick("x"); err == nil {
		t.Fatal("SPRAY_SEED=forty-two accepted")
	}
}

func TestSeedRandom(t *testing.T) {
	t.Setenv(EnvSeed, "")
	t.Setenv(EnvRandomSeeds, "1")
	seen := map[uint64]bool{}
	for range 8 {
		t.Run("draw", func(t *testing.T) { seen[Seed(t)] = true })
	}
	if len(seen) < 7 {
		t.Fatalf("8 random seeds gave %d distinct values", len(seen))
	}
	t.Setenv(EnvRandomSeeds, "0")
	if v, _, _ := pick("x"); v != NameSeed("x") {
		t.Fatal("SPRAY_RANDOM_SEEDS=0 did not give the fixed seed")
	}
}

func TestRunPattern(t *testing.T) {
	re := regexp.MustCompile(RunPattern("TestA+B"))
	if !re.MatchString("TestA+B") || re.MatchString("TestAAB") || re.MatchString("TestA+BC") {
		t.Fatalf("pattern %q does not select exactly TestA+B", re)
	}
	if got, want := RunPattern("TestX/size=1k"), "^TestX$/^size=1k$"; got != want {
		t.Fatalf("RunPattern %q, want %q", got, want)
	}
	if got := packageDir(); got != "./internal/testutil" {
		t.Fatalf("packageDir %q, want ./internal/testutil", got)
	}
}

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(10*time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll returned before its condition held, or polled on (%d calls)", n)
	}
	if Poll(5*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll of a condition that never holds returned true")
	}
}

// TestReplayLine: a failing seeded test logs its replay command, one on
// the real clock does not (RealClock before or after Seed).
func TestReplayLine(t *testing.T) {
	for _, c := range []struct {
		name       string
		real, last bool
		want       string
	}{
		{"simulated", false, false, "replay: "},
		{"real-before", true, false, "no replay line"},
		{"real-after", true, true, "no replay line"},
	} {
		var log []string
		rec := &recorder{TB: t, logs: &log}
		func() {
			defer rec.runCleanups()
			if c.real && !c.last {
				RealClock(rec)
			}
			Seed(rec)
			if c.real && c.last {
				RealClock(rec)
			}
			rec.failed = true
		}()
		got := strings.Join(log, "\n")
		if !strings.Contains(got, c.want) || (c.real && strings.Contains(got, "replay: ")) {
			t.Errorf("%s: logged %q, want %q", c.name, got, c.want)
		}
	}
}

// recorder is a testing.TB that keeps its logs and cleanups, and fails
// when told.
type recorder struct {
	testing.TB
	logs     *[]string
	cleanups []func()
	failed   bool
}

func (r *recorder) Helper()                 {}
func (r *recorder) Name() string            { return "TestRecorded" }
func (r *recorder) Failed() bool            { return r.failed }
func (r *recorder) Cleanup(f func())        { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Logf(f string, a ...any) { *r.logs = append(*r.logs, fmt.Sprintf(f, a...)) }
func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}
