package spray

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLoadPSKBounded: LoadPSK refuses, with ErrOptions and at once, what
// is not a small regular file: a device that never ends (/dev/zero), a
// FIFO without a writer (opening it would block), a directory and a file
// over its 4 KiB bound.
func TestLoadPSKBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 4<<10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/dev/zero", fifo, dir, big} {
		if _, err := LoadPSK(path); !errors.Is(err, ErrOptions) {
			t.Errorf("LoadPSK(%s): %v, want ErrOptions", path, err)
		} else {
			t.Logf("%s: %v", path, err)
		}
	}
}
