//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// bpffsMagic is BPF_FS_MAGIC, the f_type of a bpffs mount.
const bpffsMagic = 0xcafe4a11

// fabricMapNames are the shared maps that Pin pins, as "map_<name>".
var fabricMapNames = []string{fabricMapFabricCfg, fabricMapFabricStats, fabricMapFabricTx, fabricMapFabricGe, fabricMapFabricVq, fabricMapFabricInflight}

// MountBPFFS mounts a bpffs at dir (normally DefaultBPFFS) unless one is
// mounted there already, so that Pin has somewhere to pin.
func MountBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && uint32(st.Type) == bpffsMagic {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("ebpf: bpffs mount point: %w", err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("ebpf: mount bpffs on %s: %w", dir, err)
	}
	return nil
}

// isBPFFS reports whether dir is on a bpffs.
func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && uint32(st.Type) == bpffsMagic
}

func portPinName(slot uint32, id PortID, dir string) string {
	return fmt.Sprintf("port_%d_%d_%d_%s", slot, id.Switch, id.Port, dir)
}

// pinPort pins p's tcx links under f.pinDir; call with f.mu held.
func (f *Fabric) pinPort(id PortID, p *fabricPort) error {
	if p.ingress == nil || p.egress == nil {
		return nil // added without attaching: nothing to keep
	}
	if err := p.ingress.Pin(filepath.Join(f.pinDir, portPinName(p.slot, id, "ingress"))); err != nil {
		return fmt.Errorf("ebpf: pin port %v: %w", id, err)
	}
	if err := p.egress.Pin(filepath.Join(f.pinDir, portPinName(p.slot, id, "egress"))); err != nil {
		return fmt.Errorf("ebpf: pin port %v: %w", id, err)
	}
	return nil
}

// unpin removes the pins of p's links, if any.
func (p *fabricPort) unpin() error {
	var errs []error
	for _, l := range []link.Link{p.ingress, p.egress} {
		if l != nil {
			errs = append(errs, l.Unpin())
		}
	}
	return errors.Join(errs...)
}

// Pin makes f outlive the process: it pins the shared maps and the tcx
// links of every attached port (and of ports attached later) in dir, a
// directory on a bpffs that it creates (see MountBPFFS). Close then only
// releases this process's handles: the programs stay attached and the maps
// keep counting until Unpin, or until the pins are removed by hand (rm -r
// dir). LoadPinnedFabric opens the fabric again in another process. Pin
// returns ErrInvalidConfig if dir is not on a bpffs or f is pinned already.
func (f *Fabric) Pin(dir string) (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if f.pinDir != "" {
		return fmt.Errorf("%w: fabric already pinned in %s", ErrInvalidConfig, f.pinDir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ebpf: pin directory: %w", err)
	}
	if !isBPFFS(dir) {
		return fmt.Errorf("%w: %s is not on a bpffs", ErrInvalidConfig, dir)
	}
	f.pinDir = dir
	defer func() {
		if err != nil {
			_ = f.unpinLocked()
		}
	}()
	for _, name := range fabricMapNames {
		if err := f.repl[name].Pin(filepath.Join(dir, "map_"+name)); err != nil {
			return fmt.Errorf("ebpf: pin map %s: %w", name, err)
		}
	}
	for id, p := range f.ports {
		if err := f.pinPort(id, p); err != nil {
			return err
		}
	}
	return nil
}

// Unpin removes every pin of f and its directory, so that Close detaches
// the programs and frees the maps (as for a fabric that was never pinned).
// Unpinning a fabric that is not pinned does nothing.
func (f *Fabric) Unpin() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	return f.unpinLocked()
}

func (f *Fabric) unpinLocked() error {
	if f.pinDir == "" {
		return nil
	}
	var errs []error
	for _, p := range f.ports {
		errs = append(errs, p.unpin())
	}
	for _, name := range fabricMapNames {
		errs = append(errs, f.repl[name].Unpin())
	}
	if err := os.Remove(f.pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	f.pinDir = ""
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ebpf: unpin fabric: %w", err)
	}
	return nil
}

// PinDir returns the directory f is pinned in, or "".
func (f *Fabric) PinDir() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pinDir
}

// LoadPinnedFabric opens the fabric that Fabric.Pin left in dir, with its
// ports: SetFaults, SetECN, PortCounters, DetachPort and AttachPort work as
// on the original (ports attached later are pinned too). Its Close releases
// this process's handles and leaves the pins. Errors wrap os.ErrNotExist if
// dir holds no pinned fabric.
func LoadPinnedFabric(dir string) (_ *Fabric, err error) {
	spec, ncpu, err := fabricSpec()
	if err != nil {
		return nil, err
	}
	f := &Fabric{
		spec:   spec,
		ports:  make(map[PortID]*fabricPort),
		keys:   make(map[portKey]PortID),
		ncpu:   ncpu,
		repl:   make(map[string]*ebpf.Map),
		pinDir: dir,
	}
	defer func() {
		if err != nil {
			for _, p := range f.ports {
				_ = p.progs.Close()
				for _, l := range []link.Link{p.ingress, p.egress} {
					if l != nil {
						_ = l.Close()
					}
				}
			}
			for _, m := range f.repl {
				_ = m.Close()
			}
		}
	}()
	for _, name := range fabricMapNames {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "map_"+name), nil)
		if err != nil {
			return nil, fmt.Errorf("ebpf: open pinned fabric map %s: %w", name, err)
		}
		f.repl[name] = m
	}
	f.maps = fabricMaps{
		FabricCfg:      f.repl[fabricMapFabricCfg],
		FabricStats:    f.repl[fabricMapFabricStats],
		FabricTx:       f.repl[fabricMapFabricTx],
		FabricGe:       f.repl[fabricMapFabricGe],
		FabricVq:       f.repl[fabricMapFabricVq],
		FabricInflight: f.repl[fabricMapFabricInflight],
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ebpf: read pinned fabric: %w", err)
	}
	used := map[uint32]bool{}
	for _, e := range entries {
		var slot uint32
		var id PortID
		var dirn string
		if !strings.HasPrefix(e.Name(), "port_") || !strings.HasSuffix(e.Name(), "_ingress") {
			continue
		}
		if n, _ := fmt.Sscanf(strings.ReplaceAll(e.Name(), "_", " "), "port %d %d %d %s", &slot, &id.Switch, &id.Port, &dirn); n != 4 || slot >= MaxPorts {
			return nil, fmt.Errorf("ebpf: pinned fabric: unexpected pin %s", e.Name())
		}
		p := &fabricPort{slot: slot}
		f.ports[id] = p // closed by the deferred cleanup on error
		if p.ingress, err = link.LoadPinnedLink(filepath.Join(dir, e.Name()), nil); err != nil {
			return nil, fmt.Errorf("ebpf: pinned port %v: %w", id, err)
		}
		if p.egress, err = link.LoadPinnedLink(filepath.Join(dir, portPinName(slot, id, "egress")), nil); err != nil {
			return nil, fmt.Errorf("ebpf: pinned port %v: %w", id, err)
		}
		if p.progs.FabricIngress, err = linkProgram(p.ingress); err != nil {
			return nil, fmt.Errorf("ebpf: pinned port %v: %w", id, err)
		}
		if p.progs.FabricEgress, err = linkProgram(p.egress); err != nil {
			return nil, fmt.Errorf("ebpf: pinned port %v: %w", id, err)
		}
		if info, err := p.ingress.Info(); err == nil && info.TCX() != nil {
			// The namespace is unknown here: the key only guards against
			// attaching one interface twice.
			p.key = portKey{netns: 0, ifindex: int(info.TCX().Ifindex)}
		}
		var v fabricFabricPort
		if err := f.maps.FabricCfg.Lookup(slot, &v); err != nil {
			return nil, fmt.Errorf("ebpf: pinned port %v config: %w", id, err)
		}
		if v.SwitchId != id.Switch || v.PortId != id.Port {
			return nil, fmt.Errorf("ebpf: pinned port %v: slot %d holds port %d/%d", id, slot, v.SwitchId, v.PortId)
		}
		p.params = portParams{id: id, rate: v.RateMbps, kmin: v.EcnKminNs, kmax: v.EcnKmaxNs, pmax: v.EcnPmax,
			loss: v.Loss, geP: v.GeP, geR: v.GeR, geLG: v.GeLossGood, geLB: v.GeLossBad,
			blackhole: v.Blackhole != 0, burst: v.Burst != 0, roceOnly: v.RoceOnly != 0, edge: v.Edge != 0,
			trim: v.Trim != 0, trimQueue: v.TrimQueue, limit: v.QueueLimit, prio: v.PrioClass}
		f.keys[p.key] = id
		used[slot] = true
	}
	for s := uint32(0); s < MaxPorts; s++ {
		if used[s] {
			f.next = s + 1
		}
	}
	for s := uint32(0); s < f.next; s++ {
		if !used[s] {
			f.free = append(f.free, s)
		}
	}
	return f, nil
}

// linkProgram opens the program that l runs.
func linkProgram(l link.Link) (*ebpf.Program, error) {
	info, err := l.Info()
	if err != nil {
		return nil, err
	}
	return ebpf.NewProgramFromID(info.Program)
}

// PortConfig returns the current settings of port id (as AttachPort,
// SetFaults and SetECN left them; probabilities are rounded to 1/2^32).
func (f *Fabric) PortConfig(id PortID) (PortConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.port(id)
	if err != nil {
		return PortConfig{}, err
	}
	pp := p.params
	prob := func(t uint64) float64 { return float64(t) / (1 << 32) }
	c := PortConfig{ID: id, RateMbps: pp.rate, Edge: pp.edge,
		TrimQueue: pp.trimQueue, QueueLimit: pp.limit, PriorityClass: pp.prio,
		ECN:    ECNConfig{KMin: time.Duration(pp.kmin), KMax: time.Duration(pp.kmax), PMax: prob(pp.pmax)},
		Faults: Faults{Blackhole: pp.blackhole, Loss: prob(pp.loss), RoCEOnly: pp.roceOnly, Trim: pp.trim},
	}
	if pp.burst {
		c.Faults.Burst = GilbertElliott{P: prob(pp.geP), R: prob(pp.geR), LossGood: prob(pp.geLG), LossBad: prob(pp.geLB)}
	}
	return c, nil
}

// Objects returns the kernel ids of f's programs, tcx links and maps, to
// check after teardown that none is left (ObjectIDs.Alive).
func (f *Fabric) Objects() (ObjectIDs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ObjectIDs{}, ErrClosed
	}
	var ids ObjectIDs
	for _, m := range f.repl {
		info, err := m.Info()
		if err != nil {
			return ids, fmt.Errorf("ebpf: map info: %w", err)
		}
		if id, ok := info.ID(); ok {
			ids.Maps = append(ids.Maps, uint32(id))
		}
	}
	for _, p := range f.ports {
		for _, prog := range []*ebpf.Program{p.progs.FabricIngress, p.progs.FabricEgress} {
			info, err := prog.Info()
			if err != nil {
				return ids, fmt.Errorf("ebpf: program info: %w", err)
			}
			if id, ok := info.ID(); ok {
				ids.Programs = append(ids.Programs, uint32(id))
			}
		}
		for _, l := range []link.Link{p.ingress, p.egress} {
			if l == nil {
				continue
			}
			info, err := l.Info()
			if err != nil {
				return ids, fmt.Errorf("ebpf: link info: %w", err)
			}
			ids.Links = append(ids.Links, uint32(info.ID))
		}
	}
	return ids, nil
}

// Alive returns the objects of ids that still exist in the kernel, as
// "program 12", "link 7", "map 3"; empty after a complete teardown.
func (ids ObjectIDs) Alive() ([]string, error) {
	var out []string
	check := func(kind string, id uint32, err error, closer interface{ Close() error }) error {
		switch {
		case err == nil:
			_ = closer.Close()
			out = append(out, fmt.Sprintf("%s %d", kind, id))
		case errors.Is(err, os.ErrNotExist):
		default:
			return fmt.Errorf("ebpf: %s %d: %w", kind, id, err)
		}
		return nil
	}
	for _, id := range ids.Programs {
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err := check("program", id, err, p); err != nil {
			return out, err
		}
	}
	for _, id := range ids.Links {
		l, err := link.NewFromID(link.ID(id))
		if err := check("link", id, err, l); err != nil {
			return out, err
		}
	}
	for _, id := range ids.Maps {
		m, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err := check("map", id, err, m); err != nil {
			return out, err
		}
	}
	return out, nil
}
