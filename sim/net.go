package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/transport/wire"
)

// FabricConfig configures the switches of a Net. The zero value is usable
// with Topo set: every field documents its default.
type FabricConfig struct {
	Topo Topo
	// Alpha is the dynamic threshold of the egress queues of lossy
	// traffic: a queue takes a frame while it holds less than Alpha times
	// the switch's free buffer (Choudhury-Hahne); 0 means Topo.Alpha,
	// and 1 where that is zero too.
	Alpha float64
	// ECN marks ECN-capable frames at enqueue, RED-style on the egress
	// queue's bytes; the zero value means DefaultECN for the port's rate,
	// ECN.Off disables marking.
	ECN ECNConfig
	// ECNDelay, when its KMax is set, gives every port the thresholds of
	// ECN in time instead: KMin and KMax are these delays at the port's
	// rate (as the testbed's programs mark, by queue delay).
	ECNDelay ECNDelayConfig
	// EdgeUnmeasured makes the switch ports that face hosts mark no ECN
	// and report no queue in INT (QLen 0; TS and TxBytes as usual), as on
	// the netns testbed, whose programs measure a port's queue at the
	// next hop's ingress and run on no host.
	EdgeUnmeasured bool
	// PFC makes the fabric lossless (one lossless class: every frame).
	PFC PFCConfig
	// NoINT stops the switches from stamping INT hop records.
	NoINT bool
	// NICFrames bounds a host NIC's transmit queue: a link's Alloc
	// lends no buffer while that many frames wait for the wire; 0 means
	// 64.
	NICFrames int
	// HostRxFrames bounds the frames a host has received and its
	// transport not yet read; beyond, they are dropped (Drops.Host). 0
	// means 65536.
	HostRxFrames int
	// Seed seeds the fabric's random decisions (ECMP hash seeds, ECN
	// marks, losses, Topo's faults).
	Seed uint64
	// Horizon bounds the simulated time over which Topo.FlapRate's flaps
	// are scheduled; 0 means DefaultHorizon.
	Horizon time.Duration
}

// ECNConfig is RED-style marking on an egress queue: no mark at or below
// KMin bytes, a probability rising linearly to PMax at KMax, every ECT
// frame above KMax.
type ECNConfig struct {
	KMin, KMax int
	PMax       float64
	Off        bool
}

// ECNDelayConfig is RED-style marking by the time a frame waits in the
// queue: no mark at or below KMin, a probability rising linearly to PMax
// at KMax, every ECT frame above KMax.
type ECNDelayConfig struct {
	KMin, KMax time.Duration
	PMax       float64
}

// DefaultECN returns the ECN thresholds for a port of rate bit/s: the
// DCQCN settings that the HPCC paper uses at 100 Gbit/s (KMin 100 KB,
// KMax 400 KB, PMax 0.2), scaled with the rate, at least 2 and 8 frames
// of mtu bytes.
func DefaultECN(rate uint64, mtu int) ECNConfig {
	g := float64(rate) / 1e9
	return ECNConfig{KMin: max(int(g*1000), 2*mtu), KMax: max(int(g*4000), 8*mtu), PMax: 0.2}
}

// PFCConfig configures priority flow control, per ingress port: when the
// bytes a port has brought into the switch's buffer reach the XOFF
// threshold (Alpha times the free shared buffer, dynamic, or XOff bytes,
// static), the switch sends PAUSE to the upstream port, which stops after
// the link's delay; when they fall Resume bytes below it, RESUME.
// Headroom per port is reserved out of the buffer for what arrives in
// between. Zero fields take Topo's PFC thresholds, then the defaults.
type PFCConfig struct {
	On bool
	// Alpha is the XOFF threshold's share of the free shared buffer; 0
	// means 1/8 (DefaultPFCAlpha) unless XOff is set.
	Alpha float64
	// XOff, above 0, is a static XOFF threshold in bytes instead of
	// Alpha's dynamic one.
	XOff int
	// Headroom is the buffer reserved per ingress port; 0 means what
	// arrives after a PAUSE is sent: two link delays at the port's rate
	// plus two frames.
	Headroom int
	// Resume is the XON hysteresis in bytes; 0 means two frames.
	Resume int
}

// defaultNICFrames is FabricConfig.NICFrames's default.
const defaultNICFrames = 64

// DefaultPFCAlpha is PFCConfig.Alpha's default: XOFF at 1/8 of the free
// shared buffer, the dynamic threshold (alpha) of shared-buffer switch
// ASICs' lossless pools.
const DefaultPFCAlpha = 1.0 / 8

// Drops counts frames the fabric dropped, by cause.
type Drops struct {
	Loss      uint64 `json:"loss"`      // random loss of a link
	Burst     uint64 `json:"burst"`     // loss bursts
	Blackhole uint64 `json:"blackhole"` // a link that is down
	Queue     uint64 `json:"queue"`     // a full buffer or queue
	Host      uint64 `json:"host"`      // a host that did not read its frames
	NoRoute   uint64 `json:"noroute"`   // no host has the destination
}

// Total is the sum of the drops.
func (d Drops) Total() uint64 {
	return d.Loss + d.Burst + d.Blackhole + d.Queue + d.Host + d.NoRoute
}

func (d *Drops) add(o Drops) {
	d.Loss += o.Loss
	d.Burst += o.Burst
	d.Blackhole += o.Blackhole
	d.Queue += o.Queue
	d.Host += o.Host
	d.NoRoute += o.NoRoute
}

// PortStats are the counters of one port (one direction of a link: its
// egress queue and, for PFC, the ingress accounting of what it received).
type PortStats struct {
	TxFrames, TxBytes uint64
	ECNMarked         uint64
	INTStamped        uint64
	// PauseSent counts PAUSE frames this port's ingress sent upstream;
	// PausedTime is how long this port's egress stood stopped by PAUSE.
	PauseSent  uint64
	PausedTime time.Duration
	MaxQueue   int // most bytes in the egress queue at once
	Drops      Drops
	// Trimmed counts data frames this egress queue had no room for and
	// cut to their headers instead of dropping them (Topo.Trim).
	Trimmed uint64
}

// packet is a frame in the fabric, with what the switches need of its
// headers read once when a host sends it (inject): a frame is routed and
// stamped at every hop, and parsing it each time cost more than the
// switching.
type packet struct {
	buf []byte
	// flow is the ECMP key of the frame's addresses, ports and protocol.
	flow uint64
	dst  int32 // destination host, -1 if none of the fabric's
	// intOff is the frame's INT shim; intN hop records are filled of
	// intMax, 0 when the frame takes no stamp (wire.INTRegion).
	intOff       uint16
	intN, intMax uint8
}

// qent is a frame in a port's queue, with what sending it needs: a port
// sends a frame without touching the packet, which a run of a thousand
// hosts holds by the hundred thousand, far apart in memory.
type qent struct {
	// readyPs is when the frame arrived whole (or was handed to the NIC),
	// in picoseconds.
	readyPs int64
	id      int32 // the packet
	size    int32 // its bytes
	in      int32 // PFC: the ingress port whose account holds it, or -1
}

// port is one end of a link: its egress queue towards the peer.
//
// Its fields are laid out by use, a cache line each, as a frame's hop
// touches them: the queue and the state of the wire; the frame on it and
// the link's rate, delay and loss; ECN and trimmed frames; the counters;
// then what only shapers, PAUSE and loss bursts read. A run of a thousand
// hosts holds its ports far beyond the caches, and a frame's events
// missed them on six lines of the port where they now miss on three or
// four (TestPortLayout guards the lines).
type port struct {
	// line 1
	node  int32  // switch index, or host index when host
	peer  int32  // the port at the other end
	local uint16 // port number on its switch
	host  bool
	busy  bool
	// Topo.Shaper: a switch port is a token bucket (shaper); a host port
	// sends at once (instant).
	shaper    bool
	instant   bool
	paused    bool   // stopped by the peer's PAUSE
	down      bool   // the link is down
	xoff      bool   // PFC: PAUSE sent to the peer
	withdrawn bool   // routes avoid this link (reconverged)
	txCount   uint32 // INT TxBytes
	freePs    int64  // when the wire is free, in picoseconds
	qBytes    int    // queued bytes, the one on the wire included
	q         []qent // FIFO of packets; q[qh:] are queued
	// line 2
	qh    int
	cur   qent   // the frame on the wire while busy
	rate  uint64 // bit/s
	delay clock.Time
	loss  float64 // random loss of the frames leaving
	geP   float64 // Gilbert-Elliott: good->bad
	// line 3
	ecn ECNConfig
	// pq[pqh:] are trimmed frames (Topo.Trim), sent before q's.
	pq  []qent
	pqh int
	// line 4: inBytes and the first seven counters of stats
	inBytes int // PFC: bytes this port brought into its switch
	stats   PortStats
	// cold: a token bucket of bucketPs (its bytes' time at the rate)
	// that is full again at fullPs, and tailPs is that time once every
	// queued frame has left; PFC headroom; pause start; loss bursts.
	headroom       int
	bucketPs       int64
	fullPs, tailPs int64
	pausAt         clock.Time
	geR, geL       float64 // Gilbert-Elliott: bad->good, loss in bad
	rng            *rand.Rand
	geBad          bool
}

// swtch is a switch with a shared buffer. What a frame's arrival reads,
// its routes and then its buffer's accounts, fills two cache lines, and
// a switch is three (TestSwitchLayout), as port is laid out.
type swtch struct {
	// line 1: routes
	id     uint16
	lo, hi int32   // hosts reachable downwards
	div    int32   // hosts per down port
	up     []int32 // uplinks, for ECMP
	down   []int32
	// line 2: ECMP seed and buffer
	seed     uint64
	buf      int // buffer size
	shared   int // buffer less the PFC headroom
	used     int
	maxUsed  int
	integral float64 // used x ns
	lastT    clock.Time
	_        [8]byte
	// line 3: cold
	ports []int32
	_     [40]byte
}

// Net is a simulated fabric and its hosts, driven by one event loop on a
// simulated clock. It is not safe for concurrent use: everything runs in
// the goroutine that calls Run.
type Net struct {
	cfg      FabricConfig
	topo     Topo
	now      clock.Time
	events   eventQueue
	funcs    []func()
	ports    []port
	switches []swtch
	hosts    []*Host
	engines  []*hostEngine
	pkts     []packet
	free     []int32
	nevents  uint64
	// OnDeliver, when set, receives the frames of hosts that run no
	// transport (fabric tests); the frame is valid during the call.
	OnDeliver func(h int, frame []byte, at clock.Time)
	// Trace, when set, is called with every frame a switch port starts
	// to transmit (tests).
	Trace   func(sw, port int, frame []byte)
	mtuWire int
	flaps   uint64
	// withdrawn counts the ports withdrawn from the fabric's routes;
	// while it is 0 a route needs no look beyond its own links.
	withdrawn int
}

// wireOverhead is what an Ethernet frame takes on the wire beyond the
// bytes the transport writes: preamble and SFD (8), FCS (4) and the
// inter-frame gap (12). Frames shorter than 60 bytes are padded.
const wireOverhead = 24

// serPs returns the picoseconds that n frame bytes take at rate bit/s.
func serPs(n int, rate uint64) int64 {
	if n < 60 {
		n = 60
	}
	bits := uint64(n+wireOverhead) * 8
	return int64((bits*1e12 + rate - 1) / rate)
}

// shaperPs returns the picoseconds of tokens that n frame bytes take
// from a shaper of rate bit/s: tc counts the frame from its Ethernet
// header, without preamble, FCS or gap.
func shaperPs(n int, rate uint64) int64 {
	return int64((uint64(n)*8*1e12 + rate - 1) / rate)
}

// shaperWait returns how long a frame of size bytes that joins shaper
// port p's queue now waits for its tokens, in picoseconds: the time of
// the frames ahead of it less what the bucket holds.
func (n *Net) shaperWait(p *port, size int) int64 {
	now := int64(n.now) * 1000
	return max(max(p.tailPs, now)+shaperPs(size, p.rate)-p.bucketPs-now, 0)
}

// New builds the fabric that cfg describes, with its hosts running no
// transport yet (see Host.Attach).
func New(cfg FabricConfig) (*Net, error) {
	t, err := cfg.Topo.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Topo = t
	if cfg.Alpha == 0 {
		cfg.Alpha = t.Alpha
	}
	if cfg.Alpha == 0 {
		cfg.Alpha = 1
	}
	if cfg.PFC.Alpha == 0 && cfg.PFC.XOff == 0 {
		cfg.PFC.Alpha, cfg.PFC.XOff = t.PFCAlpha, t.PFCXOff
	}
	if cfg.PFC.Alpha == 0 && cfg.PFC.XOff == 0 {
		cfg.PFC.Alpha = DefaultPFCAlpha
	}
	if cfg.PFC.Resume == 0 {
		cfg.PFC.Resume = t.PFCResume
	}
	if cfg.PFC.Resume == 0 {
		cfg.PFC.Resume = 2 * t.MTU
	}
	if cfg.NICFrames == 0 {
		cfg.NICFrames = defaultNICFrames
	}
	if cfg.HostRxFrames == 0 {
		cfg.HostRxFrames = 1 << 16
	}
	if cfg.Alpha < 0 || cfg.NICFrames < 1 || cfg.HostRxFrames < 1 {
		return nil, fmt.Errorf("%w: negative alpha or queue", ErrConfig)
	}
	if err := checkPFC(cfg.PFC.Alpha, cfg.PFC.XOff, cfg.PFC.Resume, t.MTU); err != nil {
		return nil, err
	}
	if d := cfg.ECNDelay; d.KMin < 0 || d.KMax < 0 || (d.KMax > 0 && d.KMax < d.KMin) || d.PMax < 0 || d.PMax > 1 {
		return nil, fmt.Errorf("%w: ECN by delay %v to %v, pmax %v", ErrConfig, d.KMin, d.KMax, d.PMax)
	}
	n := &Net{cfg: cfg, topo: t, mtuWire: t.MTU + wireOverhead}
	n.build()
	if x := cfg.PFC.XOff; cfg.PFC.On && x > 0 {
		for i := range n.switches {
			if s := &n.switches[i]; x > s.shared {
				return nil, fmt.Errorf("%w: PFC XOFF %d bytes above switch %d's shared buffer (%d bytes less headroom)", ErrConfig, x, i, s.shared)
			}
		}
	}
	return n, nil
}

// checkPFC validates PFC thresholds: alpha in [0, 1] (a share) or a static xoff of
// at least a frame, not both, and an XON hysteresis below a static xoff.
func checkPFC(alpha float64, xoff, resume, mtu int) error {
	switch {
	case alpha < 0 || alpha > 1 || alpha != alpha:
		return fmt.Errorf("%w: PFC XOFF alpha %v: want a share of the free buffer in (0, 1]", ErrConfig, alpha)
	case alpha > 0 && xoff > 0:
		return fmt.Errorf("%w: PFC XOFF both dynamic (alpha %v) and static (%d bytes)", ErrConfig, alpha, xoff)
	case xoff < 0 || (xoff > 0 && xoff < mtu):
		return fmt.Errorf("%w: PFC XOFF %d bytes: want at least a frame (%d)", ErrConfig, xoff, mtu)
	case resume < 0:
		return fmt.Errorf("%w: PFC XON %d bytes below XOFF: want at least 0", ErrConfig, resume)
	case xoff > 0 && resume >= xoff:
		return fmt.Errorf("%w: PFC XON %d bytes below a static XOFF of %d: want less than XOFF", ErrConfig, resume, xoff)
	}
	return nil
}

// Topo returns the fabric's topology, defaults filled in.
func (n *Net) Topo() Topo { return n.topo }

// Now returns the simulated time.
func (n *Net) Now() clock.Time { return n.now }

// Events returns how many events the loop has run.
func (n *Net) Events() uint64 { return n.nevents }

// newSwitch adds a switch covering hosts [lo, hi), div hosts per down port.
func (n *Net) newSwitch(lo, hi, div int) int32 {
	id := int32(len(n.switches))
	n.switches = append(n.switches, swtch{id: uint16(id), lo: int32(lo), hi: int32(hi), div: int32(div), seed: splitmix(n.cfg.Seed ^ uint64(id+1)*0x9E3779B97F4A7C15)})
	return id
}

// link joins node a (switch, or host when aHost) and switch b with a link
// of the given rate and delay; a's port is b's uplink, b's the downlink.
func (n *Net) link(a int32, aHost bool, b int32, rate uint64, delay time.Duration) {
	pa, pb := int32(len(n.ports)), int32(len(n.ports)+1)
	mk := func(node int32, host bool, peer int32) port {
		s := splitmix(n.cfg.Seed ^ uint64(len(n.ports)+7)*0xBF58476D1CE4E5B9)
		p := port{node: node, host: host, peer: peer, rate: rate, delay: clock.Time(delay), rng: rand.New(rand.NewPCG(s, s^0x5EED))}
		p.ecn = n.cfg.ECN
		if d := n.cfg.ECNDelay; d.KMax > 0 {
			b := func(t time.Duration) int { return int(float64(t) * float64(rate) / 8e9) }
			p.ecn = ECNConfig{KMin: b(d.KMin), KMax: b(d.KMax), PMax: d.PMax}
		} else if p.ecn == (ECNConfig{}) {
			p.ecn = DefaultECN(rate, n.topo.MTU)
		}
		p.headroom = n.cfg.PFC.Headroom
		if p.headroom == 0 {
			p.headroom = int(2*int64(delay)*int64(rate/8)/1e9) + 2*n.mtuWire
		}
		if n.topo.Shaper {
			p.instant = host
			p.shaper = !host
			b := n.topo.ShaperBucket
			if b == 0 {
				// The testbed's TBF: 100 µs at the rate, at least two frames.
				b = max(int(rate/8/10000), 2*n.topo.MTU)
			}
			p.bucketPs = shaperPs(b, rate)
		}
		return p
	}
	n.ports = append(n.ports, mk(a, aHost, pb), mk(b, false, pa))
	if aHost {
		h := n.hosts[a]
		if len(h.planes) == 0 {
			h.port = pa
		}
		h.planes = append(h.planes, pa)
	} else {
		s := &n.switches[a]
		n.ports[pa].local = uint16(len(s.ports))
		s.ports = append(s.ports, pa)
		s.up = append(s.up, pa)
	}
	s := &n.switches[b]
	n.ports[pb].local = uint16(len(s.ports))
	s.ports = append(s.ports, pb)
	s.down = append(s.down, pb)
}

func (n *Net) build() {
	t := n.topo
	nh := t.Hosts()
	n.hosts = make([]*Host, nh)
	for i := range n.hosts {
		n.hosts[i] = newHost(n, i)
	}
	for range t.planes() {
		n.buildPlane()
	}
	for _, h := range n.hosts {
		if len(h.planes) == 1 {
			h.planes = nil // one plane: every frame leaves by port
		}
	}
	n.sizeBuffers()
	n.faults()
}

// buildPlane adds one plane of the fabric, linking every host into it.
func (n *Net) buildPlane() {
	t := n.topo
	nh := t.Hosts()
	switch t.Kind {
	case LeafSpine:
		leaves := make([]int32, t.Leaves)
		for l := range leaves {
			leaves[l] = n.newSwitch(l*t.HostsPerLeaf, (l+1)*t.HostsPerLeaf, 1)
			for h := range t.HostsPerLeaf {
				n.link(int32(l*t.HostsPerLeaf+h), true, leaves[l], t.HostRate, t.HostDelay)
			}
		}
		for range t.Spines {
			s := n.newSwitch(0, nh, t.HostsPerLeaf)
			for _, l := range leaves {
				n.link(l, false, s, t.Rate, t.Delay)
			}
		}
	case FatTree:
		half := t.K / 2
		podHosts := half * t.HostsPerLeaf
		aggs := make([][]int32, t.K)
		for p := range t.K {
			edges := make([]int32, half)
			for e := range half {
				lo := p*podHosts + e*t.HostsPerLeaf
				edges[e] = n.newSwitch(lo, lo+t.HostsPerLeaf, 1)
				for h := range t.HostsPerLeaf {
					n.link(int32(lo+h), true, edges[e], t.HostRate, t.HostDelay)
				}
			}
			for range half {
				a := n.newSwitch(p*podHosts, (p+1)*podHosts, t.HostsPerLeaf)
				aggs[p] = append(aggs[p], a)
				for _, e := range edges {
					n.link(e, false, a, t.Rate, t.Delay)
				}
			}
		}
		for j := range half {
			for range t.coresPerGroup() {
				c := n.newSwitch(0, nh, podHosts)
				for p := range t.K {
					n.link(aggs[p][j], false, c, t.CoreRate, t.CoreDelay)
				}
			}
		}
	}
}

// sizeBuffers gives every switch its buffer.
func (n *Net) sizeBuffers() {
	t := n.topo
	for i := range n.switches {
		s := &n.switches[i]
		cap := 0.0
		hr := 0
		for _, p := range s.ports {
			cap += float64(n.ports[p].rate)
			hr += n.ports[p].headroom
		}
		s.buf = t.BufferBytes
		if s.buf == 0 && t.PortBuffer > 0 {
			s.buf = t.PortBuffer * len(s.ports)
		}
		if s.buf == 0 {
			s.buf = max(int(cap/1e9*5000), 32*n.mtuWire*len(s.ports))
		}
		s.shared = s.buf
		if n.cfg.PFC.On {
			s.shared = max(s.buf-hr, s.buf/4)
		}
	}
}

// Switches returns the number of switches.
func (n *Net) Switches() int { return len(n.switches) }

// Hosts returns the number of hosts.
func (n *Net) Hosts() int { return len(n.hosts) }

// Host returns host i.
func (n *Net) Host(i int) *Host { return n.hosts[i] }

// HostAddr returns the MAC and IPv4 address of host i: 02:53:00:xx:xx:xx
// and 10.0.0.0 + i + 1.
func HostAddr(i int) ([6]byte, netip.Addr) {
	v := uint32(i + 1)
	mac := [6]byte{0x02, 0x53, 0, byte(v >> 16), byte(v >> 8), byte(v)}
	return mac, netip.AddrFrom4([4]byte{10, byte(v >> 16), byte(v >> 8), byte(v)})
}

// schedule adds an event.
func (n *Net) schedule(t clock.Time, kind uint8, a, b int32) {
	t = max(t, n.now) // time never runs backwards
	n.events.push(t, slotEvent{kind: kind, a: a, b: b})
}

// At runs fn at simulated time t (now if t is past).
func (n *Net) At(t clock.Time, fn func()) {
	t = max(t, n.now)
	n.funcs = append(n.funcs, fn)
	n.schedule(t, evFunc, int32(len(n.funcs)-1), 0)
}

// allocPacket returns a free packet with a buffer of an MTU.
func (n *Net) allocPacket() int32 {
	if k := len(n.free); k > 0 {
		id := n.free[k-1]
		n.free = n.free[:k-1]
		p := &n.pkts[id]
		p.buf = p.buf[:cap(p.buf)]
		return id
	}
	n.pkts = append(n.pkts, packet{buf: make([]byte, n.topo.MTU)})
	return int32(len(n.pkts) - 1)
}

func (n *Net) freePacket(id int32) { n.free = append(n.free, id) }

// Packets returns the packet buffers the run has allocated: the most
// frames in flight, queued or held by the transports at once.
func (n *Net) Packets() int { return len(n.pkts) }

// inject reads what the switches use of packet id's headers, as the host
// hands it to its NIC: the destination host and ECMP key route it, the
// INT region takes a hop record at every switch (stamp).
func (n *Net) inject(id int32) {
	pk := &n.pkts[id]
	f := pk.buf
	pk.dst = -1
	if len(f) >= 38 && f[12] == 0x08 && f[13] == 0x00 && f[30] == 10 {
		if d := int32(uint32(f[31])<<16|uint32(f[32])<<8|uint32(f[33])) - 1; d >= 0 && d < int32(len(n.hosts)) {
			pk.dst = d
		}
		pk.flow = uint64(binary.BigEndian.Uint32(f[26:]))<<32 ^ uint64(binary.BigEndian.Uint32(f[30:])) ^
			uint64(binary.BigEndian.Uint32(f[34:]))<<8 ^ uint64(f[23])
	}
	n.readINT(pk)
}

// readINT reads packet pk's INT region (wire.INTRegion).
func (n *Net) readINT(pk *packet) {
	pk.intOff, pk.intN, pk.intMax = 0, 0, 0
	if n.cfg.NoINT {
		return
	}
	if off, k, m, ok := wire.INTRegion(pk.buf); ok {
		pk.intOff, pk.intN, pk.intMax = uint16(off), uint8(k), uint8(m)
	}
}

// stamp writes hop h into packet pk's next free INT slot, as
// wire.StampHop does, and reports whether there was one.
func stamp(pk *packet, h wire.Hop) bool {
	if pk.intN >= pk.intMax {
		return false
	}
	off := int(pk.intOff)
	wire.PutHop(pk.buf[off+wire.INTShimLen:], int(pk.intN), h)
	pk.intN++
	pk.buf[off+wire.INTShimCountOff] = pk.intN
	return true
}

// push appends id to the FIFO q[*h:], reusing its space.
func push(q []qent, h *int, e qent) []qent {
	if *h > 0 && *h == len(q) {
		q, *h = q[:0], 0
	} else if *h > 64 && *h*2 > len(q) {
		k := copy(q, q[*h:])
		q, *h = q[:k], 0
	}
	return append(q, e)
}

// send puts packet id, just handed over by a host, on port pi's egress
// queue.
func (n *Net) send(pi, id int32) {
	n.enqueueAt(pi, qent{readyPs: int64(n.now) * 1000, id: id, size: int32(len(n.pkts[id].buf)), in: -1}, false)
}

// enqueueAt puts frame e on port pi's egress queue, or on its priority
// queue of trimmed frames when prio.
func (n *Net) enqueueAt(pi int32, e qent, prio bool) {
	p := &n.ports[pi]
	if prio {
		p.pq = push(p.pq, &p.pqh, e)
	} else {
		p.q = push(p.q, &p.qh, e)
	}
	p.qBytes += int(e.size)
	if p.shaper {
		p.tailPs = max(p.tailPs, int64(n.now)*1000) + shaperPs(int(e.size), p.rate)
	}
	if p.qBytes > p.stats.MaxQueue {
		p.stats.MaxQueue = p.qBytes
	}
	if !p.busy && !p.paused {
		n.startTx(pi)
	}
}

// startTx puts the head of port pi's queue on the wire.
func (n *Net) startTx(pi int32) {
	p := &n.ports[pi]
	var e qent
	switch {
	case n.topo.Trim && p.pqh < len(p.pq): // pq is empty without Trim
		e = p.pq[p.pqh]
		p.pqh++
	case p.qh < len(p.q):
		e = p.q[p.qh]
		p.qh++
	default:
		return
	}
	p.busy = true
	p.cur = e
	// Events run on nanosecond ticks, but a frame starts when it arrived
	// whole and the wire is free, to the picosecond: no rounding builds
	// up along a path or a train of frames.
	start := max(p.freePs, e.readyPs, int64(n.now)*1000-999)
	switch size := int(e.size); {
	case p.shaper:
		// A token bucket (TBF): the frame leaves once the bucket holds
		// its bytes, and crosses the link in no time but its delay.
		cost := shaperPs(size, p.rate)
		start = max(start, p.fullPs-max(p.bucketPs-cost, 0))
		p.fullPs = max(p.fullPs, start) + cost
		p.freePs = start
	case p.instant:
		p.freePs = start
	default:
		p.freePs = start + serPs(size, p.rate)
	}
	if n.Trace != nil && !p.host {
		n.Trace(int(p.node), int(p.local), n.pkts[e.id].buf)
	}
	n.schedule(clock.Time((p.freePs+999)/1000), evTxDone, pi, e.id)
}

// txDone: the frame has left port pi; it reaches the peer after the delay.
func (n *Net) txDone(pi, id int32) {
	p := &n.ports[pi]
	size := int(p.cur.size)
	p.busy = false
	p.qBytes -= size
	p.stats.TxFrames++
	p.stats.TxBytes += uint64(size)
	if p.host {
		n.hosts[p.node].txDone()
	} else {
		n.release(p.node, p.cur.in, size)
	}
	if drop := n.linkFault(p); drop != nil {
		*drop++
		n.freePacket(id)
	} else {
		// The event runs on the nanosecond the frame is whole; it
		// carries the picoseconds before it.
		arr := p.freePs + int64(p.delay)*1000
		t := clock.Time((arr + 999) / 1000)
		n.events.push(max(t, n.now), slotEvent{kind: evArrive, c: uint16(int64(t)*1000 - arr), a: p.peer, b: id})
	}
	if !p.paused {
		n.startTx(pi)
	}
}

// linkFault returns the drop counter of a fault that takes the frame now
// leaving p, or nil.
func (n *Net) linkFault(p *port) *uint64 {
	if p.down {
		return &p.stats.Drops.Blackhole
	}
	if p.geP > 0 {
		if p.geBad {
			if p.rng.Float64() < p.geR {
				p.geBad = false
			}
		} else if p.rng.Float64() < p.geP {
			p.geBad = true
		}
		if p.geBad && p.rng.Float64() < p.geL {
			return &p.stats.Drops.Burst
		}
	}
	if p.loss > 0 && p.rng.Float64() < p.loss {
		return &p.stats.Drops.Loss
	}
	return nil
}

// release returns a frame's buffer to switch si and its ingress port's
// PFC account, resuming the upstream when the account falls low enough.
func (n *Net) release(si, ini int32, size int) {
	s := &n.switches[si]
	n.account(s)
	s.used -= size
	if ini >= 0 {
		in := &n.ports[ini]
		in.inBytes -= size
		// XON once the account is Resume below XOFF, or empty: a
		// threshold that fell below Resume must not pause for ever.
		if in.xoff && in.inBytes <= max(n.xoffThreshold(s)-n.cfg.PFC.Resume, 0) {
			in.xoff = false
			n.schedule(n.now+in.delay, evPause, in.peer, 0)
		}
	}
}

// account adds the buffer occupancy since the last change to s's integral.
func (n *Net) account(s *swtch) {
	s.integral += float64(s.used) * float64(n.now-s.lastT)
	s.lastT = n.now
}

// xoffThreshold is the bytes an ingress port of s may bring into its
// buffer before it sends PAUSE: static, or Alpha of the free shared buffer.
func (n *Net) xoffThreshold(s *swtch) int {
	if x := n.cfg.PFC.XOff; x > 0 {
		return x
	}
	return int(n.cfg.PFC.Alpha * float64(max(s.shared-s.used, 0)))
}

// arrive handles frame id reaching port pi, whole rem picoseconds before
// the current nanosecond.
func (n *Net) arrive(pi, id int32, rem uint16) {
	p := &n.ports[pi]
	if p.host {
		n.hosts[p.node].receive(id)
		return
	}
	s := &n.switches[p.node]
	pk := &n.pkts[id]
	out, ok := n.route(s, pk)
	if !ok {
		p.stats.Drops.NoRoute++
		n.freePacket(id)
		return
	}
	e := &n.ports[out]
	size := len(pk.buf)
	ready := int64(n.now)*1000 - int64(rem)
	if n.topo.Trim && !n.cfg.PFC.On && priorityFrame(pk.buf) {
		n.enqueueTrimmed(s, e, out, id, ready)
		return
	}
	in := int32(-1)
	if n.cfg.PFC.On {
		if s.used+size > s.buf {
			e.stats.Drops.Queue++
			n.freePacket(id)
			return
		}
		in = pi
		p.inBytes += size
		if !p.xoff && p.inBytes >= n.xoffThreshold(s) {
			p.xoff = true
			p.stats.PauseSent++
			n.schedule(n.now+p.delay, evPause, p.peer, 1)
		}
	} else if pb := n.topo.PortBuffer; pb > 0 {
		if e.qBytes+size > pb {
			n.overflow(s, e, out, id, ready)
			return
		}
	} else if s.used+size > s.buf || float64(e.qBytes+size) > n.cfg.Alpha*float64(s.buf-s.used) {
		n.overflow(s, e, out, id, ready)
		return
	}
	n.account(s)
	s.used += size
	s.maxUsed = max(s.maxUsed, s.used)
	// The queue the frame meets: the bytes ahead of it (ECN) and with its
	// own (INT QLen); at a shaper, as the testbed's programs measure both,
	// the time it waits for its tokens at the port's rate.
	ahead, qlen := e.qBytes, e.qBytes+size
	if e.shaper {
		qlen = int(float64(n.shaperWait(e, size)) * float64(e.rate) / 8e12)
		ahead = qlen
	}
	if n.cfg.EdgeUnmeasured && n.ports[e.peer].host {
		ahead, qlen = 0, 0
	}
	if n.ecnMark(e, ahead, pk.buf) {
		e.stats.ECNMarked++
	}
	e.txCount += uint32(size)
	if pk.intMax > 0 {
		// As the eBPF fabric stamps a frame at the egress hook, before its
		// queue: TS the enqueue time, QLen the bytes ahead of it and its
		// own (what its queue delay times the rate gives there), TxBytes
		// the port's counter with this frame.
		h := wire.Hop{Switch: s.id, Port: e.local, RateMbps: uint32(e.rate / 1e6), TS: uint64(n.now),
			QLen: uint32(min(qlen, 1<<32-1)), TxBytes: e.txCount}
		if stamp(pk, h) {
			e.stats.INTStamped++
		}
	}
	n.enqueueAt(out, qent{readyPs: ready, id: id, size: int32(size), in: in}, false)
}

// maxTrimmedQueue bounds a port's queue of trimmed frames: beyond, they
// are dropped (Drops.Queue) like the frames they were.
const maxTrimmedQueue = 4096

// trimmedFrame reports whether f is a trimmed spray data frame: the
// simulator's frames are IPv4 without options or VLAN tag, so the BTH is
// at byte 42.
func trimmedFrame(f []byte) bool {
	return len(f) > 46 && wire.Opcode(f[42]) == wire.OpSprayData && f[46]&0x20 != 0
}

// priorityFrame reports whether f goes in a trimming switch's priority
// queue: a trimmed data frame, or a control frame (ACK, NAK, CNP, credit),
// as NDP's switches queue headers and control packets together. A queue
// held short by a small Alpha then drops no ACK for the data it trims
// (TestTrimThreshold).
func priorityFrame(f []byte) bool {
	if len(f) <= 46 {
		return false
	}
	switch wire.Opcode(f[42]) {
	case wire.OpSprayData:
		return f[46]&0x20 != 0
	case wire.OpSprayAck, wire.OpCreditGrant, wire.OpCreditRequest, wire.OpAcknowledge, wire.OpCNP:
		return true
	}
	return false
}

// overflow handles frame id that egress e of switch s has no room for:
// with Topo.Trim a spray data frame is cut to its headers (wire.Trim),
// counted in Trimmed, and goes on at priority; anything else is dropped
// (Drops.Queue). Guarded by TestTrimSmallBuffer.
func (n *Net) overflow(s *swtch, e *port, out, id int32, ready int64) {
	pk := &n.pkts[id]
	if n.topo.Trim && !trimmedFrame(pk.buf) {
		if m, err := wire.Trim(pk.buf); err == nil {
			pk.buf = pk.buf[:m]
			n.readINT(pk)
			e.stats.Trimmed++
			n.enqueueTrimmed(s, e, out, id, ready)
			return
		}
	}
	e.stats.Drops.Queue++
	n.freePacket(id)
}

// enqueueTrimmed puts a trimmed frame on egress e's priority queue. It
// takes switch buffer, but no threshold holds it back: a few dozen bytes
// per frame the queue could not take whole.
func (n *Net) enqueueTrimmed(s *swtch, e *port, out, id int32, ready int64) {
	if len(e.pq)-e.pqh >= maxTrimmedQueue {
		e.stats.Drops.Queue++
		n.freePacket(id)
		return
	}
	size := len(n.pkts[id].buf)
	n.account(s)
	s.used += size
	s.maxUsed = max(s.maxUsed, s.used)
	// The port's byte counter (INT TxBytes) counts what it sends at
	// priority too: a link busy with trimmed headers is busy
	// (TestTrimSmallBuffer).
	e.txCount += uint32(size)
	n.enqueueAt(out, qent{readyPs: ready, id: id, size: int32(size), in: -1}, true)
}

// route picks the egress port of a frame at switch s: down towards the
// destination host if s covers it, else an uplink by ECMP.
func (n *Net) route(s *swtch, pk *packet) (int32, bool) {
	dst := pk.dst
	if dst < 0 {
		return 0, false
	}
	if dst >= s.lo && dst < s.hi {
		return s.down[(dst-s.lo)/s.div], true
	}
	if len(s.up) == 0 {
		return 0, false
	}
	h := splitmix(s.seed ^ pk.flow)
	k := len(s.up)
	first := int(h % uint64(k))
	if u := s.up[first]; k == 1 || n.usable(u, dst) {
		return u, true
	}
	// The flows of an unusable uplink spread over the others, as a
	// switch's ECMP group does when a member leaves it (rehashed, or
	// resilient hashing's buckets dealt out), rather than all moving to
	// the next port and doubling its load (TestFailoverSpreads).
	start := int((h >> 32) % uint64(k-1))
	for i := range k - 1 {
		u := s.up[(first+1+(start+i)%(k-1))%k]
		if n.usable(u, dst) {
			return u, true
		}
	}
	return s.up[first], true
}

// usable reports whether uplink u may carry a frame for dst: it is up
// and not withdrawn, and the switch at its other end still reaches dst
// by the fabric's routes (reaches). A switch knows its own down links at
// once, and the others' once they are withdrawn (reconverged).
func (n *Net) usable(u, dst int32) bool {
	p := &n.ports[u]
	if p.down || p.withdrawn {
		return false
	}
	return n.withdrawn == 0 || n.reaches(n.ports[p.peer].node, dst)
}

// reaches reports whether switch si has a route to dst over links that
// are not withdrawn: down its port towards dst if it covers dst, else up
// any uplink whose switch reaches dst. Routes run up and then down, as
// the fabric's routing announces them, so a fat-tree's edge switch sees
// through its aggregation switch and the cores to the link that failed
// below another aggregation switch (TestFatTreeReroute).
func (n *Net) reaches(si, dst int32) bool {
	s := &n.switches[si]
	if dst >= s.lo && dst < s.hi {
		d := &n.ports[s.down[(dst-s.lo)/s.div]]
		if d.withdrawn {
			return false
		}
		below := &n.ports[d.peer]
		return below.host || n.reaches(below.node, dst)
	}
	for _, u := range s.up {
		if p := &n.ports[u]; !p.withdrawn && n.reaches(n.ports[p.peer].node, dst) {
			return true
		}
	}
	return false
}

// ecnMark marks frame f CE by RED on the q bytes ahead of it in egress
// port e's queue, and reports whether it did.
func (n *Net) ecnMark(e *port, q int, f []byte) bool {
	if e.ecn.Off || q <= e.ecn.KMin {
		return false
	}
	if q < e.ecn.KMax {
		pr := e.ecn.PMax * float64(q-e.ecn.KMin) / float64(e.ecn.KMax-e.ecn.KMin)
		if e.rng.Float64() >= pr {
			return false
		}
	}
	return markCE(f)
}

// markCE sets ECN CE on an IPv4 frame whose packet is ECN-capable and
// fixes the header checksum; it reports whether it marked.
func markCE(f []byte) bool {
	if len(f) < 34 || f[12] != 0x08 || f[13] != 0x00 {
		return false
	}
	ecn := f[15] & 3
	if ecn != 1 && ecn != 2 {
		return false
	}
	old := uint16(f[14])<<8 | uint16(f[15])
	f[15] |= 3
	nw := uint16(f[14])<<8 | uint16(f[15])
	// RFC 1624: HC' = ~(~HC + ~m + m')
	sum := uint32(^binary.BigEndian.Uint16(f[24:])) + uint32(^old) + uint32(nw)
	sum = (sum & 0xffff) + (sum >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	binary.BigEndian.PutUint16(f[24:], ^uint16(sum))
	return true
}

func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// pause stops (on) or restarts port pi's egress.
func (n *Net) pause(pi int32, on bool) {
	p := &n.ports[pi]
	if on == p.paused {
		return
	}
	p.paused = on
	if on {
		p.pausAt = n.now
		return
	}
	p.stats.PausedTime += time.Duration(n.now - p.pausAt)
	if !p.busy {
		n.startTx(pi)
	}
}

// Run runs events until the queue is empty, stop returns true (checked
// after every event), or the clock would pass until. It returns the
// time it stopped at.
func (n *Net) Run(until clock.Time, stop func() bool) clock.Time {
	for {
		t, e, ok := n.events.pop(until)
		if !ok {
			if n.events.len() > 0 {
				n.now = until
			}
			break
		}
		n.now = t
		n.nevents++
		switch e.kind {
		case evTxDone:
			n.txDone(e.a, e.b)
		case evArrive:
			n.arrive(e.a, e.b, e.c)
		case evPause:
			n.pause(e.a, e.b == 1)
		case evHostStep:
			n.engines[e.a].step()
		case evHostWake:
			n.engines[e.a].wake(t)
		case evFunc:
			fn := n.funcs[e.a]
			n.funcs[e.a] = nil
			fn()
		}
		if stop != nil && stop() {
			break
		}
	}
	for i := range n.switches {
		n.account(&n.switches[i])
	}
	return n.now
}

// Idle reports whether no event is pending.
func (n *Net) Idle() bool { return n.events.len() == 0 }

// LinkRef names a link by the switch and port index of one of its ends.
type LinkRef struct{ Switch, Port int }

func (n *Net) portOf(l LinkRef) (int32, error) {
	if l.Switch < 0 || l.Switch >= len(n.switches) || l.Port < 0 || l.Port >= len(n.switches[l.Switch].ports) {
		return 0, fmt.Errorf("%w: no link at switch %d port %d", ErrConfig, l.Switch, l.Port)
	}
	return n.switches[l.Switch].ports[l.Port], nil
}

// SetLinkDown takes a link down (both directions: frames sent on it are
// dropped and counted in Drops.Blackhole; the switches at its ends stop
// choosing it) or up. With reconverge >= 0, routes elsewhere withdraw it
// that long after it went down (the fabric's routing reconverged); a
// negative reconverge never withdraws it.
func (n *Net) SetLinkDown(l LinkRef, down bool, reconverge time.Duration) error {
	pi, err := n.portOf(l)
	if err != nil {
		return err
	}
	for _, x := range []int32{pi, n.ports[pi].peer} {
		p := &n.ports[x]
		p.down = down
		if !down {
			n.withdraw(p, false)
		}
	}
	if down && reconverge >= 0 {
		n.At(n.now.Add(reconverge), func() {
			for _, x := range []int32{pi, n.ports[pi].peer} {
				if p := &n.ports[x]; p.down {
					n.withdraw(p, true)
				}
			}
		})
	}
	return nil
}

// withdraw withdraws port p from the fabric's routes (on) or restores it.
func (n *Net) withdraw(p *port, on bool) {
	if p.withdrawn == on {
		return
	}
	p.withdrawn = on
	if on {
		n.withdrawn++
	} else {
		n.withdrawn--
	}
}

// SetLoss sets the random loss probability of every frame leaving either
// end of a link.
func (n *Net) SetLoss(l LinkRef, p float64) error {
	pi, err := n.portOf(l)
	if err != nil {
		return err
	}
	if p < 0 || p > 1 {
		return fmt.Errorf("%w: loss %v", ErrConfig, p)
	}
	n.ports[pi].loss = p
	n.ports[n.ports[pi].peer].loss = p
	return nil
}

// SetBurstLoss sets Gilbert-Elliott loss bursts on both ends of a link:
// per frame, the good state turns bad with probability p and the bad
// good with r; in the bad state frames are lost with probability loss.
func (n *Net) SetBurstLoss(l LinkRef, p, r, loss float64) error {
	pi, err := n.portOf(l)
	if err != nil {
		return err
	}
	for _, v := range []float64{p, r, loss} {
		if v < 0 || v > 1 {
			return fmt.Errorf("%w: burst loss %v", ErrConfig, v)
		}
	}
	for _, x := range []int32{pi, n.ports[pi].peer} {
		q := &n.ports[x]
		q.geP, q.geR, q.geL = p, r, loss
	}
	return nil
}

// CoreLinks returns the links between the first tier of switches and
// the next (leaf-spine: every leaf-spine link; fat-tree: edge-agg and
// agg-core), named by their upper end.
func (n *Net) CoreLinks() []LinkRef {
	var ls []LinkRef
	for i := range n.switches {
		s := &n.switches[i]
		for j, pi := range s.ports {
			p := &n.ports[pi]
			if !n.ports[p.peer].host && containsPort(s.down, pi) {
				ls = append(ls, LinkRef{Switch: i, Port: j})
			}
		}
	}
	return ls
}

func containsPort(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// PortStats returns the counters of port j of switch i.
func (n *Net) PortStats(i, j int) PortStats {
	p := &n.ports[n.switches[i].ports[j]]
	st := p.stats
	if p.paused {
		st.PausedTime += time.Duration(n.now - p.pausAt)
	}
	return st
}

// HostPortStats returns the counters of host i's NIC.
func (n *Net) HostPortStats(i int) PortStats {
	p := &n.ports[n.hosts[i].port]
	st := p.stats
	if p.paused {
		st.PausedTime += time.Duration(n.now - p.pausAt)
	}
	return st
}

// FabricStats sums the counters of the fabric.
type FabricStats struct {
	Drops Drops
	// Trimmed counts data frames cut to their headers instead of
	// dropped for a full queue (Topo.Trim).
	Trimmed    uint64
	ECNMarked  uint64
	INTStamped uint64
	// PauseFrames are the PAUSE frames sent; PausedTime the time summed
	// over every port (NICs included) that stood paused, MaxPausedTime
	// that of the port paused longest.
	PauseFrames   uint64
	PausedTime    time.Duration
	MaxPausedTime time.Duration
	// BufferMax is the most any switch held of its buffer, as a share;
	// BufferMean the mean occupancy over the run of the switch whose
	// mean is highest.
	BufferMax, BufferMean float64
}

// Stats sums the counters of every port and switch.
func (n *Net) Stats() FabricStats {
	var f FabricStats
	for i := range n.ports {
		p := &n.ports[i]
		st := p.stats
		if p.paused {
			st.PausedTime += time.Duration(n.now - p.pausAt)
		}
		f.Drops.add(st.Drops)
		f.Trimmed += st.Trimmed
		f.ECNMarked += st.ECNMarked
		f.INTStamped += st.INTStamped
		f.PauseFrames += st.PauseSent
		f.PausedTime += st.PausedTime
		f.MaxPausedTime = max(f.MaxPausedTime, st.PausedTime)
	}
	for _, h := range n.hosts {
		f.Drops.Host += h.rxDrops
	}
	for i := range n.switches {
		s := &n.switches[i]
		n.account(s)
		f.BufferMax = max(f.BufferMax, float64(s.maxUsed)/float64(s.buf))
		if n.now > 0 {
			f.BufferMean = max(f.BufferMean, s.integral/float64(n.now)/float64(s.buf))
		}
	}
	return f
}

// topBytes returns the bytes each switch of the top tier sent (the
// switches without uplinks), in switch order.
func (n *Net) topBytes() []uint64 {
	var b []uint64
	for i := range n.switches {
		s := &n.switches[i]
		if len(s.up) > 0 {
			continue
		}
		var sum uint64
		for _, p := range s.ports {
			sum += n.ports[p].stats.TxBytes
		}
		b = append(b, sum)
	}
	return b
}

// delivered returns the bytes the switches have sent to hosts.
func (n *Net) delivered() int64 {
	var b uint64
	for _, h := range n.hosts {
		if h.planes == nil {
			b += n.ports[n.ports[h.port].peer].stats.TxBytes
			continue
		}
		for _, p := range h.planes {
			b += n.ports[n.ports[p].peer].stats.TxBytes
		}
	}
	return int64(b)
}

// BufferShare returns the share of its buffer that the fullest switch
// holds now.
func (n *Net) BufferShare() float64 {
	m := 0.0
	for i := range n.switches {
		s := &n.switches[i]
		m = max(m, float64(s.used)/float64(s.buf))
	}
	return m
}

// SwitchBuffer returns switch i's buffer size in bytes.
func (n *Net) SwitchBuffer(i int) int { return n.switches[i].buf }
