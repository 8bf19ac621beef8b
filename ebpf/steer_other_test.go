//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"net/netip"
	"testing"
)

func TestNotSupported(t *testing.T) {
	if _, err := LoadSteering(SteerConfig{}); !errors.Is(err, ErrNotSupported) {
		t.Errorf("LoadSteering: %v, want ErrNotSupported", err)
	}
	if _, err := LoadSteering(SteerConfig{Local: []netip.Addr{{}}}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("LoadSteering with a bad config: %v, want ErrInvalidConfig", err)
	}
}

func TestFabricNotSupported(t *testing.T) {
	if _, err := LoadFabric(); !errors.Is(err, ErrNotSupported) {
		t.Errorf("LoadFabric: %v, want ErrNotSupported", err)
	}
}
