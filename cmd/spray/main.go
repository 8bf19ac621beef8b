// Command spray runs spray's transport between endpoints and measures it.
//
//	spray perf [flags]      point-to-point goodput, message rate, latency
//
// Run "spray <command> -h" for a command's flags.
package main

import (
	"fmt"
	"os"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage: spray <command> [flags]

commands:
  perf      goodput, messages/s and ping-pong latency between two endpoints

Run "spray <command> -h" for the flags of a command.
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "perf":
		err = runPerf(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "spray: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spray:", err)
		os.Exit(1)
	}
}
