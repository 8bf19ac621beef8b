package mem

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
)

// Defaults for the zero values of Config fields.
const (
	// DefaultFrameSize fits a 9000-byte jumbo MTU plus an Ethernet header
	// and one 802.1Q tag, so RoCE path MTUs of 4096 and 8192 fit with all of
	// spray's headers.
	DefaultFrameSize = 9018
	// DefaultFrames is the default number of transmit buffers per port and
	// the default bound on frames waiting at a port.
	DefaultFrames = 4096
	// DefaultQueueBytes is the default egress queue bound per port.
	DefaultQueueBytes = 4 << 20
	// BatchSize is the batch size that Info reports.
	BatchSize = 64
	// MinFrameLen is the shortest frame Send accepts: an Ethernet header.
	MinFrameLen = 14
)

// Errors. They are returned wrapped; test them with errors.Is.
var (
	// ErrMACInUse is returned by NewPort for a MAC that an open port has.
	ErrMACInUse = errors.New("mem: MAC address in use")
	// ErrConfig is returned by Config.Validate for a value out of range.
	ErrConfig = errors.New("mem: invalid config")
)

// Config describes a fabric. The zero value is a perfect fabric: no loss,
// no delay, unlimited bandwidth, DefaultFrameSize frames and DefaultFrames
// buffers per port. Out-of-range values are clamped by NewFabric and the
// setters (probabilities to [0, 1], negative durations and rates to 0);
// Validate reports them instead.
type Config struct {
	// Seed seeds every random decision (see the package doc). Tests should
	// take it from testutil.Seed so that it is logged.
	Seed uint64

	// Loss is the probability that a frame is lost (independently of the
	// others).
	Loss float64
	// BurstLoss is the probability, per frame, of entering a loss burst
	// (the bad state of a Gilbert-Elliott channel), in which every frame is
	// lost. A burst lasts a geometrically distributed number of frames of
	// mean BurstLen (0 or 1: one frame). The state is kept per sending port.
	BurstLoss float64
	BurstLen  int
	// BurstTime, when positive, also ends a burst once it has lasted that
	// long (the frame that finds it over draws afresh): a loss burst on a
	// real link lasts a time, while a count of frames never runs out for a
	// sender that, losing everything, slows to one resend per timeout, so
	// that a long enough burst fails any reliable sender (TestBurstTime).
	// 0 bounds bursts by BurstLen only.
	BurstTime time.Duration

	// Dup is the probability that a frame is delivered twice. The copy is
	// queued and delayed independently of the original.
	Dup float64

	// Reorder is the probability that a frame is held back by an extra
	// delay drawn uniformly from [0, ReorderDelay].
	Reorder      float64
	ReorderDelay time.Duration

	// Delay is the one-way propagation delay; Jitter adds a uniform extra
	// delay in [0, Jitter] to every frame (which may reorder frames).
	Delay  time.Duration
	Jitter time.Duration

	// Bandwidth is the rate, in bits/s, at which each destination port
	// drains its FIFO egress queue (serialization). 0 is unlimited: no
	// serialization delay and no queue.
	Bandwidth float64
	// QueueBytes bounds each port's egress queue (bytes waiting to be
	// serialized, the frame being serialized included); a frame that does
	// not fit is tail-dropped and counted in QueueDrops. 0 is
	// DefaultQueueBytes. Unused when Bandwidth is 0.
	QueueBytes int

	// FrameSize is the size of every buffer, the largest frame (Ethernet
	// header included, no FCS). 0 is DefaultFrameSize; values below
	// MinFrameLen are raised to it.
	FrameSize int
	// Frames is, per port, the number of transmit buffers the port owns
	// and the bound on frames in flight to it (beyond it frames are dropped
	// and counted in the receiver's RxDropped). 0 is DefaultFrames. Buffers
	// are allocated on first use, in chunks, so a large Frames costs memory
	// only when frames are actually outstanding.
	Frames int

	// Filter, when set, sees every frame a port sends (before routing and
	// loss) and drops it, counted in Filtered, when it returns false. It
	// runs with the fabric's lock held: it must not call the fabric or its
	// ports, and must not keep the slice.
	Filter func(frame []byte) bool
}

// Validate reports the first field out of range, wrapping ErrConfig.
func (c Config) Validate() error {
	probs := []struct {
		name string
		v    float64
	}{{"Loss", c.Loss}, {"BurstLoss", c.BurstLoss}, {"Dup", c.Dup}, {"Reorder", c.Reorder}}
	for _, p := range probs {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("%w: %s = %v, want a probability in [0, 1]", ErrConfig, p.name, p.v)
		}
	}
	switch {
	case c.BurstLen < 0:
		return fmt.Errorf("%w: BurstLen = %d < 0", ErrConfig, c.BurstLen)
	case c.ReorderDelay < 0 || c.Delay < 0 || c.Jitter < 0 || c.BurstTime < 0:
		return fmt.Errorf("%w: negative duration (ReorderDelay %v, Delay %v, Jitter %v, BurstTime %v)", ErrConfig, c.ReorderDelay, c.Delay, c.Jitter, c.BurstTime)
	case !(c.Bandwidth >= 0) || math.IsInf(c.Bandwidth, 0):
		return fmt.Errorf("%w: Bandwidth = %v, want a finite rate >= 0", ErrConfig, c.Bandwidth)
	case c.QueueBytes < 0:
		return fmt.Errorf("%w: QueueBytes = %d < 0", ErrConfig, c.QueueBytes)
	case c.FrameSize < 0 || (c.FrameSize > 0 && c.FrameSize < MinFrameLen):
		return fmt.Errorf("%w: FrameSize = %d, want 0 or >= %d", ErrConfig, c.FrameSize, MinFrameLen)
	case c.Frames < 0 || c.Frames > maxFrames:
		return fmt.Errorf("%w: Frames = %d, want 0..%d", ErrConfig, c.Frames, maxFrames)
	}
	return nil
}

const maxFrames = 1 << 30

func prob(p float64) float64 {
	if !(p > 0) { // negative or NaN
		return 0
	}
	return min(p, 1)
}

func nonneg(d time.Duration) time.Duration { return max(d, 0) }

// normalize clamps c into range and fills in defaults.
func (c Config) normalize() Config {
	c.Loss, c.BurstLoss, c.Dup, c.Reorder = prob(c.Loss), prob(c.BurstLoss), prob(c.Dup), prob(c.Reorder)
	c.BurstLen = max(c.BurstLen, 1)
	c.ReorderDelay, c.Delay, c.Jitter, c.BurstTime = nonneg(c.ReorderDelay), nonneg(c.Delay), nonneg(c.Jitter), nonneg(c.BurstTime)
	if !(c.Bandwidth > 0) || math.IsInf(c.Bandwidth, 0) {
		c.Bandwidth = 0
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = DefaultQueueBytes
	}
	if c.FrameSize <= 0 {
		c.FrameSize = DefaultFrameSize
	}
	c.FrameSize = max(c.FrameSize, MinFrameLen)
	if c.Frames <= 0 {
		c.Frames = DefaultFrames
	}
	c.Frames = min(c.Frames, maxFrames)
	return c
}

// FabricStats are the fabric's counters, summed over all ports. Every frame
// accepted by Send, and every duplicate, ends up counted exactly once in
// Delivered, Lost, Blackholed, Filtered, NoRoute, QueueDrops or RxDrops, or
// is still InFlight.
type FabricStats struct {
	// Sent and BytesSent count the frames that ports' Send accepted.
	Sent, BytesSent uint64
	// Delivered and BytesDelivered count the frames handed out by Recv.
	Delivered, BytesDelivered uint64
	// Lost counts random and burst losses.
	Lost uint64
	// Blackholed counts frames dropped by Blackhole (fabric or port).
	Blackholed uint64
	// Filtered counts frames that Config.Filter rejected.
	Filtered uint64
	// Duplicated counts the extra copies made.
	Duplicated uint64
	// Reordered counts frames delivered after a frame that their sender
	// sent later to the same port.
	Reordered uint64
	// QueueDrops counts tail drops at full egress queues.
	QueueDrops uint64
	// MaxQueueBytes is the most bytes an egress queue held (the frame
	// being serialized included): the peak of a fan-in at its receiver.
	MaxQueueBytes uint64
	// NoRoute counts frames for a MAC that no open port has.
	NoRoute uint64
	// RxDrops counts frames dropped at the receiving port: Frames already
	// waiting there, or the port closed while they were in flight.
	RxDrops uint64
	// Misuse counts calls that broke the link contract: frame IDs that were
	// not out of the pool in the right state, buffers resliced away from
	// their start, frames sent through a port that did not allocate them.
	Misuse uint64
	// InFlight is the number of frames sent and not yet handed out by Recv.
	InFlight int
}

// Fabric is an in-memory Ethernet switch with fault injection. The zero
// value is not usable: make one with NewFabric. A Fabric and its ports are
// safe for concurrent use (one lock guards them all).
type Fabric struct {
	clk clock.Clock
	sim bool

	mu     sync.Mutex
	cfg    Config
	bh     bool
	ports  []*Port
	byMAC  map[[6]byte]*Port
	macGen uint64 // bumped on every change of byMAC: Port.route's cache key
	ord    uint64 // heap tiebreak: order of enqueueing
	seq    uint64 // order of sending, for the Reordered counter
	stats  FabricStats
	closed bool
}

// NewFabric returns a fabric with configuration cfg (clamped, see Config)
// whose time is clk: a *clock.Sim for simulated time, or clock.NewSystem()
// for real time.
func NewFabric(cfg Config, clk clock.Clock) *Fabric {
	_, sim := clk.(*clock.Sim)
	return &Fabric{
		clk:   clk,
		sim:   sim,
		cfg:   cfg.normalize(),
		byMAC: make(map[[6]byte]*Port),
	}
}

// Config returns the fabric's current configuration, after clamping and
// defaults and with the changes made by the setters.
func (f *Fabric) Config() Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg
}

// NewPort attaches a port with the given addresses; frames whose
// destination MAC is mac are switched to it. The returned error wraps
// ErrMACInUse when an open port has mac, or is link.ErrClosed after Close.
func (f *Fabric) NewPort(mac [6]byte, ip netip.Addr) (*Port, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkMAC(mac); err != nil {
		return nil, err
	}
	p := f.newPortLocked(mac, ip)
	f.byMAC[mac] = p
	f.macGen++
	return p, nil
}

func (f *Fabric) checkMAC(mac [6]byte) error {
	if f.closed {
		return link.ErrClosed
	}
	if _, ok := f.byMAC[mac]; ok {
		return fmt.Errorf("%w: %x", ErrMACInUse, mac)
	}
	return nil
}

// newPortLocked makes a port and gives it the next index, which seeds its
// random source. It does not route its MAC.
func (f *Fabric) newPortLocked(mac [6]byte, ip netip.Addr) *Port {
	idx := uint32(len(f.ports))
	s := f.cfg.Seed
	p := &Port{
		fab:  f,
		idx:  idx,
		name: "mem",
		mac:  mac,
		ip:   ip,
		rng:  rand.New(rand.NewPCG(s, uint64(idx)*0x9E3779B97F4A7C15^0xD1B54A32D192ED03)),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	if !f.sim {
		p.timer = time.NewTimer(time.Hour)
		p.timer.Stop()
	}
	f.ports = append(f.ports, p)
	for _, q := range f.ports {
		for len(q.lastSeq) < len(f.ports) {
			q.lastSeq = append(q.lastSeq, 0)
		}
	}
	return p
}

// NextDelivery returns the earliest due time of the frames in flight, or
// clock.Never when there are none. A frame sent on a fabric with no
// timing (no delay, jitter, reordering or bandwidth) is due at time 0: at
// once. A simulation sets its clock there (or to
// an earlier timer) when every engine is idle.
func (f *Fabric) NextDelivery() clock.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := clock.Never
	for _, p := range f.ports {
		if len(p.rxq) > 0 {
			t = clock.Min(t, p.rxq[0].due)
		}
	}
	return t
}

// Stats returns a snapshot of the fabric's counters.
func (f *Fabric) Stats() FabricStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	for _, p := range f.ports {
		s.InFlight += len(p.rxq)
	}
	return s
}

// SetLoss changes the random loss probability.
func (f *Fabric) SetLoss(p float64) {
	f.mu.Lock()
	f.cfg.Loss = prob(p)
	f.mu.Unlock()
}

// SetBurstLoss changes the probability of entering a loss burst and the
// mean burst length. p = 0 ends no burst in progress; bursts end at their
// own pace.
func (f *Fabric) SetBurstLoss(p float64, meanLen int) {
	f.mu.Lock()
	f.cfg.BurstLoss, f.cfg.BurstLen = prob(p), max(meanLen, 1)
	f.mu.Unlock()
}

// SetDup changes the duplication probability.
func (f *Fabric) SetDup(p float64) {
	f.mu.Lock()
	f.cfg.Dup = prob(p)
	f.mu.Unlock()
}

// SetReorder changes the reorder probability and its maximum extra delay.
func (f *Fabric) SetReorder(p float64, maxDelay time.Duration) {
	f.mu.Lock()
	f.cfg.Reorder, f.cfg.ReorderDelay = prob(p), nonneg(maxDelay)
	f.mu.Unlock()
}

// SetDelay changes the propagation delay and jitter of frames sent from now
// on; frames in flight keep their due times.
func (f *Fabric) SetDelay(delay, jitter time.Duration) {
	f.mu.Lock()
	f.cfg.Delay, f.cfg.Jitter = nonneg(delay), nonneg(jitter)
	f.mu.Unlock()
}

// SetBandwidth changes the per-port serialization rate (bits/s, 0 =
// unlimited) for frames sent from now on.
func (f *Fabric) SetBandwidth(bps float64) {
	c := Config{Bandwidth: bps}.normalize()
	f.mu.Lock()
	f.cfg.Bandwidth = c.Bandwidth
	f.mu.Unlock()
}

// SetFilter replaces the filter (nil: none). See Config.Filter.
func (f *Fabric) SetFilter(fn func(frame []byte) bool) {
	f.mu.Lock()
	f.cfg.Filter = fn
	f.mu.Unlock()
}

// Blackhole drops every frame sent while on is true (a fabric-wide link
// failure), counted in Blackholed. Frames already in flight still arrive.
func (f *Fabric) Blackhole(on bool) {
	f.mu.Lock()
	f.bh = on
	f.mu.Unlock()
}

// Close closes every port and refuses new ones. It is idempotent.
func (f *Fabric) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, p := range f.ports {
		f.closePort(p)
	}
	return nil
}

// Buffer states.
const (
	stFree   uint8 = iota // in the owner's free list
	stTx                  // handed out by Alloc
	stFlight              // in a port's receive queue
	stRx                  // handed out by Recv, held by holder
)

type buffer struct {
	buf    []byte // len == cap == FrameSize
	state  uint8
	holder uint32 // port that received it, in stRx
}

// entry is a frame in flight to a port.
type entry struct {
	due   clock.Time
	ord   uint64 // tiebreak for equal due times: FIFO
	seq   uint64 // send order; a duplicate shares its original's
	owner uint32 // the sending port, which owns the buffer
	buf   uint32
	n     int32
}

func (a *entry) less(b *entry) bool {
	return a.due < b.due || (a.due == b.due && a.ord < b.ord)
}

const chunkFrames = 64

// Port is one attachment to a Fabric; it implements link.Link and
// link.StatsReader. The zero value is not usable: get one from
// Fabric.NewPort. It is safe for concurrent use, but Wait must not be
// called from two goroutines at once.
type Port struct {
	fab   *Fabric
	idx   uint32
	name  string
	mac   [6]byte
	ip    netip.Addr
	group *MultiPort // the multi-queue port this is a queue of, or nil

	// Guarded by fab.mu.
	bufs   []buffer // grows by chunks up to Frames
	free   []uint32
	rxq    []entry // ordered on (due, ord): sorted, or a min-heap when rxHeap
	rxbuf  []entry // rxq's array from its start: rxq is a window of it
	rxHeap bool    // a frame came out of order since rxq was last empty
	// queued is len(rxq) > 0 and shut is closed, for Recv to see without
	// fab.mu that nothing is queued: most steps of a sender find nothing,
	// and the fabric's one mutex is shared by every port's engine. Both
	// are written under fab.mu, queued only when rxq empties or stops
	// being empty (an atomic store is a full barrier).
	queued atomic.Bool
	shut   atomic.Bool
	// The last destination MAC this port sent to and its port, valid
	// while macGen is fab.macGen: a QP sends to one peer, so one entry
	// spares the MAC table's map lookup per frame (TestNoRouteAndMACs).
	routeMAC [6]byte
	routeGen uint64
	routeDst *Port
	lastSeq  []uint64
	rng      *rand.Rand
	burst    bool       // Gilbert-Elliott bad state
	burstAt  clock.Time // when the burst began
	busy     clock.Time
	busyF    float64 // fraction of a nanosecond after busy
	down     bool
	closed   bool
	stats    link.Stats

	wake  chan struct{} // cap 1
	done  chan struct{} // closed by Close
	timer *time.Timer   // nil under a Sim clock
}

var (
	_ link.Link        = (*Port)(nil)
	_ link.StatsReader = (*Port)(nil)
)

// Info describes the port. Name is "mem".
func (p *Port) Info() link.Info {
	return link.Info{
		Name:      p.name,
		FrameSize: p.fab.cfg.FrameSize, // never changes after NewFabric
		BatchSize: BatchSize,
		MAC:       p.mac,
		IP:        p.ip,
	}
}

// Stats returns the port's counters. RxDropped counts frames dropped
// because Frames were already waiting at this port or it closed; TxDropped
// counts frames that Send refused (misuse, too short or too long, closed).
func (p *Port) Stats() link.Stats {
	p.fab.mu.Lock()
	defer p.fab.mu.Unlock()
	return p.stats
}

// NextDelivery returns the due time of the earliest frame in flight to this
// port, or clock.Never.
func (p *Port) NextDelivery() clock.Time {
	p.fab.mu.Lock()
	defer p.fab.mu.Unlock()
	if len(p.rxq) == 0 {
		return clock.Never
	}
	return p.rxq[0].due
}

// Blackhole drops every frame sent to or from this port while on is true
// (the port's link is down), counted in Blackholed.
func (p *Port) Blackhole(on bool) {
	p.fab.mu.Lock()
	p.down = on
	p.fab.mu.Unlock()
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func frameID(owner, buf uint32) uint64 { return uint64(owner)<<32 | uint64(buf) }

// lookup returns the buffer a frame ID names, or nil.
func (f *Fabric) lookup(id uint64) (*Port, uint32, *buffer) {
	owner, b := id>>32, uint32(id)
	if owner >= uint64(len(f.ports)) {
		return nil, 0, nil
	}
	o := f.ports[owner]
	if uint64(b) >= uint64(len(o.bufs)) {
		return nil, 0, nil
	}
	return o, b, &o.bufs[b]
}

// take gets a free buffer from p's pool, allocating a chunk when the pool
// has not reached Frames buffers yet.
func (p *Port) take() (uint32, bool) {
	if len(p.free) == 0 {
		frames, size := p.fab.cfg.Frames, p.fab.cfg.FrameSize
		k := min(chunkFrames, frames-len(p.bufs))
		if k <= 0 {
			return 0, false
		}
		mem := make([]byte, k*size)
		for i := range k {
			p.free = append(p.free, uint32(len(p.bufs)))
			p.bufs = append(p.bufs, buffer{buf: mem[i*size : (i+1)*size : (i+1)*size]})
		}
		// Hand out the lowest index first.
		for i, j := len(p.free)-k, len(p.free)-1; i < j; i, j = i+1, j-1 {
			p.free[i], p.free[j] = p.free[j], p.free[i]
		}
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return b, true
}

// put returns buffer b to p's pool and tells p's Wait when the pool had run
// dry.
func (p *Port) put(b uint32) {
	p.bufs[b].state = stFree
	p.free = append(p.free, b)
	if len(p.free) == 1 && len(p.bufs) == p.fab.cfg.Frames {
		p.signal()
	}
}

// signal makes p's Wait return, and its multi-queue port's.
func (p *Port) signal() {
	notify(p.wake)
	if p.group != nil {
		notify(p.group.wake)
	}
}

// Alloc fills fs with free transmit buffers (len == cap == FrameSize) and
// returns how many: fewer than len(fs) when the port's pool is short, none
// after Close. It never blocks.
func (p *Port) Alloc(fs []link.Frame) int {
	f := p.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	return p.allocLocked(fs)
}

func (p *Port) allocLocked(fs []link.Frame) int {
	if p.closed {
		return 0
	}
	for i := range fs {
		b, ok := p.take()
		if !ok {
			return i
		}
		p.bufs[b].state = stTx
		fs[i] = link.Frame{Buf: p.bufs[b].buf, ID: frameID(p.idx, b)}
	}
	return len(fs)
}

// Send transmits the frames, each resliced to its length (MinFrameLen to
// FrameSize bytes, from the start of its buffer), and takes them all back.
// It returns how many it accepted; the others are counted in TxDropped.
// What becomes of an accepted frame (delivery, loss, ...) shows in the
// fabric's Stats only, as on a real network. After Close it returns
// link.ErrClosed.
func (p *Port) Send(fs []link.Frame) (int, error) {
	f := p.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	now := clock.Time(0)
	if f.timed() {
		now = f.clk.Now()
	}
	n := 0
	for i := range fs {
		fr := &fs[i]
		o, b, buf := f.lookup(fr.ID)
		if buf == nil || o != p || buf.state != stTx {
			f.stats.Misuse++
			p.stats.TxDropped++
			continue
		}
		l := len(fr.Buf)
		if cap(fr.Buf) == 0 || &fr.Buf[:1][0] != &buf.buf[0] {
			f.stats.Misuse++
			l = -1
		}
		if p.closed || l < MinFrameLen || l > len(buf.buf) {
			p.put(b)
			p.stats.TxDropped++
			continue
		}
		n++
		p.stats.TxFrames++
		p.stats.TxBytes += uint64(l)
		f.transmit(p, b, l, now)
	}
	if p.closed {
		return 0, link.ErrClosed
	}
	return n, nil
}

// timed reports whether a frame's fate depends on when it is sent: a
// delay, jitter, reordering, a bandwidth or a loss burst's length in time.
// Without any, Send reads no clock, and its frames are due at time 0,
// ahead of every Recv as they would be at their send time, in the order
// sent (TestUntimedOrder).
func (f *Fabric) timed() bool {
	c := &f.cfg
	return c.Delay > 0 || c.Jitter > 0 || (c.Reorder > 0 && c.ReorderDelay > 0) || c.Bandwidth > 0 || c.BurstTime > 0
}

// transmit runs one accepted frame through the fabric's faults and queues
// it at its destination. Random draws happen in a fixed order, and only
// for the faults that are configured, so that outcomes are reproducible.
func (f *Fabric) transmit(src *Port, b uint32, n int, now clock.Time) {
	f.seq++
	seq := f.seq
	f.stats.Sent++
	f.stats.BytesSent += uint64(n)
	frame := src.bufs[b].buf[:n]
	if f.bh || src.down {
		f.stats.Blackholed++
		src.put(b)
		return
	}
	if f.cfg.Filter != nil && !f.cfg.Filter(frame) {
		f.stats.Filtered++
		src.put(b)
		return
	}
	dst := src.route([6]byte(frame[:6]))
	if dst == nil {
		f.stats.NoRoute++
		src.put(b)
		return
	}
	if dst.group != nil {
		dst = dst.group.pick(frame)
	}
	if dst.down {
		f.stats.Blackholed++
		src.put(b)
		return
	}
	if dst.closed { // a queue of a multi-queue port closed on its own
		f.stats.RxDrops++
		dst.stats.RxDropped++
		src.put(b)
		return
	}
	if src.lose(now) {
		f.stats.Lost++
		src.put(b)
		return
	}
	dup := false
	var d uint32
	if f.cfg.Dup > 0 && src.rng.Float64() < f.cfg.Dup {
		if d, dup = src.take(); dup {
			copy(src.bufs[d].buf, frame)
			f.stats.Duplicated++
		}
	}
	f.enqueue(src, dst, b, n, seq, now)
	if dup {
		f.enqueue(src, dst, d, n, seq, now)
	}
}

// lose draws the random and burst loss of one frame sent by p.
func (p *Port) lose(now clock.Time) bool {
	c := &p.fab.cfg
	if p.burst && c.BurstTime > 0 && now.Sub(p.burstAt) >= c.BurstTime {
		p.burst = false
	}
	if !p.burst && c.BurstLoss > 0 && p.rng.Float64() < c.BurstLoss {
		p.burst, p.burstAt = true, now
	}
	if p.burst {
		if c.BurstLen <= 1 || p.rng.IntN(c.BurstLen) == 0 {
			p.burst = false
		}
		return true
	}
	return c.Loss > 0 && p.rng.Float64() < c.Loss
}

// enqueue serializes a frame at dst's egress, delays it and puts it in
// dst's receive queue, or drops it.
func (f *Fabric) enqueue(src, dst *Port, b uint32, n int, seq uint64, now clock.Time) {
	c := &f.cfg
	if len(dst.rxq) >= c.Frames {
		f.stats.RxDrops++
		dst.stats.RxDropped++
		src.put(b)
		return
	}
	due := now
	if bw := c.Bandwidth; bw > 0 {
		if dst.busy < now {
			dst.busy, dst.busyF = now, 0
		}
		backlog := (float64(dst.busy-now) + dst.busyF) * bw / 8e9
		if backlog+float64(n) > float64(c.QueueBytes)+1e-6 {
			f.stats.QueueDrops++
			src.put(b)
			return
		}
		f.stats.MaxQueueBytes = max(f.stats.MaxQueueBytes, uint64(backlog)+uint64(n))
		dst.busyF += float64(n) * 8e9 / bw
		whole := math.Floor(dst.busyF)
		dst.busy += clock.Time(whole)
		dst.busyF -= whole
		due = dst.busy
		if dst.busyF > 1e-6 { // the frame ends within the next nanosecond
			due++
		}
	}
	due = due.Add(c.Delay)
	if c.Jitter > 0 {
		due = due.Add(time.Duration(src.rng.Int64N(int64(c.Jitter) + 1)))
	}
	if c.Reorder > 0 && src.rng.Float64() < c.Reorder && c.ReorderDelay > 0 {
		due = due.Add(time.Duration(src.rng.Int64N(int64(c.ReorderDelay) + 1)))
	}
	src.bufs[b].state = stFlight
	f.ord++
	dst.push(entry{due: due, ord: f.ord, seq: seq, owner: src.idx, buf: b, n: int32(n)})
	if dst.rxq[0].ord == f.ord { // a new earliest frame: Wait must recompute
		dst.signal()
	}
}

// route returns the port that frames to mac go to (a queue's group
// resolved later), or nil. Called with fab.mu held.
func (p *Port) route(mac [6]byte) *Port {
	f := p.fab
	if p.routeGen == f.macGen && p.routeMAC == mac && p.routeDst != nil {
		return p.routeDst
	}
	dst := f.byMAC[mac]
	p.routeMAC, p.routeGen, p.routeDst = mac, f.macGen, dst
	return dst
}

// push queues e. Frames come in order of (due, ord) unless the fabric
// delays them unevenly (jitter, reordering, bandwidth), so rxq stays a
// sorted queue, popped from its front in O(1), until a frame comes out of
// order; it is a binary heap from then until it next empties (a sorted
// slice is a heap already). Either way frames leave in (due, ord) order
// (TestQueueOrder).
func (p *Port) push(e entry) {
	if !p.rxHeap {
		if n := len(p.rxq); n == 0 || !e.less(&p.rxq[n-1]) {
			if n > 0 && n == cap(p.rxq) && 2*n <= cap(p.rxbuf) {
				// The window reached the array's end with its front
				// free: move it back to the start.
				p.rxq = p.rxbuf[:copy(p.rxbuf[:n], p.rxq)]
			}
			p.appendRx(e)
			return
		}
		p.rxHeap = true
	}
	p.appendRx(e)
	h := p.rxq
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].less(&h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

// appendRx appends e to rxq, and notes the array when append moved it.
func (p *Port) appendRx(e entry) {
	c := cap(p.rxq)
	p.rxq = append(p.rxq, e)
	if cap(p.rxq) != c {
		p.rxbuf = p.rxq[:0]
	}
	if len(p.rxq) == 1 {
		p.queued.Store(true)
	}
}

func (p *Port) pop() entry {
	h := p.rxq
	top := h[0]
	if len(h) == 1 {
		p.queued.Store(false)
	}
	if !p.rxHeap {
		if len(h) == 1 {
			p.rxq = p.rxbuf[:0]
		} else {
			p.rxq = h[1:]
		}
		return top
	}
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].less(&h[l]) {
			m = r
		}
		if !h[m].less(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	p.rxq = h
	if len(h) == 0 {
		p.rxq, p.rxHeap = p.rxbuf[:0], false
	}
	return top
}

// Recv fills fs with the frames whose due time has passed, earliest first,
// and returns how many. It never blocks. The frames belong to the caller
// until it passes them to Release.
func (p *Port) Recv(fs []link.Frame) (int, error) {
	if !p.queued.Load() && !p.shut.Load() {
		// Nothing queued: no lock to take, no clock to read. A frame
		// queued meanwhile signals the port, so Wait returns at once.
		return 0, nil
	}
	f := p.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.closed {
		return 0, link.ErrClosed
	}
	if len(p.rxq) == 0 {
		// Nothing queued: no clock to read. An engine polls its link
		// at every step, and most steps of a sender find nothing.
		return 0, nil
	}
	return p.recvLocked(fs, f.clk.Now()), nil
}

func (p *Port) recvLocked(fs []link.Frame, now clock.Time) int {
	f := p.fab
	n := 0
	for n < len(fs) && len(p.rxq) > 0 && p.rxq[0].due <= now {
		e := p.pop()
		o := f.ports[e.owner]
		buf := &o.bufs[e.buf]
		buf.state, buf.holder = stRx, p.idx
		if e.seq < p.lastSeq[e.owner] {
			f.stats.Reordered++
		} else {
			p.lastSeq[e.owner] = e.seq
		}
		fs[n] = link.Frame{Buf: buf.buf[:e.n], ID: frameID(e.owner, e.buf)}
		n++
		f.stats.Delivered++
		f.stats.BytesDelivered += uint64(e.n)
		p.stats.RxFrames++
		p.stats.RxBytes += uint64(e.n)
	}
	return n
}

// Release returns received frames to the fabric (to their sender's pool).
// It still works after Close, so that frames received before it go back.
// Frames this port did not receive are ignored and counted in Misuse.
func (p *Port) Release(fs []link.Frame) {
	f := p.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range fs {
		o, b, buf := f.lookup(fs[i].ID)
		if buf == nil || buf.state != stRx || buf.holder != p.idx {
			f.stats.Misuse++
			continue
		}
		o.put(b)
	}
}

// Wait blocks until a frame may be due at this port, a transmit buffer may
// have been freed, Wake is called, or timeout passes (negative: no limit).
// Under a *clock.Sim it returns at once: the simulation moves time. After
// Close it returns link.ErrClosed.
func (p *Port) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return link.ErrClosed
	default:
	}
	if p.timer == nil { // simulated time
		select {
		case <-p.wake:
		default:
		}
		return nil
	}
	if timeout == 0 {
		return nil
	}
	f := p.fab
	f.mu.Lock()
	if len(p.rxq) > 0 {
		until := p.rxq[0].due.Sub(f.clk.Now())
		if until <= 0 {
			f.mu.Unlock()
			return nil
		}
		if timeout < 0 || until < timeout {
			timeout = until
		}
	}
	f.mu.Unlock()
	return sleep(f.clk, timeout, p.wake, p.done, p.timer)
}

// PrepareWait has nothing to do before Wait blocks: the fabric's lock
// guards what Wait reads (link.WaitSplitter).
func (p *Port) PrepareWait(timeout time.Duration) (time.Duration, bool, error) {
	return timeout, false, nil
}

// Block is Wait (link.WaitSplitter).
func (p *Port) Block(timeout time.Duration) error { return p.Wait(timeout) }

// sleep waits for timeout (negative: no limit), wake or done.
func sleep(clk clock.Clock, timeout time.Duration, wake, done chan struct{}, timer *time.Timer) error {
	if timeout > 0 && timeout <= spinWait {
		return spin(clk, clk.Now().Add(timeout), wake, done)
	}
	var expired <-chan time.Time
	if timeout > 0 {
		timer.Reset(timeout)
		expired = timer.C
		defer timer.Stop()
	}
	select {
	case <-wake:
	case <-expired:
	case <-done:
		return link.ErrClosed
	}
	return nil
}

// spinWait is the longest timeout that Wait spins through (yielding the
// processor between looks) rather than sleeping on a runtime timer: the Go
// runtime's poller sleeps at least a millisecond when its next timer is
// less than a millisecond away and nothing else runs, so a frame due in
// Delay (µs) would reach an idle receiver up to a millisecond late, which a
// delay-based controller reads as fabric delay and which fires 1 ms
// retransmission timers spuriously. TestRealClock covers Wait on the
// system clock.
const spinWait = 100 * time.Microsecond

// spin waits until deadline, wake or done, yielding the processor
// between looks.
func spin(clk clock.Clock, deadline clock.Time, wake, done chan struct{}) error {
	for clk.Now() < deadline {
		select {
		case <-wake:
			return nil
		case <-done:
			return link.ErrClosed
		default:
		}
		runtime.Gosched()
	}
	return nil
}

// Wake makes a pending or the next Wait return. Safe from any goroutine,
// also after Close.
func (p *Port) Wake() { notify(p.wake) }

// Close detaches the port: its MAC no longer routes, frames in flight to it
// are dropped (RxDrops), a pending Wait returns, and further calls return
// link.ErrClosed (Alloc returns 0). It is idempotent.
func (p *Port) Close() error {
	p.fab.mu.Lock()
	defer p.fab.mu.Unlock()
	p.fab.closePort(p)
	return nil
}

func (f *Fabric) closePort(p *Port) {
	if p.closed {
		return
	}
	p.closed = true
	p.shut.Store(true)
	if f.byMAC[p.mac] == p {
		delete(f.byMAC, p.mac)
		f.macGen++
	}
	for _, e := range p.rxq {
		f.ports[e.owner].put(e.buf)
		f.stats.RxDrops++
		p.stats.RxDropped++
	}
	p.rxq, p.rxHeap = p.rxbuf[:0], false
	p.queued.Store(false)
	close(p.done)
	if m := p.group; m != nil {
		notify(m.wake)
		for _, q := range m.qs {
			if !q.closed {
				return
			}
		}
		close(m.done)
	}
}
