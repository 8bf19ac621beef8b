package testbed

import (
	"context"
	"fmt"

	"github.com/sprayfabric/spray/ebpf"
)

// Switch numbers written into INT hop records: leaves count from 0,
// spines from SpineIDBase.
const SpineIDBase = 100

// PortID returns the fabric programs' name for port p of switch sw: the
// switch number (leaf l is l, spine s is SpineIDBase+s) and the port's
// index in Switch.Ports.
func (f *Fabric) PortID(sw *Switch, p int) ebpf.PortID {
	for i, l := range f.Leaves {
		if l == sw {
			return ebpf.PortID{Switch: uint16(i), Port: uint16(p)}
		}
	}
	for i, s := range f.Spines {
		if s == sw {
			return ebpf.PortID{Switch: uint16(SpineIDBase + i), Port: uint16(p)}
		}
	}
	return ebpf.PortID{Switch: 0xffff, Port: uint16(p)}
}

// AttachPrograms loads spray's fabric programs (INT stamping, ECN marking
// on queue delay, fault injection, per-port counters; package ebpf) and
// attaches them to every switch port, with each port's shaping rate so that
// queue delay converts to queue bytes; a leaf's ports to its hosts are
// edge ports (ebpf.PortConfig.Edge). On a fabric that trims
// (LeafSpineConfig.Trim) every shaped port trims at TrimBytes of its queue
// and sends trimmed and control frames in PriorityClass. ecn applies to every port; faults
// are set later, per port, through the returned ebpf.Fabric (also
// Fabric.Programs). Fabric.Close closes it too; closing it earlier detaches
// the programs earlier.
func (f *Fabric) AttachPrograms(ecn ebpf.ECNConfig) (*ebpf.Fabric, error) {
	return f.AttachProgramsContext(context.Background(), ecn)
}

// AttachProgramsContext is AttachPrograms that a cancelled ctx stops
// between two ports, detaching what it attached: loading the programs of
// every port takes seconds on a large fabric.
func (f *Fabric) AttachProgramsContext(ctx context.Context, ecn ebpf.ECNConfig) (*ebpf.Fabric, error) {
	prog, err := ebpf.LoadFabric()
	if err != nil {
		return nil, err
	}
	for _, sws := range [][]*Switch{f.Leaves, f.Spines} {
		for _, sw := range sws {
			for i, p := range sw.Ports {
				if ctx.Err() != nil {
					prog.Close()
					return nil, fmt.Errorf("testbed: attaching the fabric programs stopped: %w", context.Cause(ctx))
				}
				cfg := ebpf.PortConfig{ID: f.PortID(sw, i), RateMbps: uint32(p.RateBps / 1e6), ECN: ecn}
				// A leaf's host ports face hosts, which run no programs.
				cfg.Edge = f.nodeByName(p.Peer).kind == kindHost
				if f.Config.Trim && p.RateBps != 0 {
					cfg.TrimQueue, cfg.QueueLimit = uint32(f.Config.TrimBytes), uint32(f.Config.BufferBytes)
					cfg.PriorityClass = PriorityClass
				}
				if err := prog.AttachPortAt(sw.NS, p.Ifindex, cfg); err != nil {
					prog.Close()
					return nil, fmt.Errorf("testbed: attaching the fabric programs to %s/%s: %w", sw.Name, p.Name, err)
				}
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Load() {
		prog.Close()
		return nil, ErrClosed
	}
	f.prog = prog
	f.attached = append(f.attached, prog)
	return prog, nil
}

// Programs returns the fabric programs attached by the last
// AttachPrograms, or those of a persistent fabric; nil if none are.
func (f *Fabric) Programs() *ebpf.Fabric {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.prog
}

// UplinkBytes returns the bytes leaf l has sent up to each spine so far.
func (f *Fabric) UplinkBytes(l int) ([]uint64, error) {
	if l < 0 || l >= len(f.Leaves) {
		return nil, fmt.Errorf("%w: no leaf %d", ErrConfig, l)
	}
	st, err := f.PortStats()
	if err != nil {
		return nil, err
	}
	out := make([]uint64, f.Config.Spines)
	leaf := f.Leaves[l]
	for s := range out {
		port := leaf.Ports[f.Config.Hosts+s].Name
		for _, p := range st {
			if p.Switch == leaf.Name && p.Port == port {
				out[s] = p.TxBytes
			}
		}
	}
	return out, nil
}
