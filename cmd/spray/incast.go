package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/testbed"
)

const incastUsage = `usage: sudo spray incast [flags]    (also: spray bench incast [flags])

On a leaf-spine testbed whose receiver port is shaped and shallow-buffered, N senders on
other hosts send to one receiver at once, once per congestion controller; then a flow joins
a running one. One table row per controller: the bottleneck's queue delay (from INT records
echoed in ACKs), its overflow drops, Jain's fairness over the senders' goodput, the
bottleneck's utilization, retransmits and the joining flow's time to its fair share.

flags:
`

type incastFlags struct {
	testbed, ccs, link    string
	senders               int
	duration, join, watch time.Duration
	timeout               time.Duration
	seed                  uint64
	jsonOut               bool
}

func init() {
	register(command{name: "incast", summary: "N senders to one receiver through a shaped leaf port, per congestion controller", run: runIncast})
}

func runIncast(args []string) error {
	fs := flag.NewFlagSet("incast", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), incastUsage); fs.PrintDefaults() }
	var f incastFlags
	fs.StringVar(&f.testbed, "testbed", bench.DefaultIncastTestbed, "leaf-spine fabric (see spray perf); the receiver is the first host of the first leaf")
	fs.StringVar(&f.ccs, "cc", strings.Join(bench.IncastControllers, ","), "comma-separated controllers, one run each: "+strings.Join(cc.Names, ", "))
	fs.StringVar(&f.link, "link", bench.KindUDP, "link kind: udp, raw or xdp (xdp hides the last hop's queue from INT)")
	fs.IntVar(&f.senders, "senders", 4, "senders (N) at once")
	fs.DurationVar(&f.duration, "duration", 2*time.Second, "how long the N senders send (the first fifth is warm-up)")
	fs.DurationVar(&f.join, "join", time.Second, "how long one flow runs before a second joins (negative: no join run)")
	fs.DurationVar(&f.watch, "watch", 2*time.Second, "how long the two flows run together")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for the transport")
	fs.BoolVar(&f.jsonOut, "json", false, "print results as JSON, one object per line")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs("incast", fs); err != nil {
		return err
	}
	c := check{cmd: "incast"}
	c.atLeast("senders", int64(f.senders), 1)
	c.positiveDur("duration", f.duration)
	c.positiveDur("watch", f.watch)
	c.nonNegativeDur("join", f.join)
	c.positiveDur("timeout", f.timeout)
	if c.err != nil {
		return c.err
	}
	lcfg, err := testbed.ParseLeafSpine(f.testbed)
	if err != nil {
		return usagef("incast: --testbed: %v", err)
	}
	if n := lcfg.Hosts * lcfg.Leaves; f.senders > n-1 {
		return usagef("incast: --senders %d: want at most %d, the hosts of --testbed %s besides the receiver", f.senders, n-1, f.testbed)
	}
	for _, name := range strings.Split(f.ccs, ",") {
		if _, err := cc.ByName(name, cc.Params{}); err != nil {
			return usagef("incast: --cc: %v", err)
		}
	}
	switch f.link {
	case bench.KindUDP, bench.KindRaw, bench.KindXDP:
	default:
		return usagef("incast: --link %q: want udp, raw or xdp", f.link)
	}
	if err := testbed.CheckPrivilege(); err != nil {
		return fmt.Errorf("incast: %w", err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, f.timeout)
	defer cancelT()
	logger := log.New(os.Stderr, "spray: ", 0)
	fab, err := testbed.NewLeafSpine(ctx, lcfg)
	if err != nil {
		return err
	}
	defer fab.Close()
	progs, err := fab.AttachProgramsContext(ctx, ebpfNoECN)
	if err != nil {
		return err
	}
	defer progs.Close()
	logger.Printf("testbed %s: %s, bottleneck %s's port to %s at %d bit/s, %d bytes of queue", fab.Prefix, fab.Config,
		fab.Leaves[0].Name, fab.Host(0, 0).Name, fab.Config.HostRateBps, fab.Config.BufferBytes)
	res, err := bench.RunIncast(ctx, fab, progs, bench.IncastConfig{
		Controllers: strings.Split(f.ccs, ","), Senders: f.senders, Duration: f.duration,
		JoinAfter: f.join, JoinWatch: f.watch, Kind: f.link, Seed: f.seed, Logf: logger.Printf,
	})
	if f.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range res {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	} else {
		printIncast(os.Stdout, res)
	}
	return err
}

func printIncast(w io.Writer, res []bench.IncastResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cc\tsenders\tbase rtt µs\ttarget µs\tqdelay p50 µs\tp99 µs\tmax µs\tport mean µs\toverflow drops\tjain\tutil\tgoodput Mbit/s\tretx\ttimeouts\tecn marks\tjoin ms\t")
	for _, r := range res {
		var sum float64
		for _, g := range r.GoodputMbps {
			sum += g
		}
		join := fmt.Sprintf("%.0f", r.JoinMs)
		if r.JoinMs < 0 {
			join = "never"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%.3f\t%.2f\t%.1f\t%d\t%d\t%d\t%s\t\n", r.Controller, r.Senders, r.BaseRTTus, r.TargetUs,
			r.QueueP50us, r.QueueP99us, r.QueueMaxus, r.PortMeanUs, r.OverflowDrops, r.Jain, r.Utilization, sum, r.Retransmits, r.Timeouts, r.ECNMarked, join)
	}
	tw.Flush()
}

// ebpfNoECN is the marking the fabric starts with: none (RunIncast turns
// it on for dcqcn).
var ebpfNoECN = ebpf.ECNConfig{}
