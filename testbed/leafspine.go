package testbed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Limits of NewLeafSpine, so that a typo cannot ask the kernel for
// thousands of namespaces.
const (
	// MaxHostsPerLeaf, MaxLeaves and MaxSpines bound each dimension.
	MaxHostsPerLeaf = 64
	MaxLeaves       = 64
	MaxSpines       = 64
	// MaxNamespaces bounds hosts + leaves + spines.
	MaxNamespaces = 512
	// MaxQueues bounds the queues of a host interface (Queues).
	MaxQueues = 64
)

// DefaultRateBps is the egress rate of fabric ports when the config gives
// none: low enough that two CPUs forward it through every hop.
const DefaultRateBps = 1_000_000_000

// LeafSpineConfig configures NewLeafSpine. Hosts, Leaves and Spines must be
// set; every other zero field means its documented default.
//
// Rates are in bits per second, counting Ethernet frames (header included,
// as tc does).
type LeafSpineConfig struct {
	// Hosts per leaf (1 to MaxHostsPerLeaf), Leaves (1 to MaxLeaves) and
	// Spines (1 to MaxSpines).
	Hosts, Leaves, Spines int
	// Rate of the leaf<->spine links, shaped at the egress of both ends
	// (leaf uplink ports and spine ports). Either a string for ParseRate
	// ("1gbit", "250mbit") or RateBps; if both are set they must agree.
	// Zero: DefaultRateBps (1 Gbit/s). The kernel forwards every frame
	// three times on its way through the fabric, on the machine's CPUs: a
	// rate above what they forward makes the CPU, not the shaper, the
	// bottleneck. On two busy cores that is a few hundred Mbit/s for
	// 1500-byte frames: use a lower Rate there, or jumbo frames (MTU 9000,
	// six times fewer frames).
	Rate    string
	RateBps uint64
	// HostRate is the rate of the leaf's ports towards its hosts (the last
	// hop, where incast queues build). The host->leaf direction is not
	// shaped: hosts send as fast as they can and the fabric is the
	// bottleneck. Zero: RateBps*Spines/Hosts, which makes the fabric
	// non-blocking (every host can send at HostRate to a host on another
	// leaf at the same time); a larger HostRate oversubscribes the uplinks
	// by Hosts*HostRate/(Spines*Rate).
	HostRate    string
	HostRateBps uint64
	// BufferBytes is the egress queue of every switch port (the TBF limit;
	// with Trim, that of each of the port's two classes):
	// what arrives when it is full is dropped and counted in
	// PortStat.QueueDrops. Zero: 1 ms at RateBps, at least 16 full frames.
	BufferBytes int
	// MTU of every link. Zero: 1500. 576 to 9000.
	MTU int
	// Queues is the number of RX and TX queues of every host interface
	// and of the leaf port facing it (1 to MaxQueues; zero: 1). The leaf
	// spreads the flows it forwards to a host over the host's queues by
	// its transmit hash, as a switch and a NIC's RSS spread them over a
	// real host's queues.
	Queues int
	// Trim makes every shaped switch port trim, as a switch that trims
	// does: a whole spray data packet that would take the port's queue
	// beyond TrimBytes is cut to its headers, and the headers and the
	// control frames (ACKs, credits, CNPs) leave ahead of the data. The
	// fabric programs cut (AttachPrograms sets ebpf.PortConfig.TrimQueue
	// and PriorityClass); the port's root qdisc is then an HTB at the
	// port's rate with two classes, PriorityClass first, each with a queue
	// of BufferBytes, instead of a TBF. Without the programs attached
	// nothing is cut, and the classes only order the frames.
	Trim bool
	// TrimBytes is the queue beyond which a port trims. Zero: three
	// quarters of BufferBytes, because the programs' model of the queue
	// lags the qdisc when the machine's CPUs leave the shaper waiting, and
	// the last quarter takes that lag. At most BufferBytes.
	TrimBytes int
}

// PriorityClass is the HTB class (1:10) of a trimming port's headers and
// control frames; the data's is 1:20.
const PriorityClass = 0x10010

// String returns the config in ParseLeafSpine's syntax, with the options
// that are set.
func (c LeafSpineConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leafspine:%dx%dx%d", c.Hosts, c.Leaves, c.Spines)
	if c.Rate != "" {
		fmt.Fprintf(&b, ",rate=%s", c.Rate)
	} else if c.RateBps != 0 {
		fmt.Fprintf(&b, ",rate=%d", c.RateBps)
	}
	if c.HostRate != "" {
		fmt.Fprintf(&b, ",hostrate=%s", c.HostRate)
	} else if c.HostRateBps != 0 {
		fmt.Fprintf(&b, ",hostrate=%d", c.HostRateBps)
	}
	if c.BufferBytes != 0 {
		fmt.Fprintf(&b, ",buffer=%d", c.BufferBytes)
	}
	if c.MTU != 0 {
		fmt.Fprintf(&b, ",mtu=%d", c.MTU)
	}
	if c.Queues != 0 {
		fmt.Fprintf(&b, ",queues=%d", c.Queues)
	}
	if c.Trim && c.TrimBytes != 0 {
		fmt.Fprintf(&b, ",trim=%d", c.TrimBytes)
	} else if c.Trim {
		b.WriteString(",trim")
	}
	return b.String()
}

// ParseLeafSpine parses "leafspine:HxLxS" (H hosts per leaf, L leaves, S
// spines), optionally followed by comma-separated options: rate=RATE,
// hostrate=RATE (see ParseRate), buffer=BYTES (a number of bytes, or with
// a suffix k or m for KiB or MiB), mtu=N, queues=N, trim or trim=BYTES
// (Trim, TrimBytes). Example: "leafspine:4x2x4,rate=500mbit,buffer=64k".
// It checks the syntax and the limits; errors wrap ErrConfig.
func ParseLeafSpine(s string) (LeafSpineConfig, error) {
	var c LeafSpineConfig
	rest, ok := strings.CutPrefix(s, "leafspine:")
	if !ok {
		return c, fmt.Errorf("%w: %q: want leafspine:HOSTSxLEAVESxSPINES", ErrConfig, s)
	}
	parts := strings.Split(rest, ",")
	dims := strings.Split(parts[0], "x")
	if len(dims) != 3 {
		return c, fmt.Errorf("%w: %q: want leafspine:HOSTSxLEAVESxSPINES", ErrConfig, s)
	}
	var n [3]int
	for i, d := range dims {
		v, err := strconv.Atoi(d)
		if err != nil || d == "" || d[0] < '0' || d[0] > '9' {
			return c, fmt.Errorf("%w: %q: %q is not a count", ErrConfig, s, d)
		}
		n[i] = v
	}
	c.Hosts, c.Leaves, c.Spines = n[0], n[1], n[2]
	for _, opt := range parts[1:] {
		if opt == "trim" {
			c.Trim = true
			continue
		}
		k, v, ok := strings.Cut(opt, "=")
		if !ok || v == "" {
			return c, fmt.Errorf("%w: %q: option %q: want key=value", ErrConfig, s, opt)
		}
		var err error
		switch k {
		case "rate":
			if _, err = ParseRate(v); err == nil {
				c.Rate = v
			}
		case "hostrate":
			if _, err = ParseRate(v); err == nil {
				c.HostRate = v
			}
		case "buffer":
			c.BufferBytes, err = parseBytes(v)
		case "mtu":
			c.MTU, err = strconv.Atoi(v)
			if err == nil && c.MTU == 0 {
				err = errors.New("zero")
			}
		case "queues":
			c.Queues, err = strconv.Atoi(v)
			if err == nil && c.Queues == 0 {
				err = errors.New("zero")
			}
		case "trim":
			c.Trim = true
			c.TrimBytes, err = parseBytes(v)
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return c, fmt.Errorf("%w: %q: option %q: %v", ErrConfig, s, opt, err)
		}
	}
	if _, err := c.resolve(); err != nil {
		return c, err
	}
	return c, nil
}

func parseBytes(v string) (int, error) {
	mul := 1
	switch {
	case strings.HasSuffix(v, "k"):
		mul, v = 1<<10, v[:len(v)-1]
	case strings.HasSuffix(v, "m"):
		mul, v = 1<<20, v[:len(v)-1]
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || v[0] < '0' || v[0] > '9' || n > math.MaxInt32/mul {
		return 0, fmt.Errorf("%q is not a byte count", v)
	}
	return n * mul, nil
}

// ParseRate parses a rate in bits per second: a decimal number with an
// optional SI prefix (k, m, g, t: powers of 1000, as in tc) and an optional
// unit "bit" or "bit/s", case-insensitive: "1gbit", "2.5Gbit/s", "100m",
// "1000000". Byte rates ("bps" in tc) are refused as ambiguous. The result
// must be at least 10 kbit/s and at most 1 Tbit/s; errors wrap ErrConfig.
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "/s")
	t = strings.TrimSuffix(t, "bit")
	mul := 1.0
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			mul = 1e3
		case 'm':
			mul = 1e6
		case 'g':
			mul = 1e9
		case 't':
			mul = 1e12
		}
		if mul != 1 {
			t = t[:len(t)-1]
		}
	}
	if t == "" || (t[0] < '0' || t[0] > '9') && t[0] != '.' {
		return 0, fmt.Errorf("%w: rate %q: want a number of bit/s such as 1gbit", ErrConfig, s)
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: rate %q: want a number of bit/s such as 1gbit", ErrConfig, s)
	}
	r := v * mul
	if !(r >= 10e3 && r <= 1e12) {
		return 0, fmt.Errorf("%w: rate %q: want 10kbit to 1tbit", ErrConfig, s)
	}
	return uint64(math.Round(r)), nil
}

// Resolve checks c and returns it as NewLeafSpine builds it: every default
// filled in and the rate strings turned into RateBps and HostRateBps.
// Errors wrap ErrConfig.
func (c LeafSpineConfig) Resolve() (LeafSpineConfig, error) { return c.resolve() }

// resolve checks c and returns it with every default filled in and the
// rate strings turned into RateBps and HostRateBps.
func (c LeafSpineConfig) resolve() (LeafSpineConfig, error) {
	bad := func(format string, a ...any) (LeafSpineConfig, error) {
		return c, fmt.Errorf("%w: %s: %s", ErrConfig, c, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Hosts < 1 || c.Hosts > MaxHostsPerLeaf:
		return bad("hosts per leaf must be 1 to %d", MaxHostsPerLeaf)
	case c.Leaves < 1 || c.Leaves > MaxLeaves:
		return bad("leaves must be 1 to %d", MaxLeaves)
	case c.Spines < 1 || c.Spines > MaxSpines:
		return bad("spines must be 1 to %d", MaxSpines)
	case c.Hosts*c.Leaves+c.Leaves+c.Spines > MaxNamespaces:
		return bad("more than %d namespaces", MaxNamespaces)
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.MTU < 576 || c.MTU > 9000 {
		return bad("MTU must be 576 to 9000")
	}
	if c.Queues == 0 {
		c.Queues = 1
	}
	if c.Queues < 1 || c.Queues > MaxQueues {
		return bad("queues must be 1 to %d", MaxQueues)
	}
	rate := func(s string, bps uint64, what string) (uint64, error) {
		if s == "" {
			if bps != 0 && (bps < 10e3 || bps > 1e12) {
				return 0, fmt.Errorf("%w: %s: %s %d bit/s: want 10kbit to 1tbit", ErrConfig, c, what, bps)
			}
			return bps, nil
		}
		r, err := ParseRate(s)
		if err != nil {
			return 0, err
		}
		if bps != 0 && bps != r {
			return 0, fmt.Errorf("%w: %s: %s %q and %d bit/s disagree", ErrConfig, c, what, s, bps)
		}
		return r, nil
	}
	var err error
	if c.RateBps, err = rate(c.Rate, c.RateBps, "rate"); err != nil {
		return c, err
	}
	if c.HostRateBps, err = rate(c.HostRate, c.HostRateBps, "host rate"); err != nil {
		return c, err
	}
	if c.RateBps == 0 {
		c.RateBps = DefaultRateBps
	}
	if c.HostRateBps == 0 {
		c.HostRateBps = c.RateBps * uint64(c.Spines) / uint64(c.Hosts)
		c.HostRateBps = min(max(c.HostRateBps, 10e3), 1e12)
	}
	frame := c.MTU + 14
	if c.BufferBytes == 0 {
		c.BufferBytes = max(int(c.RateBps/8/1000), 16*frame)
	}
	if c.BufferBytes < frame || c.BufferBytes > 1<<30 {
		return bad("buffer of %d bytes: want one frame (%d) to 1 GiB", c.BufferBytes, frame)
	}
	if c.TrimBytes != 0 && !c.Trim {
		return bad("a trim threshold without trim")
	}
	if c.Trim && c.TrimBytes == 0 {
		c.TrimBytes = c.BufferBytes * 3 / 4
	}
	if c.TrimBytes < 0 || c.TrimBytes > c.BufferBytes {
		return bad("trim threshold of %d bytes: want at most the buffer (%d)", c.TrimBytes, c.BufferBytes)
	}
	return c, nil
}

// Port is one interface of a switch.
type Port struct {
	// Name of the interface inside the switch's namespace: "up<s>" (leaf
	// to spine s), "down<h>" (leaf to its host h), "down<l>" (spine to
	// leaf l).
	Name    string
	Ifindex int
	// Peer is the namespace name of the node at the other end, PeerPort
	// its interface there.
	Peer, PeerPort string
	// Addr is the port's address and the link's /31.
	Addr netip.Prefix
	// RateBps is the egress shaping rate, in bit/s.
	RateBps uint64
}

// Switch is a leaf or a spine: a network namespace that forwards IPv4.
// Its fields do not change after NewLeafSpine returns; its methods are
// safe for concurrent use.
type Switch struct {
	// Name is the namespace's name, for `ip netns exec`.
	Name string
	// NS is a handle to the namespace, valid until the fabric is closed.
	NS netns.NsHandle
	// Ports of a leaf: its host ports first (host i on Ports[i]), then its
	// uplinks (spine s on Ports[Config.Hosts+s]). Ports of a spine: leaf l
	// on Ports[l].
	Ports []Port

	closed *atomic.Bool
}

// Do runs fn on the calling goroutine's OS thread inside the switch's
// namespace, as Host.Do does.
func (s *Switch) Do(fn func() error) error {
	h := Host{Name: s.Name, NS: s.NS, closed: s.closed}
	return h.Do(fn)
}

// Command returns a command that runs name with args inside the switch's
// namespace (through `ip netns exec`).
func (s *Switch) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", s.Name, name}, args...)...)
}

// Fabric is a leaf-spine topology made by NewLeafSpine. Close it when
// done. Its exported fields do not change after NewLeafSpine returns; its
// methods are safe for concurrent use.
type Fabric struct {
	// Prefix names everything the fabric made.
	Prefix string
	// Config is the configuration with every default filled in.
	Config LeafSpineConfig
	// Hosts, leaf by leaf: host i of leaf l is Hosts[l*Config.Hosts+i].
	Hosts          []*Host
	Leaves, Spines []*Switch
	// Name is the name of a persistent fabric (UpLeafSpine,
	// OpenLeafSpine); "" for one that lives with the process.
	Name string

	// persistent: Close releases handles and leaves the fabric.
	persistent bool
	// prog is the fabric programs' handle: the last AttachPrograms's
	// result, or the pinned programs of a persistent fabric.
	prog *ebpf.Fabric
	// attached is every AttachPrograms result, closed by Close (closing
	// one twice does nothing).
	attached []*ebpf.Fabric

	nodes []*node
	links []*fabLink

	// mu serializes SetLinkDown and PortStats with each other and with
	// Close, so that none of them uses a namespace handle that Close has
	// released (its number may already name another file).
	mu        sync.Mutex
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	// owner is the claim on a throw-away fabric's prefix; nil for a
	// persistent one.
	owner *ownerLock
}

type nodeKind int

const (
	kindHost nodeKind = iota
	kindLeaf
	kindSpine
)

// node is a namespace of the fabric, with its interfaces.
type node struct {
	kind  nodeKind
	index int    // leaf or spine number; for a host, its leaf
	short string // "host1-0", "leaf1", "spine0"
	name  string // namespace name: prefix + short
	ns    netns.NsHandle
	ports []*end
}

// end is one side of a link.
type end struct {
	node    *node
	name    string
	ifindex int
	addr    netip.Prefix
	rate    uint64 // egress shaping, bit/s; 0 for host ports
	peer    *end
	link    *fabLink
}

type fabLink struct {
	a, b *end
	down bool // now
	// known is down as of the last Reconverge: what nodes that are not
	// ends of the link know about it.
	known bool
}

// isDown tells whether node n routes as if link k were down: it sees its
// own links at once, other links as of the last Reconverge.
func (k *fabLink) isDown(n *node) bool {
	if k.a.node == n || k.b.node == n {
		return k.down
	}
	return k.known
}

// fabricNet is the address space of every fabric: host subnets
// 10.80.<leaf>.0/24, leaf-spine links in 10.80.<128+leaf>.0/24. It exists
// only inside the fabric's namespaces, so fabrics do not collide.
var fabricNet = netip.MustParsePrefix("10.80.0.0/16")

// Subnet returns the address space of the fabric's hosts and links.
func (f *Fabric) Subnet() netip.Prefix { return fabricNet }

// HostSubnet returns the subnet of leaf l's hosts, which spines route to
// leaf l.
func (f *Fabric) HostSubnet(l int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 80, byte(l), 0}), 24)
}

// Host returns host i of leaf l, or nil if there is no such host.
func (f *Fabric) Host(l, i int) *Host {
	if l < 0 || l >= f.Config.Leaves || i < 0 || i >= f.Config.Hosts {
		return nil
	}
	return f.Hosts[l*f.Config.Hosts+i]
}

// NewLeafSpine builds a leaf-spine fabric: one namespace per host, leaf and
// spine; a veth pair per host<->leaf and leaf<->spine link, each a /31 in
// 10.80.0.0/16 (host i of leaf l is 10.80.l.(2i+1), its leaf's port
// 10.80.l.2i; the link of leaf l and spine s is 10.80.(128+l).2s on the
// leaf, .2s+1 on the spine). Hosts route everything to their leaf; leaves
// route every other leaf's host subnet over all spines with one multipath
// route hashed on L4 (fib_multipath_hash_policy=1, so the UDP source port
// picks the spine); spines route each host subnet to its leaf. Every switch
// port shapes its egress with a TBF qdisc (Rate towards the other layer,
// HostRate towards hosts, BufferBytes of queue). IPv6 is disabled in every
// namespace, so that no router or neighbour solicitations move the
// counters. It needs root; ctx bounds the wait for links to come up.
func NewLeafSpine(ctx context.Context, cfg LeafSpineConfig) (*Fabric, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	if err := CheckPrivilege(); err != nil {
		return nil, err
	}
	staleOnce.Do(func() { _ = CleanupStale() })
	var f *Fabric
	for try := 0; try < 20; try++ {
		n := seq.Add(1)
		prefix := fmt.Sprintf("spt%d-%d-", os.Getpid()%1000, n%100000)
		var own *ownerLock
		if own, err = lockOwner(prefix); err == nil {
			if f, err = newFabric(ctx, prefix, c); err == nil {
				f.owner = own
				break
			}
			own.release(false)
		}
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	register(f)
	return f, nil
}

// layoutFabric returns the fabric's nodes and links, named and addressed,
// without making anything in the kernel; every namespace handle is -1.
func layoutFabric(prefix string, c LeafSpineConfig) (f *Fabric, hosts, leaves, spines []*node) {
	f = &Fabric{Prefix: prefix, Config: c}
	add := func(kind nodeKind, index int, short string) *node {
		n := &node{kind: kind, index: index, short: short, name: prefix + short, ns: -1}
		f.nodes = append(f.nodes, n)
		return n
	}
	leaves = make([]*node, c.Leaves)
	spines = make([]*node, c.Spines)
	for l := range leaves {
		leaves[l] = add(kindLeaf, l, fmt.Sprintf("leaf%d", l))
	}
	for s := range spines {
		spines[s] = add(kindSpine, s, fmt.Sprintf("spine%d", s))
	}
	connect := func(a, b *node, an, bn string, aAddr, bAddr netip.Addr, aRate, bRate uint64) {
		k := &fabLink{}
		k.a = &end{node: a, name: an, addr: netip.PrefixFrom(aAddr, 31), rate: aRate, link: k}
		k.b = &end{node: b, name: bn, addr: netip.PrefixFrom(bAddr, 31), rate: bRate, link: k}
		k.a.peer, k.b.peer = k.b, k.a
		a.ports = append(a.ports, k.a)
		b.ports = append(b.ports, k.b)
		f.links = append(f.links, k)
	}
	for l, leaf := range leaves {
		for i := 0; i < c.Hosts; i++ {
			h := add(kindHost, l, fmt.Sprintf("host%d-%d", l, i))
			hosts = append(hosts, h)
			leafIP := netip.AddrFrom4([4]byte{10, 80, byte(l), byte(2 * i)})
			connect(leaf, h, fmt.Sprintf("down%d", i), "eth0", leafIP, leafIP.Next(), c.HostRateBps, 0)
		}
	}
	for l, leaf := range leaves {
		for s, spine := range spines {
			leafIP := netip.AddrFrom4([4]byte{10, 80, byte(128 + l), byte(2 * s)})
			connect(leaf, spine, fmt.Sprintf("up%d", s), fmt.Sprintf("down%d", l), leafIP, leafIP.Next(), c.RateBps, c.RateBps)
		}
	}
	return f, hosts, leaves, spines
}

func newFabric(ctx context.Context, prefix string, c LeafSpineConfig) (_ *Fabric, err error) {
	f, hosts, leaves, spines := layoutFabric(prefix, c)
	defer func() {
		if err != nil {
			f.teardown()
		}
	}()
	// A cancelled ctx stops the build between two steps (a signal ends
	// spray testbed up within a second, TestSignalEndsEveryCommand), and
	// the deferred teardown removes what was built.
	stopped := func() error {
		if ctx.Err() != nil {
			return fmt.Errorf("testbed: build stopped: %w", context.Cause(ctx))
		}
		return nil
	}
	for _, n := range f.nodes {
		if err := stopped(); err != nil {
			return nil, err
		}
		if n.ns, err = newNamed(n.name); err != nil {
			return nil, fmt.Errorf("testbed: namespace %s: %w", n.name, err)
		}
	}
	handles := make(map[*node]*netlink.Handle, len(f.nodes))
	defer func() {
		for _, h := range handles {
			h.Close()
		}
	}()
	for _, n := range f.nodes {
		if err := stopped(); err != nil {
			return nil, err
		}
		h, err := netlink.NewHandleAt(n.ns)
		if err != nil {
			return nil, fmt.Errorf("testbed: netlink in %s: %w", n.name, err)
		}
		handles[n] = h
		if err := nodeSysctls(n); err != nil {
			return nil, err
		}
		lo, err := h.LinkByName("lo")
		if err == nil {
			err = h.LinkSetUp(lo)
		}
		if err != nil {
			return nil, fmt.Errorf("testbed: lo up in %s: %w", n.name, err)
		}
	}
	for _, k := range f.links {
		if err := stopped(); err != nil {
			return nil, err
		}
		q := 1
		if k.a.node.kind == kindHost || k.b.node.kind == kindHost {
			q = c.Queues
		}
		veth := &netlink.Veth{
			LinkAttrs:       netlink.LinkAttrs{Name: k.a.name, MTU: c.MTU, NumTxQueues: q, NumRxQueues: q},
			PeerName:        k.b.name,
			PeerNamespace:   netlink.NsFd(k.b.node.ns),
			PeerNumTxQueues: uint32(q),
			PeerNumRxQueues: uint32(q),
		}
		if err := handles[k.a.node].LinkAdd(veth); err != nil {
			return nil, fmt.Errorf("testbed: veth %s%%%s-%s%%%s: %w", k.a.node.name, k.a.name, k.b.node.name, k.b.name, err)
		}
	}
	for _, n := range f.nodes {
		if err := stopped(); err != nil {
			return nil, err
		}
		h := handles[n]
		for _, e := range n.ports {
			if err := setupPort(h, e, c); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range f.nodes {
		for _, e := range n.ports {
			if err := waitOperUp(ctx, handles[n], e); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range f.nodes {
		if err := f.installRoutes(handles[n], n); err != nil {
			return nil, err
		}
	}

	if err := f.describe(handles, hosts, leaves, spines); err != nil {
		return nil, err
	}
	return f, nil
}

// describe fills f.Hosts, f.Leaves and f.Spines from the nodes, which have
// their namespaces and interface indexes.
func (f *Fabric) describe(handles map[*node]*netlink.Handle, hosts, leaves, spines []*node) error {
	c := f.Config
	for _, n := range hosts {
		e := n.ports[0]
		hst := &Host{Name: n.name, NS: n.ns, Link: e.name, Ifindex: e.ifindex, IP: e.addr.Addr(),
			Prefix: e.addr, MTU: c.MTU, closed: &f.closed}
		l, err := handles[n].LinkByIndex(e.ifindex)
		if err != nil {
			return fmt.Errorf("testbed: %s in %s: %w", e.name, n.name, err)
		}
		copy(hst.MAC[:], l.Attrs().HardwareAddr)
		f.Hosts = append(f.Hosts, hst)
	}
	sw := func(n *node) *Switch {
		s := &Switch{Name: n.name, NS: n.ns, closed: &f.closed}
		for _, e := range n.ports {
			s.Ports = append(s.Ports, Port{Name: e.name, Ifindex: e.ifindex, Peer: e.peer.node.name,
				PeerPort: e.peer.name, Addr: e.addr, RateBps: e.rate})
		}
		return s
	}
	for _, n := range leaves {
		f.Leaves = append(f.Leaves, sw(n))
	}
	for _, n := range spines {
		f.Spines = append(f.Spines, sw(n))
	}
	return nil
}

// nodeSysctls sets a namespace up before its links exist, so that new
// interfaces take the "default" values.
func nodeSysctls(n *node) error {
	kv := [][2]string{
		{"net/ipv4/conf/all/rp_filter", "0"},
		{"net/ipv4/conf/default/rp_filter", "0"},
		{"net/ipv6/conf/all/disable_ipv6", "1"},
		{"net/ipv6/conf/default/disable_ipv6", "1"},
	}
	if n.kind != kindHost {
		kv = append(kv,
			[2]string{"net/ipv4/ip_forward", "1"},
			[2]string{"net/ipv4/fib_multipath_hash_policy", "1"},
			// A nexthop whose link lost carrier is not used.
			[2]string{"net/ipv4/conf/all/ignore_routes_with_linkdown", "1"},
			[2]string{"net/ipv4/conf/default/ignore_routes_with_linkdown", "1"},
		)
	}
	h := Host{Name: n.name, NS: n.ns, closed: new(atomic.Bool)}
	return h.Do(func() error {
		for _, x := range kv {
			p := filepath.Join("/proc/sys", x[0])
			if err := os.WriteFile(p, []byte(x[1]), 0o644); err != nil {
				if strings.Contains(x[0], "ipv6") && errors.Is(err, os.ErrNotExist) {
					continue // a kernel without IPv6
				}
				return fmt.Errorf("testbed: sysctl %s in %s: %w", x[0], n.name, err)
			}
		}
		return nil
	})
}

// setupPort addresses an interface, brings it up and shapes its egress.
func setupPort(h *netlink.Handle, e *end, c LeafSpineConfig) error {
	l, err := h.LinkByName(e.name)
	if err != nil {
		return fmt.Errorf("testbed: %s in %s: %w", e.name, e.node.name, err)
	}
	e.ifindex = l.Attrs().Index
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: prefixToIPNet(e.addr)}); err != nil {
		return fmt.Errorf("testbed: address %v on %s in %s: %w", e.addr, e.name, e.node.name, err)
	}
	if c.Trim && e.node.kind == kindHost {
		// HTB, unlike TBF, does not cut a TCP segment larger than its
		// queue into frames: a host sends no multi-frame segment, so that
		// kernel TCP keeps its frames (TestLeafSpineTrimTCP).
		if err := h.LinkSetGSOMaxSegs(l, 1); err != nil {
			return fmt.Errorf("testbed: one segment a GSO packet on %s in %s: %w", e.name, e.node.name, err)
		}
	}
	if e.rate != 0 && c.Trim {
		if err := trimQdiscs(h, e, c); err != nil {
			return fmt.Errorf("testbed: htb on %s in %s: %w", e.name, e.node.name, err)
		}
	} else if e.rate != 0 {
		if err := h.QdiscReplace(tbf(e.ifindex, e.rate, c)); err != nil {
			return fmt.Errorf("testbed: tbf on %s in %s: %w", e.name, e.node.name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("testbed: %s in %s up: %w", e.name, e.node.name, err)
	}
	return nil
}

// tbf returns the root qdisc of a switch port: rate in bit/s, a queue of
// c.BufferBytes, and a bucket of 100 µs at the rate (at least two frames),
// so that bursts stay short.
func tbf(ifindex int, rate uint64, c LeafSpineConfig) *netlink.Tbf {
	bytesPerSec := rate / 8
	bucket := shaperBucket(rate, c)
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       bytesPerSec,
		Limit:      uint32(c.BufferBytes),
		Buffer:     netlink.Xmittime(bytesPerSec, bucket),
	}
}

// shaperBucket is a switch port's token bucket in bytes: 100 µs at rate
// (bit/s), at least two frames, so that bursts stay short.
func shaperBucket(rate uint64, c LeafSpineConfig) uint32 {
	return max(uint32(rate/8/10000), uint32(2*(c.MTU+14)))
}

// trimQdiscs gives a trimming port its qdiscs: an HTB root (1:) whose
// class 1:1 runs at the port's rate, over a priority class 1:10
// (PriorityClass, prio 0) and the data's 1:20 (prio 1, the default), each
// with a byte FIFO of c.BufferBytes. HTB sends a class within its own rate
// ahead of one that borrows, and of two within theirs the lower prio
// first: 1:10 goes ahead of the data up to half the rate (headers of
// frames of 1,500 bytes trimmed at three times the rate take a sixth of
// it), and either class borrows what the other leaves, up to the whole
// rate. Buckets are 100 µs at the rate, as the TBF's.
func trimQdiscs(h *netlink.Handle, e *end, c LeafSpineConfig) error {
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: e.ifindex, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = 0x20
	if err := h.QdiscReplace(root); err != nil {
		return err
	}
	frame := uint32(c.MTU + 14)
	bucket := shaperBucket(e.rate, c)
	class := func(parent, minor uint32, rate uint64, prio uint32) error {
		return h.ClassAdd(netlink.NewHtbClass(
			netlink.ClassAttrs{LinkIndex: e.ifindex, Parent: parent, Handle: netlink.MakeHandle(1, uint16(minor))},
			netlink.HtbClassAttrs{Rate: rate, Ceil: e.rate, Buffer: bucket, Cbuffer: bucket, Quantum: frame, Prio: prio}))
	}
	top := netlink.MakeHandle(1, 1)
	if err := class(root.Handle, 1, e.rate, 0); err != nil {
		return err
	}
	if err := class(top, PriorityClass&0xffff, e.rate/2, 0); err != nil {
		return err
	}
	if err := class(top, 0x20, e.rate-e.rate/2, 1); err != nil {
		return err
	}
	sw := Switch{Name: e.node.name, NS: e.node.ns, closed: new(atomic.Bool)}
	return sw.Do(func() error {
		for _, minor := range []uint32{PriorityClass & 0xffff, 0x20} {
			if err := addBfifo(e.ifindex, netlink.MakeHandle(1, uint16(minor)), netlink.MakeHandle(uint16(minor), 0), uint32(c.BufferBytes)); err != nil {
				return err
			}
		}
		return nil
	})
}

// addBfifo adds a bfifo qdisc of limit bytes under parent, in the calling
// thread's namespace (the netlink package has no bfifo).
func addBfifo(ifindex int, parent, handle, limit uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Handle: handle, Parent: parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bfifo")))
	opt := make([]byte, 4)
	binary.NativeEndian.PutUint32(opt, limit) // struct tc_fifo_qopt
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, opt))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	if err != nil {
		return fmt.Errorf("bfifo under %s: %w", netlink.HandleStr(parent), err)
	}
	return nil
}

// waitOperUp waits until an interface has carrier.
func waitOperUp(ctx context.Context, h *netlink.Handle, e *end) error {
	for {
		l, err := h.LinkByIndex(e.ifindex)
		if err != nil {
			return fmt.Errorf("testbed: %s in %s: %w", e.name, e.node.name, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: %s in %s not up: %w", e.name, e.node.name, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// installRoutes sets a node's routes over its links that are up: a host's
// default route to its leaf, a leaf's multipath routes to the other leaves'
// host subnets over the spines that reach them, a spine's routes to every
// leaf's host subnet. A destination with no path loses its route. Links
// that n is not an end of count as they were at the last Reconverge.
func (f *Fabric) installRoutes(h *netlink.Handle, n *node) error {
	type want struct {
		dst netip.Prefix
		via []*end
	}
	var routes []want
	switch n.kind {
	case kindHost:
		routes = append(routes, want{netip.MustParsePrefix("0.0.0.0/0"), n.ports[:1]})
	case kindLeaf:
		for l := 0; l < f.Config.Leaves; l++ {
			if l == n.index {
				continue
			}
			w := want{dst: f.HostSubnet(l)}
			for _, e := range n.ports {
				if e.peer.node.kind != kindSpine {
					continue
				}
				for _, se := range e.peer.node.ports {
					if se.peer.node.index == l && !se.link.isDown(n) {
						w.via = append(w.via, e)
					}
				}
			}
			routes = append(routes, w)
		}
	case kindSpine:
		for _, e := range n.ports {
			routes = append(routes, want{f.HostSubnet(e.peer.node.index), []*end{e}})
		}
	}
	for _, w := range routes {
		r := &netlink.Route{Dst: prefixToIPNet(w.dst)}
		var hops []*netlink.NexthopInfo
		for _, e := range w.via {
			if !e.link.isDown(n) {
				hops = append(hops, &netlink.NexthopInfo{LinkIndex: e.ifindex, Gw: e.peer.addr.Addr().AsSlice()})
			}
		}
		var err error
		switch {
		case len(hops) == 0:
			err = h.RouteDel(r)
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				err = nil
			}
		case len(hops) == 1:
			r.LinkIndex, r.Gw = hops[0].LinkIndex, hops[0].Gw
			err = h.RouteReplace(r)
		default:
			r.MultiPath = hops
			err = h.RouteReplace(r)
		}
		if err != nil {
			return fmt.Errorf("testbed: route to %v in %s: %w", w.dst, n.name, err)
		}
	}
	return nil
}

// Close removes every namespace of the fabric, and with them its links,
// and closes the fabric programs that AttachPrograms attached. It is
// idempotent. The Close of a persistent fabric (UpLeafSpine,
// OpenLeafSpine) only releases this process's handles: the fabric stays
// until DownLeafSpine.
func (f *Fabric) Close() error {
	f.closeOnce.Do(func() {
		unregister(f)
		f.mu.Lock()
		progs := append(f.attached, f.prog)
		f.mu.Unlock()
		var errs []error
		for _, p := range progs {
			if p != nil {
				// A pinned fabric's programs stay attached.
				errs = append(errs, p.Close())
			}
		}
		err := errors.Join(errs...)
		if f.persistent {
			f.closeErr = errors.Join(err, f.release())
			return
		}
		f.closeErr = errors.Join(err, f.teardown())
	})
	return f.closeErr
}

func (f *Fabric) teardown() (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed.Store(true)
	// The owner file stays (unlocked) while something could not be
	// removed, so that CleanupStale and spray testbed list find it.
	defer func() { f.owner.release(err != nil) }()
	var errs []error
	for _, n := range f.nodes {
		if n.ns < 0 {
			// Not made by us: after a name clash it is another
			// testbed's.
			continue
		}
		n.ns.Close()
		if err := deleteNamed(n.name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PortStat is the counters of one switch port, from the kernel's link and
// qdisc statistics.
type PortStat struct {
	// Switch and Peer are namespace names, Port the interface's name.
	Switch, Port, Peer string
	// Frames the port sent and received, and the link's own drops (a veth
	// drops when its peer is down).
	TxBytes, TxPackets, TxDropped uint64
	RxBytes, RxPackets, RxDropped uint64
	// QueueDrops counts frames that the egress queue (the root TBF, or the
	// HTB of a fabric that trims) dropped because it was full; QueueBytes
	// is what waits in it now.
	QueueDrops uint64
	QueueBytes uint64
}

// PortStats returns the counters of every switch port, leaves first, in
// the order of Leaves, Spines and their Ports. The sum of TxBytes over a
// spine's ports is the traffic that crossed that spine.
func (f *Fabric) PortStats() ([]PortStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Load() {
		return nil, ErrClosed
	}
	var out []PortStat
	for _, s := range append(append([]*Switch(nil), f.Leaves...), f.Spines...) {
		h, err := netlink.NewHandleAt(s.NS)
		if err != nil {
			return nil, fmt.Errorf("testbed: netlink in %s: %w", s.Name, err)
		}
		for _, p := range s.Ports {
			st, err := portStat(h, s, p)
			if err != nil {
				h.Close()
				return nil, err
			}
			out = append(out, st)
		}
		h.Close()
	}
	return out, nil
}

func portStat(h *netlink.Handle, s *Switch, p Port) (PortStat, error) {
	st := PortStat{Switch: s.Name, Port: p.Name, Peer: p.Peer}
	l, err := h.LinkByIndex(p.Ifindex)
	if err != nil {
		return st, fmt.Errorf("testbed: %s in %s: %w", p.Name, s.Name, err)
	}
	if ls := l.Attrs().Statistics; ls != nil {
		st.TxBytes, st.TxPackets, st.TxDropped = ls.TxBytes, ls.TxPackets, ls.TxDropped
		st.RxBytes, st.RxPackets, st.RxDropped = ls.RxBytes, ls.RxPackets, ls.RxDropped
	}
	qs, err := h.QdiscList(l)
	if err != nil {
		return st, fmt.Errorf("testbed: qdiscs of %s in %s: %w", p.Name, s.Name, err)
	}
	for _, q := range qs {
		a := q.Attrs()
		if a.Parent == netlink.HANDLE_ROOT && a.Statistics != nil && a.Statistics.Queue != nil {
			st.QueueDrops = uint64(a.Statistics.Queue.Drops)
			st.QueueBytes = uint64(a.Statistics.Queue.Backlog)
		}
	}
	return st, nil
}

// SetLinkDown takes the link between the nodes named a and b down (both
// ends, as a cable pull would) or, with down false, up again. Names are
// namespace names (a Host's or Switch's Name) or the same without the
// fabric's Prefix ("leaf0", "spine1", "host0-1"); the order does not
// matter.
//
// Only the two ends react, at once: a leaf stops using that spine, a spine
// loses its route to that leaf. The rest of the fabric does not reconverge
// until Reconverge is called (there is no routing protocol), so other
// leaves keep spraying packets for that leaf over that spine, which drops
// them: a blackhole that the transport must route around. Bringing the
// link up restores the routes of both ends; the other leaves use it again
// after Reconverge. Errors wrap ErrConfig for unknown names or nodes that share
// no link, ErrClosed after Close.
func (f *Fabric) SetLinkDown(a, b string, down bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Load() {
		return ErrClosed
	}
	na, nb := f.nodeByName(a), f.nodeByName(b)
	if na == nil || nb == nil {
		return fmt.Errorf("%w: no nodes %q and %q in %s", ErrConfig, a, b, f.Prefix)
	}
	var k *fabLink
	for _, e := range na.ports {
		if e.peer.node == nb {
			k = e.link
		}
	}
	if k == nil {
		return fmt.Errorf("%w: no link between %q and %q", ErrConfig, a, b)
	}
	k.down = down
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range []*end{k.a, k.b} {
		h, err := netlink.NewHandleAt(e.node.ns)
		if err != nil {
			return fmt.Errorf("testbed: netlink in %s: %w", e.node.name, err)
		}
		err = setLink(h, e, down)
		h.Close()
		if err != nil {
			return err
		}
	}
	for _, e := range []*end{k.a, k.b} {
		h, err := netlink.NewHandleAt(e.node.ns)
		if err != nil {
			return fmt.Errorf("testbed: netlink in %s: %w", e.node.name, err)
		}
		if !down {
			err = waitOperUp(ctx, h, e)
		}
		if err == nil {
			err = f.installRoutes(h, e.node)
		}
		h.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Reconverge updates the routes of every node to the links that are down
// now, as a routing protocol would once it converged: leaves stop sending a
// leaf's traffic to spines that lost their link to it, and the blackholes
// that SetLinkDown left are gone. Errors wrap ErrClosed after Close.
func (f *Fabric) Reconverge() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Load() {
		return ErrClosed
	}
	for _, k := range f.links {
		k.known = k.down
	}
	for _, n := range f.nodes {
		h, err := netlink.NewHandleAt(n.ns)
		if err != nil {
			return fmt.Errorf("testbed: netlink in %s: %w", n.name, err)
		}
		err = f.installRoutes(h, n)
		h.Close()
		if err != nil {
			return err
		}
	}
	if f.persistent {
		return f.saveKnown()
	}
	return nil
}

func setLink(h *netlink.Handle, e *end, down bool) error {
	l, err := h.LinkByIndex(e.ifindex)
	if err == nil {
		if down {
			err = h.LinkSetDown(l)
		} else {
			err = h.LinkSetUp(l)
		}
	}
	if err != nil {
		return fmt.Errorf("testbed: %s in %s down=%v: %w", e.name, e.node.name, down, err)
	}
	return nil
}

func (f *Fabric) nodeByName(name string) *node {
	for _, n := range f.nodes {
		if n.name == name || n.short == name {
			return n
		}
	}
	return nil
}
