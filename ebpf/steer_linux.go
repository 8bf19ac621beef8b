//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Steering is the loaded host steering XDP program with its maps: it sends
// frames to the configured UDP port to the AF_XDP socket registered for
// their RX queue and leaves everything else to the kernel.
//
// Create it with LoadSteering; the zero value is not usable. It is safe for
// concurrent use. Close detaches it from every interface and frees it.
type Steering struct {
	mu     sync.RWMutex
	objs   steerObjects
	queues int
	links  map[int]attachment // by ifindex
	closed bool
}

type attachment struct {
	link link.Link
	mode AttachMode
}

// LoadSteering loads the steering program and its maps into the kernel and
// fills the configuration maps from cfg. The program is not attached to any
// interface until Attach. It needs CAP_BPF and CAP_NET_ADMIN (root).
func LoadSteering(cfg SteerConfig) (*Steering, error) {
	p, err := cfg.plan()
	if err != nil {
		return nil, err
	}
	spec, err := loadSteer()
	if err != nil {
		return nil, fmt.Errorf("ebpf: %w", err)
	}
	spec.Maps[steerMapSteerXsks].MaxEntries = uint32(p.queues)
	spec.Maps[steerMapSteerLocal].MaxEntries = MaxLocal
	spec.Maps[steerMapSteerAllow].MaxEntries = MaxAllow

	s := &Steering{queues: p.queues, links: make(map[int]attachment)}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("ebpf: load steering program: %+v", verr)
		}
		return nil, fmt.Errorf("ebpf: load steering program: %w", err)
	}
	if err := s.apply(p); err != nil {
		s.objs.Close()
		return nil, err
	}
	return s, nil
}

// Update changes the port, the address lists and Stamp of a loaded program
// while it runs. Queues is ignored. New allowlist and local entries are added before
// the switch and stale ones removed after it, so that a frame from a peer in
// both the old and the new allowlist is never refused.
func (s *Steering) Update(cfg SteerConfig) error {
	cfg.Queues = 0
	p, err := cfg.plan()
	if err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.apply(p)
}

// apply writes p into the configuration maps: add the new addresses, switch
// the config, delete the stale addresses.
func (s *Steering) apply(p steerPlan) error {
	if err := addAddrs(s.objs.SteerLocal, p.local); err != nil {
		return fmt.Errorf("ebpf: fill local addresses: %w", err)
	}
	if err := addAddrs(s.objs.SteerAllow, p.allow); err != nil {
		return fmt.Errorf("ebpf: fill allowlist: %w", err)
	}
	c := steerSteerConfig{Port: p.port}
	if len(p.local) > 0 {
		c.MatchLocal = 1
	}
	if len(p.allow) > 0 {
		c.MatchAllow = 1
	}
	if p.stamp {
		c.Stamp = 1
	}
	if err := s.objs.SteerCfg.Update(uint32(0), &c, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ebpf: write config: %w", err)
	}
	if err := pruneAddrs(s.objs.SteerLocal, p.local); err != nil {
		return fmt.Errorf("ebpf: prune local addresses: %w", err)
	}
	if err := pruneAddrs(s.objs.SteerAllow, p.allow); err != nil {
		return fmt.Errorf("ebpf: prune allowlist: %w", err)
	}
	return nil
}

func addAddrs(m *ebpf.Map, addrs []netip.Addr) error {
	one := uint8(1)
	for _, a := range addrs {
		fam, b := addrKey(a)
		k := steerSteerAddr{Family: fam, Addr: b}
		if err := m.Update(&k, &one, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("%v: %w", a, err)
		}
	}
	return nil
}

// pruneAddrs deletes the keys of m that are not in keep (sorted).
func pruneAddrs(m *ebpf.Map, keep []netip.Addr) error {
	var stale []steerSteerAddr
	var k steerSteerAddr
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !slices.ContainsFunc(keep, func(a netip.Addr) bool {
			fam, b := addrKey(a)
			return fam == k.Family && b == k.Addr
		}) {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for i := range stale {
		if err := m.Delete(&stale[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// Attach attaches the program to the interface with index ifindex through a
// bpf_link, in the network namespace of the calling thread (to attach inside
// another namespace, lock the OS thread and enter it first). Auto tries
// Native and falls back to Generic. One Steering may be attached to several
// interfaces, once each; attaching twice to one returns ErrAttached.
func (s *Steering) Attach(ifindex int, mode AttachMode) error {
	if ifindex <= 0 {
		return fmt.Errorf("%w: ifindex %d", ErrInvalidConfig, ifindex)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.links[ifindex]; ok {
		return fmt.Errorf("%w: ifindex %d", ErrAttached, ifindex)
	}
	attach := func(flags link.XDPAttachFlags) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: s.objs.Steer, Interface: ifindex, Flags: flags})
	}
	var (
		l   link.Link
		err error
	)
	switch mode {
	case Native:
		l, err = attach(link.XDPDriverMode)
	case Generic:
		l, err = attach(link.XDPGenericMode)
	case Auto:
		mode = Native
		l, err = attach(link.XDPDriverMode)
		if err != nil {
			var gerr error
			mode = Generic
			if l, gerr = attach(link.XDPGenericMode); gerr != nil {
				err = fmt.Errorf("native: %w; generic: %w", err, gerr)
			} else {
				err = nil
			}
		}
	default:
		return fmt.Errorf("%w: attach mode %v", ErrInvalidConfig, mode)
	}
	if err != nil {
		return fmt.Errorf("ebpf: attach XDP to ifindex %d (%v): %w", ifindex, mode, err)
	}
	s.links[ifindex] = attachment{link: l, mode: mode}
	return nil
}

// Attached reports whether the program is attached to ifindex, and in which
// mode (Native or Generic; what Auto chose).
func (s *Steering) Attached(ifindex int) (AttachMode, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.links[ifindex]
	return a.mode, ok
}

// Detach detaches the program from ifindex. Detaching from an interface it
// is not attached to does nothing.
func (s *Steering) Detach(ifindex int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.links[ifindex]
	if !ok {
		return nil
	}
	delete(s.links, ifindex)
	if err := a.link.Close(); err != nil {
		return fmt.Errorf("ebpf: detach from ifindex %d: %w", ifindex, err)
	}
	return nil
}

// Register points the XSKMAP slot of RX queue queue at the AF_XDP socket
// xskFD, which must be bound to that queue with an RX ring (the kernel
// refuses it otherwise). It replaces a previous registration.
func (s *Steering) Register(queue int, xskFD int) error {
	if queue < 0 || queue >= s.queues {
		return fmt.Errorf("%w: queue %d outside 0..%d", ErrBadQueue, queue, s.queues-1)
	}
	if xskFD < 0 {
		return fmt.Errorf("%w: socket fd %d", ErrBadQueue, xskFD)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.objs.SteerXsks.Update(uint32(queue), uint32(xskFD), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("ebpf: register socket %d for queue %d: %w", xskFD, queue, err)
	}
	return nil
}

// Unregister empties the XSKMAP slot of RX queue queue: its frames pass to
// the kernel and count NoSocket. Unregistering an empty slot does nothing.
func (s *Steering) Unregister(queue int) error {
	if queue < 0 || queue >= s.queues {
		return fmt.Errorf("%w: queue %d outside 0..%d", ErrBadQueue, queue, s.queues-1)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	err := s.objs.SteerXsks.Delete(uint32(queue))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("ebpf: unregister queue %d: %w", queue, err)
	}
	return nil
}

// Counters returns the program's counters summed over CPUs.
func (s *Steering) Counters() (SteerCounters, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return SteerCounters{}, ErrClosed
	}
	var per []steerSteerCounters
	if err := s.objs.SteerStats.Lookup(uint32(0), &per); err != nil {
		return SteerCounters{}, fmt.Errorf("ebpf: read counters: %w", err)
	}
	var sum SteerCounters
	for _, c := range per {
		sum.Steered += c.Steered
		sum.Passed += c.Passed
		sum.Malformed += c.Malformed
		sum.Refused += c.Refused
		sum.NoSocket += c.NoSocket
		sum.NoRoom += c.NoRoom
	}
	return sum, nil
}

// XSKMap returns the program's XSKMAP (RX queue -> AF_XDP socket), for
// drivers that manage it themselves. It belongs to the Steering: do not
// close it; it is closed by Close.
func (s *Steering) XSKMap() *ebpf.Map { return s.objs.SteerXsks }

// Program returns the XDP program, for callers that attach it themselves.
// It belongs to the Steering and is closed by Close.
func (s *Steering) Program() *ebpf.Program { return s.objs.Steer }

// Close detaches the program from every interface and closes the program and
// its maps. It is idempotent; afterwards the methods return ErrClosed.
func (s *Steering) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for ifindex, a := range s.links {
		if err := a.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach from ifindex %d: %w", ifindex, err))
		}
	}
	clear(s.links)
	if err := s.objs.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ebpf: close steering: %w", err)
	}
	return nil
}
