package multipath

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

// TestAdaptiveMassStallIsAPause: when the receiver pauses for a millisecond
// and then acknowledges everything, latest-sent first, every path but one
// looks stalled at once, and none is taken out; when one path of four stops
// acknowledging while the others go on, it is taken out.
func TestAdaptiveMassStallIsAPause(t *testing.T) {
	const us = clock.Time(time.Microsecond)
	for _, pause := range []bool{true, false} {
		seed := testutil.Seed(t)
		set := Entropies(seed, 4)
		p := NewAdaptive(set, seed, AdaptiveConfig{})
		now := clock.Time(0)
		// Warm up: every packet acknowledged 20µs after it was sent.
		for range 400 {
			e := p.Next(now)
			p.OnAck(now+20*us, e, 20*time.Microsecond, false)
			now += 10 * us
		}
		quiet := set[0]
		type pkt struct {
			e  uint16
			at clock.Time
		}
		var held []pkt
		for range 100 { // 1ms
			e := p.Next(now)
			switch {
			case pause:
				held = append(held, pkt{e, now})
			case e != quiet:
				p.OnAck(now+20*us, e, 20*time.Microsecond, false)
			}
			now += 10 * us
		}
		for k := len(held) - 1; k >= 0; k-- {
			p.OnAck(now, held[k].e, time.Duration(now-held[k].at), false)
			p.Next(now) // new rounds between the ACKs: stall verdicts
			now += us
		}
		removed := 0
		for _, st := range p.Stats() {
			removed += int(st.Removals)
		}
		want := 1
		if pause {
			want = 0
		}
		if removed != want {
			t.Errorf("pause %v: %d paths taken out, want %d: %+v", pause, removed, want, p.Stats())
		}
	}
}

// TestAdaptiveResendNeverProbes: with a path out of the set and its probe
// overdue, resends (NextResend) stay on the active paths; the next new
// packet (Next) is the probe.
func TestAdaptiveResendNeverProbes(t *testing.T) {
	const us = clock.Time(time.Microsecond)
	seed := testutil.Seed(t)
	set := Entropies(seed, 4)
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	r, ok := p.(Resender)
	if !ok {
		t.Fatal("the adaptive policy is no Resender")
	}
	now := clock.Time(0)
	for range 100 {
		e := p.Next(now)
		p.OnAck(now+20*us, e, 20*time.Microsecond, false)
		now += 10 * us
	}
	bad := set[2]
	for range 3 {
		p.OnLoss(now, bad)
	}
	if st := p.Stats()[2]; !st.Down {
		t.Fatalf("path not out after 3 losses: %+v", st)
	}
	now += 5 * clock.Time(time.Millisecond) // the first probe is long due
	for range 50 {
		if e := r.NextResend(now, false); e == bad {
			t.Fatal("a resend went to the path out of the set")
		}
		now += us
	}
	if st := p.Stats()[2]; st.Probes != 0 {
		t.Fatalf("resends probed: %+v", st)
	}
	if e := p.Next(now); e != bad {
		t.Fatalf("the next new packet went to %d, not the overdue probe on %d", e, bad)
	}
}
