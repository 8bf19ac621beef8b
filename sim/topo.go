package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sprayfabric/spray/testbed"
)

// ErrConfig is wrapped by every configuration error of the package.
var ErrConfig = errors.New("sim: invalid config")

// Topology kinds.
const (
	LeafSpine = "leafspine"
	FatTree   = "fattree"
)

// Topo describes a fabric: a two-tier leaf-spine or a three-tier fat-tree,
// with a rate and a propagation delay per tier. The zero value is not
// usable: use ParseTopo or fill Kind and the sizes.
type Topo struct {
	// Kind is LeafSpine or FatTree.
	Kind string
	// Leaf-spine: HostsPerLeaf x Leaves x Spines, every leaf linked to
	// every spine once (as testbed.LeafSpineConfig names them).
	// Fat-tree: K-ary (K even): K pods of K/2 edge and K/2 aggregation
	// switches, (K/2)^2 cores, K^3/4 hosts; HostsPerLeaf is then the hosts
	// per edge switch (K/2 unless set: more oversubscribes the edge).
	HostsPerLeaf, Leaves, Spines int
	K                            int
	// HostRate is the rate of the host links (bit/s); 0 means Rate times
	// the uplinks per host (non-blocking), as the testbed does.
	HostRate uint64
	// Rate is the rate of the links above the hosts (leaf-spine, edge-agg);
	// 0 means 100 Gbit/s. CoreRate is the fat-tree's agg-core links; 0
	// means Rate.
	Rate, CoreRate uint64
	// HostDelay, Delay and CoreDelay are the propagation delays of the
	// host links, the links above them and the fat-tree's core links; 0
	// means 1µs each (HPCC's and htsim's default).
	HostDelay, Delay, CoreDelay time.Duration
	// BufferBytes is every switch's shared buffer; 0 means 5 KB per
	// Gbit/s of its ports' capacity (a Tomahawk's 16 MB for 32x100G), at
	// least 32 frames per port.
	BufferBytes int
	// MTU is the largest frame, Ethernet header included; 0 means 1514.
	MTU int
	// Shaper models the switches of the netns testbed (package testbed)
	// instead of switch ASICs: every switch port is a token-bucket shaper
	// (a TBF qdisc) on a link that takes no time to cross but its delay
	// (a veth copies a frame): a frame leaves once the port's bucket
	// holds its bytes (the Ethernet frame, no preamble, FCS or gap, as tc
	// counts them), the bucket refills at the port's rate up to
	// ShaperBucket bytes, and the frame reaches the peer after the link's
	// delay, without serialization. The hosts' own links are not shaped
	// (the testbed shapes switch egress only): a host's frames leave at
	// once. INT QLen and ECN marks then use the time a frame waits for its
	// tokens, at the port's rate, as the testbed's programs measure it.
	// False: every link serializes at its rate and switches store and
	// forward, as ASICs and NICs do.
	Shaper bool
	// ShaperBucket is a Shaper port's bucket in bytes; 0 means 100 µs at
	// the port's rate, at least two frames (what the testbed's TBF gets).
	ShaperBucket int
	// PortBuffer, when above 0, gives every switch egress queue its own
	// PortBuffer bytes, and a frame that finds its queue full is dropped
	// (tail drop, a TBF's limit), instead of the queues sharing
	// BufferBytes under a dynamic threshold; BufferBytes (0: PortBuffer
	// times the ports) then only bounds PFC and scales the occupancy
	// figures.
	PortBuffer int
	// PFCAlpha, PFCXOff and PFCResume are the switches' PFC thresholds
	// when PFC is on (FabricConfig.PFC's, where those are zero): XOFF at
	// PFCAlpha of the free shared buffer (dynamic) or, with PFCXOff above
	// 0, at PFCXOff bytes an ingress port holds (static); XON PFCResume
	// bytes below XOFF. 0 means PFCConfig's defaults: 1/8, two frames.
	PFCAlpha  float64
	PFCXOff   int
	PFCResume int
	// Alpha is the dynamic threshold of the lossy egress queues
	// (FabricConfig.Alpha, where that is zero): a queue takes a frame
	// while it holds less than Alpha times the switch's free buffer. 0
	// means 1. A small Alpha with Trim keeps every queue short, as NDP's
	// and Ultra Ethernet's switches trim at a queue's threshold rather
	// than at a full buffer.
	Alpha float64
	// Trim makes the switches trim rather than drop (NDP, Ultra
	// Ethernet): a spray data frame that its egress queue has no room for
	// is cut to its headers (wire.Trim) and sent on at priority, ahead of
	// the queue, so that the receiver asks for it again at once; other
	// frames are dropped as before. Without PFC only (a lossless class
	// drops nothing to trim).
	Trim bool
	// PodOversub, above 1, oversubscribes a fat-tree above its pods: each
	// aggregation switch keeps K/2/PodOversub core uplinks (and the core
	// tier (K/2)^2/PodOversub switches), PodOversub:1 of its edge
	// capacity. It must divide K/2. 0 or 1 means non-blocking.
	PodOversub int
	// Planes, above 1, builds that many copies of the fabric, every host
	// with one link into each (a NIC port per plane, each at HostRate:
	// the host's NIC has Planes x HostRate). A frame leaves by the plane
	// its ECMP key hashes to, so a sprayed QP spreads over the planes and
	// an ECMP QP keeps to one. 0 or 1 means one fabric.
	Planes int
	// Faults at scale, on the links between switches, chosen by the
	// fabric's seed. FailLinks are down from the start (and withdrawn
	// from the routes). FlapRate is each link's flaps per hour, at
	// exponential intervals: a flap takes the link down for FlapDown (0
	// means DefaultFlapDown), the fabric withdrawing it DefaultReconverge
	// later. LossyShare of the links (a share, 0.01 for 1%) lose each
	// frame with probability LossyRate (a bit error rate, as frames).
	FailLinks             int
	FlapRate              float64
	FlapDown              time.Duration
	LossyShare, LossyRate float64
}

// DefaultFlapDown is how long a flap keeps a link down when Topo gives
// no FlapDown: the loss of signal, the retraining of the link and its
// return to the routes take a fraction of a second on today's optics.
const DefaultFlapDown = 100 * time.Millisecond

// DefaultReconverge is how long after a link goes down the fabric's
// routes withdraw it (BFD-style detection and a route update); the
// switches at its ends stop using it at once.
const DefaultReconverge = 5 * time.Millisecond

// DefaultRate is Topo.Rate's default, in bit/s.
const DefaultRate = 100e9

// DefaultDelay is the propagation delay of a link when Topo gives none.
const DefaultDelay = time.Microsecond

func (t Topo) withDefaults() (Topo, error) {
	switch t.Kind {
	case LeafSpine:
		if t.HostsPerLeaf < 1 || t.Leaves < 1 || t.Spines < 1 {
			return t, fmt.Errorf("%w: leaf-spine %dx%dx%d: every count must be at least 1", ErrConfig, t.HostsPerLeaf, t.Leaves, t.Spines)
		}
	case FatTree:
		if t.K < 2 || t.K%2 != 0 || t.K > 128 {
			return t, fmt.Errorf("%w: fat-tree k=%d: want an even k in [2, 128]", ErrConfig, t.K)
		}
		if t.HostsPerLeaf == 0 {
			t.HostsPerLeaf = t.K / 2
		}
		if t.PodOversub < 0 || (t.PodOversub > 1 && (t.K/2)%t.PodOversub != 0) {
			return t, fmt.Errorf("%w: fat-tree k=%d oversubscribed %d:1 above the pod: want a divisor of %d", ErrConfig, t.K, t.PodOversub, t.K/2)
		}
	default:
		return t, fmt.Errorf("%w: topology kind %q (want %s or %s)", ErrConfig, t.Kind, LeafSpine, FatTree)
	}
	if t.Kind != FatTree && t.PodOversub > 1 {
		return t, fmt.Errorf("%w: oversubscription above the pod is for a fat-tree", ErrConfig)
	}
	if t.Planes < 0 || t.Planes > 16 || t.Switches() > 1<<16-1 {
		return t, fmt.Errorf("%w: %d planes of %d switches: want 1 to 16 planes, at most 65535 switches", ErrConfig, t.Planes, t.Switches()/max(t.Planes, 1))
	}
	if t.FailLinks < 0 || t.FailLinks > t.FabricLinks() || !(t.FlapRate >= 0 && t.FlapRate <= 3.6e6) || t.FlapDown < 0 ||
		!(t.LossyShare >= 0 && t.LossyShare <= 1) || !(t.LossyRate >= 0 && t.LossyRate <= 1) {
		return t, fmt.Errorf("%w: faults: %d links failed of %d, %v flaps a link an hour (down %v), %v of the links losing %v of their frames",
			ErrConfig, t.FailLinks, t.FabricLinks(), t.FlapRate, t.FlapDown, t.LossyShare, t.LossyRate)
	}
	if t.FlapDown == 0 {
		t.FlapDown = DefaultFlapDown
	}
	if t.Hosts() > 1<<20 || t.Hosts() < 2 {
		return t, fmt.Errorf("%w: %d hosts: want 2 to %d", ErrConfig, t.Hosts(), 1<<20)
	}
	if t.Rate == 0 {
		t.Rate = DefaultRate
	}
	if t.CoreRate == 0 {
		t.CoreRate = t.Rate
	}
	if t.HostRate == 0 {
		up := t.Spines
		if t.Kind == FatTree {
			up = t.K / 2
		}
		t.HostRate = t.Rate * uint64(up) / uint64(t.HostsPerLeaf)
		if t.HostRate == 0 {
			t.HostRate = t.Rate
		}
	}
	for _, r := range []uint64{t.Rate, t.CoreRate, t.HostRate} {
		if r < 1e6 || r > 1.6e12 {
			return t, fmt.Errorf("%w: rate %d bit/s: want 1 Mbit/s to 1.6 Tbit/s", ErrConfig, r)
		}
	}
	if t.HostDelay == 0 {
		t.HostDelay = DefaultDelay
	}
	if t.Delay == 0 {
		t.Delay = DefaultDelay
	}
	if t.CoreDelay == 0 {
		t.CoreDelay = t.Delay
	}
	if t.HostDelay < 0 || t.Delay < 0 || t.CoreDelay < 0 {
		return t, fmt.Errorf("%w: negative delay", ErrConfig)
	}
	if t.MTU == 0 {
		t.MTU = 1514
	}
	if t.MTU < 576 || t.MTU > 9014 {
		return t, fmt.Errorf("%w: MTU %d: want 576 to 9014", ErrConfig, t.MTU)
	}
	if t.BufferBytes < 0 || t.PortBuffer < 0 || t.ShaperBucket < 0 {
		return t, fmt.Errorf("%w: buffer %d, port buffer %d, shaper bucket %d", ErrConfig, t.BufferBytes, t.PortBuffer, t.ShaperBucket)
	}
	if t.PortBuffer > 0 && t.PortBuffer < t.MTU {
		return t, fmt.Errorf("%w: port buffer %d below a frame (%d)", ErrConfig, t.PortBuffer, t.MTU)
	}
	if t.ShaperBucket > 0 && (!t.Shaper || t.ShaperBucket < t.MTU) {
		return t, fmt.Errorf("%w: shaper bucket %d: want shaper on and at least a frame (%d)", ErrConfig, t.ShaperBucket, t.MTU)
	}
	if err := checkPFC(t.PFCAlpha, t.PFCXOff, t.PFCResume, t.MTU); err != nil {
		return t, err
	}
	if t.BufferBytes > 0 && t.PFCXOff > t.BufferBytes {
		return t, fmt.Errorf("%w: PFC XOFF %d bytes above the switch buffer (%d)", ErrConfig, t.PFCXOff, t.BufferBytes)
	}
	return t, nil
}

// Hosts returns the number of hosts.
func (t Topo) Hosts() int {
	if t.Kind == FatTree {
		h := t.HostsPerLeaf
		if h == 0 {
			h = t.K / 2
		}
		return t.K * t.K / 2 * h
	}
	return t.HostsPerLeaf * t.Leaves
}

// planes returns the fabric's planes, at least 1.
func (t Topo) planes() int { return max(t.Planes, 1) }

// coresPerGroup returns a fat-tree's core switches per aggregation index.
func (t Topo) coresPerGroup() int { return t.K / 2 / max(t.PodOversub, 1) }

// Switches returns the number of switches, every plane's.
func (t Topo) Switches() int {
	if t.Kind == FatTree {
		half := t.K / 2
		return t.planes() * (t.K*t.K + half*t.coresPerGroup())
	}
	return t.planes() * (t.Leaves + t.Spines)
}

// FabricLinks returns the number of links between switches, every
// plane's: the links that Topo's faults choose from.
func (t Topo) FabricLinks() int {
	if t.Kind == FatTree {
		half := t.K / 2
		return t.planes() * (t.K*half*half + t.K*half*t.coresPerGroup())
	}
	return t.planes() * t.Leaves * t.Spines
}

// Oversubscription is the host capacity of a first-tier switch over its
// uplink capacity.
func (t Topo) Oversubscription() float64 {
	up := float64(t.Spines)
	if t.Kind == FatTree {
		up = float64(t.K / 2)
	}
	return float64(t.HostsPerLeaf) * float64(t.HostRate) / (up * float64(t.Rate))
}

// String returns t in ParseTopo's syntax.
func (t Topo) String() string {
	var b strings.Builder
	if t.Kind == FatTree {
		fmt.Fprintf(&b, "fattree:%d", t.K)
		if t.HostsPerLeaf != 0 && t.HostsPerLeaf != t.K/2 {
			fmt.Fprintf(&b, ",hosts=%d", t.HostsPerLeaf)
		}
	} else {
		fmt.Fprintf(&b, "leafspine:%dx%dx%d", t.HostsPerLeaf, t.Leaves, t.Spines)
	}
	if t.Rate != 0 {
		fmt.Fprintf(&b, ",rate=%s", rateString(t.Rate))
	}
	if t.HostRate != 0 {
		fmt.Fprintf(&b, ",hostrate=%s", rateString(t.HostRate))
	}
	if t.Kind == FatTree && t.CoreRate != 0 && t.CoreRate != t.Rate {
		fmt.Fprintf(&b, ",corerate=%s", rateString(t.CoreRate))
	}
	if t.HostDelay != 0 {
		fmt.Fprintf(&b, ",hostdelay=%s", t.HostDelay)
	}
	if t.Delay != 0 {
		fmt.Fprintf(&b, ",delay=%s", t.Delay)
	}
	if t.Kind == FatTree && t.CoreDelay != 0 && t.CoreDelay != t.Delay {
		fmt.Fprintf(&b, ",coredelay=%s", t.CoreDelay)
	}
	if t.BufferBytes != 0 {
		fmt.Fprintf(&b, ",buffer=%d", t.BufferBytes)
	}
	if t.MTU != 0 {
		fmt.Fprintf(&b, ",mtu=%d", t.MTU)
	}
	if t.PortBuffer != 0 {
		fmt.Fprintf(&b, ",portbuffer=%d", t.PortBuffer)
	}
	if t.PFCAlpha != 0 || t.PFCXOff != 0 || t.PFCResume != 0 {
		b.WriteString(",pfc=")
		switch {
		case t.PFCXOff != 0:
			fmt.Fprintf(&b, "%dB", t.PFCXOff)
		case t.PFCAlpha != 0:
			b.WriteString(strconv.FormatFloat(t.PFCAlpha, 'g', -1, 64))
		}
		if t.PFCResume != 0 {
			fmt.Fprintf(&b, "/%d", t.PFCResume)
		}
	}
	if t.Alpha != 0 {
		b.WriteString(",alpha=" + strconv.FormatFloat(t.Alpha, 'g', -1, 64))
	}
	switch {
	case t.ShaperBucket != 0:
		fmt.Fprintf(&b, ",shaper=%d", t.ShaperBucket)
	case t.Shaper:
		b.WriteString(",shaper=tbf")
	}
	if t.Trim {
		b.WriteString(",trim")
	}
	if t.PodOversub > 1 {
		fmt.Fprintf(&b, ",oversub=%d", t.PodOversub)
	}
	if t.Planes > 1 {
		fmt.Fprintf(&b, ",planes=%d", t.Planes)
	}
	if t.FailLinks > 0 {
		fmt.Fprintf(&b, ",fail=%d", t.FailLinks)
	}
	if t.FlapRate > 0 {
		b.WriteString(",flap=" + strconv.FormatFloat(t.FlapRate, 'g', -1, 64))
		if t.FlapDown != 0 && t.FlapDown != DefaultFlapDown {
			fmt.Fprintf(&b, "/%v", t.FlapDown)
		}
	}
	if t.LossyShare > 0 && t.LossyRate > 0 {
		b.WriteString(",lossy=" + strconv.FormatFloat(t.LossyShare, 'g', -1, 64) + "/" + strconv.FormatFloat(t.LossyRate, 'g', -1, 64))
	}
	return b.String()
}

// Faults describes t's faults at scale in words, or "" when it has none.
func (t Topo) Faults() string {
	var fs []string
	if t.FailLinks > 0 {
		fs = append(fs, fmt.Sprintf("%d of %d links between switches down from the start", t.FailLinks, t.FabricLinks()))
	}
	if t.FlapRate > 0 {
		d := t.FlapDown
		if d == 0 {
			d = DefaultFlapDown
		}
		fs = append(fs, fmt.Sprintf("every link flapping %v times an hour, down %v a flap (withdrawn after %v)", t.FlapRate, d, DefaultReconverge))
	}
	if t.LossyShare > 0 && t.LossyRate > 0 {
		fs = append(fs, fmt.Sprintf("%d links (%v of them) losing %v of their frames", int(t.LossyShare*float64(t.FabricLinks())+0.5), t.LossyShare, t.LossyRate))
	}
	return strings.Join(fs, "; ")
}

func rateString(r uint64) string {
	switch {
	case r%1e9 == 0:
		return fmt.Sprintf("%dgbit", r/1e9)
	case r%1e6 == 0:
		return fmt.Sprintf("%dmbit", r/1e6)
	case r%1e3 == 0:
		return fmt.Sprintf("%dkbit", r/1e3)
	}
	return strconv.FormatUint(r, 10)
}

// ParseTopo parses "leafspine:HxLxS[,opt=v...]" (hosts per leaf x leaves
// x spines, as testbed.ParseLeafSpine) or "fattree:K[,opt=v...]", with
// options rate, hostrate, corerate (rates as testbed.ParseRate: 100gbit),
// delay, hostdelay, coredelay (Go durations: 1us), buffer (bytes, with k
// or m for KiB or MiB: a switch's shared buffer), portbuffer (bytes: each
// egress queue's own), shaper (tbf, or a bucket in bytes: Topo.Shaper),
// mtu, pfc (XOFF/XON: PFC's thresholds, see parsePFC), alpha (the lossy
// queues' dynamic threshold: Topo.Alpha), trim (no value:
// Topo.Trim), planes (Topo.Planes), fail (links down from the start),
// flap (RATE[/DOWN]: flaps a link an hour, and how long each keeps it
// down), lossy (SHARE/P: a share of the links losing frames with
// probability P), and for a fat-tree hosts (per edge switch) and oversub
// (above the pod: Topo.PodOversub). Examples:
// "leafspine:16x8x4,rate=100gbit,pfc=0.25/6k",
// "fattree:32,oversub=4,planes=2,fail=20,flap=0.01,lossy=0.01/1e-5".
func ParseTopo(s string) (Topo, error) {
	var t Topo
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return t, fmt.Errorf("%w: topology %q: want leafspine:HxLxS or fattree:K", ErrConfig, s)
	}
	parts := strings.Split(rest, ",")
	switch kind {
	case LeafSpine:
		t.Kind = LeafSpine
		dims := strings.Split(parts[0], "x")
		if len(dims) != 3 {
			return t, fmt.Errorf("%w: topology %q: want leafspine:HOSTSxLEAVESxSPINES", ErrConfig, s)
		}
		var n [3]int
		for i, d := range dims {
			v, err := strconv.Atoi(d)
			if err != nil || v < 1 {
				return t, fmt.Errorf("%w: topology %q: %q is not a count", ErrConfig, s, d)
			}
			n[i] = v
		}
		t.HostsPerLeaf, t.Leaves, t.Spines = n[0], n[1], n[2]
	case FatTree:
		t.Kind = FatTree
		k, err := strconv.Atoi(parts[0])
		if err != nil {
			return t, fmt.Errorf("%w: topology %q: %q is not k", ErrConfig, s, parts[0])
		}
		t.K = k
	default:
		return t, fmt.Errorf("%w: topology %q: want leafspine:HxLxS or fattree:K", ErrConfig, s)
	}
	for _, opt := range parts[1:] {
		if opt == "trim" {
			t.Trim = true
			continue
		}
		k, v, ok := strings.Cut(opt, "=")
		if !ok || v == "" {
			return t, fmt.Errorf("%w: topology %q: option %q: want key=value", ErrConfig, s, opt)
		}
		var err error
		switch k {
		case "rate":
			t.Rate, err = testbed.ParseRate(v)
		case "hostrate":
			t.HostRate, err = testbed.ParseRate(v)
		case "corerate":
			t.CoreRate, err = testbed.ParseRate(v)
		case "delay":
			t.Delay, err = parseDelay(v)
		case "hostdelay":
			t.HostDelay, err = parseDelay(v)
		case "coredelay":
			t.CoreDelay, err = parseDelay(v)
		case "buffer":
			t.BufferBytes, err = parseBytes(v)
		case "portbuffer":
			t.PortBuffer, err = parseBytes(v)
		case "shaper":
			t.Shaper = true
			if v != "tbf" {
				t.ShaperBucket, err = parseBytes(v)
			}
		case "mtu":
			t.MTU, err = strconv.Atoi(v)
		case "alpha":
			t.Alpha, err = strconv.ParseFloat(v, 64)
			if err == nil && !(t.Alpha > 0 && t.Alpha <= 8) {
				err = errors.New("want a share of the free buffer in (0, 8]")
			}
		case "pfc":
			t.PFCAlpha, t.PFCXOff, t.PFCResume, err = parsePFC(v)
		case "oversub":
			t.PodOversub, err = strconv.Atoi(v)
			if err == nil && t.PodOversub < 1 {
				err = errors.New("want a ratio of at least 1")
			}
		case "planes":
			t.Planes, err = strconv.Atoi(v)
			if err == nil && (t.Planes < 1 || t.Planes > 16) {
				err = errors.New("want 1 to 16")
			}
		case "fail":
			t.FailLinks, err = strconv.Atoi(v)
			if err == nil && t.FailLinks < 0 {
				err = errors.New("want a count of links")
			}
		case "flap":
			r, d, hasD := strings.Cut(v, "/")
			t.FlapRate, err = strconv.ParseFloat(r, 64)
			if err == nil && !(t.FlapRate > 0 && t.FlapRate <= 3.6e6) {
				err = errors.New("want flaps a link an hour in (0, 3600000]")
			}
			if err == nil && hasD {
				t.FlapDown, err = time.ParseDuration(d)
				if err == nil && (t.FlapDown <= 0 || t.FlapDown > time.Hour) {
					err = fmt.Errorf("down %v: want (0, 1h]", t.FlapDown)
				}
			}
		case "lossy":
			sh, p, ok := strings.Cut(v, "/")
			if !ok {
				err = errors.New("want SHARE/P: a share of the links and their loss probability")
				break
			}
			t.LossyShare, err = strconv.ParseFloat(sh, 64)
			if err == nil {
				t.LossyRate, err = strconv.ParseFloat(p, 64)
			}
			if err == nil && !(t.LossyShare > 0 && t.LossyShare <= 1 && t.LossyRate > 0 && t.LossyRate <= 1) {
				err = errors.New("want a share in (0, 1] and a probability in (0, 1]")
			}
		case "hosts":
			if t.Kind != FatTree {
				err = errors.New("only for a fat-tree")
			} else {
				t.HostsPerLeaf, err = strconv.Atoi(v)
				if err == nil && t.HostsPerLeaf < 1 {
					err = errors.New("want at least 1")
				}
			}
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return t, fmt.Errorf("%w: topology %q: option %q: %v", ErrConfig, s, opt, err)
		}
	}
	if _, err := t.withDefaults(); err != nil {
		return t, err
	}
	return t, nil
}

// parsePFC parses PFC thresholds "XOFF[/XON]": XOFF is a share of the
// free shared buffer (a number, 0.125 for the default 1/8: dynamic) or a
// byte count with a unit (200k, 1m, 150000B: static); XON is the bytes
// below XOFF at which RESUME is sent (a byte count, k or m allowed;
// omitted or empty: two frames). Either side may be empty for its default.
func parsePFC(v string) (alpha float64, xoff, resume int, err error) {
	x, on, _ := strings.Cut(v, "/")
	switch {
	case x == "":
	case strings.HasSuffix(x, "B") || strings.HasSuffix(x, "k") || strings.HasSuffix(x, "m"):
		if xoff, err = parseBytes(strings.TrimSuffix(x, "B")); err != nil {
			return 0, 0, 0, fmt.Errorf("XOFF: %v", err)
		}
	default:
		alpha, err = strconv.ParseFloat(x, 64)
		if err != nil || !(alpha > 0 && alpha <= 1) {
			return 0, 0, 0, fmt.Errorf("XOFF %q: want a share of the free buffer in (0, 1] (0.125) or bytes with a unit (200k, 150000B)", x)
		}
	}
	if on != "" {
		if resume, err = parseBytes(strings.TrimSuffix(on, "B")); err != nil {
			return 0, 0, 0, fmt.Errorf("XON: %v", err)
		}
	}
	if xoff > 0 && resume >= xoff {
		return 0, 0, 0, fmt.Errorf("XON %d bytes below XOFF: want less than the static XOFF of %d", resume, xoff)
	}
	return alpha, xoff, resume, nil
}

func parseDelay(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 || d > time.Second {
		return 0, fmt.Errorf("%v: want a delay in (0, 1s]", d)
	}
	return d, nil
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
	if err != nil || n <= 0 || n > (1<<40)/mul {
		return 0, fmt.Errorf("%q is not a byte count", v)
	}
	return n * mul, nil
}

// ReadHtsimTopo reads a topology file of htsim's fat-tree simulators
// ("Nodes N", "Tiers 2|3", "Podsize P", then per "Tier i" block
// Downlink_speed_Gbps, Radix_Down, Radix_Up, Downlink_Latency_ns, ...),
// so that a workload runs on the same fabric in both. Two tiers give a
// leaf-spine (tier 0: the leaves, Radix_Down hosts and Radix_Up spines;
// tier 1: the spines), three a fat-tree whose tiers must match a k-ary
// one (edge Radix_Down = Radix_Up = k/2, agg the same, core Radix_Down
// = k). Switch latency, Bundle above 1 and per-tier queue sizes are not
// modelled: a value other than their defaults is an error.
func ReadHtsimTopo(r io.Reader) (Topo, error) {
	type tier struct {
		speed                 float64
		down, up              int
		latency               int64
		set                   bool
		oversub, bundle, swns string
	}
	var (
		nodes, tiers, podsize int
		ts                    [3]tier
		cur                   = -1
	)
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 2 {
			return Topo{}, fmt.Errorf("%w: htsim topology line %d: want KEY VALUE", ErrConfig, line)
		}
		key, val := f[0], f[1]
		if key == "Tier" {
			i, err := strconv.Atoi(val)
			if err != nil || i < 0 || i > 2 {
				return Topo{}, fmt.Errorf("%w: htsim topology line %d: tier %q", ErrConfig, line, val)
			}
			cur = i
			ts[i].set = true
			continue
		}
		atoi := func() (int, error) {
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("%w: htsim topology line %d: %s %q", ErrConfig, line, key, val)
			}
			return v, nil
		}
		var err error
		if cur < 0 {
			switch key {
			case "Nodes":
				nodes, err = atoi()
			case "Tiers":
				tiers, err = atoi()
			case "Podsize":
				podsize, err = atoi()
			default:
				err = fmt.Errorf("%w: htsim topology line %d: unknown key %q", ErrConfig, line, key)
			}
			if err != nil {
				return Topo{}, err
			}
			continue
		}
		t := &ts[cur]
		switch key {
		case "Downlink_speed_Gbps":
			t.speed, err = strconv.ParseFloat(val, 64)
			if err == nil && t.speed <= 0 {
				err = errors.New("not positive")
			}
		case "Radix_Down":
			t.down, err = atoi()
		case "Radix_Up":
			t.up, err = atoi()
		case "Downlink_Latency_ns":
			var v int
			v, err = atoi()
			t.latency = int64(v)
		case "Switch_Latency_ns":
			t.swns = val
		case "Oversubscribed":
			t.oversub = val
		case "Bundle":
			t.bundle = val
		default:
			err = fmt.Errorf("unknown key %q", key)
		}
		if err != nil {
			return Topo{}, fmt.Errorf("%w: htsim topology line %d: %v", ErrConfig, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Topo{}, err
	}
	if tiers != 2 && tiers != 3 {
		return Topo{}, fmt.Errorf("%w: htsim topology: Tiers %d (want 2 or 3)", ErrConfig, tiers)
	}
	for i := range tiers {
		t := ts[i]
		if !t.set || t.speed == 0 || t.down == 0 {
			return Topo{}, fmt.Errorf("%w: htsim topology: tier %d lacks Downlink_speed_Gbps or Radix_Down", ErrConfig, i)
		}
		if t.swns != "" && t.swns != "0" {
			return Topo{}, fmt.Errorf("%w: htsim topology: tier %d: Switch_Latency_ns %s is not modelled (want 0)", ErrConfig, i, t.swns)
		}
		if t.bundle != "" && t.bundle != "1" {
			return Topo{}, fmt.Errorf("%w: htsim topology: tier %d: Bundle %s is not modelled (want 1)", ErrConfig, i, t.bundle)
		}
	}
	gbit := func(g float64) uint64 { return uint64(g * 1e9) }
	ns := func(v int64) time.Duration { return time.Duration(v) }
	var t Topo
	if tiers == 2 {
		t = Topo{Kind: LeafSpine, HostsPerLeaf: ts[0].down, Spines: ts[0].up, HostRate: gbit(ts[0].speed), Rate: gbit(ts[1].speed),
			HostDelay: ns(ts[0].latency), Delay: ns(ts[1].latency)}
		if t.HostsPerLeaf == 0 || nodes%t.HostsPerLeaf != 0 {
			return Topo{}, fmt.Errorf("%w: htsim topology: %d nodes do not fill leaves of %d", ErrConfig, nodes, t.HostsPerLeaf)
		}
		t.Leaves = nodes / t.HostsPerLeaf
		if t.Spines == 0 || ts[1].down != t.Leaves {
			return Topo{}, fmt.Errorf("%w: htsim topology: %d leaves but spines with Radix_Down %d", ErrConfig, t.Leaves, ts[1].down)
		}
	} else {
		k := ts[2].down
		h := k / 2
		if ts[0].up != h || ts[1].down != h || ts[1].up != h || podsize != ts[0].down*h {
			return Topo{}, fmt.Errorf("%w: htsim topology: three tiers that are not a k-ary fat-tree (k=%d)", ErrConfig, k)
		}
		t = Topo{Kind: FatTree, K: k, HostsPerLeaf: ts[0].down, HostRate: gbit(ts[0].speed), Rate: gbit(ts[1].speed), CoreRate: gbit(ts[2].speed),
			HostDelay: ns(ts[0].latency), Delay: ns(ts[1].latency), CoreDelay: ns(ts[2].latency)}
		if t.Hosts() != nodes {
			return Topo{}, fmt.Errorf("%w: htsim topology: %d nodes, but k=%d with %d hosts per edge has %d", ErrConfig, nodes, k, t.HostsPerLeaf, t.Hosts())
		}
	}
	return t.withDefaults()
}
