// Command spray runs spray's transport between endpoints and measures it.
//
//	spray perf [flags]               point-to-point goodput, message rate, latency
//	spray bench <collective> [flags] nccl-tests-style collective benchmarks (and incast)
//	spray compare [flags]            roce, spray and tcp on one testbed, one run
//	spray testbed up|down|status|fault  build, inspect and break a fabric by hand
//
// Run "spray <command> -h" for a command's flags. Each subcommand lives in its
// own file and registers itself with [register]; the logic it runs lives in
// library packages (bench, testbed, collective), the CLI only parses flags and
// prints.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"syscall"

	"github.com/sprayfabric/spray/testbed"
)

// command is one subcommand of the CLI.
type command struct {
	name    string
	summary string
	run     func(args []string) error
	// hidden leaves it out of the command list (spray soak, for scripts).
	hidden bool
}

var commands = map[string]command{}

// register adds a subcommand; called from init functions.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("spray: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func usage() {
	fmt.Fprint(os.Stderr, "usage: spray <command> [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(os.Stderr, "\nRun \"spray <command> -h\" for the flags of a command.\n")
}

func main() {
	os.Exit(runMain(os.Args[1:]))
}

// runMain is main without the exit: the commands handle SIGINT and
// SIGTERM (signalContext), each ends its run and tears down what it
// built, and run reports the signal, so package testbed's own handler
// (close every testbed, then die of the signal) stays off.
func runMain(args []string) int {
	testbed.LeaveSignals()
	code := run(args, os.Stderr)
	if err := testbed.CloseAll(); err != nil {
		fmt.Fprintln(os.Stderr, "spray:", err)
	}
	return code
}

// run runs the command line args (without the program's name) and returns
// the exit status: 0 on success and for -h, 2 for a command line spray
// refuses (one line, ending with a pointer to the command's -h, before
// anything ran), 128 + the signal when SIGINT or SIGTERM ended it, 1 when
// the command failed.
func run(args []string, stderr io.Writer) int {
	if len(args) < 1 {
		usage()
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		usage()
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "spray: unknown command %q (run 'spray -h' for the commands)\n", name)
		return 2
	}
	err := c.run(args[1:])
	// A signal ends the run however the command returned: a server that
	// stops cleanly on it still reports it (TestSignalEndsEveryCommand).
	if s, ok := interrupted.Load().(syscall.Signal); ok {
		fmt.Fprintf(stderr, "spray %s: interrupted by %v\n", name, s)
		return 128 + int(s)
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "spray %s (run 'spray %s -h' for its usage)\n", ue.msg, name)
		return 2
	}
	fmt.Fprintln(stderr, "spray:", err)
	return 1
}
