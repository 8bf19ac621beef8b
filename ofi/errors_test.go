//go:build cgo

package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sprayfabric/spray/transport"
)

// TestErrorCodes: a wrapped error maps to its sentinel's code, an error
// of no table row to FI_EIO's, nil to 0, and every code is positive.
func TestErrorCodes(t *testing.T) {
	if code(nil) != 0 {
		t.Errorf("code(nil) = %d", code(nil))
	}
	for _, e := range errTable {
		if e.code <= 0 {
			t.Errorf("%v maps to %d", e.err, e.code)
		}
		if got := code(fmt.Errorf("wrapped: %w", e.err)); got != code(e.err) {
			t.Errorf("wrapped %v maps to %d, the sentinel to %d", e.err, got, code(e.err))
		}
	}
	if code(errors.New("other")) != code(errors.New("another")) || code(errors.New("other")) == code(transport.ErrQueueFull) {
		t.Errorf("an unknown error maps to %d", code(errors.New("other")))
	}
}
