package sim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"unsafe"

	"github.com/sprayfabric/spray/transport"
)

// ErrMemory is returned, wrapped, by Run when a run's estimated memory
// exceeds Config.Memory.
var ErrMemory = errors.New("sim: run does not fit in memory")

// Footprint is what Run estimates a run holds at once: the transports'
// QPs and engines (their live heap measured on this build of the
// transport, so the estimate follows it), the flows' state, the payload and
// destination buffers, and a packet buffer for every frame the switch
// buffers and NIC queues can hold.
type Footprint struct {
	Hosts, Engines, QPs, Flows int
	// QPBytes and EngineBytes are the measured bytes of one connected QP
	// and of one engine with its region, for the costliest profile.
	QPBytes, EngineBytes int64
	Payload, Packets     int64
	Total                int64
}

// Estimate returns cfg's footprint, without running it.
func Estimate(cfg Config) (Footprint, error) {
	t, err := cfg.Topo.withDefaults()
	if err != nil {
		return Footprint{}, err
	}
	var s Shape
	s.Flows = int64(len(cfg.Workload.Flows))
	pairs := make(map[uint64]struct{})
	hosts := make([]bool, t.Hosts())
	var total int64
	for _, f := range cfg.Workload.Flows {
		if f.Src < 0 || f.Dst < 0 || f.Src >= len(hosts) || f.Dst >= len(hosts) {
			return Footprint{Flows: len(cfg.Workload.Flows)}, fmt.Errorf("%w: flow %d->%d on %d hosts", ErrConfig, f.Src, f.Dst, len(hosts))
		}
		lo, hi := min(f.Src, f.Dst), max(f.Src, f.Dst)
		pairs[uint64(lo)<<32|uint64(hi)] = struct{}{}
		hosts[f.Src], hosts[f.Dst] = true, true
		s.MaxSize = max(s.MaxSize, f.Size)
		total += f.Size
	}
	for _, h := range hosts {
		if h {
			s.Hosts++
		}
	}
	s.Pairs = int64(len(pairs))
	// A run holds one source buffer of the largest flow and one sink, or
	// with Verify every flow's bytes in each.
	payload := 2 * s.MaxSize
	if cfg.Verify {
		payload = 2 * total
	}
	fc := cfg.Fabric
	fc.Topo = t
	n, err := New(fc)
	if err != nil {
		return Footprint{}, err
	}
	frames := int64(n.cfg.NICFrames) * int64(len(n.hosts))
	for i := range n.switches {
		frames += int64(n.switches[i].buf / (t.MTU + wireOverhead))
	}
	return footprint(cfg, t, s, payload, frames)
}

// Preflight refuses, with an error wrapping ErrMemory, a run of cfg with
// the workload spec names (cfg.Workload unused) whose footprint from the
// parameters alone exceeds cfg.Memory (0: MemoryBudget): WorkloadShape's
// lower bounds and a NIC queue of frames per host of the topology. Call
// it before ParseWorkload, which builds every flow, and before Run, which
// builds the fabric: it builds nothing proportional to either
// (TestPreflightRefusesBeforeAllocating), and refuses nothing that Run's
// own estimate would accept.
func Preflight(cfg Config, spec string) error {
	t, err := cfg.Topo.withDefaults()
	if err != nil {
		return err
	}
	s, err := WorkloadShape(spec, t.Hosts())
	if err != nil {
		return err
	}
	nic := int64(cfg.Fabric.NICFrames)
	if nic <= 0 {
		nic = defaultNICFrames
	}
	fp, err := footprint(cfg, t, s, 2*s.MaxSize, nic*int64(t.Hosts()))
	if err != nil {
		return err
	}
	return overBudget(cfg, fp)
}

// footprint adds up a run's footprint: s's QPs, engines, flows and
// payload, and frames packet buffers, with the QP and engine costs
// measured for cfg's costliest profile.
func footprint(cfg Config, t Topo, s Shape, payload, frames int64) (Footprint, error) {
	cfg.Topo = t
	if cfg.Profiles == nil {
		cfg.Profiles = DefaultProfiles
	}
	fp := Footprint{Hosts: int(s.Hosts), Flows: int(s.Flows), QPs: int(2 * s.Pairs)}
	fp.Engines = fp.Hosts * int(min(int64(max(cfg.Queues, 1)), 2*s.Pairs))
	for _, prof := range cfg.Profiles {
		cfg := cfg
		if cfg.Window == 0 {
			cfg.Window = 256
		}
		if cfg.Entropies == 0 {
			cfg.Entropies = 32
		}
		tc, err := transportConfig(cfg, prof)
		if err != nil {
			return fp, err
		}
		q, e, err := measureQP(t, tc)
		if err != nil {
			return fp, err
		}
		fp.QPBytes, fp.EngineBytes = max(fp.QPBytes, q), max(fp.EngineBytes, e)
	}
	fp.Payload = payload
	fp.Packets = frames * int64(t.MTU+int(unsafe.Sizeof(packet{})))
	flowBytes := int64(unsafe.Sizeof(flowState{}) + unsafe.Sizeof(Flow{}))
	fp.Total = int64(fp.QPs)*fp.QPBytes + int64(fp.Engines)*fp.EngineBytes + int64(fp.Flows)*flowBytes + fp.Payload + fp.Packets
	return fp, nil
}

// measureQP returns the bytes that one QP, created and connected, and one
// engine with its registered region hold on the heap, with tc on links
// of t's MTU: the live heap after a collection, before and after making
// them (the allocation counters move by whole spans, not by object). The
// QPs it makes are then dropped.
func measureQP(t Topo, tc transport.Config) (qp, eng int64, err error) {
	const k = 64
	tp := Topo{Kind: LeafSpine, HostsPerLeaf: 1, Leaves: 2, Spines: 1, MTU: t.MTU}
	n, err := New(FabricConfig{Topo: tp})
	if err != nil {
		return 0, 0, err
	}
	tc.Seed = 1
	live := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	m0 := live()
	var engs [2]*transport.Engine
	for i := range engs {
		if engs[i], err = transport.NewEngine(n.hosts[i].Link(), tc); err != nil {
			return 0, 0, err
		}
		engs[i].Register(make([]byte, 1), transport.AccessRemoteWrite)
	}
	m1 := live()
	qps := make([]*transport.QP, 0, 2*k)
	m1 += int64(cap(qps)) * 8
	for range k {
		a, err := engs[0].CreateQP()
		if err != nil {
			return 0, 0, err
		}
		b, err := engs[1].CreateQP()
		if err != nil {
			return 0, 0, err
		}
		if err := a.Connect(b.Info()); err != nil {
			return 0, 0, err
		}
		if err := b.Connect(a.Info()); err != nil {
			return 0, 0, err
		}
		qps = append(qps, a, b)
	}
	m2 := live()
	runtime.KeepAlive(qps)
	runtime.KeepAlive(engs)
	runtime.KeepAlive(n)
	return max(m2-m1, 0) / (2 * k), max(m1-m0, 0) / 2, nil
}

// MemoryBudget returns the bytes a run may hold when Config.Memory is 0:
// the machine's physical memory, or the Go runtime's memory limit
// (GOMEMLIMIT, debug.SetMemoryLimit) when that is lower.
func MemoryBudget() int64 {
	b := debug.SetMemoryLimit(-1)
	if m := physicalMemory(); m > 0 {
		b = min(b, m)
	}
	return b
}

// physicalMemory returns MemTotal from /proc/meminfo, or 0 where there
// is none.
func physicalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && kb < math.MaxInt64/1024 {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

// overBudget returns an error wrapping ErrMemory when fp exceeds
// cfg.Memory, or MemoryBudget when that is 0.
func overBudget(cfg Config, fp Footprint) error {
	budget := cfg.Memory
	if budget == 0 {
		budget = MemoryBudget()
	}
	if fp.Total <= budget {
		return nil
	}
	return fmt.Errorf("%w: %d hosts, %d QPs (one per host and peer) of about %s each, %d flows: about %s, more than the %s this run may use (Config.Memory, spray sim --mem)",
		ErrMemory, fp.Hosts, fp.QPs, fmtBytes(fp.QPBytes), fp.Flows, fmtBytes(fp.Total), fmtBytes(budget))
}

// fmtBytes formats b in KB, MB or GB (powers of 1000).
func fmtBytes(b int64) string {
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(b)/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(b)/1e6)
	case b >= 1e3:
		return fmt.Sprintf("%.1f KB", float64(b)/1e3)
	}
	return fmt.Sprintf("%d B", b)
}
