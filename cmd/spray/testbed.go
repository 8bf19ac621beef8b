package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/testbed"
)

var testbedUsage = `usage: spray testbed <up|down|status|fault|list> [flags]   (root)

  spray testbed up leafspine:HxLxS[,rate=R,hostrate=R,buffer=B,mtu=N] [--name NAME]
        [--ecn KMIN,KMAX,PMAX]    build a fabric that stays after spray exits: namespaces,
                                  veths, shaped switch ports, the fabric programs (INT, ECN,
                                  faults, counters) pinned under ` + testbed.PinRoot + `
  spray testbed status [NAME] [--interval 1s] [--json]
                                  per switch port: utilization over the interval, packets,
                                  bytes, drops by cause, ECN marks, largest queue delay
  spray testbed fault NAME --port SWITCH:PORT [--loss P] [--burst P,R[,LOSSGOOD[,LOSSBAD]]]
        [--blackhole] [--down|--up] [--clear] [--roce-only] [--reconverge]
                                  change a port's faults while traffic runs; PORT is an index,
                                  an interface (up1, down0) or the peer (spine0:leaf1)
  spray testbed down NAME|PREFIX|--all [--kill]
                                  remove programs, pins, veths, namespaces and state (--kill:
                                  first stop what runs in the namespaces); --all removes your
                                  persistent testbeds and what your killed spray runs left
                                  (PREFIX sptN-N-, see list), never another user's
  spray testbed list              the persistent testbeds, and the throw-away testbeds of
                                  perf, bench, compare and incast runs (running or left over)

flags:
`

func init() {
	register(command{name: "testbed", summary: "build, inspect and break a leaf-spine fabric by hand (up, status, fault, down)", run: runTestbed})
}

func runTestbed(args []string) error {
	if len(args) == 0 {
		return usagef("testbed: want up, down, status, fault or list")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "up":
		return testbedUp(args, os.Stdout)
	case "down":
		return testbedDown(args, os.Stdout)
	case "status":
		return testbedStatus(args, os.Stdout)
	case "fault":
		return testbedFault(args, os.Stdout)
	case "list":
		if len(args) > 0 {
			return usagef("testbed list: unexpected argument %q", args[0])
		}
		return testbedList(os.Stdout)
	case "-h", "--help", "help":
		fmt.Fprint(os.Stderr, testbedUsage)
		return errHelp
	}
	return usagef("testbed: unknown subcommand %q (want up, down, status, fault or list)", sub)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newTestbedFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("testbed "+name, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), testbedUsage); fs.PrintDefaults() }
	return fs
}

// parseECN parses "KMIN,KMAX,PMAX" such as "20us,200us,0.2".
func parseECN(s string) (ebpf.ECNConfig, error) {
	var e ebpf.ECNConfig
	if s == "" {
		return e, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return e, fmt.Errorf("--ecn %q: want KMIN,KMAX,PMAX such as 20us,200us,0.2", s)
	}
	var err error
	if e.KMin, err = time.ParseDuration(parts[0]); err != nil {
		return e, fmt.Errorf("--ecn %q: KMIN: %v", s, err)
	}
	if e.KMax, err = time.ParseDuration(parts[1]); err != nil {
		return e, fmt.Errorf("--ecn %q: KMAX: %v", s, err)
	}
	if e.PMax, err = strconv.ParseFloat(parts[2], 64); err != nil || !(e.PMax > 0 && e.PMax <= 1) {
		return e, fmt.Errorf("--ecn %q: PMAX: want a probability in (0, 1]", s)
	}
	if e.KMin < 0 || e.KMax <= 0 || e.KMax < e.KMin {
		return e, fmt.Errorf("--ecn %q: want 0 <= KMIN <= KMAX, KMAX > 0", s)
	}
	return e, nil
}

type upHost struct {
	Namespace string `json:"namespace"`
	IP        string `json:"ip"`
	MAC       string `json:"mac"`
}

type upResult struct {
	Name   string   `json:"name"`
	Prefix string   `json:"prefix"`
	Config string   `json:"config"`
	PinDir string   `json:"pin_dir"`
	State  string   `json:"state"`
	Hosts  []upHost `json:"hosts"`
}

func testbedUp(args []string, w io.Writer) error {
	fs := newTestbedFlags("up")
	name := fs.String("name", "lab", "name of the testbed (its namespaces are "+testbed.PersistentPrefix+"NAME-...)")
	ecnFlag := fs.String("ecn", "", "ECN marking on queue delay on every switch port: KMIN,KMAX,PMAX (e.g. 20us,200us,0.2); default none")
	jsonOut := fs.Bool("json", false, "print the testbed as JSON")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up building after this long")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("testbed up: want one topology, such as leafspine:2x2x2,rate=200mbit")
	}
	cfg, err := testbed.ParseLeafSpine(pos[0])
	if err != nil {
		return usagef("testbed up: %v", err)
	}
	ecn, err := parseECN(*ecnFlag)
	if err != nil {
		return usagef("testbed up: %v", err)
	}
	if *timeout <= 0 {
		return usagef("testbed up: --timeout %v: want a duration above 0", *timeout)
	}
	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	f, err := testbed.UpLeafSpine(ctx, *name, cfg, ecn)
	if err != nil {
		return err
	}
	defer f.Close()
	if ctx.Err() != nil {
		// Interrupted while it came up: leave nothing behind.
		f.Close()
		if err := testbed.DownLeafSpine(*name); err != nil {
			return fmt.Errorf("%w; removing the testbed: %v", context.Cause(ctx), err)
		}
		return context.Cause(ctx)
	}
	res := upResult{Name: f.Name, Prefix: f.Prefix, Config: f.Config.String(), PinDir: f.Programs().PinDir(),
		State: filepath.Join(testbed.StateDir, f.Name+".json")}
	for _, h := range f.Hosts {
		res.Hosts = append(res.Hosts, upHost{Namespace: h.Name, IP: h.IP.String(), MAC: net.HardwareAddr(h.MAC[:]).String()})
	}
	if *jsonOut {
		return json.NewEncoder(w).Encode(res)
	}
	fmt.Fprintf(w, "testbed %s is up: %s\n", f.Name, res.Config)
	fmt.Fprintf(w, "  %d hosts, %d leaves, %d spines; switch links %d Mbit/s, host links %d Mbit/s, %d bytes of queue per port\n",
		len(f.Hosts), len(f.Leaves), len(f.Spines), f.Config.RateBps/1e6, f.Config.HostRateBps/1e6, f.Config.BufferBytes)
	fmt.Fprintf(w, "  fabric programs pinned in %s, state in %s\n\n", res.PinDir, res.State)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  HOST (NAMESPACE)\tIP\tMAC")
	for _, h := range res.Hosts {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", h.Namespace, h.IP, h.MAC)
	}
	tw.Flush()
	a, b := f.Hosts[0], f.Hosts[len(f.Hosts)-1]
	fmt.Fprintf(w, `
use it:
  sudo ip netns exec %[1]s ping %[3]s
  sudo ip netns exec %[2]s spray perf server
  sudo ip netns exec %[1]s spray perf client --peer %[3]s --link udp
  spray testbed status %[4]s --interval 1s
  spray testbed fault %[4]s --port spine0:%[5]s --blackhole      (then --clear)
  spray testbed down %[4]s
`, a.Name, b.Name, b.IP, f.Name, strings.TrimPrefix(f.Leaves[len(f.Leaves)-1].Name, f.Prefix))
	return nil
}

func testbedDown(args []string, w io.Writer) error {
	fs := newTestbedFlags("down")
	all := fs.Bool("all", false, "remove your persistent testbeds, and your throw-away testbeds whose process is gone (never another login user's)")
	kill := fs.Bool("kill", false, "first stop the processes running in the testbed's namespaces (SIGTERM, then SIGKILL after 2s)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	var names []string
	switch {
	case *all && len(pos) == 0:
		if names, err = persistentNames(); err != nil {
			return err
		}
		names = onlyMine(names, testbed.PersistentLogin, testbed.CallerLogin(), w)
	case !*all && len(pos) > 0:
		names = pos
	default:
		return usagef("testbed down: want NAME... or --all")
	}
	var errs []error
	var throw []testbed.Throwaway
	if *all {
		if throw, err = testbed.Throwaways(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range names {
		if testbed.IsThrowawayPrefix(n) {
			throw = append(throw, testbed.Throwaway{Prefix: n})
		}
	}
	names = slices.DeleteFunc(names, testbed.IsThrowawayPrefix)
	for _, t := range throw {
		if t.Running {
			fmt.Fprintf(w, "testbed %s left alone: process %d that made it still runs\n", t.Prefix, t.Pid)
			continue
		}
		if *all && !t.Mine {
			fmt.Fprintf(w, "testbed %s left alone: %s (spray testbed down %s removes it)\n", t.Prefix, whose(t.Login), t.Prefix)
			continue
		}
		if err := testbed.RemoveThrowaway(t.Prefix); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "testbed %s removed\n", t.Prefix)
	}
	for _, n := range names {
		stopProcesses(n, *kill)
		if err := testbed.DownLeafSpine(n); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "testbed %s removed\n", n)
	}
	return errors.Join(errs...)
}

// onlyMine keeps the persistent testbeds whose login (from their state
// file) is me, and says which it leaves alone: down --all never removes
// another user's testbed, nor one whose maker is unknown
// (TestDownAllOnlyMine).
func onlyMine(names []string, login func(string) int, me int, w io.Writer) []string {
	return slices.DeleteFunc(names, func(n string) bool {
		if l := login(n); l != me {
			fmt.Fprintf(w, "testbed %s left alone: %s (spray testbed down %s removes it)\n", n, whose(l), n)
			return true
		}
		return false
	})
}

// whose says whose a testbed is, for a login user l that is not the
// caller's.
func whose(l int) string {
	if l < 0 {
		return "made by an unknown user"
	}
	if u, err := user.LookupId(strconv.Itoa(l)); err == nil {
		return "made by " + u.Username
	}
	return fmt.Sprintf("made by login user %d", l)
}

// stopProcesses stops (kill) or lists the processes that run in testbed
// name's namespaces, which would keep them alive after down.
func stopProcesses(name string, kill bool) {
	pids, _ := testbed.NamespacePids(name)
	if len(pids) == 0 {
		return
	}
	if !kill {
		var list []string
		for _, pid := range pids {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			list = append(list, fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(string(comm))))
		}
		fmt.Fprintf(os.Stderr, "spray: testbed %s: processes still running in its namespaces keep them alive: %s (stop them, or use --kill)\n",
			name, strings.Join(list, ", "))
		return
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if pids, _ = testbed.NamespacePids(name); len(pids) == 0 {
			return
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// persistentNames returns the testbeds with a state file and those that
// left namespaces, links or pinned programs without one.
func persistentNames() ([]string, error) {
	names, err := testbed.PersistentNames()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	left, err := testbed.LeftoverNames()
	if err != nil {
		return nil, err
	}
	for _, n := range left {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return names, nil
}

func testbedList(w io.Writer) error {
	names, err := persistentNames()
	if err != nil {
		return err
	}
	for _, n := range names {
		f, err := testbed.OpenLeafSpine(n)
		if err != nil {
			fmt.Fprintf(w, "%s\tbroken: %v\n", n, err)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", n, f.Config, f.Prefix)
		f.Close()
	}
	throw, err := testbed.Throwaways()
	if err != nil {
		return err
	}
	for _, t := range throw {
		state := "left over: process gone (spray testbed down " + t.Prefix + " removes it)"
		switch {
		case t.Running:
			state = fmt.Sprintf("in use by process %d", t.Pid)
		case t.Pid > 0:
			state = fmt.Sprintf("left over by process %d, gone (spray testbed down %s removes it)", t.Pid, t.Prefix)
		}
		if !t.Mine {
			state += "; " + whose(t.Login) + ", so down --all leaves it"
		}
		fmt.Fprintf(w, "%s\tthrow-away, %d namespaces and links\t%s\n", t.Prefix, len(t.Objects), state)
	}
	return nil
}

// statusPort is the JSON form of testbed.PortStatus.
type statusPort struct {
	Switch        string      `json:"switch"`
	Port          string      `json:"port"`
	Peer          string      `json:"peer"`
	ID            string      `json:"port_id"`
	RateBps       uint64      `json:"rate_bps"`
	Down          bool        `json:"down"`
	Utilization   float64     `json:"utilization_pct"`
	TxPackets     uint64      `json:"tx_packets"`
	TxBytes       uint64      `json:"tx_bytes"`
	Packets       uint64      `json:"packets"`
	Bytes         uint64      `json:"bytes"`
	DropQueue     uint64      `json:"drop_queue"`
	DropLoss      uint64      `json:"drop_loss"`
	DropBurst     uint64      `json:"drop_burst"`
	DropBlackhole uint64      `json:"drop_blackhole"`
	DropDown      uint64      `json:"drop_down"`
	ECNMarked     uint64      `json:"ecn_marked"`
	Trimmed       uint64      `json:"trimmed"`
	MaxQueueDelay float64     `json:"max_queue_delay_us"`
	Faults        statusFault `json:"faults"`
}

// statusFault is the JSON form of ebpf.Faults.
type statusFault struct {
	Blackhole bool    `json:"blackhole"`
	Loss      float64 `json:"loss"`
	// Burst is Gilbert-Elliott burst loss: p, r, loss_good, loss_bad;
	// absent when off.
	Burst    map[string]float64 `json:"burst,omitempty"`
	RoCEOnly bool               `json:"roce_only"`
}

func jsonFaults(f ebpf.Faults) statusFault {
	s := statusFault{Blackhole: f.Blackhole, Loss: f.Loss, RoCEOnly: f.RoCEOnly}
	if f.Burst.On() {
		s.Burst = map[string]float64{"p": f.Burst.P, "r": f.Burst.R, "loss_good": f.Burst.LossGood, "loss_bad": f.Burst.LossBad}
	}
	return s
}

type statusResult struct {
	Name     string       `json:"name"`
	Config   string       `json:"config"`
	Interval float64      `json:"interval_s"`
	Ports    []statusPort `json:"ports"`
}

func faultString(f ebpf.Faults, down bool) string {
	var s []string
	if down {
		s = append(s, "link down")
	}
	if f.Blackhole {
		s = append(s, "blackhole")
	}
	if f.Loss > 0 {
		s = append(s, fmt.Sprintf("loss %.4g", f.Loss))
	}
	if f.Burst.On() {
		s = append(s, fmt.Sprintf("burst p=%.3g r=%.3g", f.Burst.P, f.Burst.R))
	}
	if len(s) > 0 && f.RoCEOnly {
		s = append(s, "(RoCE only)")
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

func testbedStatus(args []string, w io.Writer) error {
	fs := newTestbedFlags("status")
	interval := fs.Duration("interval", time.Second, "measure utilization over this long (0: counters only)")
	jsonOut := fs.Bool("json", false, "print one JSON object per testbed")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if *interval < 0 {
		return usagef("testbed status: --interval %v: want a duration >= 0", *interval)
	}
	names := pos
	if len(names) == 0 {
		if names, err = testbed.PersistentNames(); err != nil {
			return err
		}
		if len(names) == 0 {
			return errors.New("testbed status: no testbed is up (spray testbed up leafspine:2x2x2 makes one)")
		}
	}
	ctx, cancel := signalContext()
	defer cancel()
	for _, n := range names {
		f, err := testbed.OpenLeafSpine(n)
		if errors.Is(err, os.ErrNotExist) && len(pos) > 0 {
			return usagef("testbed status: no testbed %q (spray testbed list shows them)", n)
		}
		if err != nil {
			return err
		}
		st, err := f.Status(ctx, *interval)
		f.Close()
		if err != nil {
			return err
		}
		res := statusResult{Name: n, Config: f.Config.String(), Interval: interval.Seconds()}
		for _, p := range st {
			res.Ports = append(res.Ports, statusPort{Switch: p.Switch, Port: p.Port, Peer: p.Peer, ID: p.ID.String(),
				RateBps: p.RateBps, Down: p.Down, Utilization: p.Utilization, TxPackets: p.TxPackets, TxBytes: p.TxBytes,
				Packets: p.Packets, Bytes: p.Bytes, DropQueue: p.DropQueue, DropLoss: p.DropLoss, DropBurst: p.DropBurst,
				DropBlackhole: p.DropBlackhole, DropDown: p.DropDown, ECNMarked: p.ECNMarked, Trimmed: p.Trimmed,
				MaxQueueDelay: float64(p.MaxQueueDelay) / 1e3, Faults: jsonFaults(p.Faults)})
		}
		if *jsonOut {
			if err := json.NewEncoder(w).Encode(res); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(w, "testbed %s: %s, utilization over %v\n", n, res.Config, *interval)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "PORT\tPEER\tID\tMBIT/S\tUTIL%\tPACKETS\tBYTES\tQUEUE-DROP\tLOSS\tBURST\tBLACKHOLE\tDOWN-DROP\tECN\tTRIMMED\tMAX-QDELAY\tFAULTS\t")
		for i, p := range res.Ports {
			fmt.Fprintf(tw, "%s:%s\t%s\t%s\t%d\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0fµs\t%s\t\n",
				p.Switch, p.Port, p.Peer, p.ID, p.RateBps/1e6, p.Utilization, p.Packets, p.Bytes, p.DropQueue,
				p.DropLoss, p.DropBurst, p.DropBlackhole, p.DropDown, p.ECNMarked, p.Trimmed, p.MaxQueueDelay, faultString(st[i].Faults, p.Down))
		}
		tw.Flush()
	}
	return nil
}

// probFlag is a probability flag that remembers whether it was set.
type probFlag struct {
	v   float64
	set bool
}

func (p *probFlag) String() string { return strconv.FormatFloat(p.v, 'g', -1, 64) }

func (p *probFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return fmt.Errorf("%q: want a probability in [0, 1]", s)
	}
	p.v, p.set = v, true
	return nil
}

// parseBurst parses "P,R[,LOSSGOOD[,LOSSBAD]]" or "off".
func parseBurst(s string) (ebpf.GilbertElliott, error) {
	var g ebpf.GilbertElliott
	if s == "off" || s == "0" {
		return g, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) < 2 || len(parts) > 4 {
		return g, fmt.Errorf("--burst %q: want P,R[,LOSSGOOD[,LOSSBAD]] (probabilities) or off", s)
	}
	fields := []*float64{&g.P, &g.R, &g.LossGood, &g.LossBad}
	for i, x := range parts {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return g, fmt.Errorf("--burst %q: %q is not a probability in [0, 1]", s, x)
		}
		*fields[i] = v
	}
	if !g.On() {
		return g, fmt.Errorf("--burst %q: P and LOSSGOOD are 0, which is off (say off)", s)
	}
	return g, nil
}

func testbedFault(args []string, w io.Writer) error {
	fs := newTestbedFlags("fault")
	port := fs.String("port", "", "the switch port: SWITCH:PORT, PORT an index, an interface or the peer (spine0:leaf1, leaf0:up1)")
	var loss probFlag
	fs.Var(&loss, "loss", "random loss probability in [0, 1] on the port's egress")
	burst := fs.String("burst", "", "Gilbert-Elliott burst loss P,R[,LOSSGOOD[,LOSSBAD]], or off")
	blackhole := fs.Bool("blackhole", false, "drop every frame the port sends")
	down := fs.Bool("down", false, "take the link down at both ends (a pulled cable)")
	up := fs.Bool("up", false, "bring the link up again")
	clear := fs.Bool("clear", false, "clear every fault of the port (applied first) and bring its link up")
	roceOnly := fs.Bool("roce-only", false, "apply the faults to RoCE frames (UDP 4791) only")
	reconverge := fs.Bool("reconverge", false, "then update every node's routes to the links that are down")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("testbed fault: want one testbed NAME")
	}
	if *port == "" {
		return usagef("testbed fault: --port SWITCH:PORT is required")
	}
	if !loss.set && *burst == "" && !*blackhole && !*down && !*up && !*clear && !*reconverge {
		return usagef("testbed fault: nothing to do: give --loss, --burst, --blackhole, --down, --up or --clear")
	}
	if *down && (*up || *clear) {
		return usagef("testbed fault: --down with --up or --clear")
	}
	var ge ebpf.GilbertElliott
	if *burst != "" {
		if ge, err = parseBurst(*burst); err != nil {
			return usagef("testbed fault: %v", err)
		}
	}
	if sw, p, ok := strings.Cut(*port, ":"); !ok || sw == "" || p == "" {
		return usagef("testbed fault: --port %q: want SWITCH:PORT, such as spine0:leaf1 or leaf0:up1", *port)
	}
	f, err := testbed.OpenLeafSpine(pos[0])
	if errors.Is(err, os.ErrNotExist) {
		return usagef("testbed fault: no testbed %q (spray testbed list shows them)", pos[0])
	}
	if err != nil {
		return err
	}
	defer f.Close()
	// A port the testbed does not have is a usage error, found before
	// anything changes.
	sw, pi, err := f.LookupPort(*port)
	if errors.Is(err, testbed.ErrConfig) {
		return usagef("testbed fault: --port: %v", err)
	}
	if err != nil {
		return err
	}
	prog := f.Programs()
	id := f.PortID(sw, pi)
	pc, err := prog.PortConfig(id)
	if err != nil {
		return err
	}
	faults := pc.Faults
	if *clear {
		faults = ebpf.Faults{}
	}
	if loss.set {
		faults.Loss = loss.v
	}
	if *burst != "" {
		faults.Burst = ge
	}
	if *blackhole {
		faults.Blackhole = true
	}
	if *roceOnly {
		faults.RoCEOnly = true
	}
	if err := prog.SetFaults(id, faults); err != nil {
		return err
	}
	peer := sw.Ports[pi].Peer
	if *down || *up || *clear {
		if err := f.SetLinkDown(sw.Name, peer, *down); err != nil {
			return err
		}
	}
	if *reconverge {
		if err := f.Reconverge(); err != nil {
			return err
		}
	}
	short := strings.TrimPrefix(sw.Name, f.Prefix)
	fmt.Fprintf(w, "testbed %s: %s:%s (to %s, port %v): %s\n", f.Name, short, sw.Ports[pi].Name,
		strings.TrimPrefix(peer, f.Prefix), id, faultString(faults, *down))
	return nil
}
