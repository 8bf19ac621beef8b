package cc

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// TestAutoSwitch: Auto runs Swift on ACKs without INT (its window moves
// with delay as Swift's does), switches to HPCC on the first ACK with an
// INT record that carries a rate, hands HPCC Swift's window, and from then
// on follows HPCC: an INT stream showing a congested hop cuts the window.
func TestAutoSwitch(t *testing.T) {
	a := NewAuto(AutoConfig{Swift: SwiftConfig{InitCwnd: 10}, HPCC: HPCCConfig{BaseRTT: hpccT, LineRate: hpccLine}})
	ref := NewSwift(SwiftConfig{InitCwnd: 10})
	now := clock.Time(0)
	for i := range 50 {
		now = now.Add(10 * time.Microsecond)
		rtt := 10 * time.Microsecond
		if i%7 == 6 {
			rtt = 200 * time.Microsecond // over the target: a cut
		}
		s := Sample{Now: now, AckedBytes: 1400, RTT: rtt}
		a.OnSend(now, 1400)
		ref.OnSend(now, 1400)
		a.OnAck(s)
		ref.OnAck(s)
		if a.Using() != "swift" || a.Window() != ref.Window() || a.Rate() != ref.Rate() {
			t.Fatalf("ACK %d without INT: using %s, window %d rate %v, Swift alone %d %v", i, a.Using(), a.Window(), a.Rate(), ref.Window(), ref.Rate())
		}
	}
	// Records without a rate do not count.
	a.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: 10 * time.Microsecond, INT: records(Hop{Switch: 1, TS: 5})})
	if a.Using() != "swift" {
		t.Fatal("switched on a record without a link rate")
	}
	before := a.Window()
	p := &port{sw: 1, port: 2, mbps: 100000}
	now = now.Add(time.Microsecond)
	a.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: 10 * time.Microsecond, INT: records(p.step(time.Microsecond, 1, 0))})
	if a.Using() != "hpcc" {
		t.Fatal("did not switch to HPCC on an INT record")
	}
	if got := a.Window(); got != max(before, a.HPCC().minWindow()) {
		t.Fatalf("window at the switch: %d, Swift's was %d", got, before)
	}
	// A hop at line rate with a queue of one BDP: U ≈ 2, the window falls.
	w0 := a.Window()
	for range 200 {
		now = now.Add(time.Microsecond)
		a.OnSend(now, 1400)
		a.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: 10 * time.Microsecond, INT: records(p.step(time.Microsecond, 1, qlenFor(p, 1)))})
	}
	if a.Window() >= w0 || a.Window() != a.HPCC().Window() {
		t.Fatalf("HPCC in charge under congestion: window %d (was %d, HPCC's %d)", a.Window(), w0, a.HPCC().Window())
	}
	// Swift no longer hears anything.
	sw := a.Swift().Cwnd()
	a.OnAck(Sample{Now: now.Add(time.Second), AckedBytes: 1400, RTT: time.Second})
	a.OnTimeout(now.Add(time.Second))
	if a.Swift().Cwnd() != sw {
		t.Fatal("Swift still fed after the switch")
	}
	if a.NextTimer() != clock.Never {
		t.Fatal("Auto has a timer")
	}
}

// TestSwiftRelativeTarget: with RelativeTarget, a path whose unloaded
// fabric delay is 300µs (a software fabric) grows the window as long as
// the delay stays within the target above that, and cuts it when the
// delay rises beyond; with the paper's absolute target, the same path
// only ever cuts. The minimum is forgotten after two MinDelayWindows.
func TestSwiftRelativeTarget(t *testing.T) {
	base := 300 * time.Microsecond
	rel := NewSwift(SwiftConfig{RelativeTarget: true, MinDelayWindow: 100 * time.Millisecond, InitCwnd: 20})
	abs := NewSwift(SwiftConfig{InitCwnd: 20})
	now := clock.Time(0)
	feed := func(s *Swift, n int, rtt time.Duration) {
		for range n {
			now = now.Add(20 * time.Microsecond)
			s.OnAck(Sample{Now: now, AckedBytes: 1400, RTT: rtt})
		}
	}
	feed(rel, 200, base+10*time.Microsecond)
	feed(abs, 200, base+10*time.Microsecond)
	if rel.Cwnd() <= 20 || rel.Decreases() != 0 {
		t.Fatalf("relative target, delay 10µs over the base: cwnd %v, %d decreases", rel.Cwnd(), rel.Decreases())
	}
	if abs.Cwnd() >= 20 || abs.Decreases() == 0 {
		t.Fatalf("absolute target, 310µs delay: cwnd %v", abs.Cwnd())
	}
	if got := rel.BaseDelay(); got != base+10*time.Microsecond {
		t.Fatalf("base delay %v", got)
	}
	c := rel.Cwnd()
	feed(rel, 50, base+time.Millisecond)
	if rel.Cwnd() >= c || rel.Decreases() == 0 {
		t.Fatalf("1ms over the base: cwnd %v -> %v", c, rel.Cwnd())
	}
	// The path's unloaded delay grows to 800µs: within two windows the
	// old minimum is gone and the window grows again.
	feed(rel, 20000, 800*time.Microsecond)
	if got := rel.BaseDelay(); got != 800*time.Microsecond {
		t.Fatalf("base delay after 400ms at 800µs: %v", got)
	}
	c, d := rel.Cwnd(), rel.Decreases()
	feed(rel, 100, 810*time.Microsecond)
	if rel.Cwnd() <= c || rel.Decreases() != d {
		t.Fatalf("after the base moved: cwnd %v -> %v", c, rel.Cwnd())
	}
	if abs.BaseDelay() != 0 {
		t.Fatal("absolute target reports a base delay")
	}
}

// TestDCQCNEchoECN: under the spray profile ACKs echo ECN marks instead of
// the receiver sending CNPs; DCQCN treats an echo as a CNP at most once
// per EchoInterval, and ignores it when EchoInterval is negative.
func TestDCQCNEchoECN(t *testing.T) {
	d := NewDCQCN(DCQCNConfig{})
	for i := range 100 { // an ECN echo every 10µs for 1ms
		d.OnAck(Sample{Now: clock.Time(i) * 10 * us, AckedBytes: 1400, ECNCount: 1})
	}
	if n := d.CNPs(); n != 20 {
		t.Fatalf("100 echoes in 1ms at one per 50µs: %d CNPs, want 20", n)
	}
	if d.Rate() >= 12.5e9/2 {
		t.Fatalf("rate %v after 20 CNPs", d.Rate())
	}
	off := NewDCQCN(DCQCNConfig{EchoInterval: -1})
	off.OnAck(Sample{Now: 1, ECNCount: 3})
	if off.CNPs() != 0 || off.Rate() != 12.5e9 {
		t.Fatal("echo counted with EchoInterval < 0")
	}
	// A real CNP counts towards the interval too.
	c := NewDCQCN(DCQCNConfig{})
	c.OnCNP(0)
	c.OnAck(Sample{Now: clock.Time(20 * us), ECNCount: 1})
	if c.CNPs() != 1 {
		t.Fatalf("echo 20µs after a CNP counted: %d CNPs", c.CNPs())
	}
}

// TestSwiftEndpointOff: a negative EndpointTarget turns the endpoint window
// off: long hold times (a late delayed-ACK timer) cut nothing, while the
// default endpoint target cuts on them.
func TestSwiftEndpointOff(t *testing.T) {
	off := NewSwift(SwiftConfig{EndpointTarget: -1, InitCwnd: 10})
	on := NewSwift(SwiftConfig{InitCwnd: 10})
	for i := range 100 {
		s := Sample{Now: clock.Time(i) * 100 * us, AckedBytes: 1400, RTT: 1010 * time.Microsecond, HoldTime: time.Millisecond}
		off.OnAck(s)
		on.OnAck(s)
	}
	if off.Decreases() != 0 || off.Cwnd() <= 10 || off.EndpointCwnd() < off.FabricCwnd() {
		t.Fatalf("endpoint window off: cwnd %v (endpoint %v), %d decreases", off.Cwnd(), off.EndpointCwnd(), off.Decreases())
	}
	if on.Decreases() == 0 || on.Cwnd() >= 10 {
		t.Fatalf("endpoint window on: cwnd %v, %d decreases", on.Cwnd(), on.Decreases())
	}
}
