package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

const soakUsage = `usage: spray soak [flags]    (scripts/soak runs it)

Runs rounds of transfers and collectives in this process over spray's
in-memory fabric for --duration, each round with random faults drawn from
--seed: loss, loss bursts, reordering, link flaps (the fabric drops every
frame for a while) and peer restarts (an endpoint closed in the middle of a
transfer; its peer must fail with an error, not hang, and a new pair must
then transfer byte-exact). Every transfer is checked by SHA-256 and every
collective element against a reference. After each round it samples the
process's RSS and goroutines (after a GC); at the end it compares the last
quarter of the samples with the first. Exit status 1 if any message or
element was wrong, a dead peer hung its survivor, or RSS or goroutines
grew; one JSON summary line with --json.

flags:
`

func init() {
	register(command{name: "soak", hidden: true, summary: "transfers and collectives under random faults for a time, checking bytes, RSS and goroutines", run: runSoak})
}

// soakReport is the summary of a soak.
type soakReport struct {
	Seed          uint64   `json:"seed"`
	Seconds       float64  `json:"seconds"`
	Rounds        int      `json:"rounds"`
	Transfers     int      `json:"transfers"`
	Bytes         int64    `json:"bytes"`
	Collectives   int      `json:"collectives"`
	Elements      int64    `json:"elements_checked"`
	Flaps         int      `json:"flaps"`
	Restarts      int      `json:"peer_restarts"`
	Wrong         int      `json:"wrong"`
	Hung          int      `json:"hung"`
	Failed        int      `json:"failed_rounds"`
	RSSFirstMiB   float64  `json:"rss_first_quarter_mib"`
	RSSLastMiB    float64  `json:"rss_last_quarter_mib"`
	GoroutinesMin int      `json:"goroutines_first_quarter"`
	GoroutinesEnd int      `json:"goroutines_last_quarter"`
	Errors        []string `json:"errors,omitempty"`
}

func runSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), soakUsage); fs.PrintDefaults() }
	duration := fs.Duration("duration", 5*time.Minute, "how long to soak")
	seed := fs.Uint64("seed", 1, "seed of the rounds and their faults")
	jsonOut := fs.Bool("json", false, "print the summary as one JSON line")
	paths := fs.String("paths", "", "path policy of the transfers' QPs: adaptive or spray (default: the profile's)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs("soak", fs); err != nil {
		return err
	}
	c := check{cmd: "soak"}
	c.positiveDur("duration", *duration)
	if c.err != nil {
		return c.err
	}
	ctx, cancel := signalContext()
	defer cancel()
	var policy transport.PathPolicy
	switch *paths {
	case "":
	case "adaptive":
		policy = transport.PathsAdaptive
	case "spray":
		policy = transport.PathsSpray
	default:
		return usagef("soak: --paths %q: want adaptive or spray", *paths)
	}
	rep, err := soak(ctx, *duration, *seed, policy, os.Stderr)
	if *jsonOut {
		_ = json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		fmt.Printf("soak: %d rounds in %.0f s (seed %d): %d transfers (%d MiB), %d collectives (%d elements), %d link flaps, %d peer restarts\n",
			rep.Rounds, rep.Seconds, rep.Seed, rep.Transfers, rep.Bytes>>20, rep.Collectives, rep.Elements, rep.Flaps, rep.Restarts)
		fmt.Printf("soak: %d wrong, %d hung survivors, %d failed rounds; RSS %.1f -> %.1f MiB, goroutines %d -> %d\n",
			rep.Wrong, rep.Hung, rep.Failed, rep.RSSFirstMiB, rep.RSSLastMiB, rep.GoroutinesMin, rep.GoroutinesEnd)
	}
	return err
}

// rssBytes reads this process's resident set size.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// soakFabric draws a fabric's faults for a round.
func soakFabric(rng *rand.Rand, flapping *atomic.Bool) mem.Config {
	c := mem.Config{Seed: rng.Uint64(), Delay: time.Duration(2+rng.IntN(20)) * time.Microsecond, FrameSize: 9014}
	switch rng.IntN(4) {
	case 0: // clean
	case 1:
		c.Loss = rng.Float64() * 0.02
	case 2:
		// A burst ends after its frames or 1 ms, whichever comes first:
		// counted in frames only, a burst that catches a sender with
		// nothing left to send but resends swallows one resend per
		// timeout, and one of a few dozen frames outlasts the QP's
		// MaxRetries timeouts: a link down for seconds, which is what
		// the flaps (up to 40 ms) model, not a loss burst.
		c.BurstLoss, c.BurstLen, c.BurstTime = rng.Float64()*0.002, 2+rng.IntN(30), time.Millisecond
	case 3:
		c.Loss = rng.Float64() * 0.005
		c.Reorder, c.ReorderDelay = rng.Float64()*0.1, time.Duration(10+rng.IntN(100))*time.Microsecond
	}
	c.Filter = func([]byte) bool { return !flapping.Load() }
	return c
}

// flap takes the fabric down for a random while, a few times, until ctx
// ends; it counts the flaps.
func flap(ctx context.Context, rng *rand.Rand, flapping *atomic.Bool, n *atomic.Int64) {
	for {
		t := time.NewTimer(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			flapping.Store(false)
			return
		case <-t.C:
		}
		flapping.Store(true)
		n.Add(1)
		time.Sleep(time.Duration(1+rng.IntN(40)) * time.Millisecond)
		flapping.Store(false)
	}
}

// soakPair makes two endpoints on fab.
func soakPair(fab *mem.Fabric, seed uint64, paths transport.PathPolicy) (*transport.Endpoint, *transport.Endpoint, error) {
	// The engines share this machine's cores: an ACK may wait for the
	// scheduler, so the RTO floor is that of collectivetest.Spray.
	cfg := transport.Config{Seed: seed, MTU: 9014, MinRTO: collectivetest.RTOFloor, MaxRetries: collectivetest.MaxRetries, Paths: paths}
	pa, err := fab.NewPort([6]byte{2, 0x53, 0x4f, 0, 0, 1}, netip.AddrFrom4([4]byte{10, 98, 0, 1}))
	if err != nil {
		return nil, nil, err
	}
	a, err := transport.NewEndpoint(pa, cfg)
	if err != nil {
		pa.Close()
		return nil, nil, err
	}
	pb, err := fab.NewPort([6]byte{2, 0x53, 0x4f, 0, 0, 2}, netip.AddrFrom4([4]byte{10, 98, 0, 2}))
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	cfg.Seed++
	b, err := transport.NewEndpoint(pb, cfg)
	if err != nil {
		a.Close()
		pb.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// soak runs the rounds; see soakUsage.
func soak(ctx context.Context, d time.Duration, seed uint64, paths transport.PathPolicy, log io.Writer) (soakReport, error) {
	rep := soakReport{Seed: seed}
	var flaps atomic.Int64
	rng := rand.New(rand.NewPCG(seed, seed^0x736f616b))
	start := time.Now()
	var rss []int64
	var gos []int
	var faults string // the round's, for its errors
	fail := func(round int, what string, err error) {
		rep.Failed++
		msg := fmt.Sprintf("round %d (%s): %s: %v", round, faults, what, err)
		fmt.Fprintln(log, "spray soak:", msg)
		if len(rep.Errors) < 20 {
			rep.Errors = append(rep.Errors, msg)
		}
	}
	for round := 0; time.Since(start) < d && ctx.Err() == nil; round++ {
		rep.Rounds++
		var flapping atomic.Bool
		fcfg := soakFabric(rng, &flapping)
		faults = fmt.Sprintf("loss %.4f, bursts %.4f x %d, reorder %.3f", fcfg.Loss, fcfg.BurstLoss, fcfg.BurstLen, fcfg.Reorder)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		frng := rand.New(rand.NewPCG(rng.Uint64(), 1))
		flapped := make(chan struct{})
		if rng.IntN(3) == 0 {
			faults += ", flaps"
			go func() { flap(rctx, frng, &flapping, &flaps); close(flapped) }()
		} else {
			close(flapped)
		}
		switch kind := rng.IntN(3); kind {
		case 0, 1: // a transfer, or a peer restart then a transfer
			fab := mem.NewFabric(fcfg, clock.NewSystem())
			a, b, err := soakPair(fab, rng.Uint64(), paths)
			if err != nil {
				cancel()
				return rep, err
			}
			if kind == 1 {
				// The peer dies in the middle: the survivor must fail
				// with an error well before the round's deadline.
				rep.Restarts++
				// Drawn here, not in the goroutine: rng is not safe for
				// concurrent use, and a replay needs the draws in order.
				pc := bench.PerfConfig{MsgSize: 1 << 20, Total: 1 << 30, Pings: -1, Seed: rng.Uint64()}
				done := make(chan error, 1)
				go func() {
					_, err := bench.RunEndpoints(rctx, a, b, pc)
					done <- err
				}()
				time.Sleep(time.Duration(5+rng.IntN(100)) * time.Millisecond)
				b.Close()
				select {
				case err := <-done:
					if err == nil {
						fail(round, "restart", errors.New("the transfer completed after its peer closed"))
					}
				case <-time.After(30 * time.Second):
					rep.Hung++
					fail(round, "restart", errors.New("the survivor of a closed peer did not return in 30 s"))
				}
				a.Close()
				if a, b, err = soakPair(fab, rng.Uint64(), paths); err != nil {
					cancel()
					return rep, err
				}
			}
			total := int64(1+rng.IntN(64)) << 20
			pings := rng.IntN(50)
			if pings == 0 {
				pings = -1 // none (0 is PerfConfig's default)
			}
			res, err := bench.RunEndpoints(rctx, a, b, bench.PerfConfig{MsgSize: 4096 << rng.IntN(9), Total: total, Pings: pings, Seed: rng.Uint64()})
			switch {
			case errors.Is(err, bench.ErrIntegrity) || err == nil && !res.Integrity:
				rep.Wrong++
				fail(round, "transfer", fmt.Errorf("bytes differ: %v", err))
			case err != nil:
				fail(round, "transfer", err)
			default:
				rep.Transfers++
				rep.Bytes += total
			}
			a.Close()
			b.Close()
		case 2: // a collective
			world := 2 + rng.IntN(5)
			w, err := collectivetest.Spray(rctx, world, collectivetest.SprayConfig{Fabric: fcfg, Transport: transport.Config{Seed: rng.Uint64()}})
			if err != nil {
				fail(round, "collective world", err)
				cancel()
				continue
			}
			comms := make([]collective.Comm, len(w.Comms))
			for i, c := range w.Comms {
				comms[i] = c
			}
			op := bench.CollOps[rng.IntN(len(bench.CollOps))]
			size := int64(1024) << rng.IntN(12)
			rows, err := bench.RunCollectiveLocal(rctx, comms, bench.CollConfig{Op: op, MinBytes: size, MaxBytes: size, Iters: 1 + rng.IntN(3), Check: true}, nil)
			if err != nil {
				fail(round, op, err)
			}
			for _, r := range rows {
				rep.Collectives++
				rep.Elements += int64(r.Count) * int64(world)
				if r.Wrong > 0 {
					rep.Wrong++
					fail(round, op, fmt.Errorf("%d wrong elements of %d bytes", r.Wrong, r.Bytes))
				}
			}
			w.Close()
		}
		cancel()
		<-flapped
		runtime.GC()
		debug.FreeOSMemory()
		rss = append(rss, rssBytes())
		gos = append(gos, runtime.NumGoroutine())
		if round%20 == 0 {
			fmt.Fprintf(log, "spray soak: %v: round %d, RSS %.1f MiB, %d goroutines, %d wrong\n",
				time.Since(start).Round(time.Second), round, float64(rss[len(rss)-1])/(1<<20), gos[len(gos)-1], rep.Wrong)
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Flaps = int(flaps.Load())
	if n := len(rss); n >= 4 {
		q := n / 4
		med := func(s []int64) float64 { s = slices.Clone(s); slices.Sort(s); return float64(s[len(s)/2]) / (1 << 20) }
		rep.RSSFirstMiB, rep.RSSLastMiB = med(rss[:q]), med(rss[n-q:])
		rep.GoroutinesMin, rep.GoroutinesEnd = slices.Max(gos[:q]), slices.Max(gos[n-q:])
	}
	var errs []error
	if rep.Wrong > 0 || rep.Hung > 0 || rep.Failed > 0 {
		errs = append(errs, fmt.Errorf("soak: %d wrong, %d hung, %d failed rounds", rep.Wrong, rep.Hung, rep.Failed))
	}
	// Flat: the last quarter's median RSS within 25% (and 32 MiB) of the
	// first's, and no more goroutines than the first quarter had.
	if rep.RSSLastMiB > rep.RSSFirstMiB*1.25+32 {
		errs = append(errs, fmt.Errorf("soak: RSS grew from %.1f to %.1f MiB", rep.RSSFirstMiB, rep.RSSLastMiB))
	}
	if rep.GoroutinesEnd > rep.GoroutinesMin {
		errs = append(errs, fmt.Errorf("soak: goroutines grew from %d to %d", rep.GoroutinesMin, rep.GoroutinesEnd))
	}
	if ctx.Err() != nil {
		errs = append(errs, context.Cause(ctx))
	}
	return rep, errors.Join(errs...)
}
