//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU returns the user plus system CPU time this process has used
// (getrusage RUSAGE_SELF): every goroutine's, and the kernel's work done in
// its system calls, which on a veth testbed includes the peer's receive
// path.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
