//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Fabric is the loaded pair of test-fabric switch programs (tcx ingress and
// egress) with their maps, shared by every port attached to it, in any
// network namespace: one Fabric plays all the switches of a testbed.
//
// Create it with LoadFabric; the zero value is not usable. It is safe for
// concurrent use. Close detaches it from every port and frees it, unless it
// is pinned (Pin, LoadPinnedFabric): then Close only releases this
// process's handles.
type Fabric struct {
	mu     sync.Mutex
	spec   *ebpf.CollectionSpec
	maps   fabricMaps
	repl   map[string]*ebpf.Map // the shared maps, by name
	ports  map[PortID]*fabricPort
	keys   map[portKey]PortID
	free   []uint32 // slots of detached ports
	next   uint32   // first never-used slot
	ncpu   int
	closed bool
	pinDir string // bpffs directory of the pins; "" when not pinned
}

// portKey identifies an interface: its namespace's cookie and its ifindex.
type portKey struct {
	netns   uint64
	ifindex int
}

type fabricPort struct {
	slot            uint32
	key             portKey
	params          portParams
	progs           fabricPrograms // this port's instance
	ingress, egress link.Link
}

// fabricSpec is the fabric programs' collection with its maps sized, and
// the number of possible CPUs (for the per-CPU counters).
func fabricSpec() (*ebpf.CollectionSpec, int, error) {
	spec, err := loadFabric()
	if err != nil {
		return nil, 0, fmt.Errorf("ebpf: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, 0, fmt.Errorf("ebpf: %w", err)
	}
	for _, name := range []string{fabricMapFabricCfg, fabricMapFabricStats, fabricMapFabricTx, fabricMapFabricGe, fabricMapFabricVq} {
		spec.Maps[name].MaxEntries = MaxPorts
	}
	spec.Maps[fabricMapFabricInflight].MaxEntries = MaxInflight
	return spec, ncpu, nil
}

// LoadFabric loads the fabric maps into the kernel; AttachPort loads an
// instance of the programs for each port. It needs CAP_BPF and
// CAP_NET_ADMIN (root) and, to attach, a kernel with tcx (6.6 or later).
func LoadFabric() (*Fabric, error) {
	spec, ncpu, err := fabricSpec()
	if err != nil {
		return nil, err
	}
	f := &Fabric{
		spec:  spec,
		ports: make(map[PortID]*fabricPort),
		keys:  make(map[portKey]PortID),
		ncpu:  ncpu,
	}
	if err := spec.LoadAndAssign(&f.maps, nil); err != nil {
		return nil, fmt.Errorf("ebpf: load fabric maps: %w", err)
	}
	f.repl = map[string]*ebpf.Map{
		fabricMapFabricCfg:      f.maps.FabricCfg,
		fabricMapFabricStats:    f.maps.FabricStats,
		fabricMapFabricTx:       f.maps.FabricTx,
		fabricMapFabricGe:       f.maps.FabricGe,
		fabricMapFabricVq:       f.maps.FabricVq,
		fabricMapFabricInflight: f.maps.FabricInflight,
	}
	// Load one instance now, so that a kernel that refuses the programs
	// fails here rather than at the first AttachPort.
	progs, err := f.loadPrograms(^uint32(0))
	if err != nil {
		f.maps.Close()
		return nil, err
	}
	progs.Close()
	return f, nil
}

// loadPrograms loads an instance of the programs for port slot, sharing
// f's maps.
func (f *Fabric) loadPrograms(slot uint32) (fabricPrograms, error) {
	spec := f.spec.Copy()
	var progs fabricPrograms
	if err := spec.Variables[fabricVarPortSlot].Set(slot); err != nil {
		return progs, fmt.Errorf("ebpf: set port slot: %w", err)
	}
	if err := spec.LoadAndAssign(&progs, &ebpf.CollectionOptions{MapReplacements: f.repl}); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return progs, fmt.Errorf("ebpf: load fabric programs: %+v", verr)
		}
		return progs, fmt.Errorf("ebpf: load fabric programs: %w", err)
	}
	return progs, nil
}

// netnsCookie returns the cookie of the calling thread's network namespace.
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("ebpf: socket for the netns cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("ebpf: SO_NETNS_COOKIE: %w", err)
	}
	return c, nil
}

// AttachPort makes the interface with index ifindex, in the network
// namespace of the calling thread, the switch port cfg.ID: it loads an
// instance of the ingress and egress programs for the port, attaches them
// through tcx links (after programs already attached) and applies cfg. To attach inside another namespace, lock the OS
// thread and enter it first. It returns ErrAttached if cfg.ID or the
// interface is already a port of f, ErrInvalidConfig for a bad cfg or
// ifindex, and ErrInvalidConfig wrapping the reason when all MaxPorts slots
// are taken.
func (f *Fabric) AttachPort(ifindex int, cfg PortConfig) error {
	return f.addPort(ifindex, cfg, true)
}

// AttachPortAt is AttachPort in the network namespace ns: it runs
// AttachPort on a new OS thread that enters ns and is discarded afterwards,
// so that the caller's thread and namespace are untouched.
func (f *Fabric) AttachPortAt(ns netns.NsHandle, ifindex int, cfg PortConfig) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, namespace
		// and all.
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("ebpf: enter the port's namespace: %w", err)
			return
		}
		errc <- f.AttachPort(ifindex, cfg)
	}()
	return <-errc
}

// addPort loads the port's programs and, if attach, attaches them. Tests
// add ports without attaching to run the programs with BPF_PROG_TEST_RUN.
func (f *Fabric) addPort(ifindex int, cfg PortConfig, attach bool) error {
	if ifindex <= 0 {
		return fmt.Errorf("%w: ifindex %d", ErrInvalidConfig, ifindex)
	}
	pp, err := cfg.params()
	if err != nil {
		return err
	}
	cookie, err := netnsCookie()
	if err != nil {
		return err
	}
	key := portKey{netns: cookie, ifindex: ifindex}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if _, ok := f.ports[cfg.ID]; ok {
		return fmt.Errorf("%w: port %v", ErrAttached, cfg.ID)
	}
	if id, ok := f.keys[key]; ok {
		return fmt.Errorf("%w: ifindex %d is port %v", ErrAttached, ifindex, id)
	}
	var slot uint32
	switch {
	case len(f.free) > 0:
		slot = f.free[len(f.free)-1]
	case f.next < MaxPorts:
		slot = f.next
	default:
		return fmt.Errorf("%w: all %d port slots in use", ErrInvalidConfig, MaxPorts)
	}
	p := &fabricPort{slot: slot, key: key, params: pp}
	if err := f.resetSlot(slot); err != nil {
		return err
	}
	if err := f.writeParams(p); err != nil {
		return err
	}
	if p.progs, err = f.loadPrograms(slot); err != nil {
		return err
	}
	if attach {
		if err := f.attach(p, ifindex); err != nil {
			p.progs.Close()
			return err
		}
		if f.pinDir != "" {
			if err := f.pinPort(cfg.ID, p); err != nil {
				_ = p.unpin()
				_ = p.unlink()
				return err
			}
		}
	}
	if len(f.free) > 0 && f.free[len(f.free)-1] == slot {
		f.free = f.free[:len(f.free)-1]
	} else {
		f.next++
	}
	f.ports[cfg.ID] = p
	f.keys[key] = cfg.ID
	return nil
}

// attach attaches the ingress and egress programs to ifindex for p.
func (f *Fabric) attach(p *fabricPort, ifindex int) error {
	var err error
	p.ingress, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p.progs.FabricIngress, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return fmt.Errorf("ebpf: attach tcx ingress to ifindex %d: %w", ifindex, err)
	}
	p.egress, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: p.progs.FabricEgress, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		p.ingress.Close()
		p.ingress = nil
		return fmt.Errorf("ebpf: attach tcx egress to ifindex %d: %w", ifindex, err)
	}
	return nil
}

// unlink closes p's links, if any, and its programs.
func (p *fabricPort) unlink() error {
	errs := []error{p.progs.Close()}
	if p.ingress != nil {
		errs = append(errs, p.ingress.Close())
	}
	if p.egress != nil {
		errs = append(errs, p.egress.Close())
	}
	return errors.Join(errs...)
}

// resetSlot zeroes the counters and state of slot.
func (f *Fabric) resetSlot(slot uint32) error {
	zero := make([]fabricFabricCounters, f.ncpu)
	if err := f.maps.FabricStats.Update(slot, zero, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ebpf: reset counters: %w", err)
	}
	if err := f.maps.FabricTx.Update(slot, uint64(0), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ebpf: reset tx bytes: %w", err)
	}
	if err := f.maps.FabricGe.Update(slot, uint32(0), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ebpf: reset burst state: %w", err)
	}
	if err := f.maps.FabricVq.Update(slot, fabricVqState{}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ebpf: reset queue model: %w", err)
	}
	return nil
}

// writeParams writes p.params into fabric_cfg.
func (f *Fabric) writeParams(p *fabricPort) error {
	pp := p.params
	v := fabricFabricPort{
		SwitchId: pp.id.Switch, PortId: pp.id.Port, RateMbps: pp.rate,
		EcnKminNs: pp.kmin, EcnKmaxNs: pp.kmax, EcnPmax: pp.pmax,
		Loss: pp.loss, GeP: pp.geP, GeR: pp.geR, GeLossGood: pp.geLG, GeLossBad: pp.geLB,
		TrimQueue: pp.trimQueue, QueueLimit: pp.limit, PrioClass: pp.prio,
	}
	if pp.blackhole {
		v.Blackhole = 1
	}
	if pp.burst {
		v.Burst = 1
	}
	if pp.roceOnly {
		v.RoceOnly = 1
	}
	if pp.edge {
		v.Edge = 1
	}
	if pp.trim {
		v.Trim = 1
	}
	if err := f.maps.FabricCfg.Update(p.slot, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ebpf: write port %v config: %w", pp.id, err)
	}
	return nil
}

// port returns the attached port id; call with f.mu held.
func (f *Fabric) port(id PortID) (*fabricPort, error) {
	if f.closed {
		return nil, ErrClosed
	}
	p, ok := f.ports[id]
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrUnknownPort, id)
	}
	return p, nil
}

// SetFaults replaces the faults of port id; they apply from the next frame.
// Turning burst loss off and on again starts in the good state.
func (f *Fabric) SetFaults(id PortID, faults Faults) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.port(id)
	if err != nil {
		return err
	}
	pp := p.params
	if err := faults.params(&pp); err != nil {
		return err
	}
	if !pp.burst {
		if err := f.maps.FabricGe.Update(p.slot, uint32(0), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("ebpf: reset burst state: %w", err)
		}
	}
	old := p.params
	p.params = pp
	if err := f.writeParams(p); err != nil {
		p.params = old
		return err
	}
	return nil
}

// SetECN replaces the ECN marking settings of port id.
func (f *Fabric) SetECN(id PortID, ecn ECNConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.port(id)
	if err != nil {
		return err
	}
	pp := p.params
	if err := ecn.params(&pp); err != nil {
		return err
	}
	old := p.params
	p.params = pp
	if err := f.writeParams(p); err != nil {
		p.params = old
		return err
	}
	return nil
}

// PortCounters returns the counters of port id, summed over CPUs.
func (f *Fabric) PortCounters(id PortID) (PortCounters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.port(id)
	if err != nil {
		return PortCounters{}, err
	}
	var per []fabricFabricCounters
	if err := f.maps.FabricStats.Lookup(p.slot, &per); err != nil {
		return PortCounters{}, fmt.Errorf("ebpf: read port %v counters: %w", id, err)
	}
	var s PortCounters
	for _, c := range per {
		s.Packets += c.Packets
		s.Bytes += c.Bytes
		s.DropLoss += c.DropLoss
		s.DropBurst += c.DropBurst
		s.DropBlackhole += c.DropBlackhole
		s.ECNMarked += c.EcnMarked
		s.INTStamped += c.IntStamped
		s.INTFull += c.IntFull
		s.Trimmed += c.Trimmed
		s.TrimmedQueue += c.TrimmedQueue
		s.DropQueue += c.DropQueue
		s.RxPackets += c.RxPackets
		s.Measured += c.Measured
		s.QueueDelaySum += time.Duration(c.QdelaySumNs)
		s.MaxQueueDelay = max(s.MaxQueueDelay, time.Duration(c.QdelayMaxNs))
	}
	return s, nil
}

// DetachPort detaches the programs from port id and forgets it; its slot is
// reused by a later AttachPort. It returns ErrUnknownPort for a port that is
// not attached.
func (f *Fabric) DetachPort(id PortID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.port(id)
	if err != nil {
		return err
	}
	delete(f.ports, id)
	delete(f.keys, p.key)
	err = errors.Join(p.unpin(), p.unlink())
	f.free = append(f.free, p.slot)
	if err != nil {
		return fmt.Errorf("ebpf: detach port %v: %w", id, err)
	}
	return nil
}

// Ports returns the ids of the attached ports, in no particular order.
func (f *Fabric) Ports() []PortID {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]PortID, 0, len(f.ports))
	for id := range f.ports {
		ids = append(ids, id)
	}
	return ids
}

// programs returns the programs of port id (for BPF_PROG_TEST_RUN).
func (f *Fabric) programs(id PortID) (ingress, egress *ebpf.Program, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.port(id)
	if err != nil {
		return nil, nil, err
	}
	return p.progs.FabricIngress, p.progs.FabricEgress, nil
}

// Close detaches the programs from every port and frees the programs and
// maps. It is idempotent; afterwards the methods return ErrClosed.
func (f *Fabric) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	var errs []error
	for _, p := range f.ports {
		errs = append(errs, p.unlink())
	}
	f.ports, f.keys = nil, nil
	errs = append(errs, f.maps.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ebpf: close fabric: %w", err)
	}
	return nil
}
