package transport

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// With SPRAY_SCHEDCHECK=1 every engine the package's tests make checks
// its schedule after each Step (schedChecker) and panics on a violation:
// `SPRAY_SCHEDCHECK=1 go test ./transport` runs the whole suite under it.
func init() {
	if os.Getenv("SPRAY_SCHEDCHECK") != "" {
		checkEngines = func(e *Engine) func(clock.Time) {
			return schedChecker(e, func(msg string) { panic(msg) })
		}
	}
}

// schedChecker returns a check for e (Engine.check) that holds its
// schedule to the pass over every QP that it replaces: after a Step, no QP
// is left to settle; a QP on the ready list is in the timer heap exactly
// under when its timers expire (timerDeadline), and one off it exactly
// under its NextTimeout (absent when that is clock.Never) and has nothing
// to send at the Step's time; the heap is ordered. It reports each
// violation to fail. The QPs it polls get their deadlines recomputed, as
// the pass they model would.
func schedChecker(e *Engine, fail func(string)) func(now clock.Time) {
	buf := make([]byte, e.cfg.MTU+64)
	return func(now clock.Time) {
		if len(e.dirty) > 0 {
			fail(fmt.Sprintf("%d QPs left dirty after a Step", len(e.dirty)))
		}
		for i, t := range e.timers {
			if q := t.q; q.sch.heapIdx != i || q.sch.deadline != t.at {
				fail(fmt.Sprintf("QP %#x: at %d in the timer heap under %v, its index and key say %d, %v", q.qpn, i, t.at, q.sch.heapIdx, q.sch.deadline))
			}
			if p := (i - 1) / 2; i > 0 && e.timers[p].at > t.at {
				fail(fmt.Sprintf("timer heap out of order at %d", i))
			}
		}
		for _, q := range e.order {
			if q == nil {
				continue
			}
			d, what := q.NextTimeout(), "NextTimeout"
			if q.sch.ready {
				d, what = q.timerDeadline(), "timer deadline"
			}
			switch {
			case d == clock.Never && q.sch.heapIdx >= 0:
				fail(fmt.Sprintf("QP %#x: in the timer heap at %v, %s is Never", q.qpn, q.sch.deadline, what))
			case d != clock.Never && q.sch.heapIdx < 0:
				fail(fmt.Sprintf("QP %#x: %s %v, not in the timer heap", q.qpn, what, d))
			case d != clock.Never && q.sch.deadline != d:
				fail(fmt.Sprintf("QP %#x: in the timer heap at %v, %s %v", q.qpn, q.sch.deadline, what, d))
			}
			if q.sch.ready {
				continue
			}
			if n, err := q.PollTransmit(now, buf); n > 0 || err != nil {
				fail(fmt.Sprintf("QP %#x: off the ready list with a packet of %d bytes to send at %v (err %v)", q.qpn, n, now, err))
			}
			e.rekey(q, q.NextTimeout())
		}
	}
}

// multiPair is two engines on a simulated link/mem fabric with n
// connected QP pairs.
type multiPair struct {
	clk    *clock.Sim
	fab    *mem.Fabric
	ea, eb *Engine
	qa, qb []*QP
	ca, cb []Completion
}

func newMultiPair(t testing.TB, mc mem.Config, cfg Config, n int) *multiPair {
	t.Helper()
	return newMultiPairOn(t, mc, cfg, n, nil)
}

// newMultiPairOn is newMultiPair with A's engine on wrap(A's port) when
// wrap is not nil.
func newMultiPairOn(t testing.TB, mc mem.Config, cfg Config, n int, wrap func(link.Link) link.Link) *multiPair {
	t.Helper()
	m := &multiPair{clk: &clock.Sim{}}
	m.fab = mem.NewFabric(mc, m.clk)
	var pa link.Link
	pa, err := m.fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := m.fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close(); pb.Close() })
	if wrap != nil {
		pa = wrap(pa)
	}
	if m.ea, err = NewEngine(pa, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Seed++
	if m.eb, err = NewEngine(pb, cfg); err != nil {
		t.Fatal(err)
	}
	for range n {
		a, err := m.ea.CreateQP()
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.eb.CreateQP()
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Connect(b.Info()); err != nil {
			t.Fatal(err)
		}
		if err := b.Connect(a.Info()); err != nil {
			t.Fatal(err)
		}
		m.qa, m.qb = append(m.qa, a), append(m.qb, b)
	}
	return m
}

// step steps both engines once at the clock's time, collects their
// completions, and when neither did anything advances the clock to the
// next thing that can happen. It reports false when nothing can.
func (m *multiPair) step(t testing.TB) bool {
	t.Helper()
	now := m.clk.Now()
	wa, err := m.ea.Step(now)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := m.eb.Step(now)
	if err != nil {
		t.Fatal(err)
	}
	m.ca = m.ea.Completions(m.ca)
	m.cb = m.eb.Completions(m.cb)
	if wa || wb {
		return true
	}
	next := clock.Min(clock.Min(m.ea.NextDeadline(), m.eb.NextDeadline()), m.fab.NextDelivery())
	switch {
	case next == clock.Never:
		return false
	case next <= now:
		next = now + 1
	}
	m.clk.Set(next)
	return true
}

// mustStep is step for a test that waits for something: nothing left to
// happen is a deadlock.
func (m *multiPair) mustStep(t testing.TB) {
	t.Helper()
	if !m.step(t) {
		t.Fatalf("deadlock at %v: nothing in flight and no timer armed", m.clk.Now())
	}
}

// TestStepVisitsActiveQPs holds the engine's cost to what moves: with one
// QP streaming beside n idle connected ones, the engine's calls into QPs
// (packets handled, timers checked and run, transmit polls, completion
// polls) over a fixed transfer are the same for n = 1 and n = 10,000 (1,000 with -short).
// A pass over every QP in Step, NextDeadline or Completions would add at
// least n per step.
func TestStepVisitsActiveQPs(t *testing.T) {
	seed := testutil.Seed(t)
	visits := func(idle int) (a, b uint64, steps int) {
		// The smallest footprint: 10,000 QP pairs.
		cfg := Config{Seed: seed, Window: 64, SendQueue: 4, MaxMessages: 4}
		m := newMultiPair(t, mem.Config{Seed: seed, Delay: 2 * time.Microsecond}, cfg, idle+1)
		qa := m.qa[idle]
		msg := randomMessages(testutil.Rand(t), 1, 64<<10)[0]
		// Let the connects settle, then count from a quiet start.
		for range 10 {
			m.step(t)
		}
		m.ca, m.cb = m.ca[:0], m.cb[:0]
		a0, b0 := m.ea.visits, m.eb.visits
		for range 8 {
			if err := qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
				t.Fatal(err)
			}
			for len(m.ca) == 0 {
				m.mustStep(t)
				steps++
			}
			if m.ca[0].Err != nil {
				t.Fatal(m.ca[0].Err)
			}
			m.ca = m.ca[:0]
		}
		for len(m.cb) < 8 {
			m.mustStep(t)
			steps++
		}
		for _, c := range m.cb {
			if c.Err != nil || hash(c.Data) != hash(msg) {
				t.Fatalf("received %d bytes (err %v), not the message sent", c.Len, c.Err)
			}
		}
		return m.ea.visits - a0, m.eb.visits - b0, steps
	}
	n := 10000
	if testing.Short() {
		n = 1000
	}
	a1, b1, s1 := visits(1)
	aN, bN, sN := visits(n)
	t.Logf("1 idle QP: %d steps, %d+%d visits; %d idle QPs: %d steps, %d+%d visits", s1, a1, b1, n, sN, aN, bN)
	if s1 != sN || a1 != aN || b1 != bN {
		t.Fatalf("the transfer beside %d idle QPs took %d steps and %d+%d QP visits, beside 1: %d steps and %d+%d visits",
			n, sN, aN, bN, s1, a1, b1)
	}
	if a1 == 0 || b1 == 0 {
		t.Fatal("no visits counted")
	}
}

// gateLink lends at most budget transmit buffers, all it has when budget
// is negative, and records the destination QP of every frame sent.
type gateLink struct {
	link.Link
	budget int
	sentTo []uint32
	psns   []uint32 // each frame's PSN, beside sentTo
	// mangle, when set, rewrites each frame before it is sent.
	mangle func(buf []byte) []byte
}

func (g *gateLink) Alloc(fs []link.Frame) int {
	if g.budget >= 0 {
		fs = fs[:min(len(fs), g.budget)]
	}
	n := g.Link.Alloc(fs)
	if g.budget >= 0 {
		g.budget -= n
	}
	return n
}

func (g *gateLink) Send(fs []link.Frame) (int, error) {
	var pk wire.Packet
	for i, f := range fs {
		if g.mangle != nil {
			fs[i].Buf = g.mangle(f.Buf)
		}
		if wire.Decode(f.Buf, &pk) == nil {
			g.sentTo = append(g.sentTo, pk.BTH.DestQP)
			g.psns = append(g.psns, pk.BTH.PSN)
		}
	}
	return g.Link.Send(fs)
}

// TestStepNoBufferVisits holds a step's cost when the link has no
// transmit buffer to what expires: with n QPs on the ready list, each
// with a message to send, and one QP whose retransmission timer runs out
// meanwhile, the engine's calls into QPs over the starved steps are the
// same for n = 16 and n = 1,024, and the timer does run (the QP's probes
// or timeouts count up). Once the link lends buffers again, every
// message arrives intact: no QP was dropped from the schedule.
func TestStepNoBufferVisits(t *testing.T) {
	seed := testutil.Seed(t)
	run := func(n int) (visits, timers uint64) {
		cfg := Config{Seed: seed, Window: 64, SendQueue: 4, MaxMessages: 4, MinRTO: time.Millisecond}
		var g *gateLink
		// A's engine holds no buffer it did not use: the link lends
		// exactly what the test gives.
		m := newMultiPairOn(t, mem.Config{Seed: seed, Delay: 2 * time.Microsecond}, cfg, n+1,
			func(l link.Link) link.Link { g = &gateLink{Link: l}; return g })
		for range 10 {
			m.step(t)
		}
		msgs := randomMessages(testutil.Rand(t), n+1, 32<<10)
		// QP 0 sends 4 packets while B does not step: no ACK comes
		// back, and its timers are armed.
		msgs[0] = append(msgs[0], make([]byte, 32<<10)...)
		if err := m.qa[0].Post(WorkRequest{ID: 1, Op: OpSend, Data: msgs[0]}); err != nil {
			t.Fatal(err)
		}
		g.budget = 4
		if _, err := m.ea.Step(m.clk.Now()); err != nil {
			t.Fatal(err)
		}
		if g.budget != 0 || len(g.sentTo) != 4 {
			t.Fatalf("QP 0 sent %d packets, want 4", len(g.sentTo))
		}
		for i := 1; i <= n; i++ {
			if err := m.qa[i].Post(WorkRequest{ID: 1, Op: OpSend, Data: msgs[i]}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.ea.Step(m.clk.Now()); err != nil {
			t.Fatal(err)
		}
		rs0 := m.qa[0].RetransmitStats()
		v0 := m.ea.visits
		for range 50 {
			m.clk.Set(m.clk.Now() + clock.Time(200*time.Microsecond))
			if _, err := m.ea.Step(m.clk.Now()); err != nil {
				t.Fatal(err)
			}
			m.ea.NextDeadline()
		}
		visits = m.ea.visits - v0
		rs := m.qa[0].RetransmitStats()
		timers = rs.TLPs + rs.RTOs - rs0.TLPs - rs0.RTOs
		if m.ea.Stats().TxNoBuffer < 50 {
			t.Fatalf("the link ran short of buffers %d times, want every step", m.ea.Stats().TxNoBuffer)
		}
		g.budget = -1
		m.ca, m.cb = m.ca[:0], m.cb[:0]
		got := map[uint32][32]byte{}
		for limit := 0; len(got) < n+1; limit++ {
			if limit > 1_000_000 {
				t.Fatalf("%d of %d messages arrived", len(got), n+1)
			}
			m.mustStep(t)
			for _, c := range m.cb {
				if c.Err != nil {
					t.Fatal(c.Err)
				}
				got[c.QPN] = hash(c.Data)
			}
			m.cb = m.cb[:0]
		}
		for i, q := range m.qb {
			if got[q.qpn] != hash(msgs[i]) {
				t.Fatalf("QP %d: the message arrived altered", i)
			}
		}
		return visits, timers
	}
	v16, t16 := run(16)
	v1k, t1k := run(1024)
	t.Logf("starved steps: 16 ready QPs %d visits (%d timers), 1,024 ready QPs %d visits (%d timers)", v16, t16, v1k, t1k)
	if t16 == 0 || t1k == 0 {
		t.Fatalf("the sender's timers did not run while the link had no buffer (%d, %d)", t16, t1k)
	}
	if v16 != v1k {
		t.Fatalf("the starved steps visited QPs %d times beside 16 ready QPs, %d beside 1,024", v16, v1k)
	}
}

// TestBurstAcrossSteps: a QP's turn on the ready list lasts burst packets
// however few buffers each step gets, so QPs with data share a link that
// lends one buffer per step in turns of 8, not one QP until it runs dry.
func TestBurstAcrossSteps(t *testing.T) {
	seed := testutil.Seed(t)
	var g *gateLink
	cfg := Config{Seed: seed, CC: func() cc.Controller { return &cc.Fixed{} }}
	m := newMultiPairOn(t, mem.Config{Seed: seed}, cfg, 3,
		func(l link.Link) link.Link { g = &gateLink{Link: l}; return g })
	for range 10 {
		m.step(t)
	}
	msg := make([]byte, 64<<10)
	for _, q := range m.qa {
		if err := q.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
	}
	g.sentTo = g.sentTo[:0]
	for range 48 {
		g.budget = 1
		if _, err := m.ea.Step(m.clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.sentTo) != 48 {
		t.Fatalf("%d frames sent in 48 steps of one buffer", len(g.sentTo))
	}
	for i, to := range g.sentTo {
		want := m.qb[i/8%3].qpn
		if to != want {
			t.Fatalf("frame %d went to QP %#x, want %#x: turns of 8 packets in creation order, sent to %x", i, to, want, g.sentTo)
		}
	}
}

// TestRepairAheadOfData: six QPs stream at once, 8 packets a turn, over
// a link that takes one frame per frame time, and a switch trims one
// packet of each of three of them. Once a QP has the trimmed packet's NAK,
// the very next frame its engine sends is the resend, ahead of the new
// data of the QPs whose turn it is: a resend that waited for its QP's
// turn would wait up to a round of the others', and meet its queue as
// full as when it was trimmed. Every message arrives intact.
func TestRepairAheadOfData(t *testing.T) {
	seed := testutil.Seed(t)
	var g *gateLink
	cfg := Config{Profile: Spray, Seed: seed, CC: func() cc.Controller { return &cc.Fixed{} }}
	m := newMultiPairOn(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond, Bandwidth: 10e9}, cfg, 6,
		func(l link.Link) link.Link { g = &gateLink{Link: l, budget: -1}; return g })
	for range 10 {
		m.step(t)
	}
	// The 11th packet of QPs 1, 3 and 4, first transmission only.
	victims := map[uint32]uint32{}
	for _, i := range []int{1, 3, 4} {
		victims[m.qb[i].qpn] = (m.qa[i].Info().PSN + 10) & 0xFFFFFF
	}
	trimmed := map[uint32]bool{}
	g.mangle = func(f []byte) []byte {
		var pk wire.Packet
		if wire.Decode(f, &pk) != nil || pk.BTH.Opcode != wire.OpSprayData {
			return f
		}
		if p, ok := victims[pk.BTH.DestQP]; ok && p == pk.BTH.PSN && !trimmed[pk.BTH.DestQP] {
			trimmed[pk.BTH.DestQP] = true
			m, err := wire.Trim(f)
			if err != nil {
				t.Errorf("Trim: %v", err)
				return f
			}
			return f[:m]
		}
		return f
	}
	r := testutil.Rand(t)
	msgs := make([][]byte, len(m.qa))
	for i, q := range m.qa {
		msgs[i] = make([]byte, 256<<10)
		for j := range msgs[i] {
			msgs[i][j] = byte(r.Uint32())
		}
		if err := q.Post(WorkRequest{ID: uint64(i), Op: OpSend, Data: msgs[i]}); err != nil {
			t.Fatal(err)
		}
	}
	// A's link sends one frame per step, a step per frame time at 10
	// Gb/s: every QP has data waiting for its turn.
	naks := make([]uint64, len(m.qa))
	checked := 0
	for steps := 0; len(m.cb) < len(m.qa); steps++ {
		if steps > 1<<20 {
			t.Fatalf("%d of %d messages arrived", len(m.cb), len(m.qa))
		}
		before, now := len(g.sentTo), m.clk.Now()
		g.budget = 1
		if _, err := m.ea.Step(now); err != nil {
			t.Fatal(err)
		}
		if _, err := m.eb.Step(now); err != nil {
			t.Fatal(err)
		}
		m.ca, m.cb = m.ea.Completions(m.ca), m.eb.Completions(m.cb)
		m.clk.Set(now + 1200)
		for i, q := range m.qa {
			n := q.Stats().TrimNaksReceived
			if n == naks[i] {
				continue
			}
			naks[i] = n
			p, ok := victims[m.qb[i].qpn]
			if !ok || checked == len(victims) || len(g.sentTo) == before {
				continue
			}
			checked++
			if g.sentTo[before] != m.qb[i].qpn || g.psns[before] != p {
				t.Fatalf("QP %d took the NAK of trimmed PSN %d; the next frame sent went to QP %#x, PSN %d: want its resend first", i, p, g.sentTo[before], g.psns[before])
			}
		}
	}
	if checked != len(victims) || len(trimmed) != len(victims) {
		t.Fatalf("%d trimmed, %d resends checked: want %d", len(trimmed), checked, len(victims))
	}
	for _, c := range m.cb {
		i := slices.IndexFunc(m.qb, func(q *QP) bool { return q.qpn == c.QPN })
		if c.Err != nil || i < 0 || hash(c.Data) != hash(msgs[i]) {
			t.Fatalf("QP %#x received %d bytes (err %v), not the message sent", c.QPN, c.Len, c.Err)
		}
	}
}

// TestSchedMatchesFullPass runs random traffic over many QP pairs, on a
// lossy, reordering fabric, with both profiles, and checks after every
// Step that the schedule matches a pass over every QP (schedChecker): no
// QP off the ready list has a packet due or a stale deadline. Every
// message arrives intact, destroyed QPs included: some QPs are destroyed
// while idle and others created in their place.
func TestSchedMatchesFullPass(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			r := testutil.Rand(t)
			mc := mem.Config{Seed: seed, Loss: 0.01, Reorder: 0.05, ReorderDelay: 20 * time.Microsecond, Delay: 5 * time.Microsecond}
			cfg := Config{Profile: prof, Seed: seed, MinRTO: time.Millisecond, SendQueue: 16, MaxMessages: 8, Window: 256}
			m := newMultiPair(t, mc, cfg, 24)
			var violations []string
			for _, e := range []*Engine{m.ea, m.eb} {
				e.check = schedChecker(e, func(s string) { violations = append(violations, s) })
			}
			msgs := randomMessages(r, 32, 20<<10)
			want := map[*QP][][32]byte{} // by receiving QP, in order
			sent := 0
			for round := 0; round < 400; round++ {
				// Post on a few random QPs of either side.
				for range r.IntN(4) {
					i := r.IntN(len(m.qa))
					src, dst := m.qa[i], m.qb[i]
					if r.IntN(2) == 0 {
						src, dst = dst, src
					}
					msg := msgs[r.IntN(len(msgs))]
					if err := src.Post(WorkRequest{ID: uint64(sent + 1), Op: OpSend, Data: msg}); err != nil {
						continue // queue full
					}
					want[dst] = append(want[dst], hash(msg))
					sent++
				}
				// Now and then replace an idle pair.
				if r.IntN(40) == 0 {
					i := r.IntN(len(m.qa))
					if m.qa[i].Pending() == 0 && m.qb[i].Pending() == 0 && len(want[m.qa[i]]) == 0 && len(want[m.qb[i]]) == 0 {
						m.ea.DestroyQP(m.qa[i])
						m.eb.DestroyQP(m.qb[i])
						a, err := m.ea.CreateQP()
						if err != nil {
							t.Fatal(err)
						}
						b, err := m.eb.CreateQP()
						if err != nil {
							t.Fatal(err)
						}
						if err := a.Connect(b.Info()); err != nil {
							t.Fatal(err)
						}
						if err := b.Connect(a.Info()); err != nil {
							t.Fatal(err)
						}
						m.qa[i], m.qb[i] = a, b
					}
				}
				for range 1 + r.IntN(20) {
					m.step(t)
				}
				check(t, m, want)
				if len(violations) > 0 {
					t.Fatalf("at %v: %d violations, the first: %s", m.clk.Now(), len(violations), violations[0])
				}
			}
			for limit := 0; pendingAny(m, want); limit++ {
				if limit > 1_000_000 {
					t.Fatal("messages still in flight after a million steps")
				}
				m.mustStep(t)
				check(t, m, want)
			}
			if len(violations) > 0 {
				t.Fatalf("%d violations, the first: %s", len(violations), violations[0])
			}
			if sent < 100 {
				t.Fatalf("only %d messages sent", sent)
			}
		})
	}
}

// check matches the received messages against want, in order, and removes
// them from it. want is by QP, not by QP number: each engine numbers its
// own QPs, and the two engines can give the same number (at
// SPRAY_SEED=11 they do).
func check(t *testing.T, m *multiPair, want map[*QP][][32]byte) {
	t.Helper()
	for _, side := range []struct {
		e  *Engine
		cs *[]Completion
	}{{m.ea, &m.ca}, {m.eb, &m.cb}} {
		for _, c := range *side.cs {
			if c.Err != nil {
				t.Fatalf("QP %#x: %v %v", c.QPN, c.Op, c.Err)
			}
			if c.Op != OpRecv {
				continue
			}
			q := side.e.QP(c.QPN)
			w := want[q]
			if q == nil || len(w) == 0 || hash(c.Data) != w[0] {
				t.Fatalf("QP %#x received %d bytes it was not sent next", c.QPN, c.Len)
			}
			want[q] = w[1:]
		}
		*side.cs = (*side.cs)[:0]
	}
}

func pendingAny(m *multiPair, want map[*QP][][32]byte) bool {
	for _, w := range want {
		if len(w) > 0 {
			return true
		}
	}
	for i := range m.qa {
		if m.qa[i].Pending() > 0 || m.qb[i].Pending() > 0 {
			return true
		}
	}
	return false
}
