package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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
	"text/tabwriter"
	"time"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

const perfUsage = `usage: spray perf [server|client] [flags]

  spray perf [--link mem,tcp]                 client and server in this process, over spray's
                                              in-memory fabric and kernel TCP on loopback
  spray perf --size 64,1K,4K,64K              a sweep: each link kind at each size (messages/s,
                                              latency percentiles, CPU per message)
  sudo spray perf --testbed pair              two network namespaces joined by a veth pair,
        [--link xdp,raw,udp,tcp]              one run per link kind, TCP on the same veth
  sudo spray perf --testbed pair,mtu=9000,queues=2
                                              the same with jumbo frames (AF_XDP multi-buffer)
                                              and two queues on each veth end
  sudo spray perf --testbed leafspine:2x2x2   hosts x leaves x spines of namespaces, L4-hashed
                                              multipath routes, shaped switch ports, spray's
                                              fabric programs (INT, ECN, faults) on every port
  sudo spray perf --testbed leafspine:1x2x4,rate=100mbit,mtu=3500 --total 1G \
        --fault leaf0:up1@5s --restore 10s    one sprayed QP across the fabric; the link is
                                              blackholed at 5 s and restored at 10 s into the
                                              transfer; prints the goodput timeline summary
  spray perf server [--listen :18515]         on one host: answer clients (the link kind
                                              and profile come from the client)
  spray perf client --peer HOST [--link udp]  on another host: measure against the server
  spray perf --psk FILE [--integrity-only]    any of the above with secured QPs: every packet
                                              authenticated, payloads encrypted unless
                                              --integrity-only; a server needs the same --psk
  spray perf server --cert C --key K [--ca CA]
  spray perf client --peer HOST --ca CA [--cert C --key K]
                                              the control connection in TLS 1.3 (the server's
                                              certificate must name HOST; with --ca the server
                                              checks clients' too) and the QP's keys from it

Link kinds: xdp (AF_XDP with the eBPF steering program; root), raw (AF_PACKET; root),
udp (kernel UDP sockets; no privilege), tcp (kernel TCP, the reference), mem (in-process).

flags:
`

type perfFlags struct {
	links, profile, testbed, pcapFile, listen, peer, ccName string
	metrics, fault, cpuProfile, pskFile                     string
	certFile, keyFile, caFile                               string
	pings, mtu, paths, window, qps, queues, engines         int
	busyPoll                                                busyPollFlag
	size, total, windowBytes                                sizeFlag
	sizes                                                   []int64 // --size, all of its sizes
	totalSet                                                bool
	restore                                                 time.Duration
	loss, gbps                                              float64
	seed                                                    uint64
	jsonOut, pathsSet, integrityOnly                        bool
	timeout                                                 time.Duration

	// Set by check from --testbed and --fault.
	pair      testbed.PairConfig
	leafSpine testbed.LeafSpineConfig
	faultPort string
	faultAt   time.Duration
}

// maxPerfSize bounds --size: the client keeps four payloads of it and the
// server receives whole messages, so a size beyond what the transport
// sends in one message is refused before anything is allocated.
const maxPerfSize = 256 << 20

func init() {
	register(command{name: "perf", summary: "goodput, messages/s and ping-pong latency between two endpoints", run: runPerf})
}

func runPerf(args []string) error {
	mode := ""
	if len(args) > 0 && (args[0] == "server" || args[0] == "client") {
		mode, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), perfUsage); fs.PrintDefaults() }
	var f perfFlags
	fs.StringVar(&f.links, "link", "", "comma-separated link kinds, run one after the other (default mem,tcp; xdp,raw,udp,tcp with --testbed; udp for client)")
	fs.StringVar(&f.profile, "profile", "spray", "transport profile: spray or roce")
	fs.StringVar(&f.testbed, "testbed", "", "run on a local testbed: pair[,mtu=N][,queues=N] or leafspine:HxLxS[,options]")
	fs.StringVar(&f.pcapFile, "pcap", "", "write the frames the client's link sent and received to this pcap file")
	fs.StringVar(&f.listen, "listen", fmt.Sprintf(":%d", bench.DefaultControlPort), "server: control address to listen on")
	fs.StringVar(&f.peer, "peer", "", "client: the server's host or host:port")
	f.size, f.total = 1<<20, 1<<30
	fs.Var(sizeListFlag{&f.size, &f.sizes}, "size", "bulk message size in bytes (K, M, G suffixes; default 1M, at most 256M and --total), or a comma-separated sweep (64,1K,4K,64K) run size by size, each link kind at each, with pings of that size and, without --total, min(1G, 256Ki messages) each (local and pair runs)")
	fs.Var(&f.total, "total", "bulk bytes to transfer (K, M, G suffixes; default 1G)")
	fs.IntVar(&f.pings, "pings", 2000, "ping-pong round trips to time (0 or negative: none)")
	fs.Float64Var(&f.loss, "loss", 0, "mem link: random loss probability of the in-memory fabric")
	fs.Float64Var(&f.gbps, "gbps", 0, "mem link: bandwidth of the in-memory fabric in Gbit/s (0 = unlimited)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for payloads and the fabric; given explicitly, also for the transport's QP numbers, PSNs and keys (otherwise unpredictable)")
	fs.IntVar(&f.qps, "qps", 1, "QPs carrying the bulk data at once, --total/N bytes each (spray links; tcp runs one connection); goodput summed and per QP")
	fs.IntVar(&f.queues, "queues", 1, "mem link: receive queues per port, spread by RSS, one engine per queue")
	fs.IntVar(&f.engines, "engines", 0, "engines per endpoint on a multi-queue link: 0 one per queue, 1 one for the whole link")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (client, server and every engine) to this file")
	fs.Var(&f.busyPoll, "busy-poll", "engines poll without sleeping for this long after their last work (--busy-poll alone: 50µs)")
	fs.BoolVar(&f.jsonOut, "json", false, "print results as JSON, one object per line")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.IntVar(&f.mtu, "mtu", 0, "largest frame in bytes, Ethernet header included (default: 9014 for mem, the interface MTU + 14 otherwise)")
	fs.IntVar(&f.paths, "paths", 8, "entropies (paths) a spray QP sprays over")
	fs.StringVar(&f.ccName, "cc", "", "congestion control: "+strings.Join(cc.Names, ", ")+" (default: the profile's, auto for spray, dcqcn for roce; dcqcn turns on ECN marking of data packets; fixed is an unlimited window)")
	fs.IntVar(&f.window, "window", 0, "packets a QP may have outstanding (0: the transport's default)")
	fs.StringVar(&f.metrics, "metrics", "", "serve OpenTelemetry metrics of every endpoint for Prometheus at http://ADDR/metrics while the run goes on (e.g. :9464)")
	fs.StringVar(&f.fault, "fault", "", "leafspine: blackhole the leaf-spine link `PORT@TIME` into the transfer (PORT as in spray testbed fault --port, e.g. leaf0:up1@5s) and report the failover")
	fs.DurationVar(&f.restore, "restore", 0, "with --fault: restore the link this long into the transfer (0: never)")
	fs.Var(&f.windowBytes, "window-bytes", "with --fault and --cc fixed: the QP's fixed window in bytes (default: (spines-1) x half a port buffer)")
	fs.StringVar(&f.pskFile, "psk", "", "secure the spray QPs with the pre-shared key in this `FILE` (at least 16 bytes, e.g. openssl rand -hex 32): packets authenticated, payloads encrypted; a server needs the same key")
	fs.BoolVar(&f.integrityOnly, "integrity-only", false, "with --psk or certificates: authenticate packets but leave payloads in clear")
	fs.StringVar(&f.certFile, "cert", "", "server and client: this side's certificate (PEM `FILE`, with --key): the control connection runs TLS 1.3 and the spray QP's keys come from it (a server needs one)")
	fs.StringVar(&f.keyFile, "key", "", "server and client: the private key of --cert (PEM `FILE`)")
	fs.StringVar(&f.caFile, "ca", "", "server and client: the CAs (PEM `FILE`) a client verifies the server against (default: the system's), or a server its clients (then required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("perf: unexpected argument %q (the mode comes first: spray perf [server|client] [flags])", fs.Arg(0))
	}
	withTLS := f.certFile != "" || f.keyFile != "" || f.caFile != ""
	switch {
	case f.integrityOnly && f.pskFile == "" && !withTLS:
		return usagef("perf: --integrity-only needs --psk FILE, or certificates (--cert, --key, --ca)")
	case withTLS && f.pskFile != "":
		return usagef("perf: --psk or certificates (--cert, --key, --ca), not both")
	case withTLS && mode == "":
		return usagef("perf: --cert, --key and --ca are for perf server and client; runs in one process take --psk FILE")
	case (f.certFile == "") != (f.keyFile == ""):
		return usagef("perf: --cert and --key go together")
	case mode == "server" && withTLS && f.certFile == "":
		return usagef("perf server: --ca needs --cert and --key: the server presents a certificate")
	}
	if f.pskFile != "" && f.fault != "" {
		return usagef("perf: --psk does not apply to --fault runs")
	}
	fs.Visit(func(fl *flag.Flag) { f.totalSet = f.totalSet || fl.Name == "total" })
	if err := f.check(); err != nil {
		return err
	}
	if err := f.checkPlan(mode); err != nil {
		return err
	}
	seedSet := false
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "paths":
			f.pathsSet = true
		case "seed":
			seedSet = true
		}
	})
	if f.qps < 1 || f.qps > 4096 {
		return usagef("perf: --qps %d: want 1 to 4096", f.qps)
	}
	if f.engines < 0 || f.engines > 64 {
		return usagef("perf: --engines %d: want 0 to 64", f.engines)
	}
	if f.queues < 1 || f.queues > 64 {
		return usagef("perf: --queues %d: want 1 to 64", f.queues)
	}
	if f.queues > 1 && f.pcapFile != "" {
		return usagef("perf: --pcap captures a single-queue link; drop --queues")
	}
	if f.qps > 1 && mode != "" {
		return usagef("perf: --qps runs locally only (mem, or --testbed pair), not in %s mode", mode)
	}
	if len(f.sizes) > 1 && (mode != "" || f.fault != "" || f.testbed != "" && !isPairTestbed(f.testbed)) {
		return usagef("perf: a --size sweep runs locally only (mem and tcp, or --testbed pair)")
	}
	prof, err := transport.ParseProfile(f.profile)
	if err != nil {
		return usagef("perf: --profile: %v", err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, f.timeout)
	defer cancelT()

	tseed := uint64(0) // unpredictable QP numbers, PSNs and keys unless asked
	if seedSet {
		tseed = f.seed
	}
	tcfg := transport.Config{Profile: prof, Seed: tseed, MTU: f.mtu, Entropies: f.paths, Window: f.window,
		ECN: f.ccName == "dcqcn" || f.ccName == "" && prof == transport.RoCE, BusyPoll: time.Duration(f.busyPoll),
		Engines: f.engines}
	if err := setNamedCC(f.ccName, &tcfg); err != nil {
		return err
	}
	pcfg := bench.PerfConfig{MsgSize: int(f.size), Total: int64(f.total), Pings: f.pings, Seed: f.seed, QPs: f.qps}
	if f.pings <= 0 {
		pcfg.Pings = -1 // none; PerfConfig's 0 means its default
	}
	if f.pskFile != "" {
		if pcfg.PSK, err = spray.LoadPSK(f.pskFile); err != nil {
			return usagef("perf: --psk: %v", err)
		}
	}
	pcfg.IntegrityOnly = f.integrityOnly
	var tlsCfg *tls.Config
	if withTLS {
		if tlsCfg, err = perfTLS(mode, f.certFile, f.keyFile, f.caFile); err != nil {
			return usagef("perf %s: %v", mode, err)
		}
	}
	var capture *pcap.Writer
	wrap := func(l link.Link) link.Link { return l }
	if f.pcapFile != "" {
		file, err := os.Create(f.pcapFile)
		if err != nil {
			return err
		}
		defer file.Close()
		if capture, err = pcap.NewWriter(file); err != nil {
			return err
		}
		defer capture.Close()
		wrap = func(l link.Link) link.Link { return pcap.Wrap(l, capture) }
	}
	logger := log.New(os.Stderr, "spray: ", 0)
	if f.cpuProfile != "" {
		stop, err := startCPUProfile("perf", f.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	stopMetrics, err := serveMetrics(f.metrics, &tcfg, logger.Printf)
	if err != nil {
		return err
	}
	defer stopMetrics()

	switch mode {
	case "server":
		ln, err := net.Listen("tcp", f.listen)
		if err != nil {
			return err
		}
		logger.Printf("perf server listening on %v", ln.Addr())
		return bench.ServePerf(ctx, ln, bench.RemoteRun{Transport: tcfg, Perf: bench.PerfConfig{PSK: pcfg.PSK}, TLS: tlsCfg, Wrap: wrap, Logf: logger.Printf})
	case "client":
		if f.peer == "" {
			return usagef("perf client: --peer HOST is required")
		}
		addr := f.peer
		if _, _, err := net.SplitHostPort(addr); err != nil {
			addr = net.JoinHostPort(addr, strconv.Itoa(bench.DefaultControlPort))
		}
		for _, kind := range splitKinds(f.links, "udp") {
			if err := linkPrivilege("perf client", kind); err != nil {
				return err
			}
		}
		var results []bench.PerfResult
		for _, kind := range splitKinds(f.links, "udp") {
			res, err := bench.DialPerf(ctx, addr, bench.RemoteRun{Kind: kind, Transport: tcfg, Perf: pcfg, TLS: tlsCfg, Wrap: wrap, Logf: logger.Printf})
			if err != nil {
				return fmt.Errorf("perf over %s: %w", kind, err)
			}
			results = append(results, res)
		}
		return report(f, results)
	}

	if f.fault != "" {
		return perfFailover(ctx, f, tcfg, logger)
	}
	switch f.testbed {
	case "":
		var results []bench.PerfResult
		for _, pc := range f.sweep(pcfg) {
			for _, kind := range splitKinds(f.links, "mem,tcp") {
				var res bench.PerfResult
				var err error
				switch kind {
				case "mem":
					res, err = perfMem(ctx, f, tcfg, pc, wrap)
				default: // checkPlan let only mem and tcp through
					res, err = perfTCP(ctx, pc)
				}
				if err != nil {
					return fmt.Errorf("perf over %s at %s: %w", kind, formatSize(int64(pc.MsgSize)), err)
				}
				results = append(results, res)
			}
		}
		return report(f, results)
	}
	if isPairTestbed(f.testbed) {
		return perfPair(ctx, f, tcfg, pcfg, wrap, logger)
	}
	return perfLeafSpine(ctx, f, tcfg, pcfg, wrap, logger)
}

// isPairTestbed reports whether --testbed names the pair testbed.
func isPairTestbed(tb string) bool { return tb == "pair" || strings.HasPrefix(tb, "pair,") }

// sweepMessages is the messages of each size a --size sweep sends when
// --total is not given (at most the default 1G): a sweep from 64 bytes to
// 64K then takes seconds per size, not minutes at the smallest.
const sweepMessages = 256 << 10

// sweep returns the runs of --size: pcfg alone for one size; for a
// sweep, one per size, with pings of that size and, without --total,
// sweepMessages messages of it (at most 1G).
func (f perfFlags) sweep(pcfg bench.PerfConfig) []bench.PerfConfig {
	if len(f.sizes) <= 1 {
		return []bench.PerfConfig{pcfg}
	}
	var runs []bench.PerfConfig
	for _, n := range f.sizes {
		pc := pcfg
		pc.MsgSize, pc.PingSize = int(n), int(n)
		if !f.totalSet {
			pc.Total = min(n*sweepMessages, 1<<30)
		}
		runs = append(runs, pc)
	}
	return runs
}

// check refuses flag values out of range, naming the flag and the range.
func (f perfFlags) check() error {
	c := check{cmd: "perf"}
	c.atLeast("total", int64(f.total), 1)
	sizes := f.sizes
	if len(sizes) == 0 {
		sizes = []int64{int64(f.size)}
	}
	for _, n := range sizes {
		c.atLeast("size", n, 1)
		c.atMost("size", n, maxPerfSize)
		if n > int64(f.total) && c.err == nil && (len(sizes) == 1 || f.totalSet) {
			c.fail("size", formatSize(n), "at most --total ("+formatSize(int64(f.total))+")")
		}
	}
	if f.mtu != 0 && (f.mtu < 256 || f.mtu > 65535+14) {
		c.fail("mtu", f.mtu, "0 (the link's) or 256 to 65549")
	}
	c.atLeast("pings", int64(f.pings), -1)
	c.atMost("pings", int64(f.pings), 10_000_000)
	c.atLeast("paths", int64(f.paths), 1)
	c.atMostInt("paths", int64(f.paths), 1024)
	if f.window != 0 && (f.window < 64 || f.window > 1<<20 || f.window%64 != 0) {
		c.fail("window", f.window, "0 (the transport's default) or a multiple of 64 from 64 to 1048576")
	}
	c.atMost("window-bytes", int64(f.windowBytes), 1<<30)
	c.atLeast("window-bytes", int64(f.windowBytes), 0)
	c.prob("loss", f.loss)
	c.within("gbps", f.gbps, 0, maxGbps)
	if d := time.Duration(f.busyPoll); d > time.Second {
		c.fail("busy-poll", d, "a duration up to 1s")
	}
	c.outPath("pcap", f.pcapFile)
	c.outPath("cpuprofile", f.cpuProfile)
	c.positiveDur("timeout", f.timeout)
	c.nonNegativeDur("restore", f.restore)
	return c.err
}

// maxGbps bounds --gbps: 100 Tbit/s, beyond any link, and far from the
// overflow of a byte rate.
const maxGbps = 100_000

// perfKinds are the link kinds perf runs where: in one process (no
// --testbed, no mode), across a testbed, and against a server.
var perfKinds = map[string][]string{
	"local":     {"mem", bench.KindTCP},
	"pair":      {bench.KindXDP, bench.KindRaw, bench.KindUDP, bench.KindTCP},
	"leafspine": {bench.KindXDP, bench.KindRaw, bench.KindUDP, bench.KindTCP},
	"remote":    {bench.KindXDP, bench.KindRaw, bench.KindUDP, bench.KindTCP},
}

// checkPlan refuses, as usage errors and before anything is built or
// allocated, the flags that do not fit together: an unknown controller, a
// testbed spec spray cannot build, a link kind the chosen setting cannot
// run, a malformed --fault. It keeps the parsed testbed and fault in f.
// TestCLIRefusesNonsense guards it.
func (f *perfFlags) checkPlan(mode string) error {
	if f.ccName != "" {
		if _, err := cc.ByName(f.ccName, cc.Params{}); err != nil {
			return usagef("perf: --cc: %v", err)
		}
	}
	where := "local"
	switch {
	case mode != "":
		where = "remote"
		if f.testbed != "" {
			return usagef("perf %s: --testbed runs both ends here; drop it (or the mode)", mode)
		}
	case f.testbed == "pair" || strings.HasPrefix(f.testbed, "pair,"):
		where = "pair"
		pc, err := testbed.ParsePair(f.testbed)
		if err != nil {
			return usagef("perf: --testbed: %v", err)
		}
		f.pair = pc
	case strings.HasPrefix(f.testbed, "leafspine"):
		where = "leafspine"
		lc, err := testbed.ParseLeafSpine(f.testbed)
		if err != nil {
			return usagef("perf: --testbed: %v", err)
		}
		f.leafSpine = lc
	case f.testbed != "":
		return usagef("perf: --testbed %q: want pair[,mtu=N][,queues=N] or leafspine:HxLxS[,options]", f.testbed)
	}
	if where == "local" && f.engines > 1 && f.engines != f.queues {
		return usagef("perf: --engines %d: want 0, 1 or --queues (%d) on the mem link", f.engines, f.queues)
	}
	if (f.fault != "" || f.restore != 0) && where != "leafspine" {
		return usagef("perf: --fault and --restore need a leafspine testbed (--testbed leafspine:HxLxS)")
	}
	def := map[string]string{"local": "mem,tcp", "pair": "xdp,raw,udp,tcp", "leafspine": "xdp,udp,tcp", "remote": "udp"}[where]
	if f.fault != "" {
		def = bench.KindXDP
	}
	for _, k := range splitKinds(f.links, def) {
		if !slices.Contains(perfKinds[where], k) {
			hint := strings.Join(perfKinds[where], ", ")
			if where == "local" && slices.Contains(perfKinds["pair"], k) {
				hint += "; " + k + " needs --testbed pair, or server and client modes"
			}
			return usagef("perf: --link %q: want %s", k, hint)
		}
	}
	if f.fault == "" {
		if f.restore != 0 {
			return usagef("perf: --restore needs --fault")
		}
		return nil
	}
	spec, atStr, ok := strings.Cut(f.fault, "@")
	if !ok || spec == "" {
		return usagef("perf: --fault %q: want PORT@TIME, such as leaf0:up1@5s", f.fault)
	}
	at, err := time.ParseDuration(atStr)
	if err != nil || at <= 0 {
		return usagef("perf: --fault %q: %q is not a positive duration", f.fault, atStr)
	}
	if f.restore != 0 && f.restore <= at {
		return usagef("perf: --restore %v must come after the failure at %v", f.restore, at)
	}
	if kinds := splitKinds(f.links, bench.KindXDP); len(kinds) != 1 || kinds[0] == bench.KindTCP {
		return usagef("perf: --fault runs one link kind of xdp, raw or udp, not %q", f.links)
	}
	if f.leafSpine.Leaves < 2 || f.leafSpine.Spines < 2 {
		return usagef("perf: --fault needs two leaves and two spines at least, not %s", f.testbed)
	}
	f.faultPort, f.faultAt = spec, at
	return nil
}

// setNamedCC sets tcfg.CC for --cc name (perf and bench) on a link of tcfg.MTU-byte frames
// (0: unknown) at tcfg.LineRate bytes/s (0: unknown): nil for "" (the
// profile's controller, which the transport sizes for each QP's payload
// and LineRate), cc.ByName's controller otherwise. Callers that learn the
// MTU or the rate of the link call it again.
func setNamedCC(name string, tcfg *transport.Config) error {
	if name == "" {
		tcfg.CC = nil
		return nil
	}
	pb := 0 // ByName's 1400
	if tcfg.MTU > 0 {
		pb = max(tcfg.MTU-100, 256) // about the payload: spray's headers take 70-170 bytes
	}
	mk, err := cc.ByName(name, cc.Params{LineRate: tcfg.LineRate, PacketBytes: pb})
	if err != nil {
		return err
	}
	tcfg.CC = mk
	return nil
}

func splitKinds(s, def string) []string {
	if s == "" {
		s = def
	}
	return strings.Split(s, ",")
}

func report(f perfFlags, results []bench.PerfResult) error {
	for i := range results {
		if results[i].Protection == "" {
			results[i].Protection = bench.ProtectionClear // kernel TCP
		}
	}
	if f.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	printPerf(os.Stdout, results)
	for _, r := range results {
		if len(r.QPs) > 1 {
			printQPs(os.Stdout, r)
		}
	}
	return nil
}

// printQPs prints the per-QP shares of a multi-QP result.
func printQPs(w io.Writer, r bench.PerfResult) {
	fmt.Fprintf(w, "\n%s: %d QPs, %.2f Gbit/s in all\n", r.Link, len(r.QPs), r.GoodputGbps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "qpn\tbytes\tseconds\tGbit/s\tretransmits\tsha256\t")
	for _, q := range r.QPs {
		verdict := "ok"
		if !q.Integrity {
			verdict = "MISMATCH"
		}
		fmt.Fprintf(tw, "%#x\t%d\t%.3f\t%.2f\t%d\t%s\t\n", q.QPN, q.Bytes, q.Seconds, q.GoodputGbps, q.Retransmits, verdict)
	}
	tw.Flush()
}

// busyPollFlag is --busy-poll: a duration, or alone DefaultBusyPoll.
type busyPollFlag time.Duration

// defaultBusyPoll is --busy-poll without a value.
const defaultBusyPoll = 50 * time.Microsecond

func (b *busyPollFlag) String() string { return time.Duration(*b).String() }

func (b *busyPollFlag) IsBoolFlag() bool { return true }

func (b *busyPollFlag) Set(s string) error {
	switch s {
	case "true":
		*b = busyPollFlag(defaultBusyPoll)
		return nil
	case "false":
		*b = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration >= 0 (e.g. 200us), or no value")
	}
	*b = busyPollFlag(d)
	return nil
}

func printPerf(w io.Writer, results []bench.PerfResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "link\tprofile\tprotection\tmsg size\tbytes\tseconds\tGbit/s\tmsgs/s\trtt p50 µs\tp99 µs\tp99.9 µs\tretransmits\tCPU s/GB\tCPU µs/msg\tsha256\t")
	for _, r := range results {
		verdict := "ok"
		if !r.Integrity {
			verdict = "MISMATCH"
		}
		prot := r.Protection
		if prot == "" {
			prot = bench.ProtectionClear
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.3f\t%.2f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%.2f\t%.2f\t%s\t\n", r.Link, r.Profile, prot, r.MsgSize, r.Bytes,
			r.Seconds, r.GoodputGbps, r.MsgsPerSec, r.RTTp50us, r.RTTp99us, r.RTTp999us, r.Retransmits, r.CPUSecPerGB, r.CPUMicrosPerMsg, verdict)
	}
	tw.Flush()
}

// perfPair builds a pair testbed and runs each link kind across it.
func perfPair(ctx context.Context, f perfFlags, tcfg transport.Config, pcfg bench.PerfConfig, wrap func(link.Link) link.Link, logger *log.Logger) error {
	pc := f.pair
	if pc.MTU == 0 {
		pc.MTU = 3500 // the largest that fits one AF_XDP UMEM chunk (4 KiB less headroom)
	}
	if f.mtu > 0 {
		pc.MTU = f.mtu - 14
	}
	mtu := pc.MTU
	p, err := testbed.NewPair(ctx, pc)
	if err != nil {
		return err
	}
	defer p.Close()
	logger.Printf("testbed %s: %s (%v) <-> %s (%v), veth MTU %d, %d queue(s)", p.Prefix, p.A.Name, p.A.IP, p.B.Name, p.B.IP, mtu, max(pc.Queues, 1))
	tcfg.MTU = mtu + 14
	if err := setNamedCC(f.ccName, &tcfg); err != nil {
		return err
	}
	var results []bench.PerfResult
	for _, pc := range f.sweep(pcfg) {
		for _, kind := range splitKinds(f.links, "xdp,raw,udp,tcp") {
			res, err := bench.RunPair(ctx, p, bench.PairRun{Kind: kind, Transport: tcfg, Perf: pc, Wrap: wrap})
			if err != nil {
				return fmt.Errorf("perf over %s at %s: %w", kind, formatSize(int64(pc.MsgSize)), err)
			}
			results = append(results, res.PerfResult)
		}
	}
	return report(f, results)
}

// perfLeafSpine builds a leaf-spine fabric with spray's fabric programs on
// every switch port and runs each link kind from the first host of the
// first leaf to the last host of the last leaf, across the spines.
func perfLeafSpine(ctx context.Context, f perfFlags, tcfg transport.Config, pcfg bench.PerfConfig, wrap func(link.Link) link.Link, logger *log.Logger) error {
	fab, progs, err := perfFabric(ctx, f, tcfg.ECN)
	if err != nil {
		return err
	}
	defer fab.Close()
	defer progs.Close()
	a, b := fab.Host(0, 0), fab.Host(fab.Config.Leaves-1, fab.Config.Hosts-1)
	logger.Printf("testbed %s: %s, %s (%v) -> %s (%v)", fab.Prefix, fab.Config, a.Name, a.IP, b.Name, b.IP)
	tcfg.MTU = a.MTU + 14
	tcfg = tcfg.OnINTFabric(0)
	// The hosts' ports are the fastest a flow goes.
	tcfg.LineRate = float64(fab.Config.HostRateBps) / 8
	if err := setNamedCC(f.ccName, &tcfg); err != nil {
		return err
	}
	var results []bench.PerfResult
	for _, kind := range splitKinds(f.links, "xdp,udp,tcp") {
		before, err := fab.UplinkBytes(0)
		if err != nil {
			return err
		}
		res, err := bench.RunHosts(ctx, a, b, bench.PairRun{Kind: kind, Transport: tcfg, Perf: pcfg, Wrap: wrap})
		if err != nil {
			return fmt.Errorf("perf over %s: %w", kind, err)
		}
		after, err := fab.UplinkBytes(0)
		if err != nil {
			return err
		}
		var shares []string
		var total uint64
		for i := range after {
			total += after[i] - before[i]
		}
		for i := range after {
			shares = append(shares, fmt.Sprintf("spine%d %.1f%%", i, 100*float64(after[i]-before[i])/float64(max(total, 1))))
		}
		logger.Printf("%s: bytes leaving %s per spine: %s", kind, fab.Leaves[0].Name, strings.Join(shares, ", "))
		results = append(results, res.PerfResult)
	}
	return report(f, results)
}

// perfMem runs client and server in this process, each with its own engine
// goroutine, over the in-memory fabric.
func perfMem(ctx context.Context, f perfFlags, tcfg transport.Config, pcfg bench.PerfConfig, wrap func(link.Link) link.Link) (bench.PerfResult, error) {
	if tcfg.MTU == 0 {
		tcfg.MTU = 9014
	}
	tcfg.LineRate = f.gbps * 1e9 / 8
	if err := setNamedCC(f.ccName, &tcfg); err != nil {
		return bench.PerfResult{}, err
	}
	fab := mem.NewFabric(mem.Config{Seed: f.seed, Loss: f.loss, Bandwidth: f.gbps * 1e9, FrameSize: max(tcfg.MTU, 1514), Delay: 2 * time.Microsecond}, clock.NewSystem())
	port := func(mac [6]byte, ip netip.Addr) (link.Link, error) {
		if f.queues > 1 {
			return fab.NewMultiPort(mac, ip, f.queues, nil)
		}
		return fab.NewPort(mac, ip)
	}
	pa, err := port([6]byte{0x02, 0x53, 0x50, 0, 0, 1}, netip.AddrFrom4([4]byte{10, 99, 0, 1}))
	if err != nil {
		return bench.PerfResult{}, err
	}
	la := pa
	if f.queues == 1 {
		la = wrap(pa) // a capture sees one link; with queues the engines own theirs
	}
	a, err := transport.NewEndpoint(la, tcfg)
	if err != nil {
		return bench.PerfResult{}, err
	}
	defer a.Close()
	pb, err := port([6]byte{0x02, 0x53, 0x50, 0, 0, 2}, netip.AddrFrom4([4]byte{10, 99, 0, 2}))
	if err != nil {
		return bench.PerfResult{}, err
	}
	if tcfg.Seed != 0 {
		tcfg.Seed++
	}
	b, err := transport.NewEndpoint(pb, tcfg)
	if err != nil {
		return bench.PerfResult{}, err
	}
	defer b.Close()
	res, err := bench.RunEndpoints(ctx, a, b, pcfg)
	res.Link, res.Profile = "mem", tcfg.Profile.String()
	return res.PerfResult, err
}

// perfTCP runs the same workload over kernel TCP on loopback.
func perfTCP(ctx context.Context, cfg bench.PerfConfig) (bench.PerfResult, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return bench.PerfResult{}, err
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		srvErr <- bench.PerfServer(ctx, bench.NewTCPConn(c))
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return bench.PerfResult{}, err
	}
	defer c.Close()
	res, err := bench.PerfClient(ctx, bench.NewTCPConn(c), cfg)
	if err != nil {
		return res, err
	}
	if err := <-srvErr; err != nil {
		return res, fmt.Errorf("server: %w", err)
	}
	res.Link, res.Profile = "tcp", "kernel"
	return res, nil
}

// perfFabric builds the leaf-spine fabric of --testbed (with --mtu) and
// attaches spray's fabric programs to every switch port, marking ECN when
// ecn is set. The caller closes both.
func perfFabric(ctx context.Context, f perfFlags, ecn bool) (*testbed.Fabric, *ebpf.Fabric, error) {
	lcfg := f.leafSpine
	if f.mtu > 0 {
		lcfg.MTU = f.mtu - 14
	}
	fab, err := testbed.NewLeafSpine(ctx, lcfg)
	if err != nil {
		return nil, nil, err
	}
	var marks ebpf.ECNConfig
	if ecn {
		marks = ebpf.ECNConfig{KMin: 20 * time.Microsecond, KMax: 200 * time.Microsecond, PMax: 0.2}
	}
	progs, err := fab.AttachProgramsContext(ctx, marks)
	if err != nil {
		fab.Close()
		return nil, nil, err
	}
	return fab, progs, nil
}

// perfTLS builds the TLS 1.3 configuration of perf's server or client
// from PEM files: this side's certificate and key (the server's are
// required), and the CAs that verify the other side (a client's default:
// the system's; a server with them requires clients' certificates).
func perfTLS(mode, certFile, keyFile, caFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS13}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert, --key: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca: no PEM certificate in %s", caFile)
		}
		if mode == "server" {
			c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		} else {
			c.RootCAs = pool
		}
	}
	return c, nil
}
