package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errHelp is a command's answer to -h: its usage is printed, and spray
// exits with status 0.
var errHelp = errors.New("help requested")

// usageError is a command line that spray refuses: a flag it does not
// know or cannot parse, a stray argument, a value out of range. main prints
// it on one line with a pointer to the command's -h and exits with status
// 2 (as the flag package does), before anything ran.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// parseFlags parses args with fs without letting the flag package print:
// -h prints fs's usage and returns errHelp; any other error becomes a
// one-line usageError (not the usage, which hides the error in 60 lines).
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return errHelp
	case err != nil:
		return usageError{fs.Name() + ": " + err.Error()}
	}
	return nil
}

// noArgs refuses the positional arguments that parseFlags left, which
// would otherwise be ignored.
func noArgs(cmd string, fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q (flags only)", cmd, fs.Arg(0))
	}
	return nil
}

// check collects the range checks of a command's flags; err is the first
// that failed, as a usageError naming the flag and its allowed range.
type check struct {
	cmd string
	err error
}

func (c *check) fail(flagName string, v any, want string) {
	if c.err == nil {
		c.err = usagef("%s: --%s %v: want %s", c.cmd, flagName, v, want)
	}
}

// atLeast checks an integer flag against its smallest allowed value.
func (c *check) atLeast(flagName string, v, lo int64) {
	if v < lo {
		c.fail(flagName, v, fmt.Sprintf("at least %d", lo))
	}
}

// prob checks a probability flag: [0, 1].
func (c *check) prob(flagName string, v float64) {
	if !(v >= 0 && v <= 1) {
		c.fail(flagName, v, "a probability in [0, 1]")
	}
}

// positiveDur checks a duration flag that must be above zero.
func (c *check) positiveDur(flagName string, v time.Duration) {
	if v <= 0 {
		c.fail(flagName, v, "a duration above 0")
	}
}

// nonNegativeDur checks a duration flag that may be zero.
func (c *check) nonNegativeDur(flagName string, v time.Duration) {
	if v < 0 {
		c.fail(flagName, v, "a duration >= 0")
	}
}

// interrupted holds the signal (SIGINT, SIGTERM) that ended a command's
// signalContext, for main's message and exit status.
var interrupted atomic.Value

// signalContext returns the context of a command's run: SIGINT or SIGTERM
// ends it, and main then reports the signal rather than the command's
// "context canceled" and exits with 128 + its number. Every blocking call
// of a command takes this context (control connections through
// deadlines), so a signal ends the run within a second. A second signal,
// or a run still going forceExitAfter after the first, exits at once
// with 128 + the signal's number (a testbed it built is then left for
// spray testbed down --all).
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		var s os.Signal
		select {
		case s = <-ch:
			interrupted.Store(s)
			cancel(fmt.Errorf("interrupted by %v", s))
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(forceExitAfter)
		select {
		case s = <-ch:
			fmt.Fprintf(os.Stderr, "spray: %v again: exiting now\n", s)
		case <-t.C:
			fmt.Fprintf(os.Stderr, "spray: still stopping %v after %v: exiting now\n", s, forceExitAfter)
		}
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
	return ctx, func() { signal.Stop(ch); cancel(nil) }
}

// forceExitAfter bounds the time from a first SIGINT or SIGTERM to the
// exit: long enough to tear down a testbed of dozens of namespaces.
const forceExitAfter = 20 * time.Second

// maxSize bounds every size flag: a byte count above it is refused as a
// usage error rather than allocated (TestCLIRefusesNonsense).
const maxSize = 1 << 40

// sizeFlag is a byte count with an optional K, M or G suffix (binary), the
// one parser of every flag that takes a size (parseSize).
type sizeFlag int64

func (s *sizeFlag) String() string { return formatSize(int64(*s)) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// sizeListFlag is a comma-separated list of sizes (parseSize): all of
// them in *all, the first in *first.
type sizeListFlag struct {
	first *sizeFlag
	all   *[]int64
}

func (s sizeListFlag) String() string {
	if s.first == nil {
		return ""
	}
	if s.all == nil || len(*s.all) == 0 {
		return s.first.String()
	}
	parts := make([]string, len(*s.all))
	for i, n := range *s.all {
		parts[i] = formatSize(n)
	}
	return strings.Join(parts, ",")
}

func (s sizeListFlag) Set(v string) error {
	var all []int64
	for _, part := range strings.Split(v, ",") {
		n, err := parseSize(part)
		if err != nil {
			return err
		}
		all = append(all, n)
	}
	*s.first, *s.all = sizeFlag(all[0]), all
	return nil
}

// parseSize parses "8", "64K", "64M", "1G" (also lower case, and with a
// trailing B or iB: "64KiB", "1gb"), powers of two, at most maxSize.
func parseSize(v string) (int64, error) {
	s := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(v)), "B"), "I")
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > maxSize/mult {
		return 0, fmt.Errorf("bad size %q (want a number of bytes up to 1T, optionally with K, M or G)", v)
	}
	return n * mult, nil
}

// formatSize writes n as parseSize reads it, with the largest suffix that
// divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// atMost checks an integer flag against its largest allowed value.
func (c *check) atMost(flagName string, v, hi int64) {
	if v > hi {
		c.fail(flagName, formatSize(v), "at most "+formatSize(hi))
	}
}

// atMostInt checks a count flag against its largest allowed value.
func (c *check) atMostInt(flagName string, v, hi int64) {
	if v > hi {
		c.fail(flagName, v, fmt.Sprintf("at most %d", hi))
	}
}

// within checks a float flag: a number in [lo, hi] (NaN refused).
func (c *check) within(flagName string, v, lo, hi float64) {
	if !(v >= lo && v <= hi) {
		c.fail(flagName, v, fmt.Sprintf("a number from %v to %v", lo, hi))
	}
}

// outPath checks a flag naming a file the command writes after its run
// (empty: none): its directory exists and is writable, and it is not a
// directory, so that a run is not spent before the write fails.
func (c *check) outPath(flagName, path string) {
	c.outPathIn(flagName, path, false)
}

// outPathIn is outPath for a file whose directory the command makes when
// it is missing (mkdir): the nearest existing ancestor must then be a
// writable directory.
func (c *check) outPathIn(flagName, path string, mkdir bool) {
	if path == "" || c.err != nil {
		return
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			c.err = usagef("%s: --%s %s: a directory, want a file", c.cmd, flagName, path)
		} else if err := unix.Access(path, unix.W_OK); err != nil {
			c.err = usagef("%s: --%s %s: not writable: %v", c.cmd, flagName, path, err)
		}
		return
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	for mkdir && errors.Is(err, os.ErrNotExist) && dir != filepath.Dir(dir) {
		dir = filepath.Dir(dir)
		fi, err = os.Stat(dir)
	}
	switch {
	case err != nil:
		c.err = usagef("%s: --%s %s: %v", c.cmd, flagName, path, err)
	case !fi.IsDir():
		c.err = usagef("%s: --%s %s: %s is not a directory", c.cmd, flagName, path, dir)
	default:
		if err := unix.Access(dir, unix.W_OK); err != nil {
			c.err = usagef("%s: --%s %s: cannot create a file in %s: %v", c.cmd, flagName, path, dir, err)
		}
	}
}
