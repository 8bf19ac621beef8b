package multipath

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

// warm sends n packets on p, each acknowledged 20µs later, 10µs apart, and
// returns the time after them.
func warm(p Policy, now clock.Time, n int) clock.Time {
	const us = clock.Time(time.Microsecond)
	for range n {
		e := p.Next(now)
		p.OnAck(now+20*us, e, 20*time.Microsecond, false)
		now += 10 * us
	}
	return now
}

// TestAdaptiveAckPaths: acknowledgements rotate over the whole set while
// every path delivers, never go to a path taken out of the set or one that
// lost its latest packet, and pass over a path that lost an
// acknowledgement until the QP's own data is acknowledged on it again.
func TestAdaptiveAckPaths(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 8)
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	ap, ok := p.(AckPather)
	if !ok {
		t.Fatal("the adaptive policy is no AckPather")
	}
	now := warm(p, 0, 200)
	count := func(urgent bool) map[uint16]int {
		seen := map[uint16]int{}
		for range 10 * len(set) {
			seen[ap.NextAck(urgent)]++
		}
		return seen
	}
	if seen := count(false); len(seen) != len(set) {
		t.Fatalf("ACKs on %d of %d paths while all deliver: %v", len(seen), len(set), seen)
	}
	dead, lossy, lostAck := set[1], set[4], set[6]
	for range 3 {
		p.OnLoss(now, dead)
	}
	p.OnLoss(now, lossy)
	ap.AckLost(lostAck)
	seen := count(false)
	for _, e := range []uint16{dead, lossy, lostAck} {
		if seen[e] != 0 {
			t.Fatalf("%d ACKs on %d (dead %d, lossy %d, lost an ACK %d): %v", seen[e], e, dead, lossy, lostAck, seen)
		}
	}
	if len(seen) != len(set)-3 {
		t.Fatalf("ACKs on %d paths, want %d: %v", len(seen), len(set)-3, seen)
	}
	// An ACK of data on the path that lost an acknowledgement clears it.
	p.OnAck(now, lostAck, 20*time.Microsecond, false)
	if seen := count(false); seen[lostAck] == 0 {
		t.Fatalf("no ACK on %d after its data was acknowledged: %v", lostAck, seen)
	}
	// Urgent: the path acknowledged last, of those that deliver.
	last := set[7]
	p.OnAck(now+clock.Time(time.Millisecond), last, 20*time.Microsecond, false)
	if e := ap.NextAck(true); e != last {
		t.Fatalf("urgent ACK on %d, want %d, acknowledged last", e, last)
	}
	ap.AckLost(last)
	if e := ap.NextAck(true); e == last || e == dead || e == lossy {
		t.Fatalf("urgent ACK on %d after its ACK was lost (dead %d, lossy %d)", e, dead, lossy)
	}
	// Every active path losing an acknowledgement clears the marks: a QP
	// that sends no data learns nothing else. (last is marked already.)
	for _, e := range set {
		if e != last {
			ap.AckLost(e)
		}
	}
	if seen := count(false); len(seen) != len(set)-2 || seen[dead] != 0 || seen[lossy] != 0 {
		t.Fatalf("after every path lost an ACK: %v (dead %d, lossy %d)", seen, dead, lossy)
	}
}

// TestAdaptiveResendAvoidsLossyPaths: a resend skips paths whose latest
// packet was lost while any path delivers, and an urgent one (in RTO
// backoff) takes the path acknowledged last.
func TestAdaptiveResendAvoidsLossyPaths(t *testing.T) {
	seed := testutil.Seed(t)
	set := Entropies(seed, 16)
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	r := p.(Resender)
	now := warm(p, 0, 400)
	// Half the paths lose their latest packet: too few losses each to go
	// out of the set.
	lossy := map[uint16]bool{}
	for i, e := range set {
		if i%2 == 0 {
			p.OnLoss(now, e)
			lossy[e] = true
		}
	}
	for _, st := range p.Stats() {
		if st.Down {
			t.Fatalf("a path went out after one loss: %+v", st)
		}
	}
	for range 200 {
		if e := r.NextResend(now, false); lossy[e] {
			t.Fatalf("a resend went to %d, which lost its latest packet", e)
		}
	}
	last := set[5]
	now += clock.Time(time.Millisecond)
	p.OnAck(now, last, 20*time.Microsecond, false)
	for range 5 {
		if e := r.NextResend(now, true); e != last {
			t.Fatalf("urgent resend on %d, want %d, acknowledged last", e, last)
		}
	}
	// The path acknowledged last loses the resend: the next urgent one
	// moves on to another path that delivers.
	p.OnLoss(now, last)
	if e := r.NextResend(now, true); e == last || lossy[e] {
		t.Fatalf("urgent resend on %d after %d lost it", e, last)
	}
	// When every path lost its latest packet, resends still go out.
	for _, e := range set {
		p.OnLoss(now, e)
	}
	for range 50 {
		r.NextResend(now, false)
		r.NextResend(now, true)
	}
}

func TestAdaptiveAckResendNoAllocs(t *testing.T) {
	p := NewAdaptive(Entropies(1, 64), 1, AdaptiveConfig{})
	ap, r := p.(AckPather), p.(Resender)
	var now clock.Time
	var i int
	allocs := testing.AllocsPerRun(20000, func() {
		now = now.Add(time.Microsecond)
		i++
		e := p.Next(now)
		if i%7 == 0 {
			p.OnLoss(now, e)
			ap.AckLost(e)
		} else {
			p.OnAck(now, e, time.Duration(5+i%11)*time.Microsecond, false)
		}
		ap.NextAck(i%3 == 0)
		r.NextResend(now, i%5 == 0)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
}

// TestAdaptiveOneProbeAtATime: with half the paths out of the set and all
// their probes due, a burst of new packets carries one probe until it is
// answered or times out, not one per path.
func TestAdaptiveOneProbeAtATime(t *testing.T) {
	const us = clock.Time(time.Microsecond)
	seed := testutil.Seed(t)
	set := Entropies(seed, 16)
	p := NewAdaptive(set, seed, AdaptiveConfig{})
	now := warm(p, 0, 400)
	for i, e := range set {
		if i%2 == 0 {
			for range 3 {
				p.OnLoss(now, e)
			}
		}
	}
	now += 10 * clock.Time(time.Millisecond) // every probe long due
	probes := func() (n uint64) {
		for _, st := range p.Stats() {
			n += st.Probes
		}
		return n
	}
	// A burst shorter than the probe timeout (2 x 20µs, at least 50µs).
	for range 20 {
		p.Next(now)
		now += 2 * us
	}
	if n := probes(); n != 1 {
		t.Fatalf("%d probes in a burst of 20 packets, want 1", n)
	}
	// After the probe timed out, the next one goes out.
	now += 200 * us
	for range 5 {
		p.Next(now)
		now += 2 * us
	}
	if n := probes(); n != 2 {
		t.Fatalf("%d probes after the first timed out, want 2", n)
	}
}

// TestAdaptiveUrgentAfterSpineFailure: two spines, 8 entropies on one and
// 24 on the other (as the fabric's hash happened to split a QP's set in
// spray compare). The second spine dies: nothing more is learned of its
// entropies, whose record stays clean, while the first spine keeps
// delivering the QP's packets but loses a packet on each of its entropies
// (the peer's acknowledgements went to the dead spine). An urgent resend
// and an urgent acknowledgement go to the spine that delivered last, not
// to a clean entropy of the dead one; and with the spines unknown (no
// OnPath), the rule is as before: the freshest clean entropy.
func TestAdaptiveUrgentAfterSpineFailure(t *testing.T) {
	const us = clock.Time(time.Microsecond)
	for _, known := range []bool{true, false} {
		seed := testutil.Seed(t)
		set := Entropies(seed, 32)
		p := NewAdaptive(set, seed, AdaptiveConfig{})
		live := map[uint16]bool{}
		for i, e := range set {
			live[e] = i < 8
			if known {
				sig := uint64(2)
				if live[e] {
					sig = 1
				}
				p.(PathObserver).OnPath(0, e, sig)
			}
		}
		now := warm(p, 0, 640)
		// The dead spine's entropies: their last packets before the failure
		// were acknowledged. Then only the live spine's carry data; each
		// delivers some, and then loses one.
		now += clock.Time(time.Millisecond)
		for range 3 {
			for _, e := range set[:8] {
				p.OnAck(now+20*us, e, 20*time.Microsecond, false)
				now += 10 * us
			}
		}
		for _, e := range set[:8] {
			p.OnLoss(now, e)
		}
		r, ap := p.(Resender), p.(AckPather)
		e1, e2 := r.NextResend(now, true), ap.NextAck(true)
		if known && (!live[e1] || !live[e2]) {
			t.Fatalf("after the spine failure: urgent resend on %d (live spine: %v), urgent ACK on %d (%v)", e1, live[e1], e2, live[e2])
		}
		if !known && (live[e1] || live[e2]) {
			t.Fatalf("spines unknown: urgent resend on %d, ACK on %d, want clean entropies (not the 8 that lost)", e1, e2)
		}
	}
}
