//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import "github.com/vishvananda/netns"

// Fabric is the loaded pair of test-fabric switch programs. On this platform
// it cannot be loaded: LoadFabric returns ErrNotSupported.
type Fabric struct{}

// LoadFabric returns ErrNotSupported on this platform.
func LoadFabric() (*Fabric, error) { return nil, ErrNotSupported }

// AttachPort returns ErrNotSupported.
func (f *Fabric) AttachPort(int, PortConfig) error { return ErrNotSupported }

// AttachPortAt returns ErrNotSupported.
func (f *Fabric) AttachPortAt(netns.NsHandle, int, PortConfig) error { return ErrNotSupported }

// DetachPort returns ErrNotSupported.
func (f *Fabric) DetachPort(PortID) error { return ErrNotSupported }

// SetFaults returns ErrNotSupported.
func (f *Fabric) SetFaults(PortID, Faults) error { return ErrNotSupported }

// SetECN returns ErrNotSupported.
func (f *Fabric) SetECN(PortID, ECNConfig) error { return ErrNotSupported }

// PortCounters returns ErrNotSupported.
func (f *Fabric) PortCounters(PortID) (PortCounters, error) {
	return PortCounters{}, ErrNotSupported
}

// Ports returns nil.
func (f *Fabric) Ports() []PortID { return nil }

// Close does nothing.
func (f *Fabric) Close() error { return nil }

// MountBPFFS returns ErrNotSupported.
func MountBPFFS(string) error { return ErrNotSupported }

// Pin returns ErrNotSupported.
func (f *Fabric) Pin(string) error { return ErrNotSupported }

// Unpin returns ErrNotSupported.
func (f *Fabric) Unpin() error { return ErrNotSupported }

// PinDir returns "".
func (f *Fabric) PinDir() string { return "" }

// LoadPinnedFabric returns ErrNotSupported.
func LoadPinnedFabric(string) (*Fabric, error) { return nil, ErrNotSupported }

// PortConfig returns ErrNotSupported.
func (f *Fabric) PortConfig(PortID) (PortConfig, error) { return PortConfig{}, ErrNotSupported }

// Objects returns ErrNotSupported.
func (f *Fabric) Objects() (ObjectIDs, error) { return ObjectIDs{}, ErrNotSupported }

// Alive returns ErrNotSupported.
func (ids ObjectIDs) Alive() ([]string, error) { return nil, ErrNotSupported }
