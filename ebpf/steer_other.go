//go:build !linux || !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import "github.com/cilium/ebpf"

// Steering is the loaded host steering XDP program. On this platform it
// cannot be loaded: LoadSteering returns ErrNotSupported.
type Steering struct{}

// LoadSteering returns ErrNotSupported on this platform.
func LoadSteering(cfg SteerConfig) (*Steering, error) {
	if _, err := cfg.plan(); err != nil {
		return nil, err
	}
	return nil, ErrNotSupported
}

// Update returns ErrNotSupported.
func (s *Steering) Update(SteerConfig) error { return ErrNotSupported }

// Attach returns ErrNotSupported.
func (s *Steering) Attach(int, AttachMode) error { return ErrNotSupported }

// Attached reports false.
func (s *Steering) Attached(int) (AttachMode, bool) { return Auto, false }

// Detach returns ErrNotSupported.
func (s *Steering) Detach(int) error { return ErrNotSupported }

// Register returns ErrNotSupported.
func (s *Steering) Register(int, int) error { return ErrNotSupported }

// Unregister returns ErrNotSupported.
func (s *Steering) Unregister(int) error { return ErrNotSupported }

// Counters returns ErrNotSupported.
func (s *Steering) Counters() (SteerCounters, error) { return SteerCounters{}, ErrNotSupported }

// XSKMap returns nil.
func (s *Steering) XSKMap() *ebpf.Map { return nil }

// Program returns nil.
func (s *Steering) Program() *ebpf.Program { return nil }

// Close does nothing.
func (s *Steering) Close() error { return nil }
