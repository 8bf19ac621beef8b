package transporttest

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// The addresses of the fabric ports under A and B.
var (
	MACA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	MACB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	IPA  = netip.MustParseAddr("10.0.0.1")
	IPB  = netip.MustParseAddr("10.0.0.2")
)

var (
	// ErrDeadlock is wrapped by Run's error when nothing is in flight on
	// the fabric and neither engine has a timer armed, before done reports
	// true.
	ErrDeadlock = errors.New("transporttest: deadlock: nothing in flight and no timer armed")
	// ErrLimit is wrapped by Run's error when the next thing that can
	// happen is later than the limit, before done reports true.
	ErrLimit = errors.New("transporttest: simulated time limit reached")
)

// Pair is two transport Engines joined by a link/mem fabric under a
// simulated clock, with one connected QP on each. Its fields are there for
// the test to read and use (post on QA, inspect Fabric.Stats, reset CA).
// Make one with NewPair or NewPairWith: the zero value is not usable. A Pair
// is not safe for concurrent use.
type Pair struct {
	// Clock is the simulated clock of the fabric; Run advances it.
	Clock *clock.Sim
	// Fabric joins A's port (MACA, IPA) and B's (MACB, IPB).
	Fabric *mem.Fabric
	// A and B are the engines, QA and QB their connected QPs.
	A, B   *transport.Engine
	QA, QB *transport.QP
	// CA and CB are the completions Run collected from A and B so far, in
	// the order the engines reported them.
	CA, CB []transport.Completion
}

// Options adjusts the Pair that NewPairWith builds. The zero value adjusts
// nothing.
type Options struct {
	// WrapA and WrapB, when not nil, wrap A's and B's fabric port (a
	// capture, a fault injector); the engine runs on the link returned, and
	// the test's cleanup closes that link. Nil runs the engine on the port.
	WrapA, WrapB func(link.Link) link.Link
	// ConfigB, when not nil, adjusts B's config (a copy of the config given
	// to NewPairWith, with Seed already set to its Seed+1) before B is
	// made; for example, to give only the sender a congestion controller.
	ConfigB func(*transport.Config)
	// Secure, when not nil, secures A's QP with it and B's with its
	// mirror (Send and Recv swapped) before they connect (QP.Secure).
	Secure *transport.Security
}

// NewPair returns a connected Pair: a fabric with config mc, engine A with
// cfg and engine B with cfg but Seed cfg.Seed+1, one QP on each. It fails
// the test on any error and closes both links at the test's cleanup.
func NewPair(tb testing.TB, mc mem.Config, cfg transport.Config) *Pair {
	tb.Helper()
	return NewPairWith(tb, mc, cfg, Options{})
}

// NewPairWith is NewPair with the adjustments of o.
func NewPairWith(tb testing.TB, mc mem.Config, cfg transport.Config, o Options) *Pair {
	tb.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = testutil.Seed(tb)
	}
	p := &Pair{Clock: &clock.Sim{}}
	p.Fabric = mem.NewFabric(mc, p.Clock)
	pa, err := p.Fabric.NewPort(MACA, IPA)
	if err != nil {
		tb.Fatal(err)
	}
	pb, err := p.Fabric.NewPort(MACB, IPB)
	if err != nil {
		pa.Close()
		tb.Fatal(err)
	}
	var la, lb link.Link = pa, pb
	if o.WrapA != nil {
		la = o.WrapA(la)
	}
	if o.WrapB != nil {
		lb = o.WrapB(lb)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	if p.A, err = transport.NewEngine(la, cfg); err != nil {
		tb.Fatal(err)
	}
	cfgB := cfg
	cfgB.Seed = cfg.Seed + 1
	if o.ConfigB != nil {
		o.ConfigB(&cfgB)
	}
	if p.B, err = transport.NewEngine(lb, cfgB); err != nil {
		tb.Fatal(err)
	}
	if p.QA, err = p.A.CreateQP(); err != nil {
		tb.Fatal(err)
	}
	if p.QB, err = p.B.CreateQP(); err != nil {
		tb.Fatal(err)
	}
	if s := o.Secure; s != nil {
		if err := p.QA.Secure(*s); err != nil {
			tb.Fatal(err)
		}
		if err := p.QB.Secure(transport.Security{Send: s.Recv, Recv: s.Send, IntegrityOnly: s.IntegrityOnly}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := p.QA.Connect(p.QB.Info()); err != nil {
		tb.Fatal(err)
	}
	if err := p.QB.Connect(p.QA.Info()); err != nil {
		tb.Fatal(err)
	}
	return p
}

// Run steps both engines at the current simulated time, appends their
// completions to CA and CB, and, once neither has more work at that time,
// sets the clock to the earliest engine deadline or fabric delivery (at
// least one nanosecond on), until done reports true; done is asked before
// every step. Run returns nil when done reports true, an error wrapping
// ErrDeadlock when nothing can happen any more, one wrapping ErrLimit when
// the next thing would happen after limit (an absolute simulated time), or
// an engine's Step error.
func (p *Pair) Run(limit clock.Time, done func() bool) error {
	for !done() {
		now := p.Clock.Now()
		wa, err := p.A.Step(now)
		if err != nil {
			return fmt.Errorf("engine A at %v: %w", now, err)
		}
		wb, err := p.B.Step(now)
		if err != nil {
			return fmt.Errorf("engine B at %v: %w", now, err)
		}
		p.CA = p.A.Completions(p.CA)
		p.CB = p.B.Completions(p.CB)
		if wa || wb {
			continue
		}
		next := clock.Min(clock.Min(p.A.NextDeadline(), p.B.NextDeadline()), p.Fabric.NextDelivery())
		switch {
		case next == clock.Never:
			return fmt.Errorf("at %v: %w", now, ErrDeadlock)
		case next > limit:
			return fmt.Errorf("at %v, next event at %v, limit %v: %w", now, next, limit, ErrLimit)
		case next <= now:
			next = now + 1
		}
		p.Clock.Set(next)
	}
	return nil
}
