//go:build !linux

package transport

import "errors"

const canPin = false

func pinThread(int) error { return errors.New("pinning threads is supported on Linux only") }
