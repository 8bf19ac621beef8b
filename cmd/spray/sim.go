package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/sprayfabric/spray/sim"
)

const simUsage = `usage: spray sim [flags]

Runs a workload on a simulated fabric (leaf-spine or fat-tree, shared-buffer switches, ECN, INT,
ECMP, PFC) with spray's own transport code on every host under a simulated clock, once per
profile and scenario, and prints the table spray compare prints plus PFC pauses and switch
buffer occupancy. No root, no network: everything runs in this process, deterministic for a seed.

  spray sim                                               128 hosts, all-to-all, every scenario
  spray sim --topo leafspine:16x64x16,rate=100gbit --workload permutation:2M --scenarios lossless
  spray sim --topo fattree:8 --workload alltoall-pairwise:1M --profiles spray
  spray sim --topo htsim:leaf_spine.topo --workload htsim:perm.cm   htsim's files
  spray sim --workload incast:64k,senders=32 --pfc off    roce without PFC

Profiles: roce (ECMP, Go-Back-N, DCQCN, PFC on), spray (adaptive spraying, selective repeat,
HPCC on INT, an ACK per eighth of a round trip at line rate, PFC off), spray-ecmp (spray's
transport on one path per QP), spray-credits (spray whose receivers pace their senders with
credit grants). Scenarios: lossless, loss0.01 and loss0.1 (random loss on every link
between switches), linkfail (a leaf's uplink to the last spine fails 20us in; the rest of the
fabric withdraws it 5 ms later). Workloads: permutation:SIZE, alltoall:SIZE (each rank's buffer,
every peer at once), alltoall-pairwise:SIZE, incast:SIZE[,senders=N], mix:SIZE[,senders=N,bg=SIZE],
moe:SIZE[,compute=DUR,iters=N], moe:ep=G[,...], htsim:FILE; options iters=N, cdf=FILE. Every host runs one
transport engine with one QP per peer (--queues: one engine per NIC queue); a workload whose QPs,
flows and buffers are estimated above --mem is refused before it runs.

moe:SIZE,compute=DUR,iters=N is an MoE layer's training steps: each rank sends SIZE/hosts to every
other (dispatch), computes for DUR (default 1ms) once all of its dispatch is in, sends SIZE/hosts
to every other again (combine), and starts the next step once all of its combine is in; iters
steps, by default enough that the compute alone lasts 100 ms. A second table gives per row the
mean step, the all-to-alls' mean and longest time, the flows' mean and p99.9, PAUSE frames, switch
buffer mean and max, and the shares of the step spent computing (MFU-style) and waiting on the
network. Rates per minute are printed only from at least 100 ms of simulated time ("-" below);
the simulated column gives each row's window.

moe:ep=G[,place=leaf|spread|pod,jobs=J,tokens=T,experts=E,topk=K,hidden=H,dispatch=B,combine=B,
grad=SIZE,routing=uniform|random,compute=DUR,iters=N] is MoE training with expert parallelism: each
of J jobs (default 1) takes its block of hosts/J hosts and splits it into EP groups of G ranks,
packed in consecutive hosts (leaf, the default), dealt over the job's leaves (spread) or over its
pods (pod: a fat-tree's). Each rank holds E/G of a group's E experts and each step dispatches each
of its T tokens, one copy per rank that holds one of the token's top-K experts, of B bytes, computes
for DUR, and combines them back; routing=uniform gives every pair the expected copies,
T x (1 - C(E-E/G, K)/C(E, K)), random draws each token's experts (seeded). With grad=SIZE the ranks
holding the same experts in a job's groups then reduce-scatter and all-gather SIZE bytes in a ring
before the next step. Defaults: DeepSeek-V3's pretraining setting as DeepEP benchmarks it, T=4096,
E=256, K=8, H=7168, FP8 dispatch (7392 B a copy) and BF16 combine (14336 B); no grad.

Fabrics at scale: --topo fattree:K,oversub=N keeps K/2/N core uplinks on each aggregation switch
(N:1 above the pod; N divides K/2); planes=N builds N copies of the fabric with every host a port
into each (the NIC's rate is N times hostrate; a frame takes the plane its ECMP key hashes to, so
spraying spreads over planes). Faults on the links between switches, chosen by --seed and named
in the header: fail=N (down from the start, withdrawn from the routes), flap=RATE[/DOWN] (each link
flaps RATE times an hour at random, down DOWN each time, default 100ms, withdrawn after 5 ms),
lossy=SHARE/P (that share of the links loses each frame with probability P).
  spray sim --topo fattree:16,oversub=4,planes=2,fail=8,flap=0.1,lossy=0.01/1e-6 --workload moe:ep=64,tokens=512

--faults fail=N,flap=RATE[/DOWN],lossy=SHARE/P runs every scenario and profile a second time with
those faults added to --topo, as rows SCENARIO+faults: the fabric lossless and faulted in one table.
--markdown FILE writes the headline table: per row each kind of collective's mean and p99.9 over its
instances (an EP group's dispatch or combine, a data parallel ring's reduce-scatter or all-gather,
in every step; the whole collective for workloads without groups), PFC pauses per minute and the
simulated time, switch buffer mean and max, the compute share of the step (compute over the mean
step), and the CPU time and peak RSS of the row. Each row runs alone, its cost measured.
  spray sim --topo fattree:8 --workload moe:ep=16,tokens=64,compute=25ms,iters=4 --scenarios lossless --faults fail=1,lossy=0.01/1e-5

The collective/bound column sets each row's mean collective time (the makespan for a workload that
is not collectives) beside its line-rate bound: the time the busiest link needs for the
collective's bytes with the profile's frame headers, each flow spread evenly over its equal-cost
paths (JSON bound_ns, and bounds_ns per collective).

PFC's thresholds: --topo ...,pfc=XOFF/XON. XOFF is when an ingress port that has brought that
much into a switch's buffer sends PAUSE: a share of the free shared buffer (dynamic; default
0.125) or bytes with a unit (static: 200k, 150000B); XON is the bytes below XOFF at which it sends
RESUME (default two frames: 3028). pfc=0.25/6k, pfc=200k/3k.

Trimming: --topo ...,trim[,alpha=A]. Without PFC, a spray data frame that its queue has no room
for is cut to its headers and sent at priority with the control frames; its receiver asks for it
again at once. alpha is the lossy queues' threshold, a share of the free buffer (default 1): with
trim, alpha=0.03125 keeps every queue short at the cost of the frames it trims.

flags:
`

func init() {
	register(command{name: "sim", summary: "roce and spray on a simulated fabric of up to thousands of hosts", run: runSim})
}

func runSim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), simUsage); fs.PrintDefaults() }
	topo := fs.String("topo", "leafspine:16x8x8,rate=100gbit", "fabric: leafspine:HxLxS or fattree:K, options rate, hostrate, corerate, delay, hostdelay, coredelay, buffer, mtu, pfc=XOFF/XON, oversub, planes, fail, flap, lossy; or htsim:FILE")
	work := fs.String("workload", "alltoall:1M", "workload: KIND:SIZE[,iters=N,senders=N,bg=SIZE,cdf=FILE,compute=DUR] or htsim:FILE")
	profs := fs.String("profiles", strings.Join(sim.DefaultProfiles, ","), "comma-separated profiles, run in this order under each scenario")
	scen := fs.String("scenarios", strings.Join(sim.DefaultScenarios, ","), "comma-separated scenarios: lossless, loss0.01, loss0.1, linkfail")
	pfc := fs.String("pfc", "", "on or off: PFC for every profile (default: on for roce, off for spray)")
	seed := fs.Uint64("seed", 1, "seed of the fabric, the transports and the workload")
	window := fs.Int("window", 256, "packets a QP may have in flight")
	limit := fs.Duration("limit", 10*time.Second, "simulated time after which a run stops")
	jsonFile := fs.String("json", "", "write the rows here as JSON")
	mdFile := fs.String("markdown", "", "write the headline table here as Markdown: per row each collective's mean and p99.9, pauses per minute, switch buffer, compute share, CPU and RSS")
	faults := fs.String("faults", "", "run every scenario and profile again with these faults on the fabric (fail=N,flap=RATE[/DOWN],lossy=SHARE/P), as rows SCENARIO+faults")
	pngFile := fs.String("png", "", "write completion-time CDFs and buffer occupancy here as PNG")
	cmFile := fs.String("write-cm", "", "write the workload here as an htsim connection matrix, and run nothing")
	hostWin := fs.Float64("host-window", sim.DefaultHostWindow, "bound each host's spray data in flight to this many bandwidth-delay products of its link (0: none)")
	hostRate := fs.Float64("host-rate", 0, "pace each host's new spray data at this share of its link, e.g. 0.94 (0: none)")
	queues := fs.Int("queues", 1, "transport engines per host, one per NIC queue, the host's QPs spread over them and its frames steered to them by QP")
	var mem sizeFlag
	fs.Var(&mem, "mem", "memory the run may hold (64G, ...); a workload estimated above it is refused, and the garbage collector keeps the heap under it (default: the machine's memory)")
	parallel := fs.Int("parallel", 0, "runs (scenario and profile pairs) made at once, as memory allows; the rows are the same whatever it is, but each row's CPU time and peak RSS are measured only at 1 (0: one per CPU core, or 1 with --markdown, whose table has them)")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	memProf := fs.String("memprofile", "", "write a heap profile to this file at the first progress report (about one a second of wall time) past --memprofile-at of simulated time (go tool pprof)")
	memProfAt := fs.Duration("memprofile-at", time.Millisecond, "simulated time of the heap profile")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs("sim", fs); err != nil {
		return err
	}
	c := check{cmd: "sim"}
	if *window < 64 || *window > 1<<20 || *window%64 != 0 {
		c.fail("window", *window, "a multiple of 64 from 64 to 1048576")
	}
	c.atLeast("queues", int64(*queues), 1)
	c.atLeast("parallel", int64(*parallel), 0)
	c.atMostInt("parallel", int64(*parallel), 1024)
	c.atMostInt("queues", int64(*queues), 1024)
	if !(*hostWin >= 0 && *hostWin <= sim.MaxHostWindow) {
		c.fail("host-window", fmt.Sprint(*hostWin), fmt.Sprintf("a number of bandwidth-delay products from 0 to %d", sim.MaxHostWindow))
	}
	c.nonNegativeDur("memprofile-at", *memProfAt)
	c.outPath("json", *jsonFile)
	c.outPath("markdown", *mdFile)
	c.outPath("png", *pngFile)
	c.outPath("write-cm", *cmFile)
	c.outPath("cpuprofile", *cpuProf)
	c.outPath("memprofile", *memProf)
	if !(*hostRate >= 0 && *hostRate <= 1) {
		c.fail("host-rate", fmt.Sprint(*hostRate), "a share of the host link, 0 to 1 (0: none)")
	}
	c.positiveDur("limit", *limit)
	if *pfc != "" && *pfc != "on" && *pfc != "off" {
		c.fail("pfc", *pfc, "on or off")
	}
	if c.err != nil {
		return c.err
	}
	var t sim.Topo
	var err error
	if f, ok := strings.CutPrefix(*topo, "htsim:"); ok {
		// A file that cannot be read or parsed is a usage error, like a
		// bad spec (TestCLIRefusesNonsense).
		r, err := os.Open(f)
		if err != nil {
			return usagef("sim: --topo %s: %v", *topo, err)
		}
		t, err = sim.ReadHtsimTopo(r)
		r.Close()
		if err != nil {
			return usagef("sim: --topo %s: %v", *topo, err)
		}
	} else if t, err = sim.ParseTopo(*topo); err != nil {
		return usagef("sim: --topo: %v", err)
	}
	// The faulted fabric: the same spec with the faults' options added.
	var ft sim.Topo
	if *faults != "" {
		if t.Faults() != "" || strings.HasPrefix(*topo, "htsim:") {
			return usagef("sim: --faults: --topo %s: want a fat-tree or leaf-spine spec without faults of its own", *topo)
		}
		for _, o := range strings.Split(*faults, ",") {
			if k, _, _ := strings.Cut(o, "="); k != "fail" && k != "flap" && k != "lossy" {
				return usagef("sim: --faults %s: %q: want fail=N, flap=RATE[/DOWN] or lossy=SHARE/P", *faults, o)
			}
		}
		if ft, err = sim.ParseTopo(*topo + "," + *faults); err != nil {
			return usagef("sim: --faults: %v", err)
		}
	}
	cfg := sim.Config{Topo: t, Profiles: strings.Split(*profs, ","), Scenarios: strings.Split(*scen, ","),
		PFC: *pfc, Seed: *seed, Window: *window, Limit: *limit, Memory: int64(mem), Queues: *queues, Parallel: cmp.Or(*parallel, defaultParallel(*mdFile)), HostWindow: cmp.Or(*hostWin, -1), HostRate: *hostRate}
	if *cmFile != "" {
		// Only the flows are built: bound them before they are.
		s, err := sim.WorkloadShape(*work, t.Hosts())
		if err != nil {
			return usagef("sim: --workload: %v", err)
		}
		if s.Flows > sim.MaxFlows {
			return usagef("sim: --write-cm: the workload has %d flows, more than %d", s.Flows, sim.MaxFlows)
		}
	} else {
		// The estimate from the parameters, before the workload's flows
		// or the fabric are built (TestSimRefusesBeforeAllocating).
		// The topology is checked: a config error is the workload's.
		switch err := sim.Preflight(cfg, *work); {
		case errors.Is(err, sim.ErrMemory):
			return usagef("%v", err)
		case err != nil:
			return usagef("sim: --workload: %v", err)
		}
	}
	w, err := sim.ParseWorkloadOn(*work, t, *seed)
	if err != nil {
		return usagef("sim: --workload: %v", err)
	}
	cfg.Workload = w
	if *cmFile != "" {
		f, err := os.Create(*cmFile)
		if err != nil {
			return err
		}
		if err := sim.WriteConnectionMatrix(f, w, t.Hosts()); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if mem > 0 {
		debug.SetMemoryLimit(int64(mem))
	}
	if !*quiet {
		cfg.Progress = func(p sim.Progress) {
			left := ""
			if run, all, ok := p.Left(); ok {
				left = fmt.Sprintf(", about %v left (%v in all %d runs)", run.Round(time.Second), all.Round(time.Second), p.Runs)
			}
			fmt.Fprintf(os.Stderr, "sim: %s/%s (run %d of %d): simulated %v, wall %v, %.2fM events/s, %d/%d flows done%s\n",
				p.Scenario, p.Profile, p.Run, p.Runs, p.Sim.Round(time.Microsecond), p.Wall.Round(time.Second),
				float64(p.Events)/p.Wall.Seconds()/1e6, p.FlowsDone, p.Flows, left)
		}
	}
	if *cpuProf != "" {
		stop, err := startCPUProfile("sim", *cpuProf)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *memProf != "" {
		cfg.Progress = heapProfileAt(*memProf, *memProfAt, cfg.Progress)
	}
	// sim.Run takes no context: a signal ends the command here, and the
	// process with it (main reports the signal and exits 128+signal).
	ctx, cancel := signalContext()
	defer cancel()
	type result struct {
		res sim.Result
		err error
	}
	ran := make(chan result, 1)
	go func() {
		res, err := runRows(cfg, ft, *faults != "")
		ran <- result{res, err}
	}()
	var res sim.Result
	select {
	case r := <-ran:
		if errors.Is(r.err, sim.ErrConfig) || errors.Is(r.err, sim.ErrMemory) { // checked before anything runs
			return usagef("%v", r.err)
		}
		if r.err != nil {
			return r.err
		}
		res = r.res
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	sim.WriteTable(os.Stdout, res)
	sim.WriteSteps(os.Stdout, res, w)
	sim.WriteCollectives(os.Stdout, res)
	sim.WriteWall(os.Stdout, res)
	if *mdFile != "" {
		var b bytes.Buffer
		sim.WriteHeadline(&b, res, w)
		if err := os.WriteFile(*mdFile, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if *jsonFile != "" {
		var b bytes.Buffer
		if err := sim.WriteJSON(&b, res); err != nil {
			return err
		}
		if err := os.WriteFile(*jsonFile, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if *pngFile != "" {
		var b bytes.Buffer
		if err := sim.WritePNG(&b, res); err != nil {
			return err
		}
		if err := os.WriteFile(*pngFile, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runRows runs cfg, and with faulted again on fabric ft, its rows'
// scenarios marked "+faults". The rows are those one sim.Run of cfg
// gives, in the same order: each runs on a fresh fabric from the seed.
// With cfg.Parallel at most 1 it runs one scenario and profile at a
// time and measures each row's CPU time and peak RSS (rowCost); with
// more, the runs of a fabric go at once and a row's cost, which the
// process's counters cannot tell apart, is left out (TestRunRowsMatchRun).
func runRows(cfg sim.Config, ft sim.Topo, faulted bool) (sim.Result, error) {
	topos := []sim.Topo{cfg.Topo}
	if faulted {
		topos = append(topos, ft)
	}
	if cfg.Parallel > 1 && len(cfg.Scenarios)*len(cfg.Profiles) > 1 {
		var res sim.Result
		for i, t := range topos {
			c := cfg
			c.Topo = t
			if p := cfg.Progress; p != nil && i > 0 {
				c.Progress = func(pr sim.Progress) {
					pr.Scenario += "+faults"
					p(pr)
				}
			}
			r, err := sim.Run(c)
			if err != nil {
				return res, err
			}
			if i == 0 {
				res = r
				continue
			}
			for _, row := range r.Rows {
				row.Scenario += "+faults"
				res.Rows = append(res.Rows, row)
			}
			res.Faults = r.Faults + " (the +faults rows)"
		}
		return res, nil
	}
	runs, run := len(topos)*len(cfg.Scenarios)*len(cfg.Profiles), 0
	var res sim.Result
	for i, t := range topos {
		for _, sc := range cfg.Scenarios {
			for _, prof := range cfg.Profiles {
				run++
				c := cfg
				c.Topo, c.Scenarios, c.Profiles = t, []string{sc}, []string{prof}
				if p := cfg.Progress; p != nil {
					n := run
					c.Progress = func(pr sim.Progress) {
						if i > 0 {
							pr.Scenario += "+faults"
						}
						pr.Run, pr.Runs = n, runs
						p(pr)
					}
				}
				done := rowCost()
				r, err := sim.Run(c)
				if err != nil {
					return res, err
				}
				row := r.Rows[0]
				row.CPU, row.RSS = done()
				if i > 0 {
					row.Scenario += "+faults"
					r.Faults += " (the +faults rows)"
				}
				rows := append(res.Rows, row)
				if i == 0 {
					res = r
				}
				res.Faults, res.Rows = r.Faults, rows
			}
		}
	}
	return res, nil
}

// heapProfileAt returns a Progress function that calls next and, at the
// first report past the simulated time at, writes a heap profile of the
// live objects to path (errors on stderr: the run goes on).
func heapProfileAt(path string, at time.Duration, next func(sim.Progress)) func(sim.Progress) {
	done := false
	return func(p sim.Progress) {
		if next != nil {
			next(p)
		}
		if done || p.Sim < at {
			return
		}
		done = true
		runtime.GC()
		f, err := os.Create(path)
		if err == nil {
			err = pprof.WriteHeapProfile(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "sim: --memprofile: %v\n", err)
		}
	}
}

// defaultParallel is --parallel's value when it is not given: one run
// per core, or one at a time when the headline table (--markdown) wants
// each row's own CPU time and peak RSS (TestSimFaults).
func defaultParallel(markdown string) int {
	if markdown != "" {
		return 1
	}
	return runtime.GOMAXPROCS(0)
}
