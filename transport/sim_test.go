package transport

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	ipA  = netip.MustParseAddr("10.0.0.1")
	ipB  = netip.MustParseAddr("10.0.0.2")
)

// simPair is two engines joined by a link/mem fabric under a simulated
// clock: the quinn-proto Pair idea. Run jumps the clock to the next thing
// that can happen, so a test takes no wall-clock time for simulated waits.
type simPair struct {
	t      testing.TB
	clk    *clock.Sim
	fab    *mem.Fabric
	ea, eb *Engine
	qa, qb *QP
	ca, cb []Completion // completions collected so far
	// toB holds frames that reach B's engine at the start of run's next
	// round, past the fabric (a test's Filter puts rewritten frames here).
	toB [][]byte
}

func newSimPair(t testing.TB, mc mem.Config, cfg Config) *simPair {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = testutil.Seed(t)
	}
	cfgB := cfg
	cfgB.Seed = cfg.Seed + 1
	return newSimPairOf(t, mc, cfg, cfgB, nil)
}

// newSimPairOf is newSimPair with a Config for each side; before, when
// set, runs on the two QPs before they connect.
func newSimPairOf(t testing.TB, mc mem.Config, cfgA, cfgB Config, before func(s *simPair)) *simPair {
	t.Helper()
	s := &simPair{t: t, clk: &clock.Sim{}}
	s.fab = mem.NewFabric(mc, s.clk)
	pa, err := s.fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := s.fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close(); pb.Close() })
	if s.ea, err = NewEngine(pa, cfgA); err != nil {
		t.Fatal(err)
	}
	if s.eb, err = NewEngine(pb, cfgB); err != nil {
		t.Fatal(err)
	}
	if s.qa, err = s.ea.CreateQP(); err != nil {
		t.Fatal(err)
	}
	if s.qb, err = s.eb.CreateQP(); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(s)
	}
	if err := s.qa.Connect(s.qb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := s.qb.Connect(s.qa.Info()); err != nil {
		t.Fatal(err)
	}
	return s
}

// run steps both engines until done reports true, or fails after limit of
// simulated time or when nothing can happen any more.
func (s *simPair) run(limit clock.Time, done func() bool) error {
	for !done() {
		now := s.clk.Now()
		for _, f := range s.toB {
			s.eb.input(now, now, f)
		}
		s.toB = s.toB[:0]
		wa, err := s.ea.Step(now)
		if err != nil {
			return err
		}
		wb, err := s.eb.Step(now)
		if err != nil {
			return err
		}
		s.ca = s.ea.Completions(s.ca)
		s.cb = s.eb.Completions(s.cb)
		if wa || wb || len(s.toB) > 0 {
			continue
		}
		next := clock.Min(clock.Min(s.ea.NextDeadline(), s.eb.NextDeadline()), s.fab.NextDelivery())
		switch {
		case next == clock.Never:
			return fmt.Errorf("deadlock at %v: nothing in flight and no timer armed", now)
		case next > limit:
			return fmt.Errorf("not done after %v of simulated time", limit)
		case next <= now:
			next = now + 1
		}
		s.clk.Set(next)
	}
	return nil
}

func hash(b []byte) [32]byte { return sha256.Sum256(b) }
