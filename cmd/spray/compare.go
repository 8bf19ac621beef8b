package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/telemetry"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

const compareUsage = `usage: spray compare [flags]

Runs the same all-to-all (one rank per host) with classic RoCE (ECMP, Go-Back-N, a fixed Local ACK
Timeout as RoCE NICs run it: 67 ms by default, --roce-ack-timeout), spray
(adaptive spraying, selective repeat, INT) and kernel TCP, one after the other, under each
scenario, on one leaf-spine testbed; prints one row per profile and scenario, writes the rows as
JSON and the CDF of the all-to-all completion times as a PNG into --out (results/ by default).

  sudo spray compare                          the default testbed, every scenario
  sudo spray compare --scenarios lossless,loss0.1 --size 4M --iters 50
  spray compare                               without root (or --sim): the scenarios in the simulator
                                              (spray sim), same transport code, roce with PFC
  spray compare --loopback                    ranks in this process over loopback (link/udp),
                                              lossless and loss scenarios only
  sudo spray compare --metrics :9464          and serve the endpoints' metrics for Prometheus
  sudo spray compare --psk FILE               spray and roce QPs secured (--integrity-only:
                                              payloads left in clear)

Scenarios: lossless, loss0.01 and loss0.1 (random loss at every spine link's egress), collision
(ECMP flows given entropies that hash onto one spine), spinefail (a spine link blackholed a third
of the way through, never restored).

flags:
`

func init() {
	register(command{name: "compare", summary: "roce, spray and tcp on one testbed, same all-to-all and faults, one run", run: runCompare})
}

func runCompare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), compareUsage); fs.PrintDefaults() }
	tb := fs.String("testbed", bench.DefaultCompareTestbed, "leaf-spine testbed: leafspine:HxLxS[,rate=R,hostrate=R,buffer=B,mtu=M]")
	scen := fs.String("scenarios", strings.Join(bench.DefaultScenarios, ","), "comma-separated scenarios, run in this order")
	profs := fs.String("profiles", strings.Join(bench.DefaultProfiles, ","), "comma-separated profiles, run in this order under each scenario")
	var size sizeFlag = 1 << 20
	fs.Var(&size, "size", "bytes each rank sends per all-to-all (K, M, G suffixes; default 1M, at most 1G)")
	iters := fs.Int("iters", 30, "timed all-to-alls per run")
	warmup := fs.Int("warmup", 2, "untimed all-to-alls before them")
	linkKind := fs.String("link", bench.KindXDP, "link of the spray and roce ranks on a testbed: xdp, raw or udp")
	sprayCC := fs.String("cc-spray", bench.DefaultSprayCC, "congestion control of spray: hpcc, swift, auto, dcqcn, fixed, window or default")
	roceCC := fs.String("cc-roce", bench.DefaultRoCECC, "congestion control of roce: dcqcn, fixed, window or default")
	roceTimeout := fs.Int("roce-ack-timeout", transport.DefaultLocalAckTimeout, "roce's Local ACK Timeout exponent: a fixed retransmission timer of 4.096us x 2^N, as ibv_modify_qp's timeout (perftest 14, NCCL 20); -1: an adaptive timer instead")
	outDir := fs.String("out", "results", "folder for the JSON and PNG files (made if missing)")
	jsonFile := fs.String("json", "compare.json", "write the rows as JSON to this file in --out (\"\": don't)")
	pngFile := fs.String("png", "compare.png", "write the completion-time CDFs as PNG to this file in --out (\"\": don't)")
	loopback := fs.Bool("loopback", false, "run on loopback even as root")
	simulate := fs.Bool("sim", false, "run the scenarios in the simulator (spray sim), the default without root")
	seed := fs.Uint64("seed", 1, "seed for the transports, faults and payloads")
	pairwise := fs.Bool("pairwise", false, "all-to-all in p-1 pairwise rounds (default: every peer at once, as NCCL groups its sends)")
	runTimeout := fs.Duration("run-timeout", time.Minute, "give up on one profile under one scenario after this long")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up on the whole comparison after this long")
	metrics := fs.String("metrics", "", "serve the spray and roce endpoints' OpenTelemetry metrics for Prometheus at http://ADDR/metrics while the comparison runs (e.g. :9464); each run's endpoints are named PROFILE/SCENARIO/rankR")
	pskFile := fs.String("psk", "", "secure the spray and roce QPs with the pre-shared key in this `FILE` (at least 16 bytes): packets authenticated, payloads encrypted; not in the simulator")
	integrityOnly := fs.Bool("integrity-only", false, "with --psk: authenticate packets but leave payloads in clear")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs("compare", fs); err != nil {
		return err
	}
	if *integrityOnly && *pskFile == "" {
		return usagef("compare: --integrity-only needs --psk FILE")
	}
	n := int64(size)
	c := check{cmd: "compare"}
	c.atLeast("size", n, 1)
	c.atMost("size", n, 1<<30)
	c.atLeast("iters", int64(*iters), 1)
	c.atLeast("warmup", int64(*warmup), 0)
	c.atMostInt("warmup", int64(*warmup), 1_000_000)
	c.positiveDur("run-timeout", *runTimeout)
	// The files go into --out, which the run makes if missing.
	for flagName, name := range map[string]string{"json": *jsonFile, "png": *pngFile} {
		if name != "" && !filepath.IsAbs(name) {
			name = filepath.Join(*outDir, name)
		}
		c.outPathIn(flagName, name, filepath.Dir(name) == filepath.Clean(*outDir))
	}
	c.positiveDur("timeout", *timeout)
	if c.err != nil {
		return c.err
	}
	var err error
	cfg := bench.CompareConfig{
		Scenarios: strings.Split(*scen, ","), Profiles: strings.Split(*profs, ","),
		Size: n, Iters: *iters, Warmup: *warmup, Link: *linkKind, SprayCC: *sprayCC, RoCECC: *roceCC,
		Seed: *seed, RunTimeout: *runTimeout, Loopback: *loopback || os.Geteuid() != 0,
		Pairwise: *pairwise, RoCEAckTimeout: *roceTimeout,
	}
	if *pskFile != "" {
		if cfg.PSK, err = spray.LoadPSK(*pskFile); err != nil {
			return usagef("compare: --psk: %v", err)
		}
		cfg.IntegrityOnly = *integrityOnly
	}
	if *roceTimeout == 0 {
		return usagef("compare: --roce-ack-timeout 0 (an infinite timer) is not supported; want 1 to %d, or -1", transport.MaxLocalAckTimeout)
	}
	if *warmup == 0 {
		cfg.Warmup = -1
	}
	if cfg.Testbed, err = testbed.ParseLeafSpine(*tb); err != nil {
		return usagef("compare: --testbed: %v", err)
	}
	if err := cfg.Check(); err != nil {
		return usagef("compare: %v", strings.TrimPrefix(err.Error(), bench.ErrCompare.Error()+": "))
	}
	// Results go into --out whichever way the comparison runs.
	inOut := func(name string) string {
		if name == "" || filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(*outDir, name)
	}
	mkOut := func() error {
		if *jsonFile == "" && *pngFile == "" {
			return nil
		}
		if err := os.MkdirAll(*outDir, 0o755); err != nil {
			return fmt.Errorf("compare: --out: %w", err)
		}
		return nil
	}
	if *simulate || (os.Geteuid() != 0 && !*loopback) {
		why := map[bool]string{true: "--sim", false: "not root"}[*simulate]
		if cfg.PSK != nil {
			return usagef("compare: --psk runs on a testbed or --loopback, not in the simulator (%s)", why)
		}
		if err := mkOut(); err != nil {
			return err
		}
		cs := compareSim{tb: cfg.Testbed, scenarios: cfg.Scenarios, profs: cfg.Profiles, size: n, iters: *iters, warmup: *warmup,
			seed: *seed, pairwise: *pairwise, jsonFile: inOut(*jsonFile), pngFile: inOut(*pngFile), why: why}
		// sim.Run takes no context: a signal ends the command here, and
		// the process with it, as in spray sim.
		ctx, cancel := signalContext()
		defer cancel()
		ran := make(chan error, 1)
		go func() { ran <- cs.run(os.Stdout) }()
		select {
		case err := <-ran:
			return err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	out := os.Stdout
	if cfg.Loopback {
		why := "--loopback"
		if os.Geteuid() != 0 {
			why = "not root"
		}
		fmt.Fprintf(out, "spray compare: %s: running every rank in this process over loopback (link/udp for spray and roce, loopback TCP for tcp); no testbed, no fabric counters; collision and spinefail need the testbed (sudo)\n", why)
	}
	logger := log.New(os.Stderr, "spray: ", 0)
	cfg.Logf = logger.Printf
	if *metrics != "" {
		srv, err := startMetrics(*metrics, logger.Printf)
		if err != nil {
			return fmt.Errorf("compare: --metrics: %w", err)
		}
		defer srv.Close()
		mp := srv.MeterProvider()
		cfg.OnEndpoint = func(ep *transport.Endpoint, name string) {
			if _, err := telemetry.InstrumentWith(mp, ep, name); err != nil {
				logger.Printf("metrics: %s: %v", name, err)
			}
		}
	}
	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	res, runErr := bench.Compare(ctx, cfg)
	if len(res.Rows) > 0 {
		bench.WriteCompareTable(out, res)
	}
	// A teardown that failed after a complete run still writes the
	// results, then reports what it left.
	if runErr != nil && !errors.Is(runErr, bench.ErrTeardown) {
		return runErr
	}
	if err := writeCompareFiles(out, res, inOut(*jsonFile), inOut(*pngFile), mkOut); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}

// writeCompareFiles writes the rows as JSON and the CDFs as PNG to the
// files named (none for ""), after mkOut made their folder.
func writeCompareFiles(out io.Writer, res bench.CompareResult, jsonFile, pngFile string, mkOut func() error) error {
	if err := mkOut(); err != nil {
		return err
	}
	var wrote []string
	if jsonFile != "" {
		f, err := os.Create(jsonFile)
		if err != nil {
			return err
		}
		err = bench.WriteCompareJSON(f, res)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("compare: writing %s: %w", jsonFile, err)
		}
		wrote = append(wrote, jsonFile)
	}
	if pngFile != "" {
		f, err := os.Create(pngFile)
		if err != nil {
			return err
		}
		err = bench.WriteCompareCDF(f, res)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(pngFile)
			return fmt.Errorf("compare: writing %s: %w", pngFile, err)
		}
		wrote = append(wrote, pngFile)
	}
	if len(wrote) > 0 {
		fmt.Fprintf(out, "wrote %s\n", strings.Join(wrote, ", "))
	}
	return nil
}
