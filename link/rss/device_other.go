//go:build !linux

package rss

import "fmt"

// Device reads a device's RSS key and table; Linux only.
func Device(ifname string) (Table, error) {
	return Table{}, fmt.Errorf("%w: reading %s's RSS configuration needs Linux", ErrNoRSS, ifname)
}

// DeviceFD reads a device's RSS key and table through a socket; Linux only.
func DeviceFD(fd int, ifname string) (Table, error) { return Device(ifname) }
