package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"
	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link/route"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

const benchUsage = `usage: spray bench <collective> [flags]
       spray bench incast [flags]      (the incast command's flags)

Collectives: alltoall, allreduce, allgather, reducescatter, broadcast. The output is
nccl-tests': size, count, type, redop, root, time per iteration, algbw, busbw, #wrong,
and the p50, p99 and p99.9 of the iterations' times (each the slowest rank's).

  spray bench alltoall -b 8 -e 64M -f 2         --world ranks in this process over spray's
                                                in-memory fabric (or loopback TCP with
                                                --transport tcp); no privilege needed
  sudo spray bench alltoall --testbed leafspine:2x2x1
                                                a leaf-spine fabric of namespaces, one
                                                process per host (rank = host index)
  spray bench allreduce --rank R --world N --bootstrap HOST:PORT [--link udp]
                                                one rank per host; rank 0 listens at
                                                HOST:PORT (its own address) and prints
  mpirun -np 4 spray bench alltoall             rank, world and rank 0's address from
  srun -N 2 -n 2 spray bench alltoall           mpirun, srun or torchrun (RANK, WORLD_SIZE,
                                                MASTER_ADDR, MASTER_PORT+1); mpirun across
                                                hosts: -x SPRAY_BOOTSTRAP=HOST:PORT. Flags win.
                                                --bootstrap-file F: rank 0 takes a port the
                                                kernel picks and writes HOST:PORT to F.
                                                Ranks on a loopback bootstrap address B use
                                                B+rank (127.0.0.1, .2, ...)

Sizes take the suffixes K, M and G (KiB, MiB, GiB). Transports: spray (the spray profile),
roce (the classic RoCEv2 profile: Go-Back-N, one path, DCQCN), tcp (kernel TCP). Each
profile runs its own congestion control (spray: auto, Swift from RTT or HPCC from INT;
roce: DCQCN) unless --cc names another.

flags:
`

// benchFlags are the flags of spray bench.
type benchFlags struct {
	op                     string
	minB, maxB, chunk      sizeFlag
	factor, warmup, iters  int
	typ, redop             string
	root, check, paths     int
	jsonOut, progress      string
	transport, linkKind    string
	ccName                 string
	rank, world            int
	bootstrap, ip, testbed string
	bootstrapFile          string
	metrics                string
	pskFile                string
	integrityOnly          bool
	psk                    []byte // read from pskFile
	seed                   uint64
	timeout, minRTO        time.Duration
	joinTimeout            time.Duration
	// launched is set when a launcher's environment (mpirun, srun,
	// torchrun) gave the rank: its stderr is a pipe the launcher forwards
	// line by line.
	launched bool

	// onEndpoint instruments the endpoints for --metrics.
	onEndpoint func(*transport.Endpoint)

	stdout, stderr io.Writer
	stderrFd       int
	// progressHook, when set (tests), is the progress callback.
	progressHook func(done, total int)
}

// benchWaitEvery is the period of join's reports of the ranks it waits
// for; tests shorten it.
var benchWaitEvery = 5 * time.Second

// benchBootstrapPort is rank 0's bootstrap port on a testbed.
const benchBootstrapPort = 18516

func init() {
	register(command{name: "bench", summary: "nccl-tests-style collective benchmarks (alltoall, allreduce...) and incast", run: runBench})
}

func runBench(args []string) error {
	return benchMain(args, os.Stdout, os.Stderr, int(os.Stderr.Fd()))
}

// benchMain is spray bench with its output streams (tests pass buffers).
func benchMain(args []string, stdout, stderr io.Writer, stderrFd int) error {
	if len(args) > 0 && args[0] == "incast" {
		c, ok := commands["incast"]
		if !ok {
			return fmt.Errorf("bench incast: this build of spray has no incast command")
		}
		return c.run(args[1:])
	}
	f := benchFlags{stdout: stdout, stderr: stderr, stderrFd: stderrFd}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), benchUsage); fs.PrintDefaults() }
	f.minB, f.maxB = 8, 64<<20
	fs.Var(&f.minB, "b", "smallest size in bytes (K, M, G suffixes)")
	fs.Var(&f.maxB, "e", "largest size in bytes (K, M, G suffixes)")
	fs.IntVar(&f.factor, "f", 2, "size multiplication factor between steps")
	fs.IntVar(&f.warmup, "w", 5, "untimed warm-up iterations per size")
	fs.IntVar(&f.iters, "n", 20, "timed iterations per size")
	fs.StringVar(&f.typ, "d", "float32", "element type: float32, float64, int32")
	fs.StringVar(&f.redop, "o", "sum", "reduction of allreduce and reducescatter: sum, min, max")
	fs.IntVar(&f.root, "r", 0, "root rank of broadcast")
	fs.IntVar(&f.check, "c", 1, "check results against the reference (1) or not (0)")
	fs.StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file (- for stdout, instead of the table)")
	fs.StringVar(&f.transport, "transport", "spray", "spray, roce or tcp")
	fs.StringVar(&f.linkKind, "link", "", "link of the spray and roce transports across hosts: xdp, raw or udp (default xdp with --testbed, udp with --rank)")
	fs.IntVar(&f.rank, "rank", -1, "this process's rank, across hosts")
	fs.IntVar(&f.world, "world", 8, "number of ranks")
	fs.StringVar(&f.bootstrap, "bootstrap", "", "rank 0's bootstrap address host:port, across hosts")
	fs.StringVar(&f.bootstrapFile, "bootstrap-file", "", "across hosts: rank 0 listens at the bootstrap host on a port the kernel picks and writes HOST:PORT to this new `FILE` (on a filesystem every rank sees), the other ranks read it there; rank 0 removes it once the world has joined")
	fs.StringVar(&f.ip, "ip", "", "across hosts: the local address to use (default: the source address towards the bootstrap host; rank 0: the bootstrap address)")
	fs.StringVar(&f.testbed, "testbed", "", "run on a local testbed, one process per host: leafspine:HxLxS[,rate=..] (root)")
	fs.StringVar(&f.metrics, "metrics", "", "serve the spray endpoints' OpenTelemetry metrics for Prometheus at http://ADDR/metrics while the run goes on (e.g. :9464; not with --testbed)")
	fs.StringVar(&f.progress, "progress", "auto", "progress on stderr: auto (a bar when stderr is a terminal, a line every 5 s under mpirun, srun or torchrun), on, off")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the transports")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Minute, "give up after this long")
	fs.DurationVar(&f.joinTimeout, "join-timeout", 2*time.Minute, "across hosts: give up when the world has not assembled after this long (every rank joined rank 0's bootstrap)")
	fs.IntVar(&f.paths, "paths", 8, "entropies (paths) a spray QP sprays over")
	fs.StringVar(&f.ccName, "cc", "", "congestion control of the spray and roce transports: "+strings.Join(cc.Names, ", ")+" (default: the profile's, auto for spray, dcqcn for roce; fixed is an unlimited window)")
	fs.Var(&f.chunk, "chunk", "largest message of the collectives' algorithms (0: 256K)")
	fs.DurationVar(&f.minRTO, "min-rto", 0, "smallest retransmission timeout of spray and roce QPs (0: the transport's 1ms; with --testbed, 4x a full switch queue's drain time, at least 5ms, as spray compare; in one process 5ms)")
	fs.StringVar(&f.pskFile, "psk", "", "secure the spray and roce QPs with the pre-shared key in this `FILE` (at least 16 bytes, e.g. openssl rand -hex 32), the same for every rank: packets authenticated, payloads encrypted")
	fs.BoolVar(&f.integrityOnly, "integrity-only", false, "with --psk: authenticate packets but leave payloads in clear")
	op := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		op, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if op == "" && fs.NArg() > 0 {
		op = fs.Arg(0)
		if err := parseFlags(fs, fs.Args()[1:]); err != nil {
			return err
		}
	}
	if fs.NArg() > 0 {
		return usagef("bench: unexpected argument %q", fs.Arg(0))
	}
	if op == "" {
		return usagef("bench: which collective? (%s)", strings.Join(bench.CollOps, ", "))
	}
	f.op = op
	if err := f.fromLauncher(fs, os.Getenv); err != nil {
		return err
	}
	if f.ccName != "" {
		if _, err := cc.ByName(f.ccName, cc.Params{}); err != nil {
			return usagef("bench: --cc: %v", err)
		}
	}
	cfg, err := f.collConfig()
	if err != nil {
		return err
	}
	if f.metrics != "" && f.testbed != "" {
		return usagef("bench: --metrics with --testbed: every rank runs in its own namespace, out of reach; use --metrics in one process or with --rank")
	}
	switch f.transport {
	case "spray", "roce", "tcp":
	default:
		return usagef("bench: --transport %q: want spray, roce or tcp", f.transport)
	}
	if err := f.checkPlacement(); err != nil {
		return err
	}
	switch {
	case f.integrityOnly && f.pskFile == "":
		return usagef("bench: --integrity-only needs --psk FILE")
	case f.pskFile != "" && f.transport == "tcp":
		return usagef("bench: --psk secures spray and roce QPs, not kernel TCP")
	case f.pskFile != "":
		if f.psk, err = spray.LoadPSK(f.pskFile); err != nil {
			return usagef("bench: --psk: %v", err)
		}
	}

	var hook transport.Config
	stopMetrics, err := serveMetrics(f.metrics, &hook, log.New(stderr, "spray bench: ", 0).Printf)
	if err != nil {
		return err
	}
	defer stopMetrics()
	f.onEndpoint = hook.OnEndpoint

	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, f.timeout)
	defer cancelT()
	switch {
	case f.testbed != "":
		return f.runTestbed(ctx)
	case f.rank >= 0:
		return f.runRank(ctx, cfg)
	}
	return f.runLocal(ctx, cfg)
}

// collConfig checks the flags that describe the sweep.
func (f *benchFlags) collConfig() (bench.CollConfig, error) {
	var red collective.Op
	switch f.redop {
	case "sum":
		red = collective.Sum
	case "min":
		red = collective.Min
	case "max":
		red = collective.Max
	default:
		return bench.CollConfig{}, usagef("bench: -o %q: want sum, min or max", f.redop)
	}
	if !slices.Contains(bench.CollTypes, f.typ) {
		return bench.CollConfig{}, usagef("bench: -d %q: want %s", f.typ, strings.Join(bench.CollTypes, ", "))
	}
	if !slices.Contains(bench.CollOps, f.op) {
		return bench.CollConfig{}, usagef("bench: collective %q: want %s (or incast)", f.op, strings.Join(bench.CollOps, ", "))
	}
	if f.minB <= 0 || f.maxB < f.minB {
		return bench.CollConfig{}, usagef("bench: sizes -b %d -e %d: want 0 < b <= e", f.minB, f.maxB)
	}
	c := check{cmd: "bench"}
	c.atLeast("f", int64(f.factor), 2)
	c.atLeast("w", int64(f.warmup), 0)
	c.atLeast("n", int64(f.iters), 1)
	c.atMostInt("n", int64(f.iters), 1_000_000)
	c.atMostInt("w", int64(f.warmup), 1_000_000)
	c.atLeast("r", int64(f.root), 0)
	c.atLeast("paths", int64(f.paths), 1)
	c.atMostInt("paths", int64(f.paths), 1024)
	if f.jsonOut != "-" {
		c.outPath("json", f.jsonOut)
	}
	c.atLeast("chunk", int64(f.chunk), 0)
	c.positiveDur("timeout", f.timeout)
	c.nonNegativeDur("min-rto", f.minRTO)
	c.positiveDur("join-timeout", f.joinTimeout)
	c.atMost("b", int64(f.minB), 1<<32)
	c.atMost("e", int64(f.maxB), 1<<32)
	c.atMost("chunk", int64(f.chunk), 1<<30)
	if f.progress != "auto" && f.progress != "on" && f.progress != "off" {
		c.fail("progress", f.progress, "auto, on or off")
	}
	if f.check != 0 && f.check != 1 {
		c.fail("c", f.check, "0 or 1")
	}
	if c.err != nil {
		return bench.CollConfig{}, c.err
	}
	if f.world < 1 || f.world > collective.MaxWorld {
		return bench.CollConfig{}, usagef("bench: --world %d: want 1 to %d", f.world, collective.MaxWorld)
	}
	cfg := bench.CollConfig{Op: f.op, Type: f.typ, Reduce: red, MinBytes: int64(f.minB), MaxBytes: int64(f.maxB),
		Factor: f.factor, Warmup: f.warmup, Iters: f.iters, Check: f.check != 0, Root: f.root}
	if f.chunk > 0 {
		cfg.Options = &collective.Options{ChunkBytes: int(f.chunk)}
	}
	if f.op == bench.OpBroadcast && (f.root < 0 || f.root >= f.world) && f.testbed == "" {
		return cfg, usagef("bench: -r %d: want a rank in [0, %d)", f.root, f.world)
	}
	return cfg, nil
}

// checkPlacement refuses, before anything is built, the flags that say
// where the ranks run and do not fit together: a testbed spray cannot
// build, a link kind the ranks cannot use, a rank outside the world.
func (f *benchFlags) checkPlacement() error {
	switch f.linkKind {
	case "", bench.KindXDP, bench.KindRaw, bench.KindUDP, "mem":
	default:
		return usagef("bench: --link %q: want xdp, raw or udp", f.linkKind)
	}
	switch {
	case f.testbed != "":
		if !strings.HasPrefix(f.testbed, "leafspine") {
			return usagef("bench: --testbed %q: want leafspine:HxLxS", f.testbed)
		}
		lcfg, err := testbed.ParseLeafSpine(f.testbed)
		if err != nil {
			return usagef("bench: --testbed: %v", err)
		}
		if n := lcfg.Hosts * lcfg.Leaves; f.op == bench.OpBroadcast && (f.root < 0 || f.root >= n) {
			return usagef("bench: -r %d: want a rank in [0, %d)", f.root, n)
		}
		if f.linkKind == "mem" {
			return usagef("bench: --link mem runs in one process, not on a testbed")
		}
	case f.rank >= 0:
		if f.bootstrap == "" {
			return usagef("bench: --rank needs --bootstrap HOST:PORT (rank 0's address)")
		}
		if f.rank >= f.world {
			return usagef("bench: --rank %d of --world %d: want a rank in [0, %d)", f.rank, f.world, f.world)
		}
		if _, _, err := net.SplitHostPort(f.bootstrap); err != nil {
			return usagef("bench: --bootstrap %q: want HOST:PORT", f.bootstrap)
		}
		if f.ip != "" {
			ip, err := netip.ParseAddr(f.ip)
			if err != nil {
				return usagef("bench: --ip %q: want an IP address", f.ip)
			}
			// An address of another host would wait out the join
			// timeout: refuse it at once.
			if !localAddress(ip) {
				return usagef("bench: --ip %v is not an address of this host (ip -br addr lists them)", ip)
			}
		}
		if f.linkKind == "mem" {
			return usagef("bench: --link mem runs in one process, not across hosts")
		}
	case f.linkKind != "" && f.linkKind != "mem":
		return usagef("bench: --link %s needs --testbed or --rank (in one process the ranks share link/mem)", f.linkKind)
	}
	if f.bootstrapFile != "" && (f.rank < 0 || f.testbed != "") {
		return usagef("bench: --bootstrap-file needs --rank or a launcher (mpirun, srun, torchrun), not --testbed")
	}
	return nil
}

// transportConfig is the transport configuration of a spray or roce run.
func (f *benchFlags) transportConfig(rank int) transport.Config {
	prof := transport.Spray
	if f.transport == "roce" {
		prof = transport.RoCE
	}
	tc := transport.Config{Profile: prof, Seed: f.seed + uint64(rank), Entropies: f.paths, OnEndpoint: f.onEndpoint, MinRTO: f.minRTO}
	f.setCC(&tc)
	return tc
}

// setCC sets tc.CC from --cc (setNamedCC) and ECN marking for dcqcn.
func (f *benchFlags) setCC(tc *transport.Config) {
	_ = setNamedCC(f.ccName, tc) // runBench checked the name
	tc.ECN = f.ccName == "dcqcn"
}

// dcqcn reports whether the run's controller is DCQCN (the roce profile's
// by default), which needs the fabric to mark ECN.
func (f *benchFlags) dcqcn() bool {
	return f.ccName == "dcqcn" || f.ccName == "" && f.transport == "roce"
}

// progressFunc returns the progress callback of rank 0: a bar on stderr
// when asked for, or when auto and stderr is a terminal; nil otherwise.
func (f *benchFlags) progressFunc() (func(done, total int), func()) {
	if f.progressHook != nil {
		return f.progressHook, func() {}
	}
	on := f.progress == "on"
	if f.progress == "auto" {
		_, err := unix.IoctlGetTermios(f.stderrFd, unix.TCGETS)
		on = err == nil
		if !on && f.launched {
			return f.progressLines(5 * time.Second), func() {}
		}
	}
	if !on {
		return nil, func() {}
	}
	var last time.Time
	drawn := false
	draw := func(done, total int) {
		if done < total && time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		const width = 40
		n := width * done / max(total, 1)
		fmt.Fprintf(f.stderr, "\r[%s%s] %3d%% %d/%d iterations", strings.Repeat("=", n), strings.Repeat(" ", width-n), 100*done/max(total, 1), done, total)
		drawn = true
	}
	clear := func() {
		if drawn {
			fmt.Fprintf(f.stderr, "\r%s\r", strings.Repeat(" ", 80))
		}
	}
	return draw, clear
}

// progressLines returns a progress callback that writes a line to stderr
// at most every period, for a launcher that forwards whole lines (a \r bar
// would pile up in its output).
func (f *benchFlags) progressLines(period time.Duration) func(done, total int) {
	last := time.Now()
	return func(done, total int) {
		if done == total || time.Since(last) < period {
			return
		}
		last = time.Now()
		fmt.Fprintf(f.stderr, "spray bench: %d/%d iterations (%d%%)\n", done, total, 100*done/max(total, 1))
	}
}

// table starts rank 0's output of a run: the title line and a table that
// prints each row as its size finishes (cfg.OnRow), unless --json - puts
// JSON there instead. report closes it.
func (f *benchFlags) table(cfg *bench.CollConfig, world int, link string) *bench.CollTable {
	if f.jsonOut == "-" {
		return nil
	}
	fmt.Fprintf(f.stdout, "# spray bench %s: %d ranks, transport %s, link %s, %s\n", f.op, world, f.transport, link, f.protection())
	t := bench.NewCollTable(f.stdout)
	cfg.OnRow = t.Row
	return t
}

// protection names what protects the run's packets.
func (f *benchFlags) protection() string {
	switch {
	case f.psk == nil:
		return bench.ProtectionClear
	case f.integrityOnly:
		return bench.ProtectionIntegrity
	}
	return bench.ProtectionEncrypted
}

// report prints the rows (rank 0): the table on stdout, and JSON to the
// --json file or, for "-", to stdout instead of the table.
func (f *benchFlags) report(t *bench.CollTable, rows []bench.CollRow, world int, link string) error {
	if t != nil {
		t.Close()
	}
	if f.jsonOut != "" {
		out := struct {
			Collective string          `json:"collective"`
			World      int             `json:"world"`
			Transport  string          `json:"transport"`
			Link       string          `json:"link"`
			Protection string          `json:"protection"`
			Rows       []bench.CollRow `json:"rows"`
		}{f.op, world, f.transport, link, f.protection(), rows}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		b = append(b, '\n')
		if f.jsonOut == "-" {
			_, err := f.stdout.Write(b) // instead of the table
			return err
		}
		if err := os.WriteFile(f.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runLocal runs every rank in this process: over one link/mem fabric
// (spray, roce) or loopback TCP.
func (f *benchFlags) runLocal(ctx context.Context, cfg bench.CollConfig) error {
	var comms []collective.Comm
	link := "mem"
	if f.transport == "tcp" {
		link = "loopback"
		cs, err := collectivetest.TCP(ctx, f.world, collective.TCPConfig{})
		if err != nil {
			return err
		}
		for _, c := range cs {
			defer c.Close()
			comms = append(comms, c)
		}
	} else {
		// collectivetest.Spray raises the RTO floor: every rank's engine shares this
		// machine's cores.
		w, err := collectivetest.Spray(ctx, f.world, collectivetest.SprayConfig{Transport: f.transportConfig(0),
			PSK: f.psk, IntegrityOnly: f.integrityOnly})
		if err != nil {
			return err
		}
		defer w.Close()
		for _, c := range w.Comms {
			comms = append(comms, c)
		}
	}
	link += " (one process)"
	t := f.table(&cfg, f.world, link)
	progress, clear := f.progressFunc()
	rows, err := bench.RunCollectiveLocal(ctx, comms, cfg, progress)
	clear()
	if err != nil {
		return err
	}
	return f.report(t, rows, f.world, link)
}

// runRank runs one rank of a world that spans processes.
func (f *benchFlags) runRank(ctx context.Context, cfg bench.CollConfig) error {
	if f.transport != "tcp" {
		if err := linkPrivilege("bench", f.linkKind); err != nil {
			return err
		}
	}
	logger := log.New(f.stderr, fmt.Sprintf("spray bench rank %d: ", f.rank), 0)
	b, err := f.join(ctx, logger)
	if err != nil {
		return err
	}
	defer b.Close()
	local, err := f.localAddr(ctx)
	if err != nil {
		return err
	}
	var comm collective.Comm
	link := "kernel"
	if f.transport == "tcp" {
		c, err := collective.NewTCPComm(ctx, b, collective.TCPConfig{Listen: netip.AddrPortFrom(local, 0).String()})
		if err != nil {
			return err
		}
		defer c.Close()
		comm = c
	} else {
		link = f.linkKind
		if link == "" {
			link = bench.KindUDP
		}
		ep, err := f.openEndpoint(ctx, local, link, logger)
		if err != nil {
			return err
		}
		defer ep.Close()
		var next func(context.Context, netip.Addr) ([6]byte, error)
		if link != bench.KindUDP {
			next = func(ctx context.Context, ip netip.Addr) ([6]byte, error) {
				p, err := route.Resolve(ctx, ip)
				return p.DstMAC, err
			}
		}
		c, err := collective.NewSprayCommConfig(ctx, ep, b, collective.SprayConfig{NextHop: next, PSK: f.psk, IntegrityOnly: f.integrityOnly})
		if err != nil {
			return err
		}
		defer c.Close()
		comm = c
	}
	var progress func(int, int)
	clear := func() {}
	var t *bench.CollTable
	if f.rank == 0 {
		t = f.table(&cfg, f.world, link)
		progress, clear = f.progressFunc()
	}
	rows, err := bench.RunCollective(ctx, comm, cfg, progress)
	clear()
	if err != nil {
		return err
	}
	// Nobody closes while others still send.
	if err := b.Barrier(ctx); err != nil {
		return err
	}
	if f.rank != 0 {
		return nil
	}
	return f.report(t, rows, f.world, link)
}

// join joins the world at --bootstrap within --join-timeout, saying every
// few seconds which ranks it still waits for (TestBenchRankMissing).
func (f *benchFlags) join(ctx context.Context, logger *log.Logger) (*collective.Bootstrap, error) {
	jctx, cancel := context.WithTimeout(ctx, f.joinTimeout)
	defer cancel()
	start := time.Now()
	cfg := collective.BootstrapConfig{Rank: f.rank, Size: f.world, Addr: f.bootstrap}
	if f.bootstrapFile != "" {
		done, err := f.bootstrapByFile(jctx, &cfg)
		if err != nil {
			return nil, err
		}
		defer done()
	}
	cfg.WaitEvery, cfg.Waiting = benchWaitEvery, func(missing []int) {
		who := make([]string, len(missing))
		for i, r := range missing {
			who[i] = strconv.Itoa(r)
		}
		what := "rank(s) " + strings.Join(who, ", ") + " to join"
		if f.rank != 0 {
			what = "rank 0 to listen"
		}
		logger.Printf("waiting for %s at %s (%v of --join-timeout %v)", what, cfg.Addr, time.Since(start).Round(time.Second), f.joinTimeout)
	}
	b, err := collective.NewBootstrap(jctx, cfg)
	if err != nil && ctx.Err() == nil && jctx.Err() != nil {
		return nil, fmt.Errorf("bench: the world of %d ranks did not assemble within --join-timeout %v: %w", f.world, f.joinTimeout, err)
	}
	return b, err
}

// localAddress reports whether ip is assigned to an interface of this
// host (of the calling thread's network namespace), or is a loopback
// address (Linux answers for all of 127.0.0.0/8 on lo).
func localAddress(ip netip.Addr) bool {
	if ip.Unmap().IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: let the link say
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == ip.Unmap() {
			return true
		}
	}
	return false
}

// localAddr is the address this rank uses: --ip, else on a loopback
// bootstrap the bootstrap address plus the rank, else rank 0's bootstrap
// address on rank 0, else the source address of the route towards it.
func (f *benchFlags) localAddr(ctx context.Context) (netip.Addr, error) {
	if f.ip != "" {
		return netip.ParseAddr(f.ip)
	}
	host, _, err := net.SplitHostPort(f.bootstrap)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bench: --bootstrap %q: %w", f.bootstrap, err)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("bench: --bootstrap host %q: %v", host, err)
	}
	boot := ips[0].Unmap()
	if boot.IsLoopback() {
		if ip, ok := loopbackRank(boot, f.rank); ok {
			return ip, nil
		}
		return netip.Addr{}, fmt.Errorf("bench: rank %d has no loopback address after %v: pass --ip", f.rank, boot)
	}
	if f.rank == 0 {
		return boot, nil
	}
	p, err := route.Resolve(ctx, boot)
	if err != nil {
		return netip.Addr{}, err
	}
	if !p.Src.IsValid() {
		return netip.Addr{}, fmt.Errorf("bench: no source address towards %v: pass --ip", boot)
	}
	return p.Src, nil
}

// openEndpoint opens a link of kind on the interface that holds local
// (spray.LookupInterface, spray.OpenLink) and starts an endpoint on it.
func (f *benchFlags) openEndpoint(ctx context.Context, local netip.Addr, kind string, logger *log.Logger) (*transport.Endpoint, error) {
	k, err := spray.ParseLinkKind(kind)
	if err == nil && k == spray.LinkAuto {
		err = errors.New("want xdp, raw or udp")
	}
	if err != nil {
		return nil, fmt.Errorf("bench: --link %s: %w", kind, err)
	}
	ifc, err := spray.LookupInterface("", local)
	if err != nil {
		return nil, fmt.Errorf("bench: %w (pass --ip)", err)
	}
	// Jumbo frames at most (loopback's MTU is 64 KiB).
	frame := min(ifc.MTU, 9000) + 14
	l, _, _, err := spray.OpenLink(spray.LinkConfig{Kind: k, Interface: ifc, FrameSize: frame, Logf: logger.Printf,
		Entropies: multipath.Entropies(f.seed^0x706f727473+uint64(f.rank), max(f.paths, 8))})
	if err != nil {
		return nil, fmt.Errorf("bench: opening a %s link on %s (%v): %w", kind, ifc.Name, local, err)
	}
	tc := f.transportConfig(f.rank)
	tc.MTU = frame
	f.setCC(&tc)
	tc = tc.OnINTFabric(0)
	ep, err := transport.NewEndpoint(l, tc)
	if err != nil {
		l.Close()
		return nil, err
	}
	return ep, nil
}

// runTestbed builds a leaf-spine fabric and runs one process per host,
// this executable re-executed inside the host's namespace with --rank,
// --world and --bootstrap (host 0's address). It forwards rank 0's output
// and reports every rank's errors.
func (f *benchFlags) runTestbed(ctx context.Context) error {
	if err := testbed.CheckPrivilege(); err != nil {
		return fmt.Errorf("bench --testbed %s: %w", f.testbed, err)
	}
	lcfg, err := testbed.ParseLeafSpine(f.testbed)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fab, err := testbed.NewLeafSpine(ctx, lcfg)
	if err != nil {
		return err
	}
	defer fab.Close()
	var ecn ebpf.ECNConfig
	if f.dcqcn() { // DCQCN reacts to ECN marks
		ecn = ebpf.ECNConfig{KMin: 20 * time.Microsecond, KMax: 200 * time.Microsecond, PMax: 0.2}
	}
	progs, err := fab.AttachProgramsContext(ctx, ecn)
	if err != nil {
		return err
	}
	defer progs.Close()
	if f.minRTO == 0 {
		// A queue building on a software fabric must not look like a loss.
		c := fab.Config
		drain := time.Duration(float64(c.BufferBytes) * 8 / float64(max(c.RateBps, 1)) * 1e9)
		f.minRTO = max(4*drain, 5*time.Millisecond)
	}
	n := len(fab.Hosts)
	if f.op == bench.OpBroadcast && (f.root < 0 || f.root >= n) {
		return fmt.Errorf("bench: -r %d: want a rank in [0, %d)", f.root, n)
	}
	boot := netip.AddrPortFrom(fab.Hosts[0].IP, benchBootstrapPort).String()
	fmt.Fprintf(f.stderr, "spray bench: testbed %s: %s, %d ranks, bootstrap %s\n", fab.Prefix, fab.Config, n, boot)
	progress := "off"
	if p, _ := f.progressFunc(); p != nil {
		progress = "on"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, n)
	logs := make([]bytes.Buffer, n)
	var wg sync.WaitGroup
	for r, h := range fab.Hosts {
		args := f.rankArgs(r, n, boot, progress)
		cmd := h.Command(ctx, exe, args...)
		cmd.Stdout = io.Discard
		cmd.Stderr = &logs[r]
		if r == 0 {
			cmd.Stdout = f.stdout
			cmd.Stderr = io.MultiWriter(f.stderr, &logs[r])
		}
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("bench: starting rank %d in %s: %w", r, h.Name, err)
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				errs[r] = fmt.Errorf("rank %d (%s, %v): %w", r, h.Name, h.IP, err)
				cancel()
			}
		})
	}
	wg.Wait()
	var failed []error
	for r, err := range errs {
		if err == nil {
			continue
		}
		if r != 0 && logs[r].Len() > 0 {
			err = fmt.Errorf("%w\n%s", err, strings.TrimSpace(logs[r].String()))
		}
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

// rankArgs are the arguments of rank r's process on a testbed.
func (f *benchFlags) rankArgs(r, n int, boot, progress string) []string {
	kind := f.linkKind
	if kind == "" {
		kind = bench.KindXDP
	}
	args := []string{"bench", f.op,
		"-b", f.minB.String(), "-e", f.maxB.String(), "-f", strconv.Itoa(f.factor),
		"-w", strconv.Itoa(f.warmup), "-n", strconv.Itoa(f.iters), "-d", f.typ, "-o", f.redop,
		"-r", strconv.Itoa(f.root), "-c", strconv.Itoa(f.check),
		"--transport", f.transport, "--link", kind, "--seed", strconv.FormatUint(f.seed, 10),
		"--paths", strconv.Itoa(f.paths), "--chunk", f.chunk.String(), "--timeout", f.timeout.String(), "--min-rto", f.minRTO.String(),
		"--join-timeout", f.joinTimeout.String(),
		"--rank", strconv.Itoa(r), "--world", strconv.Itoa(n), "--bootstrap", boot,
	}
	if f.ccName != "" {
		args = append(args, "--cc", f.ccName)
	}
	if f.pskFile != "" {
		args = append(args, "--psk", f.pskFile)
		if f.integrityOnly {
			args = append(args, "--integrity-only")
		}
	}
	if r == 0 {
		args = append(args, "--progress", progress)
		if f.jsonOut != "" {
			args = append(args, "--json", f.jsonOut)
		}
	} else {
		args = append(args, "--progress", "off")
	}
	return args
}
