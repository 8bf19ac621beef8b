package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Errors. Methods wrap them, or the failing system call's error, with %w.
var (
	// ErrClosed is returned by Host.Do after the testbed was closed.
	ErrClosed = errors.New("testbed: closed")
	// ErrConfig is returned by NewPair for an invalid PairConfig.
	ErrConfig = errors.New("testbed: invalid config")
)

// netnsDir is where named namespaces are bind-mounted (as iproute2 does).
const netnsDir = "/run/netns"

// PairConfig configures NewPair. The zero value is a valid configuration.
type PairConfig struct {
	// MTU of both veth ends. 0: 1500. 68 to 65535 (9000 for jumbo frames).
	MTU int
	// Queues is the number of RX and TX queues of both veth ends (1 to
	// MaxQueues; zero: 1). Frames sent on a TX queue arrive on the peer's
	// RX queue of the same number.
	Queues int
	// Subnet holds both hosts' addresses: A gets the first host address, B
	// the second. It must be IPv4 with room for them. Zero: 10.77.x.0/24,
	// with x chosen per testbed.
	Subnet netip.Prefix
}

// Host is one end of a testbed: a network namespace and its interface. The
// fields do not change after NewPair returns.
type Host struct {
	// Name is the namespace's name, for `ip netns exec`.
	Name string
	// NS is a handle to the namespace, valid until the testbed is closed.
	NS netns.NsHandle
	// Link is the veth interface's name inside the namespace.
	Link    string
	Ifindex int
	MAC     [6]byte
	IP      netip.Addr
	// Prefix is IP with the subnet's length, as configured on Link.
	Prefix netip.Prefix
	MTU    int

	closed *atomic.Bool
}

// Pair is two hosts joined by a veth pair. Close it when done.
type Pair struct {
	// Prefix names everything the testbed made.
	Prefix string
	A, B   *Host

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	owner     *ownerLock
}

var seq atomic.Uint32

// NewPair makes two namespaces joined by a veth pair with addresses in one
// subnet, loopback up, and registers the pair for teardown on signals and
// CloseAll. It needs root. ctx bounds the wait for the link to come up.
func NewPair(ctx context.Context, cfg PairConfig) (*Pair, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("%w: MTU %d", ErrConfig, cfg.MTU)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.Queues < 1 || cfg.Queues > MaxQueues {
		return nil, fmt.Errorf("%w: Queues %d (1 to %d)", ErrConfig, cfg.Queues, MaxQueues)
	}
	if err := CheckPrivilege(); err != nil {
		return nil, err
	}
	staleOnce.Do(func() { _ = CleanupStale() })
	var p *Pair
	var err error
	for try := 0; try < 20; try++ {
		n := seq.Add(1)
		prefix := fmt.Sprintf("spt%d-%d-", os.Getpid()%1000, n%100000)
		subnet := cfg.Subnet
		if !subnet.IsValid() {
			subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(n), 0}), 24)
		}
		var own *ownerLock
		if own, err = lockOwner(prefix); err == nil {
			if p, err = newPair(ctx, prefix, subnet.Masked(), cfg.MTU, cfg.Queues); err == nil {
				p.owner = own
				break
			}
			own.release(false)
		}
		if !errors.Is(err, os.ErrExist) {
			break
		}
		// Another process with the same pid%1000 (or the same PID in
		// another PID namespace) holds this name: next.
	}
	if err != nil {
		return nil, err
	}
	register(p)
	return p, nil
}

func hostAddrs(subnet netip.Prefix) (netip.Addr, netip.Addr, error) {
	a := subnet.Addr()
	if !a.Is4() || subnet.Bits() > 30 {
		return a, a, fmt.Errorf("%w: subnet %v: need IPv4 with room for two hosts", ErrConfig, subnet)
	}
	a = a.Next()
	return a, a.Next(), nil
}

func newPair(ctx context.Context, prefix string, subnet netip.Prefix, mtu, queues int) (_ *Pair, err error) {
	ipA, ipB, err := hostAddrs(subnet)
	if err != nil {
		return nil, err
	}
	p := &Pair{Prefix: prefix}
	p.A = &Host{Name: prefix + "a", Link: prefix + "a", IP: ipA, MTU: mtu, NS: -1, closed: &p.closed}
	p.B = &Host{Name: prefix + "b", Link: prefix + "b", IP: ipB, MTU: mtu, NS: -1, closed: &p.closed}
	p.A.Prefix = netip.PrefixFrom(ipA, subnet.Bits())
	p.B.Prefix = netip.PrefixFrom(ipB, subnet.Bits())
	defer func() {
		if err != nil {
			p.teardown()
		}
	}()
	for _, h := range []*Host{p.A, p.B} {
		if h.NS, err = newNamed(h.Name); err != nil {
			return nil, fmt.Errorf("testbed: namespace %s: %w", h.Name, err)
		}
	}
	ha, err := netlink.NewHandleAt(p.A.NS)
	if err != nil {
		return nil, fmt.Errorf("testbed: netlink in %s: %w", p.A.Name, err)
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(p.B.NS)
	if err != nil {
		return nil, fmt.Errorf("testbed: netlink in %s: %w", p.B.Name, err)
	}
	defer hb.Close()
	veth := &netlink.Veth{
		LinkAttrs:       netlink.LinkAttrs{Name: p.A.Link, MTU: mtu, NumTxQueues: queues, NumRxQueues: queues},
		PeerName:        p.B.Link,
		PeerNamespace:   netlink.NsFd(p.B.NS),
		PeerNumTxQueues: uint32(queues),
		PeerNumRxQueues: uint32(queues),
	}
	if err := ha.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("testbed: veth %s/%s: %w", p.A.Link, p.B.Link, err)
	}
	for _, x := range []struct {
		h  *Host
		nl *netlink.Handle
	}{{p.A, ha}, {p.B, hb}} {
		if err := setupHost(x.h, x.nl); err != nil {
			return nil, err
		}
	}
	for _, x := range []struct {
		h  *Host
		nl *netlink.Handle
	}{{p.A, ha}, {p.B, hb}} {
		if err := waitUp(ctx, x.h, x.nl); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func setupHost(h *Host, nl *netlink.Handle) error {
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("testbed: lo up in %s: %w", h.Name, err)
	}
	l, err := nl.LinkByName(h.Link)
	if err != nil {
		return fmt.Errorf("testbed: %s in %s: %w", h.Link, h.Name, err)
	}
	h.Ifindex = l.Attrs().Index
	copy(h.MAC[:], l.Attrs().HardwareAddr)
	addr := &netlink.Addr{IPNet: prefixToIPNet(h.Prefix)}
	if err := nl.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("testbed: address %v on %s: %w", h.Prefix, h.Link, err)
	}
	if err := nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("testbed: %s up: %w", h.Link, err)
	}
	return nil
}

// waitUp waits until the host's interface has carrier.
func waitUp(ctx context.Context, h *Host, nl *netlink.Handle) error {
	for {
		l, err := nl.LinkByIndex(h.Ifindex)
		if err != nil {
			return fmt.Errorf("testbed: %s: %w", h.Link, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: %s not up: %w", h.Link, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// newNamed makes a named namespace on a throw-away OS thread: netns.NewNamed
// moves the calling thread into the new namespace, and a goroutine that
// exits while locked takes its thread with it.
func newNamed(name string) (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		ns, err := makeNamed(name)
		ch <- result{ns, err}
	}()
	r := <-ch
	return r.ns, r.err
}

// threadNS is the calling thread's network namespace, named through
// /proc/thread-self, which holds in any PID namespace (a path built from
// Getpid and Gettid names another process, or none, in a child PID
// namespace: TestCleanupStalePIDNamespaces).
const threadNS = "/proc/thread-self/ns/net"

// makeNamed moves the calling (locked) thread into a new network
// namespace and binds it to /run/netns/name, as `ip netns add` does. The
// error wraps os.ErrExist when the name is taken.
func makeNamed(name string) (netns.NsHandle, error) {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return netns.None(), err
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return netns.None(), fmt.Errorf("unshare: %w", err)
	}
	ns, err := netns.GetFromPath(threadNS)
	if err != nil {
		return netns.None(), err
	}
	path := filepath.Join(netnsDir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		ns.Close()
		return netns.None(), err
	}
	f.Close()
	if err := unix.Mount(threadNS, path, "bind", unix.MS_BIND, ""); err != nil {
		ns.Close()
		os.Remove(path)
		return netns.None(), fmt.Errorf("bind %s: %w", path, err)
	}
	return ns, nil
}

// Do runs fn on the calling goroutine's OS thread inside the host's
// namespace, and moves the thread back before returning. Sockets that fn
// opens belong to the host's namespace for their lifetime.
func (h *Host) Do(fn func() error) error {
	if h.closed.Load() {
		return ErrClosed
	}
	runtime.LockOSThread()
	orig, err := netns.GetFromPath(threadNS)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("testbed: current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(h.NS); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("testbed: enter %s: %w", h.Name, err)
	}
	defer func() {
		// A thread that cannot go back stays locked, and is discarded when
		// this goroutine exits.
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}

// Command returns a command that runs name with args inside the host's
// namespace (through `ip netns exec`).
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Close removes the namespaces and the veth pair. It is idempotent.
func (p *Pair) Close() error {
	p.closeOnce.Do(func() {
		unregister(p)
		p.closeErr = p.teardown()
	})
	return p.closeErr
}

func (p *Pair) teardown() (err error) {
	p.closed.Store(true)
	// The owner file stays (unlocked) while something could not be
	// removed, so that CleanupStale and spray testbed list find it.
	defer func() { p.owner.release(err != nil) }()
	var errs []error
	if p.A.NS >= 0 {
		// Deleting one end deletes both, now rather than when the
		// namespace goes away.
		if nl, err := netlink.NewHandleAt(p.A.NS); err == nil {
			if l, err := nl.LinkByName(p.A.Link); err == nil {
				if err := nl.LinkDel(l); err != nil {
					errs = append(errs, fmt.Errorf("testbed: delete %s: %w", p.A.Link, err))
				}
			}
			nl.Close()
		}
	}
	for _, h := range []*Host{p.A, p.B} {
		if h.NS < 0 {
			// Not made by us: after a name clash it is another
			// testbed's.
			continue
		}
		h.NS.Close()
		if err := deleteNamed(h.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteNamed removes a named namespace as iproute2's `ip netns delete`
// does, whatever the propagation of /run/netns: it lazily unmounts
// (MNT_DETACH) the namespace's bind mount, then unlinks the file. Where
// shared propagation stacked several copies of the mount on the same path
// (/run/netns bound onto itself more than once, as a tool that calls
// `ip netns add` under a shared root can leave it), one unmount leaves the
// path a mount point and the unlink fails with EBUSY: it unmounts again
// until the path is no longer a mount point. One that is already gone is
// not an error. TestDownSharedNetns guards it.
func deleteNamed(name string) error {
	path := filepath.Join(netnsDir, name)
	var err error
	for range 64 {
		if _, serr := os.Lstat(path); errors.Is(serr, os.ErrNotExist) {
			return hiddenMount(name, path)
		}
		// EINVAL: not (or no longer) a mount point, only the file is left.
		uerr := unix.Unmount(path, unix.MNT_DETACH)
		if uerr != nil && !errors.Is(uerr, unix.EINVAL) && !errors.Is(uerr, unix.ENOENT) {
			return fmt.Errorf("testbed: delete namespace %s: unmount: %w", name, uerr)
		}
		err = os.Remove(path)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		if errors.Is(uerr, unix.EINVAL) && stacked(path) {
			// Not a mount point here, yet busy: it is one in a mount of
			// /run/netns that a later one hides.
			return fmt.Errorf("testbed: delete namespace %s: %s is hidden under a later mount of %s (something bound %s onto itself after the namespace was made), which keeps the namespace: run `umount -l %s` (this also hides the namespaces made since, under that mount), then `spray testbed down %s`: %w",
				name, path, netnsDir, netnsDir, netnsDir, downTarget(name), err)
		}
	}
	return fmt.Errorf("testbed: delete namespace %s: %w", name, err)
}

// stacked tells whether path's directory is a mount point and path is one
// too, where unmounting path found none: a namespace's bind mount that a
// later mount of the directory hides (TestTeardownStackedNetns).
func stacked(path string) bool {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return false
	}
	dirs, points := 0, 0
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 {
			switch f[4] {
			case filepath.Dir(path):
				dirs++
			case path:
				points++
			}
		}
	}
	return dirs > 0 && points > 0
}

// downTarget returns what spray testbed down takes to remove the testbed
// that namespace name belongs to: a throw-away's prefix, a persistent
// fabric's name.
func downTarget(name string) string {
	if p := throwawayPrefix.FindString(name); p != "" {
		return p
	}
	if n, ok := fabricName(name); ok {
		return n
	}
	return "--all"
}

// hiddenMount returns an error when path, which this thread no longer
// sees, is still a mount point underneath another mount: something
// mounted over /run/netns after the namespace was made, so that the
// namespace stays alive, out of sight, whatever deleteNamed does. Without
// this a teardown would report success and leave every namespace behind
// (TestTeardownReportsHiddenNamespace).
func hiddenMount(name, path string) error {
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == path {
			return fmt.Errorf("testbed: delete namespace %s: %s is hidden under another mount (something mounted over %s since the namespace was made); unmount that, then run spray testbed down %s",
				name, path, netnsDir, downTarget(name))
		}
	}
	return nil
}

// Cleanup removes the named namespaces, and links in the calling thread's
// namespace, whose names start with prefix: what a crashed run left behind.
// Pass a testbed's Prefix, or "spt" for every testbed of every process
// (including running ones). An empty prefix is refused.
func Cleanup(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("%w: empty cleanup prefix", ErrConfig)
	}
	return cleanupMatching(func(n string) bool { return strings.HasPrefix(n, prefix) })
}

// cleanupMatching removes the named namespaces, and links in the calling
// thread's namespace, whose names match.
func cleanupMatching(match func(string) bool) error {
	var errs []error
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if match(e.Name()) {
			if err := deleteNamed(e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if match(l.Attrs().Name) {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("testbed: delete link %s: %w", l.Attrs().Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists the named namespaces and links in the calling thread's
// namespace whose names start with prefix.
func Leftovers(prefix string) ([]string, error) {
	return leftoversMatching(func(n string) bool { return strings.HasPrefix(n, prefix) })
}

// leftoversMatching lists the named namespaces and links in the calling
// thread's namespace whose names match.
func leftoversMatching(match func(string) bool) ([]string, error) {
	var out []string
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if match(e.Name()) {
			out = append(out, "netns "+e.Name())
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return out, err
	}
	for _, l := range links {
		if match(l.Attrs().Name) {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	return out, nil
}

// The registry of open testbeds, closed on SIGINT/SIGTERM and by CloseAll.
var registry struct {
	sync.Mutex
	open    map[closer]struct{}
	sigOnce sync.Once
}

type closer interface{ Close() error }

func register(c closer) {
	registry.Lock()
	if registry.open == nil {
		registry.open = map[closer]struct{}{}
	}
	registry.open[c] = struct{}{}
	registry.Unlock()
	registry.sigOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			s := <-ch
			_ = CloseAll()
			// Die of the signal as the process would have without us.
			signal.Reset(s)
			_ = syscall.Kill(os.Getpid(), s.(syscall.Signal))
		}()
	})
}

// LeaveSignals keeps the package from handling SIGINT and SIGTERM
// itself (closing every testbed, then dying of the signal): the caller
// handles them, ends its runs and closes its testbeds, or calls CloseAll.
// spray's CLI does, to report the signal and exit with 128 + its number.
// Call it before the first testbed is built.
func LeaveSignals() { registry.sigOnce.Do(func() {}) }

func unregister(c closer) {
	registry.Lock()
	delete(registry.open, c)
	registry.Unlock()
}

// CloseAll closes every testbed this process has open. Call it before
// exiting (from TestMain after m.Run, or main's defer); SIGINT and SIGTERM
// call it by themselves.
func CloseAll() error {
	registry.Lock()
	var all []closer
	for c := range registry.open {
		all = append(all, c)
	}
	registry.Unlock()
	var errs []error
	for _, c := range all {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

var staleOnce sync.Once

// CleanupStale removes the throw-away testbeds that it can prove abandoned
// (their owner file's lock is free: the process that made them is gone,
// however it ended) and leaves every other alone: running ones, in any PID
// namespace, and those of an older spray, whose owner files hold a bare
// PID. NewPair and NewLeafSpine call it once per process
// (TestCleanupStale, TestCleanupStalePIDNamespaces).
func CleanupStale() error {
	entries, err := os.ReadDir(ownerDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		prefix := e.Name()
		if !IsThrowawayPrefix(prefix) {
			continue // persistent fabrics, files being made
		}
		_, claim, ok := claimAbandoned(prefix)
		if !ok {
			continue
		}
		err := Cleanup(prefix)
		if err != nil {
			errs = append(errs, err)
		}
		claim.release(err != nil)
	}
	return errors.Join(errs...)
}
