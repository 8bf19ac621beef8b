package main

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// rowCost measures what one run costs the process: call it before the
// run and the function it returns after, for the CPU time (user and
// system, every thread) and the peak resident set between the two. The
// peak is the kernel's high-water mark, reset to the current RSS (after
// a collection that returns the heap to the kernel) before the run, so
// that an earlier, larger run does not count; where the reset is not
// allowed it is the process's peak so far (TestRowCost).
func rowCost() func() (cpu time.Duration, rss int64) {
	runtime.GC()
	debug.FreeOSMemory()
	// "5" resets the peak resident set size to the current one (Linux 4.0,
	// proc(5)).
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	before := cpuTime()
	return func() (time.Duration, int64) {
		cpu := cpuTime() - before
		if hwm := highWater(); hwm > 0 {
			return cpu, hwm
		}
		var ru unix.Rusage
		if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
			return cpu, 0
		}
		return cpu, ru.Maxrss * 1024
	}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// highWater returns VmHWM from /proc/self/status in bytes, or 0.
func highWater() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		v, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}
