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
	"fmt"
	"os"
	"sort"
)

// command is one subcommand of the CLI.
type command struct {
	name    string
	summary string
	run     func(args []string) error
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
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(os.Stderr, "\nRun \"spray <command> -h\" for the flags of a command.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	switch name {
	case "-h", "--help", "help":
		usage()
		return
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "spray: unknown command %q\n", name)
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "spray:", err)
		os.Exit(1)
	}
}
