package transport

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
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
// schedule to the pass over every QP that it replaces: after a Step, a QP
// off the ready list is in the timer heap exactly under its NextTimeout
// (absent when that is clock.Never), and has nothing to send at the Step's
// time. It reports each violation to fail. The QPs it polls get their
// deadlines recomputed, as the pass they model would.
func schedChecker(e *Engine, fail func(string)) func(now clock.Time) {
	buf := make([]byte, e.cfg.MTU+64)
	return func(now clock.Time) {
		for _, q := range e.order {
			if q == nil || q.sch.ready {
				continue
			}
			switch d := q.NextTimeout(); {
			case d == clock.Never && q.sch.heapIdx >= 0:
				fail(fmt.Sprintf("QP %#x: in the timer heap at %v, NextTimeout is Never", q.qpn, q.sch.deadline))
			case d != clock.Never && q.sch.heapIdx < 0:
				fail(fmt.Sprintf("QP %#x: NextTimeout %v, not in the timer heap", q.qpn, d))
			case d != clock.Never && q.sch.deadline != d:
				fail(fmt.Sprintf("QP %#x: in the timer heap at %v, NextTimeout %v", q.qpn, q.sch.deadline, d))
			}
			if n, err := q.PollTransmit(now, buf); n > 0 || err != nil {
				fail(fmt.Sprintf("QP %#x: off the ready list with a packet of %d bytes to send at %v (err %v)", q.qpn, n, now, err))
			}
			if q.sch.heapIdx >= 0 {
				e.heapRemove(q.sch.heapIdx)
			}
			if d := q.NextTimeout(); d != clock.Never {
				q.sch.deadline = d
				e.heapPush(q)
			}
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
	m := &multiPair{clk: &clock.Sim{}}
	m.fab = mem.NewFabric(mc, m.clk)
	pa, err := m.fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := m.fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close(); pb.Close() })
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
			want := map[uint32][][32]byte{} // by receiving QP, in order
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
					want[dst.qpn] = append(want[dst.qpn], hash(msg))
					sent++
				}
				// Now and then replace an idle pair.
				if r.IntN(40) == 0 {
					i := r.IntN(len(m.qa))
					if m.qa[i].Pending() == 0 && m.qb[i].Pending() == 0 && len(want[m.qa[i].qpn]) == 0 && len(want[m.qb[i].qpn]) == 0 {
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
// them from it.
func check(t *testing.T, m *multiPair, want map[uint32][][32]byte) {
	t.Helper()
	for _, cs := range []*[]Completion{&m.ca, &m.cb} {
		for _, c := range *cs {
			if c.Err != nil {
				t.Fatalf("QP %#x: %v %v", c.QPN, c.Op, c.Err)
			}
			if c.Op != OpRecv {
				continue
			}
			w := want[c.QPN]
			if len(w) == 0 || hash(c.Data) != w[0] {
				t.Fatalf("QP %#x received %d bytes it was not sent next", c.QPN, c.Len)
			}
			want[c.QPN] = w[1:]
		}
		*cs = (*cs)[:0]
	}
}

func pendingAny(m *multiPair, want map[uint32][][32]byte) bool {
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
