package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/testbed"
)

// FailoverRun describes a spine link failure in the middle of a bulk
// transfer across a leaf-spine fabric: Run's flows go from Run.A to Run.B
// (on different leaves), Port is blackholed FailAt after the transfer
// starts and, when RestoreAt is positive, restored then.
type FailoverRun struct {
	Fabric *testbed.Fabric
	Progs  *ebpf.Fabric
	// Run is the transfer. Its During and PathEvery are set by RunFailover
	// (PathEvery when zero: 10ms).
	Run FabricRun
	// Switch and Port name the port to blackhole: a leaf's uplink or a
	// spine's port (testbed.Fabric.LookupPort finds them by name).
	Switch *testbed.Switch
	Port   int
	// FailAt and RestoreAt are on the transfer's clock; RestoreAt 0 leaves
	// the link dead.
	FailAt, RestoreAt time.Duration
	// Window is the span the goodput is averaged over to judge recovery;
	// 0 means 20ms.
	Window time.Duration
}

// FailoverResult is what RunFailover measured. Rates are goodput (payload
// placed at the receiver, FlowResult.Placed) in bit/s on the transfer's
// own timeline.
type FailoverResult struct {
	FabricResult
	// Spines is the fabric's spine count S, DeadSpine the spine whose link
	// failed.
	Spines, DeadSpine int
	// Failed and Restored are when the fault was set and cleared
	// (Restored 0: never).
	Failed, Restored time.Duration
	// Pre is the goodput over the second before the failure (or since the
	// start, if shorter), Post from 100ms after the failure to the restore
	// (or the end).
	Pre, Post float64
	// Recovered reports whether the goodput averaged over Window came back
	// to (S-1)/S of Pre, Recovery how long after the failure the first
	// such window began. Recovered90 and Recovery90 are the same for 90% of
	// (S-1)/S.
	Recovered, Recovered90 bool
	Recovery, Recovery90   time.Duration
	// Dip is the lowest goodput averaged over Window in the 100ms after
	// the failure.
	Dip float64
	// DeadBytes are the bytes the sender's leaf sent towards the dead spine
	// while the link was down, ProbeBytes in the 300ms after the restore;
	// SharesAfter are each spine's share of the bytes from the restore to
	// the end. ProbedBack reports that the dead spine carried at least a
	// quarter of an equal share after the restore: a spine never probed
	// back carries only the probes, and how much of its share a returned
	// one regains by the end follows how fast its paths' weights recover
	// (docs/results.md#failover; TestPerfFailover, TestFabricFailover).
	DeadBytes, ProbeBytes uint64
	SharesAfter           []float64
	ProbedBack            bool
	// PathsOut is the most entropies out of the spray set at once after the
	// failure, OutAfter how many were out 300ms after the restore (or at
	// the end), Removals how often a path was taken out over the run.
	PathsOut, OutAfter, Paths int
	Removals                  uint64
	// Blackholed counts the frames the dead port dropped.
	Blackholed uint64
}

// RunFailover runs r: the transfer, the failure and the restore, and reads
// the timeline. It fails if the transfer ends before the failure (or the
// restore) took place.
func RunFailover(ctx context.Context, r FailoverRun) (FailoverResult, error) {
	fab := r.Fabric
	if fab == nil || r.Progs == nil || r.Switch == nil || r.Run.A == nil || r.Run.B == nil {
		return FailoverResult{}, fmt.Errorf("%w: failover needs the fabric, its programs, the port and both hosts", ErrFabricRun)
	}
	if r.FailAt <= 0 || (r.RestoreAt != 0 && r.RestoreAt <= r.FailAt) {
		return FailoverResult{}, fmt.Errorf("%w: failover at %v, restore at %v: want 0 < failure < restore", ErrFabricRun, r.FailAt, r.RestoreAt)
	}
	if r.Window <= 0 {
		r.Window = 20 * time.Millisecond
	}
	res := FailoverResult{Spines: fab.Config.Spines, DeadSpine: -1}
	hosts := fab.Config.Hosts
	for _, l := range fab.Leaves {
		if l == r.Switch && r.Port >= hosts && r.Port < len(l.Ports) {
			res.DeadSpine = r.Port - hosts
		}
	}
	for s, sp := range fab.Spines {
		if sp == r.Switch && r.Port >= 0 && r.Port < len(sp.Ports) {
			res.DeadSpine = s
		}
	}
	if res.DeadSpine < 0 {
		return res, fmt.Errorf("%w: port %d of %s is not a leaf-spine link", ErrFabricRun, r.Port, r.Switch.Name)
	}
	la := -1
	for l := range fab.Leaves {
		for h := range hosts {
			if fab.Host(l, h) == r.Run.A {
				la = l
			}
		}
	}
	if la < 0 {
		return res, fmt.Errorf("%w: the sender %s is not a host of the fabric", ErrFabricRun, r.Run.A.Name)
	}
	dead := fab.PortID(r.Switch, r.Port)
	var atFail, atRestore, atProbe []uint64
	var setErr error
	run := r.Run
	if run.PathEvery == 0 {
		run.PathEvery = 10 * time.Millisecond
	}
	run.During = func(ctx context.Context, start time.Time) {
		wait := func(d time.Duration) bool {
			select {
			case <-time.After(time.Until(start.Add(d))):
				return true
			case <-ctx.Done():
				return false
			}
		}
		if !wait(r.FailAt) {
			return
		}
		atFail, _ = fab.UplinkBytes(la)
		if setErr = r.Progs.SetFaults(dead, ebpf.Faults{Blackhole: true, RoCEOnly: true}); setErr != nil {
			return
		}
		res.Failed = time.Since(start)
		if r.RestoreAt == 0 || !wait(r.RestoreAt) {
			return
		}
		atRestore, _ = fab.UplinkBytes(la)
		if setErr = r.Progs.SetFaults(dead, ebpf.Faults{}); setErr != nil {
			return
		}
		res.Restored = time.Since(start)
		if wait(r.RestoreAt + 300*time.Millisecond) {
			atProbe, _ = fab.UplinkBytes(la)
		}
	}
	fr, err := RunFabric(ctx, run)
	res.FabricResult = fr
	// Whatever happened, the link comes back for whoever uses the fabric next.
	if cerr := r.Progs.SetFaults(dead, ebpf.Faults{}); err == nil {
		err = cerr
	}
	err = errors.Join(err, setErr)
	if err != nil {
		return res, err
	}
	end, err := fab.UplinkBytes(la)
	if err != nil {
		return res, err
	}
	if res.Failed == 0 || (r.RestoreAt != 0 && atProbe == nil) {
		return res, fmt.Errorf("%w: the transfer took %.2fs and ended before the failure (at %v) and the restore (at %v) were over", ErrFabricRun, fr.Seconds, r.FailAt, r.RestoreAt)
	}
	if pc, err := r.Progs.PortCounters(dead); err == nil {
		res.Blackholed = pc.DropBlackhole
	}
	f := fr.Flows[0]
	tl := f.Placed
	res.Pre = tl.Rate(max(res.Failed-time.Second, 0), res.Failed)
	stop := res.Restored
	if stop == 0 {
		stop = time.Duration(f.Seconds * float64(time.Second))
	}
	res.Post = tl.Rate(res.Failed+100*time.Millisecond, stop)
	frac := float64(res.Spines-1) / float64(res.Spines)
	res.Recovery, res.Recovered = tl.Recovery(res.Failed, r.Window, res.Pre, frac)
	res.Recovery90, res.Recovered90 = tl.Recovery(res.Failed, r.Window, res.Pre, 0.9*frac)
	res.Dip = tl.Dip(res.Failed, res.Failed+100*time.Millisecond, r.Window)

	restoreAt := stop
	if atRestore != nil {
		res.DeadBytes = atRestore[res.DeadSpine] - atFail[res.DeadSpine]
		res.ProbeBytes = atProbe[res.DeadSpine] - atRestore[res.DeadSpine]
		d := make([]uint64, len(end))
		for i := range d {
			d[i] = end[i] - atRestore[i]
		}
		res.SharesAfter = shareOf(d)
		res.ProbedBack = res.SharesAfter[res.DeadSpine] >= 0.25/float64(res.Spines)
		restoreAt = res.Restored + 300*time.Millisecond
	} else {
		res.DeadBytes = end[res.DeadSpine] - atFail[res.DeadSpine]
	}
	for _, s := range f.PathSamples {
		out := 0
		for _, p := range s.Paths {
			if p.Down {
				out++
			}
		}
		if s.At >= res.Failed && (res.Restored == 0 || s.At < res.Restored) {
			res.PathsOut = max(res.PathsOut, out)
		}
		if s.At <= restoreAt {
			res.OutAfter = out
		}
	}
	res.Paths = len(f.Paths)
	for _, p := range f.Paths {
		res.Removals += p.Removals
	}
	return res, nil
}

// shareOf returns each element's fraction of the sum.
func shareOf(d []uint64) []float64 {
	var total uint64
	for _, v := range d {
		total += v
	}
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v) / float64(max(total, 1))
	}
	return out
}
