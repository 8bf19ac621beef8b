package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
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

// nonNegative checks a float flag (NaN and infinities refused).
func (c *check) nonNegative(flagName string, v float64) {
	if !(v >= 0) || math.IsInf(v, 0) {
		c.fail(flagName, v, "a finite number >= 0")
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
// deadlines), so a signal ends the run within a second.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			interrupted.Store(s)
			cancel(fmt.Errorf("interrupted by %v", s))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel(nil) }
}
