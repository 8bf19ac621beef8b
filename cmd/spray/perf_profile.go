package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile of the process to path (perf's
// and sim's --cpuprofile) until the returned function is called; read it with
// `go tool pprof spray PATH`.
func startCPUProfile(cmd, path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: --cpuprofile: %w", cmd, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: --cpuprofile: %w", cmd, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
