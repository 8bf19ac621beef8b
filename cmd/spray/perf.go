package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sprayfabric/spray/bench"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

type perfFlags struct {
	links   string
	profile string
	size    int
	total   int64
	pings   int
	loss    float64
	rate    float64
	seed    uint64
	jsonOut bool
	timeout time.Duration
	mtu     int
	paths   int
}

func runPerf(args []string) error {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	var f perfFlags
	fs.StringVar(&f.links, "link", "mem,tcp", "comma-separated link kinds to run, one after the other: mem (in-memory fabric), tcp (kernel TCP over loopback)")
	fs.StringVar(&f.profile, "profile", "spray", "transport profile: spray or roce")
	fs.IntVar(&f.size, "size", 1<<20, "bulk message size in bytes")
	fs.Int64Var(&f.total, "total", 1<<30, "bulk bytes to transfer")
	fs.IntVar(&f.pings, "pings", 2000, "ping-pong round trips to time")
	fs.Float64Var(&f.loss, "loss", 0, "random loss probability of the in-memory fabric (mem link)")
	fs.Float64Var(&f.rate, "gbps", 0, "bandwidth of the in-memory fabric in Gbit/s (mem link; 0 = unlimited)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for payloads, the fabric and the transport")
	fs.BoolVar(&f.jsonOut, "json", false, "print results as JSON, one object per link")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.IntVar(&f.mtu, "mtu", 9014, "largest frame in bytes (Ethernet header included)")
	fs.IntVar(&f.paths, "paths", 8, "entropies (paths) a spray QP sprays over")
	if err := fs.Parse(args); err != nil {
		return err
	}
	prof, err := transport.ParseProfile(f.profile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	cfg := bench.PerfConfig{MsgSize: f.size, Total: f.total, Pings: f.pings, Seed: f.seed}
	var results []bench.PerfResult
	for _, kind := range strings.Split(f.links, ",") {
		var res bench.PerfResult
		var err error
		switch kind {
		case "mem":
			res, err = perfMem(ctx, f, prof, cfg)
		case "tcp":
			res, err = perfTCP(ctx, cfg)
		default:
			return fmt.Errorf("perf: unknown link %q (want mem or tcp)", kind)
		}
		if err != nil {
			return fmt.Errorf("perf over %s: %w", kind, err)
		}
		results = append(results, res)
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
	return nil
}

func printPerf(w io.Writer, results []bench.PerfResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "link\tprofile\tmsg size\tbytes\tseconds\tGbit/s\tmsgs/s\trtt p50 µs\tp99 µs\tp99.9 µs\tretransmits\tsha256\t")
	for _, r := range results {
		verdict := "ok"
		if !r.Integrity {
			verdict = "MISMATCH"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%.2f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%s\t\n", r.Link, r.Profile, r.MsgSize, r.Bytes,
			r.Seconds, r.GoodputGbps, r.MsgsPerSec, r.RTTp50us, r.RTTp99us, r.RTTp999us, r.Retransmits, verdict)
	}
	tw.Flush()
}

// perfMem runs client and server in this process, each with its own engine
// goroutine, over the in-memory fabric.
func perfMem(ctx context.Context, f perfFlags, prof transport.Profile, cfg bench.PerfConfig) (bench.PerfResult, error) {
	fab := mem.NewFabric(mem.Config{Seed: f.seed, Loss: f.loss, Bandwidth: f.rate * 1e9, FrameSize: f.mtu, Delay: 2 * time.Microsecond}, clock.NewSystem())
	tcfg := transport.Config{Profile: prof, Seed: f.seed, MTU: f.mtu, Entropies: f.paths}
	a, err := memEndpoint(fab, 1, tcfg)
	if err != nil {
		return bench.PerfResult{}, err
	}
	defer a.Close()
	tcfg.Seed++
	b, err := memEndpoint(fab, 2, tcfg)
	if err != nil {
		return bench.PerfResult{}, err
	}
	defer b.Close()
	ca, cb, err := connectPair(ctx, a, b)
	if err != nil {
		return bench.PerfResult{}, err
	}
	srvErr := make(chan error, 1)
	go func() { srvErr <- bench.PerfServer(ctx, &bench.SprayConn{C: cb, CQ: b.CQ()}) }()
	res, err := bench.PerfClient(ctx, &bench.SprayConn{C: ca, CQ: a.CQ()}, cfg)
	if err != nil {
		return res, err
	}
	if err := <-srvErr; err != nil {
		return res, fmt.Errorf("server: %w", err)
	}
	st, err := ca.Stats(ctx)
	if err != nil {
		return res, err
	}
	res.Link, res.Profile, res.Retransmits = "mem", prof.String(), st.Retransmits
	return res, nil
}

func memEndpoint(fab *mem.Fabric, n byte, cfg transport.Config) (*transport.Endpoint, error) {
	port, err := fab.NewPort([6]byte{0x02, 0x53, 0x50, 0, 0, n}, netip.AddrFrom4([4]byte{10, 99, 0, n}))
	if err != nil {
		return nil, err
	}
	return transport.NewEndpoint(port, cfg)
}

// connectPair creates a QP on each endpoint and connects them.
func connectPair(ctx context.Context, a, b *transport.Endpoint) (*transport.Conn, *transport.Conn, error) {
	ca, err := a.CreateQP(ctx)
	if err != nil {
		return nil, nil, err
	}
	cb, err := b.CreateQP(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := ca.Connect(ctx, cb.Info()); err != nil {
		return nil, nil, err
	}
	if err := cb.Connect(ctx, ca.Info()); err != nil {
		return nil, nil, err
	}
	return ca, cb, nil
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
	c, err := net.Dial("tcp", ln.Addr().String())
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
