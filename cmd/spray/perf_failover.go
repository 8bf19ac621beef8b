package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/transport"
)

// failoverReport is perf --fault's summary, also its JSON.
type failoverReport struct {
	Testbed     string  `json:"testbed"`
	Link        string  `json:"link"`
	Profile     string  `json:"profile"`
	Port        string  `json:"port"`
	WindowBytes int     `json:"window_bytes,omitempty"`
	MinRTOMs    float64 `json:"min_rto_ms"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	GoodputMbps float64 `json:"goodput_mbps"`
	Integrity   bool    `json:"sha256_ok"`
	Retransmits uint64  `json:"retransmits"`
	Timeouts    uint64  `json:"timeouts"`
	FailedS     float64 `json:"failed_s"`
	RestoredS   float64 `json:"restored_s,omitempty"`
	PreMbps     float64 `json:"pre_failure_mbps"`
	PostMbps    float64 `json:"post_failure_mbps"`
	// RecoveryMs is the time from the failure to the first 20 ms window
	// whose goodput is at least (S-1)/S of PreMbps; -1 if none.
	RecoveryMs   float64   `json:"recovery_ms"`
	Recovery90Ms float64   `json:"recovery_90pct_ms"`
	DipMbps      float64   `json:"dip_mbps"`
	PathsOut     int       `json:"paths_out_max"`
	OutAfter     int       `json:"paths_out_after_restore"`
	Paths        int       `json:"paths"`
	Blackholed   uint64    `json:"blackholed_frames"`
	DeadBytes    uint64    `json:"dead_spine_bytes_while_down"`
	ProbeBytes   uint64    `json:"dead_spine_bytes_300ms_after_restore"`
	SharesAfter  []float64 `json:"spine_shares_after_restore,omitempty"`
	ProbedBack   bool      `json:"probed_back_in"`
	Spines       int       `json:"spines"`
	DeadSpine    int       `json:"dead_spine"`
	// Timeline is the goodput in Mbit/s per BucketMs, from the start.
	BucketMs float64   `json:"bucket_ms"`
	Timeline []float64 `json:"timeline_mbps"`
}

// perfFailover runs one sprayed QP across a leaf-spine fabric from the
// first host of the first leaf to the last host of the last leaf, blackholes
// a leaf-spine link in the middle of it (and restores it), and reports the
// goodput timeline around both.
func perfFailover(ctx context.Context, f perfFlags, tcfg transport.Config, logger *log.Logger) error {
	spec, at := f.faultPort, f.faultAt
	kinds := splitKinds(f.links, bench.KindXDP)
	fab, progs, err := perfFabric(ctx, f, tcfg.ECN)
	if err != nil {
		return err
	}
	defer fab.Close()
	defer progs.Close()
	sw, port, err := fab.LookupPort(spec)
	if err != nil {
		return err
	}
	a, b := fab.Host(0, 0), fab.Host(fab.Config.Leaves-1, fab.Config.Hosts-1)
	tcfg.MTU = a.MTU + 14
	tcfg = tcfg.OnINTFabric(0)
	if tcfg.Profile == transport.Spray {
		if !f.pathsSet {
			// Enough entropies that every spine gets several whatever
			// the hash does with them.
			tcfg.Entropies = 8 * fab.Config.Spines
		}
	}
	tcfg.LineRate = float64(fab.Config.HostRateBps) / 8
	if err := setNamedCC(f.ccName, &tcfg); err != nil {
		return err
	}
	window := 0
	if f.ccName == "fixed" || f.ccName == "none" {
		// Unlimited, a QP would overrun the shaped ports; bounded by half
		// a port's buffer on each surviving spine, it cannot overflow them
		// when a spine dies.
		window = int(f.windowBytes)
		if window == 0 {
			window = (fab.Config.Spines - 1) * fab.Config.BufferBytes / 2
		}
		tcfg.CC = func() cc.Controller { return cc.Fixed{WindowBytes: window} }
	}
	if tcfg.MinRTO == 0 {
		// A packet may wait in two full port queues on its way (the
		// sender's leaf uplink, the spine's port down): a retransmission
		// timeout shorter than that is spurious by construction, and
		// under CPU load the default 1 ms floor fires often.
		tcfg.MinRTO = max(time.Duration(2*fab.Config.BufferBytes*8)*time.Second/time.Duration(fab.Config.RateBps), time.Millisecond)
	}
	logger.Printf("testbed %s: %s, %s (%v) -> %s (%v); %s blackholed at %v, restored at %v", fab.Prefix, fab.Config, a.Name, a.IP, b.Name, b.IP, spec, at, f.restore)
	res, err := bench.RunFailover(ctx, bench.FailoverRun{
		Fabric: fab, Progs: progs, Switch: sw, Port: port, FailAt: at, RestoreAt: f.restore,
		Run: bench.FabricRun{A: a, B: b, Kind: kinds[0], Transport: tcfg, Total: int64(f.total), MsgSize: int(f.size), Seed: f.seed},
	})
	if err != nil {
		return err
	}
	fl := res.Flows[0]
	rep := failoverReport{
		Testbed: fab.Config.String(), Link: kinds[0], Profile: tcfg.Profile.String(), Port: spec, WindowBytes: window, MinRTOMs: float64(tcfg.MinRTO) / 1e6,
		Bytes: fl.Bytes, Seconds: fl.Seconds, GoodputMbps: fl.GoodputMbps, Integrity: fl.Integrity,
		Retransmits: fl.Sender.Retransmits, Timeouts: fl.Sender.Timeouts,
		FailedS: res.Failed.Seconds(), RestoredS: res.Restored.Seconds(), PreMbps: res.Pre / 1e6, PostMbps: res.Post / 1e6,
		RecoveryMs: -1, Recovery90Ms: -1, DipMbps: res.Dip / 1e6, PathsOut: res.PathsOut, OutAfter: res.OutAfter, Paths: res.Paths,
		Blackholed: res.Blackholed, DeadBytes: res.DeadBytes, ProbeBytes: res.ProbeBytes, SharesAfter: res.SharesAfter,
		ProbedBack: res.ProbedBack, Spines: res.Spines, DeadSpine: res.DeadSpine,
		BucketMs: float64(fl.Placed.Bucket) / 1e6,
	}
	if res.Recovered {
		rep.RecoveryMs = float64(res.Recovery) / 1e6
	}
	if res.Recovered90 {
		rep.Recovery90Ms = float64(res.Recovery90) / 1e6
	}
	for _, v := range fl.Placed.Bytes {
		rep.Timeline = append(rep.Timeline, float64(v)*8/fl.Placed.Bucket.Seconds()/1e6)
	}
	if f.jsonOut {
		return json.NewEncoder(os.Stdout).Encode(rep)
	}
	printFailover(os.Stdout, rep)
	return nil
}

// printFailover prints the failover summary for people.
func printFailover(w io.Writer, r failoverReport) {
	verdict := "ok"
	if !r.Integrity {
		verdict = "MISMATCH"
	}
	fmt.Fprintf(w, "failover: %s, %s %s, %d bytes, %s blackholed at %.3fs", r.Testbed, r.Link, r.Profile, r.Bytes, r.Port, r.FailedS)
	if r.RestoredS > 0 {
		fmt.Fprintf(w, ", restored at %.3fs", r.RestoredS)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  transfer:     %.2f s, %.1f Mbit/s, sha256 %s, %d retransmits, %d timeouts", r.Seconds, r.GoodputMbps, verdict, r.Retransmits, r.Timeouts)
	if r.WindowBytes > 0 {
		fmt.Fprintf(w, ", fixed window %d bytes", r.WindowBytes)
	}
	fmt.Fprintf(w, ", min RTO %.1f ms", r.MinRTOMs)
	fmt.Fprintln(w)
	frac := float64(r.Spines-1) / float64(r.Spines)
	fmt.Fprintf(w, "  goodput:      %.1f Mbit/s in the second before the failure, %.1f (%.2f of it) from 100 ms after it to the restore\n",
		r.PreMbps, r.PostMbps, r.PostMbps/max(r.PreMbps, 1e-9))
	rec := func(ms float64) string {
		if ms < 0 {
			return "never"
		}
		return fmt.Sprintf("%.0f ms after the failure", ms)
	}
	fmt.Fprintf(w, "  recovery:     goodput (20 ms average) back to (S-1)/S = %.0f%% of the pre-failure level: %s; to 90%% of that: %s; lowest 20 ms average in the 100 ms after the failure %.1f Mbit/s (%.2f)\n",
		100*frac, rec(r.RecoveryMs), rec(r.Recovery90Ms), r.DipMbps, r.DipMbps/max(r.PreMbps, 1e-9))
	fmt.Fprintf(w, "  paths:        up to %d of %d entropies out of the spray set while the link was down; %d frames blackholed\n", r.PathsOut, r.Paths, r.Blackholed)
	if r.RestoredS > 0 {
		shares := make([]string, len(r.SharesAfter))
		for i, s := range r.SharesAfter {
			shares[i] = fmt.Sprintf("%.3f", s)
		}
		yes := "no"
		if r.ProbedBack {
			yes = "yes"
		}
		fmt.Fprintf(w, "  restore:      probed back in: %s (spine %d carried %d bytes in the 300 ms after the restore; shares from the restore on: %s; %d entropies still out 300 ms after)\n",
			yes, r.DeadSpine, r.ProbeBytes, strings.Join(shares, " "), r.OutAfter)
	}
	around := func(at float64) string {
		var b strings.Builder
		i0 := int(at*1000/r.BucketMs) - 4
		for i := max(i0, 0); i < i0+16 && i < len(r.Timeline); i++ {
			fmt.Fprintf(&b, " %.0f", r.Timeline[i])
		}
		return b.String()
	}
	fmt.Fprintf(w, "  timeline:     Mbit/s per %.0f ms from 20 ms before the failure:%s\n", r.BucketMs, around(r.FailedS))
	if r.RestoredS > 0 {
		fmt.Fprintf(w, "                from 20 ms before the restore:%s\n", around(r.RestoredS))
	}
}
