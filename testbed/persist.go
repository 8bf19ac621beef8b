package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Environment variables that move where persistent fabrics keep their
// state, read once at start (tests point them at temporary directories, so
// that nothing of theirs reaches the host's).
const (
	// EnvStateDir replaces StateDir.
	EnvStateDir = "SPRAY_TESTBED_STATE"
	// EnvBPFFS replaces BPFFS (and PinRoot, BPFFS/spray).
	EnvBPFFS = "SPRAY_BPFFS"
)

// Where persistent fabrics keep what a later process needs to reopen them.
// Set them (or the variables above) before any fabric is made.
var (
	// StateDir holds one <name>.json per persistent fabric.
	StateDir = envOr(EnvStateDir, "/run/spray/testbeds")
	// BPFFS is the bpffs that UpLeafSpine mounts (if none is) and pins
	// under.
	BPFFS = envOr(EnvBPFFS, ebpf.DefaultBPFFS)
	// PinRoot holds the pinned fabric programs of each persistent fabric,
	// in <PinRoot>/<prefix>.
	PinRoot = BPFFS + "/spray"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

const (
	// PersistentPrefix starts the prefix of every persistent fabric:
	// "spf-<name>-". CleanupStale, which only removes the testbeds of dead
	// processes, never touches them.
	PersistentPrefix = "spf-"
	// MaxNameLen bounds a persistent fabric's name.
	MaxNameLen = 24
)

// persistState is the state file of a persistent fabric: what OpenLeafSpine
// needs (Name, Prefix, Config, PinDir, Known) and a description for people
// and other tools (the rest).
type persistState struct {
	Name    string          `json:"name"`
	Prefix  string          `json:"prefix"`
	Config  LeafSpineConfig `json:"config"`
	ECN     ebpf.ECNConfig  `json:"ecn"`
	PinDir  string          `json:"pin_dir"`
	Created time.Time       `json:"created"`
	// Login is the login user who made it (CallerLogin); spray testbed
	// down --all removes only the caller's. Absent (-1) in older files.
	Login int `json:"login"`
	// Known lists the links that were down at the last Reconverge, as
	// pairs of node names without the prefix.
	Known    [][2]string   `json:"known_down,omitempty"`
	Hosts    []stateHost   `json:"hosts"`
	Switches []stateSwitch `json:"switches"`
}

type stateHost struct {
	Namespace string `json:"namespace"`
	Interface string `json:"interface"`
	IP        string `json:"ip"`
	MAC       string `json:"mac"`
}

type stateSwitch struct {
	Namespace string      `json:"namespace"`
	Ports     []statePort `json:"ports"`
}

type statePort struct {
	Name    string `json:"name"`
	Ifindex int    `json:"ifindex"`
	Peer    string `json:"peer"`
	PortID  string `json:"port_id"`
	Addr    string `json:"addr"`
	RateBps uint64 `json:"rate_bps"`
}

// checkName refuses names that would not make good file and namespace
// names.
func checkName(name string) error {
	ok := name != "" && len(name) <= MaxNameLen
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case (r == '-' || r == '_') && i > 0:
		default:
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%w: testbed name %q: want 1 to %d letters, digits, '-' or '_', starting with a letter or digit", ErrConfig, name, MaxNameLen)
	}
	return nil
}

func statePath(name string) string { return filepath.Join(StateDir, name+".json") }

// PersistentPrefixOf returns the prefix of the persistent fabric name.
func PersistentPrefixOf(name string) string { return PersistentPrefix + name + "-" }

// UpLeafSpine builds a persistent leaf-spine fabric called name: as
// NewLeafSpine, with the fabric programs attached (AttachPrograms with ecn)
// and pinned under PinRoot, its namespaces named PersistentPrefixOf(name)
// + "host0-0" and so on, and a state file in StateDir, so that it outlives
// the process. Reopen it with OpenLeafSpine and remove it with
// DownLeafSpine; the returned Fabric's Close only releases this process's
// handles. Errors wrap os.ErrExist if a fabric of that name exists (or
// left namespaces behind), ErrConfig for a bad name or config. It needs
// root.
func UpLeafSpine(ctx context.Context, name string, cfg LeafSpineConfig, ecn ebpf.ECNConfig) (_ *Fabric, err error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if err := CheckPrivilege(); err != nil {
		return nil, err
	}
	prefix := PersistentPrefixOf(name)
	if _, err := os.Stat(statePath(name)); err == nil {
		return nil, fmt.Errorf("testbed %q: %w (remove it with spray testbed down %s)", name, os.ErrExist, name)
	}
	if left, _ := leftoversMatching(ofFabric(name)); len(left) > 0 {
		return nil, fmt.Errorf("testbed %q: %w: %s left behind (remove with spray testbed down %s)", name, os.ErrExist, strings.Join(left, ", "), name)
	}
	if err := ebpf.MountBPFFS(BPFFS); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: state directory: %w", err)
	}
	// An owner file that CleanupStale does not take for a pid.
	if os.MkdirAll(ownerDir, 0o755) == nil {
		_ = os.WriteFile(filepath.Join(ownerDir, prefix), []byte("persistent "+name+"\n"), 0o644)
	}
	defer func() {
		if err != nil {
			_ = DownLeafSpine(name)
		}
	}()
	f, err := newFabric(ctx, prefix, c)
	if err != nil {
		return nil, err
	}
	f.Name, f.persistent = name, true
	prog, err := f.AttachProgramsContext(ctx, ecn)
	if err != nil {
		f.teardown()
		return nil, err
	}
	pinDir := filepath.Join(PinRoot, prefix)
	if err := prog.Pin(pinDir); err != nil {
		prog.Close()
		f.teardown()
		return nil, err
	}
	st := f.state(ecn, pinDir)
	if err := writeState(st); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (f *Fabric) state(ecn ebpf.ECNConfig, pinDir string) *persistState {
	st := &persistState{Name: f.Name, Prefix: f.Prefix, Config: f.Config, ECN: ecn, PinDir: pinDir, Created: time.Now().UTC(), Login: CallerLogin()}
	for _, k := range f.links {
		if k.known {
			st.Known = append(st.Known, [2]string{k.a.node.short, k.b.node.short})
		}
	}
	for _, h := range f.Hosts {
		st.Hosts = append(st.Hosts, stateHost{Namespace: h.Name, Interface: h.Link, IP: h.IP.String(), MAC: net.HardwareAddr(h.MAC[:]).String()})
	}
	for _, sw := range append(append([]*Switch(nil), f.Leaves...), f.Spines...) {
		ss := stateSwitch{Namespace: sw.Name}
		for i, p := range sw.Ports {
			ss.Ports = append(ss.Ports, statePort{Name: p.Name, Ifindex: p.Ifindex, Peer: p.Peer,
				PortID: f.PortID(sw, i).String(), Addr: p.Addr.String(), RateBps: p.RateBps})
		}
		st.Switches = append(st.Switches, ss)
	}
	return st
}

func writeState(st *persistState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(st.Name) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("testbed: write state: %w", err)
	}
	if err := os.Rename(tmp, statePath(st.Name)); err != nil {
		return fmt.Errorf("testbed: write state: %w", err)
	}
	return nil
}

// PersistentLogin returns the login user who made the persistent fabric
// name, -1 when its state file does not say (an older spray's) or is gone.
func PersistentLogin(name string) int {
	b, err := os.ReadFile(statePath(name))
	if err != nil {
		return -1
	}
	st := persistState{Login: -1}
	if json.Unmarshal(b, &st) != nil {
		return -1
	}
	return st.Login
}

func readState(name string) (*persistState, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(statePath(name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no testbed %q is up: %w (spray testbed up ... --name %s makes one)", name, os.ErrNotExist, name)
		}
		return nil, fmt.Errorf("testbed %q: %w", name, err)
	}
	var st persistState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w: testbed %q: state file %s: %v", ErrConfig, name, statePath(name), err)
	}
	if st.Name != name || st.Prefix != PersistentPrefixOf(name) {
		return nil, fmt.Errorf("%w: testbed %q: state file %s names %q", ErrConfig, name, statePath(name), st.Name)
	}
	return &st, nil
}

// saveKnown rewrites the state file of a persistent fabric with the links
// that Reconverge saw down; call with f.mu held.
func (f *Fabric) saveKnown() error {
	st, err := readState(f.Name)
	if err != nil {
		return err
	}
	st.Known = nil
	for _, k := range f.links {
		if k.known {
			st.Known = append(st.Known, [2]string{k.a.node.short, k.b.node.short})
		}
	}
	return writeState(st)
}

// OpenLeafSpine opens the persistent fabric that UpLeafSpine (in this or
// another process) built: the returned Fabric has its Hosts, Leaves,
// Spines, PortStats, SetLinkDown, Reconverge and Status, and Programs
// returns its pinned fabric programs (faults, ECN, counters). Close
// releases the handles and leaves the fabric. Errors wrap os.ErrNotExist
// for an unknown name.
func OpenLeafSpine(name string) (_ *Fabric, err error) {
	st, err := readState(name)
	if err != nil {
		return nil, err
	}
	c, err := st.Config.resolve()
	if err != nil {
		return nil, fmt.Errorf("testbed %q: state file: %w", name, err)
	}
	f, hosts, leaves, spines := layoutFabric(st.Prefix, c)
	f.Name, f.persistent = name, true
	defer func() {
		if err != nil {
			f.release()
		}
	}()
	handles := make(map[*node]*netlink.Handle, len(f.nodes))
	defer func() {
		for _, h := range handles {
			h.Close()
		}
	}()
	for _, n := range f.nodes {
		if n.ns, err = netns.GetFromName(n.name); err != nil {
			return nil, fmt.Errorf("testbed %q: namespace %s: %w", name, n.name, err)
		}
		h, err := netlink.NewHandleAt(n.ns)
		if err != nil {
			return nil, fmt.Errorf("testbed: netlink in %s: %w", n.name, err)
		}
		handles[n] = h
		for _, e := range n.ports {
			l, err := h.LinkByName(e.name)
			if err != nil {
				return nil, fmt.Errorf("testbed %q: %s in %s: %w", name, e.name, n.name, err)
			}
			e.ifindex = l.Attrs().Index
			if l.Attrs().Flags&net.FlagUp == 0 {
				e.link.down = true
			}
		}
	}
	for _, kd := range st.Known {
		for _, k := range f.links {
			if k.a.node.short == kd[0] && k.b.node.short == kd[1] {
				k.known = true
			}
		}
	}
	if err := f.describe(handles, hosts, leaves, spines); err != nil {
		return nil, err
	}
	if f.prog, err = ebpf.LoadPinnedFabric(st.PinDir); err != nil {
		return nil, fmt.Errorf("testbed %q: fabric programs: %w", name, err)
	}
	return f, nil
}

// release closes the namespace handles of a persistent fabric, which
// stays.
func (f *Fabric) release() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed.Store(true)
	for _, n := range f.nodes {
		if n.ns >= 0 {
			n.ns.Close()
			n.ns = -1
		}
	}
	return nil
}

// DownLeafSpine removes the persistent fabric name, whatever state it is
// in: its pinned programs and maps (which detaches them), the links in its
// namespaces, the namespaces, the state file. Processes still running in
// its namespaces (ip netns exec) keep the namespace alive until they exit.
// Errors wrap os.ErrNotExist if nothing of that name exists.
func DownLeafSpine(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := CheckPrivilege(); err != nil {
		return err
	}
	prefix := PersistentPrefixOf(name)
	pinDir := filepath.Join(PinRoot, prefix)
	found := false
	if st, err := readState(name); err == nil {
		found = true
		if st.PinDir != "" && strings.HasPrefix(st.PinDir, PinRoot+"/") {
			pinDir = st.PinDir
		}
	}
	var errs []error
	if _, err := os.Stat(pinDir); err == nil {
		found = true
		// Removing a link's pin, with no process holding it, detaches
		// the program.
		if err := os.RemoveAll(pinDir); err != nil {
			errs = append(errs, fmt.Errorf("testbed: remove pinned programs: %w", err))
		}
	}
	// Objects are matched by fabric name, not by prefix: "spf-lab-" also
	// starts the objects of fabric "lab-2" (TestDownLeavesNamesake).
	own := ofFabric(name)
	left, err := leftoversMatching(own)
	if err != nil {
		errs = append(errs, err)
	}
	if len(left) > 0 {
		found = true
	}
	// Delete the links first, so that they are gone when this returns
	// rather than when the kernel gets round to the dead namespaces.
	for _, l := range left {
		if ns, ok := strings.CutPrefix(l, "netns "); ok {
			errs = append(errs, deleteLinksIn(ns))
		}
	}
	errs = append(errs, cleanupMatching(own))
	// The state file goes last, and only once nothing it names is left:
	// without it `testbed list` shows nothing, and a namespace that
	// survived would be an orphan nobody lists.
	if left, err := leftoversMatching(own); err != nil {
		errs = append(errs, err)
	} else if len(left) > 0 {
		errs = append(errs, fmt.Errorf("testbed %s: still there after down, state kept: %s", name, strings.Join(left, ", ")))
	} else if _, err := os.Stat(pinDir); err == nil {
		errs = append(errs, fmt.Errorf("testbed %s: pinned programs still in %s, state kept", name, pinDir))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(ownerDir, prefix))
	if err := os.Remove(statePath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = os.Remove(statePath(name) + ".tmp")
	if !found {
		return fmt.Errorf("no testbed %q: %w", name, os.ErrNotExist)
	}
	return nil
}

// deleteLinksIn deletes every link but lo in the named namespace.
func deleteLinksIn(nsName string) error {
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return nil // gone already
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("testbed: netlink in %s: %w", nsName, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("testbed: links in %s: %w", nsName, err)
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().Name == "lo" {
			continue
		}
		// The peer of a veth may be gone with an earlier deletion.
		if err := h.LinkDel(l); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENODEV) {
			errs = append(errs, fmt.Errorf("testbed: delete %s in %s: %w", l.Attrs().Name, nsName, err))
		}
	}
	return errors.Join(errs...)
}

// PersistentNames returns the names of the persistent fabrics that have a
// state file, sorted.
func PersistentNames() ([]string, error) {
	entries, err := os.ReadDir(StateDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && checkName(n) == nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// LeftoverNames returns the names of the persistent fabrics that left
// named namespaces, links in the calling thread's namespace or pinned
// programs behind, state file or not (a crashed up or down), sorted: what
// `spray testbed down --all` removes besides PersistentNames.
func LeftoverNames() ([]string, error) {
	var cands []string
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		cands = append(cands, e.Name())
	}
	if links, err := netlink.LinkList(); err == nil {
		for _, l := range links {
			cands = append(cands, l.Attrs().Name)
		}
	}
	pins, _ := os.ReadDir(PinRoot)
	for _, e := range pins {
		cands = append(cands, e.Name()) // "spf-NAME-"
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range cands {
		if n, ok := fabricName(c); ok && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ofFabric matches the names of persistent fabric name's namespaces and
// links, and nothing of another fabric whose name it starts.
func ofFabric(name string) func(string) bool {
	return func(s string) bool {
		n, ok := fabricName(s)
		return ok && n == name
	}
}

// fabricName extracts NAME from a persistent fabric's object name
// "spf-NAME-NODE..." (NODE a host, leaf or spine; NAME may hold '-') or
// its pin directory "spf-NAME-".
func fabricName(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, PersistentPrefix)
	if !ok {
		return "", false
	}
	if n, ok := strings.CutSuffix(rest, "-"); ok && checkName(n) == nil {
		return n, true
	}
	best := -1
	for _, node := range []string{"-host", "-leaf", "-spine"} {
		if i := strings.LastIndex(rest, node); i > best {
			best = i
		}
	}
	if best <= 0 || checkName(rest[:best]) != nil {
		return "", false
	}
	return rest[:best], true
}

// NamespacePids returns the processes whose network namespace is one of
// the named namespaces of persistent fabric name (what `ip netns exec`
// started there and left running): they keep the namespace alive after it
// is deleted. Processes that vanish while it looks are skipped.
func NamespacePids(name string) ([]int, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	own := ofFabric(name)
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	inodes := map[uint64]bool{}
	for _, e := range entries {
		if !own(e.Name()) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(netnsDir, e.Name()), &st) == nil {
			inodes[st.Ino] = true
		}
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", p.Name(), "ns", "net"), &st) == nil && inodes[st.Ino] {
			out = append(out, pid)
		}
	}
	return out, nil
}
