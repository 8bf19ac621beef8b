package transport

import (
	"syscall"
	"unsafe"
)

const canPin = true

// pinThread sets the calling OS thread's CPU affinity to cpu alone.
func pinThread(cpu int) error {
	var set [1024 / 64]uint64
	if cpu < 0 || cpu >= len(set)*64 {
		return syscall.EINVAL
	}
	set[cpu/64] |= 1 << (cpu % 64)
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(set), uintptr(unsafe.Pointer(&set)))
	if errno != 0 {
		return errno
	}
	return nil
}
