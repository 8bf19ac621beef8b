package multipath

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

// simPath is one path of the simulated fabric.
type simPath struct {
	rtt    time.Duration // base round trip
	qdelay time.Duration // extra queueing, added to the RTT and reported as INT
	ecn    bool          // every packet is marked
	drop   bool          // every packet is lost
	silent bool          // losses are never reported (a blackhole the sender's loss detection misses)
}

type simEvent struct {
	at, sent clock.Time
	entropy  uint16
	lost     bool
	seq      uint64
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// sim drives a policy in simulated time: one packet every gap, ACKs after
// the path's RTT, loss reports three RTTs after the send.
type sim struct {
	t      *testing.T
	p      Policy
	now    clock.Time
	gap    time.Duration
	paths  map[uint16]*simPath
	events eventHeap
	seq    uint64
	log    []uint16 // the entropies Next returned, when not nil
}

func newSim(t *testing.T, p Policy, rtt time.Duration) *sim {
	s := &sim{t: t, p: p, gap: time.Microsecond, paths: map[uint16]*simPath{}}
	for _, e := range p.Paths() {
		s.paths[e] = &simPath{rtt: rtt}
	}
	return s
}

// run sends n packets and delivers the events that fall due meanwhile.
func (s *sim) run(n int) {
	for range n {
		e := s.p.Next(s.now)
		if s.log != nil {
			s.log = append(s.log, e)
		}
		if !slices.Contains(s.p.Paths(), e) {
			s.t.Fatalf("Next returned %d, not in the set %v", e, s.p.Paths())
		}
		sp := s.paths[e]
		rtt := sp.rtt + sp.qdelay
		s.seq++
		switch {
		case !sp.drop:
			heap.Push(&s.events, simEvent{at: s.now.Add(rtt), sent: s.now, entropy: e, seq: s.seq})
		case !sp.silent:
			heap.Push(&s.events, simEvent{at: s.now.Add(3 * rtt), sent: s.now, entropy: e, lost: true, seq: s.seq})
		}
		s.now = s.now.Add(s.gap)
		for len(s.events) > 0 && s.events[0].at <= s.now {
			ev := heap.Pop(&s.events).(simEvent)
			if ev.lost {
				s.p.OnLoss(ev.at, ev.entropy)
				continue
			}
			sp := s.paths[ev.entropy]
			if o, ok := s.p.(INTObserver); ok {
				o.OnINT(ev.at, ev.entropy, sp.qdelay)
			}
			s.p.OnAck(ev.at, ev.entropy, ev.at.Sub(ev.sent), sp.ecn)
		}
	}
}

func statsOf(p Policy, e uint16) PathStats {
	for _, s := range p.Stats() {
		if s.Entropy == e {
			return s
		}
	}
	return PathStats{}
}

// runUntilDown runs packet by packet until entropy e is out of the set, and
// returns the data packets (not probes) it carried meanwhile.
func (s *sim) runUntilDown(e uint16, limit int) uint64 {
	s.t.Helper()
	for range limit {
		s.run(1)
		if st := statsOf(s.p, e); st.Down {
			return st.Packets - st.Probes
		}
	}
	s.t.Fatalf("entropy %d not taken out within %d packets: %+v", e, limit, statsOf(s.p, e))
	return 0
}

// packetsSince returns the packets per entropy since before.
func packetsSince(p Policy, before []PathStats) []uint64 {
	var d []uint64
	for i, s := range p.Stats() {
		d = append(d, s.Packets-before[i].Packets)
	}
	return d
}

func TestAdaptiveImplementsINTObserver(t *testing.T) {
	if _, ok := NewAdaptive(Entropies(1, 4), 1, AdaptiveConfig{}).(INTObserver); !ok {
		t.Fatal("the adaptive policy does not implement INTObserver")
	}
	if _, ok := NewSpray(Entropies(1, 4), 1).(INTObserver); ok {
		t.Fatal("oblivious spray implements INTObserver: it would ignore the calls")
	}
}

// TestAdaptiveEqualPaths: on identical paths the adaptive policy is
// oblivious spraying: every round of len(set) packets is a permutation.
func TestAdaptiveEqualPaths(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 8)
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	s := newSim(t, p, 10*time.Microsecond)
	s.run(8 * 500)
	for _, st := range p.Stats() {
		if st.Packets != 500 || st.Down || st.Weight != 1 || st.Acks == 0 {
			t.Fatalf("entropy %d: %+v, want 500 packets at weight 1", st.Entropy, st)
		}
	}
	q := NewAdaptive(set, seed, AdaptiveConfig{})
	r := NewAdaptive(set, seed+1, AdaptiveConfig{})
	same := true
	for range 64 {
		same = same && q.Next(0) == r.Next(0)
	}
	if same {
		t.Fatalf("seeds %d and %d spray alike", seed, seed+1)
	}
}

func TestAdaptiveRemovesLossyPath(t *testing.T) {
	for _, silent := range []bool{false, true} {
		name := "reported"
		if silent {
			name = "blackhole"
		}
		t.Run(name, func(t *testing.T) {
			seed := testutil.Seed(t)
			set := Entropies(seed, 4)
			p := NewAdaptive(set, seed, AdaptiveConfig{ProbeInterval: 200 * time.Microsecond, MaxProbeInterval: 800 * time.Microsecond})
			s := newSim(t, p, 10*time.Microsecond)
			s.run(200) // warm up: RTT samples on every path
			bad := set[1]
			warm := statsOf(p, bad).Packets
			*s.paths[bad] = simPath{rtt: 10 * time.Microsecond, drop: true, silent: silent}
			n := s.runUntilDown(bad, 1000)
			// Reported: 3 losses in a row, the first reported 30µs after its
			// send, at about a quarter of the packets. Blackhole: 50µs (the
			// stall timeout floor) of sends with no ACK.
			if n-warm > 25 {
				t.Fatalf("bad path carried %d packets before it was taken out", n-warm)
			}
			t.Logf("bad path taken out after %d of its packets", n-warm)

			before := p.Stats()
			s.run(20000) // 20 ms
			d := packetsSince(p, before)
			st := statsOf(p, bad)
			if !st.Down || st.Removals != 1 {
				t.Fatalf("bad path: %+v, want down, removed once", st)
			}
			// Probes only: with backoff 200, 400, 800, 800... µs, about 26 in 20 ms.
			if probes := st.Probes - before[1].Probes; d[1] != probes || probes < 5 || probes > 30 {
				t.Fatalf("bad path carried %d packets, %d probes in 20ms", d[1], probes)
			}
			for i, n := range d {
				if i != 1 && (n < 6000 || n > 7400) {
					t.Fatalf("good path %d carried %d of 20000 packets, want about a third: %v", i, n, d)
				}
			}

			// The path heals: a probe brings it back within the backoff.
			s.paths[bad].drop = false
			s.run(1000)
			if st := statsOf(p, bad); st.Down || st.Removals != 1 {
				t.Fatalf("healed path not back after 1ms: %+v", st)
			}
			before = p.Stats()
			s.run(4000)
			d = packetsSince(p, before)
			for i, n := range d {
				if n < 800 || n > 1200 {
					t.Fatalf("after the recovery path %d carried %d of 4000 packets, want about a quarter: %v", i, n, d)
				}
			}
		})
	}
}

func TestAdaptiveNeverRemovesLastPath(t *testing.T) {
	seed := testutil.Seed(t)
	for _, k := range []int{1, 2, 3} {
		set := Entropies(seed, k)
		p := NewAdaptive(set, seed, AdaptiveConfig{})
		s := newSim(t, p, 10*time.Microsecond)
		for _, e := range set {
			s.paths[e].drop = true
		}
		s.run(5000)
		up := 0
		for _, st := range p.Stats() {
			if !st.Down {
				up++
			}
		}
		// Losses every path shares take none out (sharedLoss), and the
		// last active path never goes.
		if up != k {
			t.Fatalf("k=%d: %d paths up with every path losing, want all: %+v", k, up, p.Stats())
		}
	}
}

func TestAdaptiveCongestedPathGetsLess(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  simPath
	}{
		{"rtt", simPath{rtt: 30 * time.Microsecond}},
		{"int", simPath{rtt: 10 * time.Microsecond, qdelay: 20 * time.Microsecond}},
		{"ecn", simPath{rtt: 10 * time.Microsecond, ecn: true}},
		{"all", simPath{rtt: 10 * time.Microsecond, qdelay: 40 * time.Microsecond, ecn: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := testutil.Seed(t)
			set := Entropies(seed, 4)
			p := NewAdaptive(set, seed, AdaptiveConfig{})
			s := newSim(t, p, 10*time.Microsecond)
			*s.paths[set[2]] = tc.bad
			s.run(2000)
			before := p.Stats()
			s.run(20000)
			d := packetsSince(p, before)
			st := statsOf(p, set[2])
			if st.Down || st.Removals != 0 {
				t.Fatalf("congested path taken out: %+v", st)
			}
			good := (d[0] + d[1] + d[3]) / 3
			if d[2] == 0 || d[2] > good/2 {
				t.Fatalf("congested path carried %d packets, the others %v: want a smaller but nonzero share", d[2], d)
			}
			for _, i := range []int{0, 1, 3} {
				if d[i] < good*9/10 || d[i] > good*11/10 {
					t.Fatalf("good paths carried %v, want equal shares", d)
				}
			}
			t.Logf("packets per path %v, weight of the congested one %.3f", d, st.Weight)

			// The congestion clears: the path gets its share back.
			*s.paths[set[2]] = simPath{rtt: 10 * time.Microsecond}
			s.run(10000)
			before = p.Stats()
			s.run(20000)
			d = packetsSince(p, before)
			for _, n := range d {
				if n < 4750 || n > 5250 {
					t.Fatalf("after the congestion cleared: %v, want equal shares", d)
				}
			}
		})
	}
}

// TestAdaptiveProbeRules checks which ACKs bring a path back: only one of
// a packet sent at or after the probe, within the probe timeout.
func TestAdaptiveProbeRules(t *testing.T) {
	set := []uint16{50000, 50001}
	cfg := AdaptiveConfig{StallRTTs: 4, LossLimit: 1, ProbeInterval: 100 * time.Microsecond, MinStallTimeout: time.Microsecond}
	p := NewAdaptive(set, 1, cfg)
	var now clock.Time
	p.OnAck(now, 50000, 10*time.Microsecond, false)
	p.OnAck(now, 50001, 10*time.Microsecond, false)
	p.OnLoss(now, 50001)
	if !statsOf(p, 50001).Down {
		t.Fatal("path not taken out after LossLimit losses")
	}
	p.OnLoss(now, 50000) // the last path stays
	if statsOf(p, 50000).Down {
		t.Fatal("the last path was taken out")
	}
	next := func() uint16 {
		now = now.Add(time.Microsecond)
		return p.Next(now)
	}
	for range 99 {
		if e := next(); e != 50000 {
			t.Fatalf("at %v: packet on the down path before its probe time", now)
		}
	}
	if e := next(); e != 50001 || statsOf(p, 50001).Probes != 1 {
		t.Fatalf("at %v: no probe (entropy %d)", now, e)
	}
	probeSent := now
	if e := next(); e != 50000 {
		t.Fatal("second packet on the down path while its probe is outstanding")
	}
	// A late ACK of a packet sent before the probe: not the probe.
	p.OnAck(now, 50001, now.Sub(probeSent)+time.Microsecond, false)
	if !statsOf(p, 50001).Down {
		t.Fatal("an ACK of a packet sent before the probe restored the path")
	}
	// The probe's ACK, after the timeout of 4 x 10µs: too late.
	now = probeSent.Add(41 * time.Microsecond)
	next() // notices the timeout
	failAt := now
	p.OnAck(now, 50001, now.Sub(probeSent), false)
	if !statsOf(p, 50001).Down {
		t.Fatal("a late probe ACK restored the path")
	}
	// The next probe comes after the doubled interval (200µs after the
	// timeout was noticed) and its timely ACK restores the path.
	probes := 0
	for range 300 {
		if next() == 50001 {
			probes++
			break
		}
	}
	if probes != 1 || now != failAt.Add(200*time.Microsecond) {
		t.Fatalf("second probe at %v, want 200µs after the timeout noticed at %v", now, failAt)
	}
	now = now.Add(5 * time.Microsecond)
	p.OnAck(now, 50001, 5*time.Microsecond, false)
	st := statsOf(p, 50001)
	// Its SRTT restarts from the larger of the probe's 5µs and the other
	// path's 10µs: the probe crossed an empty queue.
	if st.Down || st.Removals != 1 || st.Probes != 2 || st.SRTT != 10*time.Microsecond {
		t.Fatalf("after a timely probe ACK: %+v", st)
	}
	got := map[uint16]int{}
	for range 100 {
		got[next()]++
	}
	// 50000 still has a loss against it: it gets less.
	if got[50000] < 10 || got[50001] < 10 || got[50000] > got[50001] {
		t.Fatalf("after the restore: %v, want both in use, more on 50001", got)
	}
}

func TestAdaptiveConfigDefaults(t *testing.T) {
	got := AdaptiveConfig{}.withDefaults()
	want := AdaptiveConfig{StallRTTs: 2, MinStallTimeout: 50 * time.Microsecond, InitialRTT: 100 * time.Microsecond,
		LossLimit: 3, MaxLossRate: 0.25, ProbeInterval: time.Millisecond, MaxProbeInterval: 64 * time.Millisecond,
		ECNWeight: 4, LossWeight: 16, MinWeight: 1.0 / 16}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	neg := AdaptiveConfig{StallRTTs: -1, MinStallTimeout: -1, InitialRTT: -1, LossLimit: -1, MaxLossRate: -1,
		ProbeInterval: -1, MaxProbeInterval: -1, DelayScale: -1, ECNWeight: -1, LossWeight: -1, MinWeight: -1}.withDefaults()
	want.ECNWeight, want.LossWeight = 0, 0
	if neg != want {
		t.Fatalf("negative config %+v, want %+v", neg, want)
	}
	c := AdaptiveConfig{ProbeInterval: time.Second, MaxProbeInterval: time.Millisecond, MinWeight: 3}.withDefaults()
	if c.MaxProbeInterval != time.Second || c.MinWeight != 1 {
		t.Fatalf("clamping: %+v", c)
	}
}

func TestAdaptiveInputs(t *testing.T) {
	p := NewAdaptive([]uint16{50000, 50001, 50000}, 1, AdaptiveConfig{})
	if !slices.Equal(p.Paths(), []uint16{50000, 50001}) {
		t.Fatalf("duplicates kept: %v", p.Paths())
	}
	p.OnAck(1, 1234, time.Second, true) // not ours: ignored
	p.OnLoss(1, 1234)
	p.(INTObserver).OnINT(1, 1234, time.Second)
	for _, st := range p.Stats() {
		if st.Acks != 0 || st.Losses != 0 || st.QueueDelay != 0 {
			t.Fatalf("foreign entropy counted: %+v", st)
		}
	}
	p.(INTObserver).OnINT(1, 50001, 80*time.Microsecond)
	if q := statsOf(p, 50001).QueueDelay; q != 10*time.Microsecond {
		t.Fatalf("QueueDelay %v after one 80µs sample, want 10µs", q)
	}
	// Absurd RTTs and delays: no overflow into a spurious stall.
	p.OnAck(2, 50000, math.MaxInt64, true)
	p.(INTObserver).OnINT(2, 50000, math.MaxInt64)
	for i := range 100 {
		e := p.Next(clock.Time(3 + i))
		p.OnAck(clock.Time(4+i), e, time.Nanosecond, false)
	}
	for _, st := range p.Stats() {
		if st.Down || st.Packets == 0 {
			t.Fatalf("after absurd RTTs: %+v", p.Stats())
		}
	}
	p = NewAdaptive(nil, 7, AdaptiveConfig{})
	if e := p.Next(0); e != Entropies(7, 1)[0] || p.Next(0) != e {
		t.Fatalf("empty set: entropy %d", e)
	}
	// The other policies leave the adaptive fields zero.
	sp := NewSpray(Entropies(1, 3), 1)
	sp.Next(0)
	sp.OnLoss(0, sp.Paths()[0])
	for _, st := range sp.Stats() {
		if st.Down || st.Removals != 0 || st.Probes != 0 || st.Weight != 0 || st.QueueDelay != 0 {
			t.Fatalf("spray set adaptive fields: %+v", st)
		}
	}
}

func TestAdaptiveNoAllocs(t *testing.T) {
	p := NewAdaptive(Entropies(1, 64), 1, AdaptiveConfig{ProbeInterval: 10 * time.Microsecond})
	o := p.(INTObserver)
	var now clock.Time
	var i int
	allocs := testing.AllocsPerRun(20000, func() {
		now = now.Add(time.Microsecond)
		i++
		e := p.Next(now)
		o.OnINT(now, e, time.Duration(i%7)*time.Microsecond)
		if i%5 == 0 { // every fifth packet lost: paths go out and come back
			p.OnLoss(now, e)
		} else {
			p.OnAck(now, e, time.Duration(5+i%11)*time.Microsecond, i%3 == 0)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
	var removals uint64
	for _, st := range p.Stats() {
		removals += st.Removals
	}
	if removals == 0 {
		t.Fatal("the allocation test never took a path out")
	}
}

// checker replays events on a policy and checks its invariants.
type checker struct {
	tb    testing.TB
	p     Policy
	set   []uint16
	now   clock.Time
	sends uint64
	out   []uint16
}

func (c *checker) next() {
	before := c.p.Stats()
	e := c.p.Next(c.now)
	c.sends++
	c.out = append(c.out, e)
	i := slices.Index(c.set, e)
	if i < 0 {
		c.tb.Fatalf("Next returned %d, not in %v", e, c.set)
	}
	if before[i].Down && c.p.Stats()[i].Probes != before[i].Probes+1 {
		c.tb.Fatalf("packet on down path %d that is not a probe", e)
	}
}

func (c *checker) check() {
	var pkts uint64
	up := 0
	for i, st := range c.p.Stats() {
		pkts += st.Packets
		if st.Entropy != c.set[i] {
			c.tb.Fatalf("Stats order %v", c.p.Stats())
		}
		if !st.Down {
			up++
		}
		if st.Probes > st.Packets || st.Weight < 0 || st.Weight > 1 || (st.Down && st.Weight != 0) {
			c.tb.Fatalf("inconsistent stats %+v", st)
		}
	}
	if up == 0 {
		c.tb.Fatal("every path is down")
	}
	if pkts != c.sends {
		c.tb.Fatalf("%d packets counted, %d sent", pkts, c.sends)
	}
}

// apply runs one encoded event: op selects it, x and y are its arguments.
func (c *checker) apply(op, x, y byte) {
	e := c.set[int(x)%len(c.set)]
	if x == 255 {
		e = 1234 // foreign
	}
	switch op % 6 {
	case 0, 1:
		c.next()
	case 2:
		c.p.OnAck(c.now, e, time.Duration(y)*time.Microsecond, y&1 == 1)
	case 3:
		c.p.OnLoss(c.now, e)
	case 4:
		c.p.(INTObserver).OnINT(c.now, e, time.Duration(int8(y))*time.Microsecond)
	case 5:
		c.now = c.now.Add(time.Duration(y) * time.Duration(x) * 100 * time.Nanosecond)
	}
	c.check()
}

func TestAdaptiveRandomInvariants(t *testing.T) {
	r := testutil.Rand(t)
	for run := range 200 {
		set := Entropies(r.Uint64(), 1+r.IntN(12))
		seed := r.Uint64()
		cfg := AdaptiveConfig{
			StallRTTs:        r.IntN(6),
			MinStallTimeout:  time.Duration(r.IntN(50)) * time.Microsecond,
			LossLimit:        r.IntN(5),
			MaxLossRate:      r.Float64(),
			ProbeInterval:    time.Duration(r.IntN(300)) * time.Microsecond,
			MaxProbeInterval: time.Duration(r.IntN(3000)) * time.Microsecond,
			DelayScale:       time.Duration(r.IntN(20)) * time.Microsecond,
			ECNWeight:        r.Float64()*10 - 2,
			LossWeight:       r.Float64()*30 - 5,
			MinWeight:        r.Float64() * 0.5,
		}
		ops := make([]byte, 3*2000)
		for i := range ops {
			ops[i] = byte(r.Uint32())
		}
		c := checker{tb: t, p: NewAdaptive(set, seed, cfg), set: slices.Clone(set)}
		d := checker{tb: t, p: NewAdaptive(set, seed, cfg), set: slices.Clone(set)}
		for i := 0; i+2 < len(ops); i += 3 {
			c.apply(ops[i], ops[i+1], ops[i+2])
			d.apply(ops[i], ops[i+1], ops[i+2])
		}
		if !slices.Equal(c.out, d.out) || !slices.Equal(c.p.Stats(), d.p.Stats()) {
			t.Fatalf("run %d: same seed and events, different behaviour", run)
		}
	}
}

func FuzzAdaptive(f *testing.F) {
	f.Add(uint64(1), uint8(4), []byte{0, 0, 0, 2, 0, 10, 3, 1, 0, 3, 1, 0, 3, 1, 0, 5, 200, 200, 0, 0, 0})
	f.Add(uint64(2), uint8(1), []byte{3, 0, 0, 3, 0, 0, 3, 0, 0, 0, 0, 0, 5, 255, 255, 0, 0, 0})
	f.Add(uint64(3), uint8(8), []byte{4, 2, 128, 2, 2, 9, 0, 0, 0, 2, 255, 1, 5, 10, 10, 0, 1, 2})
	f.Fuzz(func(t *testing.T, seed uint64, k uint8, ops []byte) {
		set := Entropies(seed, 1+int(k%16))
		rng := rand.New(rand.NewPCG(seed, 0))
		cfg := AdaptiveConfig{LossLimit: 1 + rng.IntN(3), ProbeInterval: time.Duration(1+rng.IntN(100)) * time.Microsecond}
		c := checker{tb: t, p: NewAdaptive(set, seed, cfg), set: set}
		for i := 0; i+2 < len(ops) && i < 3*4096; i += 3 {
			c.apply(ops[i], ops[i+1], ops[i+2])
		}
	})
}

func BenchmarkAdaptiveNext(b *testing.B) {
	p := NewAdaptive(Entropies(1, 64), 1, AdaptiveConfig{})
	var now clock.Time
	b.ReportAllocs()
	for b.Loop() {
		now++
		p.Next(now)
	}
}

// BenchmarkAdaptivePacket is the policy's work per packet: Next, the INT
// record and the ACK.
func BenchmarkAdaptivePacket(b *testing.B) {
	p := NewAdaptive(Entropies(1, 64), 1, AdaptiveConfig{})
	o := p.(INTObserver)
	var now clock.Time
	b.ReportAllocs()
	for b.Loop() {
		now++
		e := p.Next(now)
		o.OnINT(now, e, 0)
		p.OnAck(now, e, time.Microsecond, false)
	}
}

// TestAdaptivePauseIsNoStall: a packet lost without a report just before
// the sender goes idle does not make its path look stalled when sending
// resumes.
func TestAdaptivePauseIsNoStall(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 8)
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	s := newSim(t, p, 10*time.Microsecond)
	s.run(800)
	for _, e := range set {
		s.paths[e].drop, s.paths[e].silent = true, true
	}
	s.run(8) // one round: a lost packet on every path
	for _, e := range set {
		s.paths[e].drop = false
	}
	s.now = s.now.Add(10 * time.Millisecond)
	s.run(4000)
	for _, st := range p.Stats() {
		if st.Down || st.Removals != 0 {
			t.Fatalf("path taken out after a pause: %+v", st)
		}
	}
}

// TestAdaptiveSharesMatchModel compares the shares of paths with random
// fixed conditions against the weight formula of the package doc.
func TestAdaptiveSharesMatchModel(t *testing.T) {
	r := testutil.Rand(t)
	for range 6 {
		k := 2 + r.IntN(7)
		set := Entropies(r.Uint64(), k)
		p := NewAdaptive(set, r.Uint64(), AdaptiveConfig{})
		s := newSim(t, p, 0)
		conds := make([]simPath, k)
		for i, e := range set {
			conds[i] = simPath{
				rtt:    time.Duration(10+r.IntN(40)) * time.Microsecond,
				qdelay: time.Duration(r.IntN(3)*r.IntN(30)) * time.Microsecond,
				ecn:    r.IntN(4) == 0,
			}
			*s.paths[e] = conds[i]
		}
		s.run(20000)
		before := p.Stats()
		const n = 40000
		s.run(n)
		got := packetsSince(p, before)

		// The model.
		base := conds[0].rtt + conds[0].qdelay
		for _, c := range conds {
			base = min(base, c.rtt+c.qdelay)
		}
		w := make([]float64, k)
		wmax, sum := 0.0, 0.0
		for i, c := range conds {
			pen := float64(max(c.rtt+c.qdelay-base, c.qdelay)) / float64(base)
			if c.ecn {
				pen += 4
			}
			w[i] = 1 / (1 + pen)
			wmax = max(wmax, w[i])
		}
		for i := range w {
			w[i] = max(w[i]/wmax, 1.0/16)
			sum += w[i]
		}
		for i := range w {
			want := w[i] / sum * n
			if d := float64(got[i]) - want; d > 0.03*want+20 || -d > 0.03*want+20 {
				t.Fatalf("path %d (%+v): %d packets, model %.0f; all %v, conditions %+v", i, conds[i], got[i], want, got, conds)
			}
		}
	}
}

// TestAdaptiveRandomFaults kills and heals random paths (never all of
// them) and checks what a user would notice: each failure costs a bounded
// number of packets, the live paths carry the rest, and once everything
// has healed every path is back in use.
func TestAdaptiveRandomFaults(t *testing.T) {
	r := testutil.Rand(t)
	for range 4 {
		k := 2 + r.IntN(7)
		set := Entropies(r.Uint64(), k)
		p := NewAdaptive(set, r.Uint64(), AdaptiveConfig{ProbeInterval: 100 * time.Microsecond, MaxProbeInterval: time.Millisecond})
		rtt := time.Duration(5+r.IntN(20)) * time.Microsecond
		s := newSim(t, p, rtt)
		// A silent failure goes unnoticed for StallRTTs (2) x rtt, at least
		// 50µs, from the last ACK (one RTT after the failure); the path
		// carries its share of the packets meanwhile (1/up with up paths in
		// the set), give or take a round.
		bound := func(up int) uint64 {
			return uint64(max(2*rtt, 50*time.Microsecond)+rtt)/uint64(time.Microsecond)/uint64(up) + uint64(k)
		}
		s.run(1000)
		dead := make([]bool, k)
		deadFrom := make([]uint64, k) // non-probe packets at the time of the kill
		maxLost := make([]uint64, k)  // bound(paths up at the time of the kill)
		nDead := 0
		for range 40 {
			i := r.IntN(k)
			st := p.Stats()[i]
			switch {
			case !dead[i] && nDead < k-1:
				dead[i] = true
				nDead++
				deadFrom[i] = st.Packets - st.Probes
				up := 0
				for _, st := range p.Stats() {
					if !st.Down {
						up++
					}
				}
				maxLost[i] = bound(max(up, 2))
				*s.paths[set[i]] = simPath{rtt: s.paths[set[i]].rtt, drop: true, silent: r.IntN(2) == 0}
			case dead[i]:
				if lost := st.Packets - st.Probes - deadFrom[i]; lost > maxLost[i] {
					t.Fatalf("k=%d rtt=%v: dead path %d carried %d packets besides probes, want at most %d: %+v", k, rtt, i, lost, maxLost[i], st)
				}
				if !st.Down {
					t.Fatalf("k=%d: dead path %d still in the set: %+v", k, i, st)
				}
				dead[i] = false
				nDead--
				s.paths[set[i]].drop = false
			}
			before := p.Stats()
			s.run(2000)
			d := packetsSince(p, before)
			for j := range k {
				if !dead[j] && d[j] < 2000/uint64(k)/4 {
					t.Fatalf("k=%d: live path %d carried %d of 2000 packets: %v (dead %v)", k, j, d[j], d, dead)
				}
			}
		}
		for i := range k {
			s.paths[set[i]].drop = false
		}
		s.run(3000)
		before := p.Stats()
		s.run(4000)
		for i, n := range packetsSince(p, before) {
			if st := p.Stats()[i]; st.Down || n < 4000/uint64(k)*3/4 {
				t.Fatalf("k=%d: after healing path %d carried %d of 4000: %+v", k, i, n, st)
			}
		}
	}
}

// TestAdaptiveEveryStretchSpreadsOverPaths: 32 entropies of which ECMP put
// 13 on one spine and 19 on the other (OnPath), equal paths. Each spine
// gets half of the packets, and not only over whole rounds: every run of
// 79 consecutive packets (a 256 KiB message at MTU 3500) splits within a
// few packets, since a message that loads one spine more than the other
// finishes when that spine does. (Shuffled whole, rounds put up to a
// dozen more on one spine.)
func TestAdaptiveEveryStretchSpreadsOverPaths(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 32)
	r := rand.New(rand.NewPCG(seed, 7))
	spine := map[uint16]int{}
	for i, k := range r.Perm(len(set)) {
		spine[set[k]] = min(i/13, 1)
	}
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	for _, e := range set {
		p.(PathObserver).OnPath(0, e, uint64(100+spine[e]))
	}
	s := newSim(t, p, 20*time.Microsecond)
	s.run(2000)
	s.log = []uint16{}
	s.run(20000)
	const stretch = 79
	var on [2]int
	worst := 0
	for i, e := range s.log {
		on[spine[e]]++
		if i >= stretch {
			on[spine[s.log[i-stretch]]]--
		}
		if i >= stretch-1 {
			worst = max(worst, abs(on[0]-on[1]))
		}
	}
	var total [2]int
	for _, e := range s.log {
		total[spine[e]]++
	}
	t.Logf("packets per spine %v; largest difference over %d consecutive packets: %d", total, stretch, worst)
	if d := abs(total[0] - total[1]); d > len(s.log)/100 {
		t.Fatalf("spines carried %v packets, want halves", total)
	}
	if worst > 4 {
		t.Fatalf("a run of %d packets put %d more on one spine than on the other, want at most 4", stretch, worst)
	}
}

// TestAdaptiveScoresPhysicalPaths: the entropies that share a physical
// path (OnPath) share its weight, from their state pooled. One entropy of
// a spine whose acknowledgements happen to come back slowly (their way
// back crosses a queue, its host was descheduled) does not lose its share
// to the others on the same spine, while a spine that is slower as a
// whole still gets less.
func TestAdaptiveScoresPhysicalPaths(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 8)
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	for i, e := range set {
		p.(PathObserver).OnPath(0, e, uint64(1+i/4)) // two spines of four entropies
	}
	s := newSim(t, p, 100*time.Microsecond)
	s.paths[set[1]].rtt = 400 * time.Microsecond // one slow entropy on spine 1
	for _, e := range set[4:] {
		s.paths[e].rtt = 250 * time.Microsecond // spine 2 slower as a whole
	}
	s.run(4000)
	before := p.Stats()
	s.run(40000)
	d := packetsSince(p, before)
	st := p.Stats()
	for i := range set {
		if st[i].Weight != st[i&^3].Weight {
			t.Fatalf("entropy %d has weight %.3f, entropy %d on the same spine %.3f", i, st[i].Weight, i&^3, st[i&^3].Weight)
		}
	}
	var spine [2]uint64
	for i, n := range d {
		spine[i/4] += n
	}
	t.Logf("packets per entropy %v, per spine %v; weights %.3f %.3f", d, spine, st[0].Weight, st[4].Weight)
	for i := range 4 {
		if d[i] < spine[0]/4*9/10 || d[i] > spine[0]/4*11/10 {
			t.Fatalf("spine 1's entropies carried %v, want equal shares", d[:4])
		}
	}
	if spine[0] <= spine[1] {
		t.Fatalf("spines carried %v: the slower one should carry less", spine)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestAdaptiveProbeBySignature: entropies with the same path signature
// (OnPath) take the same links. When a spine's entropies are all out, one
// acknowledged probe brings every one of them back; one probe that times
// out makes all of them wait for the doubled interval, so probes of a dead
// spine do not go out one entropy after another.
func TestAdaptiveProbeBySignature(t *testing.T) {
	set := []uint16{50000, 50001, 50002, 50003, 50004, 50005}
	sig := func(e uint16) uint64 { return 1 + uint64(e%2) } // two spines, three entropies each
	cfg := AdaptiveConfig{StallRTTs: 4, LossLimit: 1, ProbeInterval: 100 * time.Microsecond, MinStallTimeout: time.Microsecond}
	p := NewAdaptive(set, 1, cfg)
	po := p.(PathObserver)
	var now clock.Time
	for _, e := range set {
		po.OnPath(now, e, sig(e))
		p.OnAck(now, e, 10*time.Microsecond, false)
	}
	down := func() {
		for _, e := range set {
			if sig(e) == 2 {
				p.OnLoss(now, e)
			}
		}
	}
	probesOf := func() (n uint64) {
		for _, e := range set {
			if sig(e) == 2 {
				n += statsOf(p, e).Probes
			}
		}
		return n
	}
	probe := func(limit int) (uint16, bool) {
		for range limit {
			now = now.Add(time.Microsecond)
			if e := p.Next(now); sig(e) == 2 {
				return e, true
			}
		}
		return 0, false
	}
	down()
	e, ok := probe(200)
	if !ok || probesOf() != 1 {
		t.Fatalf("no probe of the spine's entropies within 200µs of their removal (probes %d)", probesOf())
	}
	now = now.Add(5 * time.Microsecond)
	p.OnAck(now, e, 5*time.Microsecond, false)
	for _, x := range set {
		if statsOf(p, x).Down {
			t.Fatalf("entropy %d still out after a probe of entropy %d, on the same path, came back", x, e)
		}
	}

	// The spine dies again: the first probe times out (4 x 10µs), and no
	// entropy of the spine is probed before the doubled interval.
	down()
	if _, ok := probe(200); !ok {
		t.Fatal("no probe after the second removal")
	}
	sent := probesOf()
	now = now.Add(41 * time.Microsecond)
	p.Next(now) // notices the timeout
	failAt := now
	e, ok = probe(400)
	if !ok || probesOf() != sent+1 {
		t.Fatalf("no second probe (probes %d)", probesOf())
	}
	if now.Sub(failAt) < 200*time.Microsecond {
		t.Fatalf("entropy %d probed %v after its spine's probe timed out, want the doubled interval (200µs)", e, now.Sub(failAt))
	}
}

// TestAdaptiveResendAfterStallRemovesFreshPath: NextResend found a path
// whose latest report was an ACK, then the round it drew from ended and the
// next round took that path out as stalled, leaving only paths that lost
// their latest packet. The pick indexed the set with -1 (spray compare
// --cc-spray fixed --size 4M panicked). Every resend must be an active path.
func TestAdaptiveResendAfterStallRemovesFreshPath(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 3)
	r := NewAdaptive(set, seed, AdaptiveConfig{}).(Resender)
	p := r.(Policy)
	at := func(us int) clock.Time { return clock.Time(0).Add(time.Duration(us) * time.Microsecond) }
	for _, e := range set {
		p.OnAck(at(1000), e, 10*time.Microsecond, false)
	}
	// Every path gets packets from 1000µs on; none is acknowledged yet.
	for us := 1000; us <= 1100; us += 10 {
		p.Next(at(us))
	}
	// Two paths acknowledge packets sent at 1080µs, then each loses its
	// latest packet; the third (the only fresh one) stays silent, stalled.
	stalled := set[0]
	for _, e := range set[1:] {
		p.OnAck(at(1100), e, 20*time.Microsecond, false)
		p.OnLoss(at(1100), e)
	}
	for k := range 4 * len(set) {
		e := r.NextResend(at(1100), false)
		st := statsOf(p, e)
		if !slices.Contains(set, e) || st.Down {
			t.Fatalf("resend %d: entropy %d, down %v; want an active path of %v", k, e, st.Down, p.Stats())
		}
	}
	if !statsOf(p, stalled).Down {
		t.Fatalf("the stalled path %d stayed in the set: %+v", stalled, p.Stats())
	}
}

// TestAdaptiveSharedLossKeepsPaths: losses that every path shares (a
// bottleneck they all cross overflowing: each path loses a burst at once)
// take no path out, while the same bursts on one path of four do.
func TestAdaptiveSharedLossKeepsPaths(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 4)
	now := clock.Time(0)
	for _, shared := range []bool{true, false} {
		p := NewAdaptive(set, seed, AdaptiveConfig{})
		// Warm up: every path acknowledges.
		for range 64 {
			e := p.Next(now)
			now = now.Add(time.Microsecond)
			p.OnAck(now, e, 10*time.Microsecond, false)
		}
		// An overflow: a burst of sends, each path losing LossLimit in a
		// row (shared), or only set[0] losing them.
		for range 4 {
			var sent []uint16
			for range 16 {
				sent = append(sent, p.Next(now))
				now = now.Add(time.Microsecond)
			}
			for _, e := range sent {
				if shared || e == set[0] {
					p.OnLoss(now, e)
				} else {
					p.OnAck(now, e, 10*time.Microsecond, false)
				}
			}
		}
		down := 0
		for _, st := range p.Stats() {
			if st.Down {
				down++
			}
		}
		switch {
		case shared && down != 0:
			t.Errorf("shared losses took %d of 4 paths out", down)
		case !shared && (down != 1 || !statsOf(p, set[0]).Down):
			t.Errorf("losses on one path took %d paths out (that one: %v)", down, statsOf(p, set[0]).Down)
		}
	}
}
