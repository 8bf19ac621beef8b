package cc

import (
	"math"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

const us = clock.Time(time.Microsecond)

// dcqcnRun runs d's timers up to end, with a CNP at each time in cnps
// (sorted), and sends sendBytes every µs while sendBytes > 0. A CNP and a
// timer due at the same time: the timer comes first, as in an engine's
// step. It ends with OnTimer(end), so that Alpha is alpha at end.
func dcqcnRun(d *DCQCN, from, end clock.Time, cnps []clock.Time, sendBytes int) {
	defer d.OnTimer(end)
	now := from
	for now < end {
		next := min(end, d.NextTimer())
		if len(cnps) > 0 {
			next = min(next, cnps[0])
		}
		if sendBytes > 0 {
			next = min(next, (now/us+1)*us)
		}
		now = max(now, next)
		if d.NextTimer() <= now {
			d.OnTimer(now)
		}
		if len(cnps) > 0 && cnps[0] <= now {
			d.OnCNP(now)
			cnps = cnps[1:]
		}
		if sendBytes > 0 && now%us == 0 {
			d.OnSend(now, sendBytes)
		}
	}
}

func every(from clock.Time, period time.Duration, n int) []clock.Time {
	ts := make([]clock.Time, n)
	for i := range ts {
		ts[i] = from.Add(period * time.Duration(i))
	}
	return ts
}

func TestDCQCNFirstCNP(t *testing.T) {
	d := NewDCQCN(DCQCNConfig{})
	if d.Rate() != 12.5e9 || d.Window() != 0 || d.Alpha() != 1 || d.NextTimer() != clock.Never {
		t.Fatalf("initial: rate %v window %d alpha %v timer %v", d.Rate(), d.Window(), d.Alpha(), d.NextTimer())
	}
	d.OnSend(0, 1<<30) // at line rate: the byte counter does not run
	d.OnAck(Sample{Now: 1, RTT: time.Microsecond, AckedBytes: 4096})
	d.OnLoss(1, 1)
	d.OnTimeout(1)
	if d.Rate() != 12.5e9 || d.NextTimer() != clock.Never {
		t.Fatal("events other than CNPs moved DCQCN")
	}
	d.OnCNP(10 * us)
	// Alpha starts at 1: the first CNP halves the rate.
	if d.Rate() != 12.5e9/2 || d.TargetRate() != 12.5e9 || d.Alpha() != 1 || d.CNPs() != 1 {
		t.Fatalf("after a CNP: rate %v target %v alpha %v", d.Rate(), d.TargetRate(), d.Alpha())
	}
	if d.NextTimer() != 65*us {
		t.Fatalf("next timer %v, want 65µs (K and T after the CNP)", d.NextTimer())
	}
	// A storm of CNPs stops at MinRate.
	for i := range 100 {
		d.OnCNP(10*us + clock.Time(i))
	}
	if d.Rate() != 1.25e6 {
		t.Fatalf("rate %v after 100 CNPs, want MinRate 1.25e6", d.Rate())
	}
	bad := NewDCQCN(DCQCNConfig{LineRate: math.NaN(), G: 2, MinRate: -1, AlphaPeriod: -1, ByteCounter: -1, FastRecovery: -2, AdditiveRate: math.Inf(1), Window: -5})
	if bad.Rate() != 12.5e9 || bad.Window() != 0 {
		t.Fatalf("bad config: rate %v window %d", bad.Rate(), bad.Window())
	}
	bad.OnCNP(0)
	if bad.NextTimer() != 55*us {
		t.Fatalf("bad config: timer %v, want 55µs", bad.NextTimer())
	}
}

// TestDCQCNAlpha checks that alpha tracks the CNP rate with gain g: CNPs
// more often than K drive it to 1, none decays it by (1-g) per K, and a CNP
// every 100µs (one decay between CNPs) holds it at the fixed point of
// a = (1-g)((1-g)a + g).
func TestDCQCNAlpha(t *testing.T) {
	const g = 1.0 / 256
	d := NewDCQCN(DCQCNConfig{})
	d.OnCNP(0)
	// No CNP for 100 periods of K.
	dcqcnRun(d, 0, 100*55*us, nil, 0)
	if want := math.Pow(1-g, 100); math.Abs(d.Alpha()-want) > 1e-9 {
		t.Fatalf("alpha %v after 100 K without CNP, want %v", d.Alpha(), want)
	}
	// The cut at a CNP is alpha/2 of the rate.
	c := *d
	before, a := c.Rate(), c.Alpha()
	c.OnCNP(100 * 55 * us)
	if want := before * (1 - a/2); math.Abs(c.Rate()-want) > 1 || c.TargetRate() != before {
		t.Fatalf("cut %v -> %v, want ×(1-α/2) = %v", before, c.Rate(), want)
	}
	// A long quiet spell: alpha decays, the rate recovers, the timers stop.
	dcqcnRun(d, 100*55*us, clock.Time(time.Second), nil, 0)
	if d.Alpha() > 1e-4 || d.Rate() != 12.5e9 || d.NextTimer() != clock.Never {
		t.Fatalf("after 1 s: alpha %v rate %v timer %v", d.Alpha(), d.Rate(), d.NextTimer())
	}
	// A CNP every 50µs: alpha climbs as 1 - (1-g)^n (1 - a0) towards 1.
	a0 := d.Alpha()
	start := clock.Time(time.Second)
	dcqcnRun(d, start, start+2000*50*us, every(start, 50*time.Microsecond, 2000), 0)
	if want := 1 - math.Pow(1-g, 2000)*(1-a0); math.Abs(d.Alpha()-want) > 1e-9 || d.Alpha() < 0.99 {
		t.Fatalf("alpha %v after 2000 CNPs 50µs apart, want %v", d.Alpha(), want)
	}
	// A CNP every 100µs: one decay at 55µs between CNPs.
	start = clock.Time(2 * time.Second)
	dcqcnRun(d, start, start+5000*100*us, every(start, 100*time.Microsecond, 5000), 0)
	if want := (1 - g) * g / (1 - (1-g)*(1-g)); math.Abs(d.Alpha()-want) > 0.005 {
		t.Fatalf("alpha %v with a CNP every 100µs, want about %v", d.Alpha(), want)
	}
}

// TestDCQCNRecovery checks the increase stages after two back-to-back CNPs
// (target rate L/2, rate L/4): F timer events of fast recovery halve the
// distance to the target each, then additive increase raises the target by
// R_AI per event; with the byte counter running too, hyper increase
// raises it by i·R_HAI, and the rate gets back to line rate sooner.
func TestDCQCNRecovery(t *testing.T) {
	const L, rai = 12.5e9, 5e6
	d := NewDCQCN(DCQCNConfig{})
	d.OnCNP(0)
	d.OnCNP(1)
	if d.TargetRate() != L/2 || d.Rate() != L/4 {
		t.Fatalf("after two CNPs: target %v rate %v, want L/2, L/4", d.TargetRate(), d.Rate())
	}
	gap := d.TargetRate() - d.Rate()
	for i := 1; i <= 5; i++ {
		d.OnTimer(1 + clock.Time(i)*55*us)
		if d.TargetRate() != L/2 {
			t.Fatalf("fast recovery %d moved the target to %v", i, d.TargetRate())
		}
		if want := L/2 - gap/math.Pow(2, float64(i)); math.Abs(d.Rate()-want) > 1 {
			t.Fatalf("fast recovery %d: rate %v, want %v", i, d.Rate(), want)
		}
	}
	for i := 1; i <= 20; i++ {
		prevRate := d.Rate()
		d.OnTimer(1 + clock.Time(5+i)*55*us)
		if want := L/2 + float64(i)*rai; math.Abs(d.TargetRate()-want) > 1 {
			t.Fatalf("additive increase %d: target %v, want %v", i, d.TargetRate(), want)
		}
		if d.Rate() <= prevRate || d.Rate() > d.TargetRate() {
			t.Fatalf("additive increase %d: rate %v -> %v, target %v", i, prevRate, d.Rate(), d.TargetRate())
		}
	}
	// Timer alone: 1 s brings a target of L/2 + (1s/55µs)·R_AI, ~ L/2 + 9e10:
	// back at line rate.
	noBytes := NewDCQCN(DCQCNConfig{})
	noBytes.OnCNP(0)
	noBytes.OnCNP(1)
	withBytes := NewDCQCN(DCQCNConfig{})
	withBytes.OnCNP(0)
	withBytes.OnCNP(1)
	// 10 MB every 55µs: byte counter events as often as timer events.
	var tNo, tWith clock.Time
	prevTarget, hyper := withBytes.TargetRate(), false
	for now := clock.Time(1); now < clock.Time(time.Second) && (tNo == 0 || tWith == 0); now += us {
		noBytes.OnTimer(now)
		withBytes.OnTimer(now)
		withBytes.OnSend(now, 10000000/55+1)
		if step := withBytes.TargetRate() - prevTarget; step > rai+1 {
			hyper = true
		}
		prevTarget = withBytes.TargetRate()
		if tNo == 0 && noBytes.Rate() >= 0.99*L {
			tNo = now
		}
		if tWith == 0 && withBytes.Rate() >= 0.99*L {
			tWith = now
		}
	}
	if !hyper {
		t.Error("no hyper increase with both counters past F")
	}
	if tWith == 0 || tNo == 0 || tWith >= tNo {
		t.Errorf("99%% of line rate after %v with the byte counter, %v without", tWith, tNo)
	}
	t.Logf("back to 99%% of line rate after %v (timer only) and %v (timer and byte counter)", tNo, tWith)
}

// TestDCQCNLateTimer checks that one late OnTimer catches up with every
// missed period, with bounded work.
func TestDCQCNLateTimer(t *testing.T) {
	d := NewDCQCN(DCQCNConfig{})
	d.OnCNP(0)
	d.OnTimer(clock.Time(1000 * 55 * time.Microsecond))
	if want := math.Pow(1-1.0/256, 1000); math.Abs(d.Alpha()-want) > 1e-9 {
		t.Fatalf("alpha %v, want %v", d.Alpha(), want)
	}
	if d.Rate() != 12.5e9 || d.NextTimer() != clock.Never {
		t.Fatalf("rate %v next %v: want the line rate and no timer (alpha waits for the next CNP)", d.Rate(), d.NextTimer())
	}
	d.OnCNP(0)
	d.OnSend(1, math.MaxInt)
	if d.Rate() != 12.5e9 {
		t.Fatalf("a huge send: rate %v", d.Rate())
	}
	d.OnCNP(0)
	d.OnTimer(clock.Never - 1)
	if d.Rate() != 12.5e9 || d.NextTimer() != clock.Never {
		t.Fatalf("timer at the end of time: rate %v next %v", d.Rate(), d.NextTimer())
	}
}

func TestCNPGenerator(t *testing.T) {
	var g CNPGenerator // 50µs
	sent := 0
	for now := clock.Time(0); now < clock.Time(time.Millisecond); now += us {
		if g.OnCE(now) {
			if now%(50*us) != 0 {
				t.Fatalf("CNP at %v", now)
			}
			sent++
		}
	}
	if sent != 20 || g.Sent != 20 || g.Suppressed != 980 {
		t.Fatalf("CE every µs for 1 ms: %d CNPs (sent %d, suppressed %d), want 20", sent, g.Sent, g.Suppressed)
	}
	g2 := CNPGenerator{Interval: 4 * time.Microsecond}
	if !g2.OnCE(100) || g2.OnCE(4099) || !g2.OnCE(4100) {
		t.Fatal("4µs interval")
	}
}

func TestControllersNoAllocs(t *testing.T) {
	p := &port{sw: 1, port: 1, mbps: 100000}
	h := NewHPCC(HPCCConfig{})
	s := NewSwift(SwiftConfig{})
	d := NewDCQCN(DCQCNConfig{})
	var g CNPGenerator
	a := NewAuto(AutoConfig{Swift: SwiftConfig{RelativeTarget: true}})
	for _, c := range []Controller{h, s, d, a} {
		var now clock.Time
		rec := make([]Hop, 1)
		allocs := testing.AllocsPerRun(1000, func() {
			now += 1000
			c.OnSend(now, 1500)
			rec[0] = p.step(time.Microsecond, 0.9, 1000)
			c.OnAck(Sample{Now: now, AckedBytes: 1500, RTT: 30 * time.Microsecond, HoldTime: time.Microsecond, INT: rec})
			if g.OnCE(now) {
				c.OnCNP(now)
			}
			c.OnTimer(now)
			_, _, _ = c.Window(), c.Rate(), c.NextTimer()
		})
		if allocs != 0 {
			t.Errorf("%T: %v allocations per packet", c, allocs)
		}
	}
}

func FuzzDCQCN(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 200, 9, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDCQCN(DCQCNConfig{ByteCounter: 1 << 16})
		now := clock.Time(0)
		for _, b := range data {
			now += clock.Time(b&0x3f) * us
			switch b >> 6 {
			case 0:
				d.OnCNP(now)
			case 1:
				d.OnSend(now, int(b)<<12)
			default:
				if next := d.NextTimer(); next != clock.Never && next < now {
					d.OnTimer(now)
				}
			}
			if r, a := d.Rate(), d.Alpha(); r < 1.25e6 || r > 12.5e9 || a < 0 || a > 1 || d.TargetRate() > 12.5e9 {
				t.Fatalf("rate %v alpha %v target %v", r, a, d.TargetRate())
			}
		}
	})
}

func BenchmarkDCQCN(b *testing.B) {
	d := NewDCQCN(DCQCNConfig{})
	var g CNPGenerator
	var now clock.Time
	b.ReportAllocs()
	for b.Loop() {
		now += 100
		d.OnSend(now, 4096)
		if now%(20*us) == 0 && g.OnCE(now) {
			d.OnCNP(now)
		}
		if d.NextTimer() <= now {
			d.OnTimer(now)
		}
	}
}

// dcqcnModel is DCQCN written the slow way: a tick per µs, countdowns for
// the timers, every rule spelled out.
type dcqcnModel struct {
	rc, rt, alpha          float64
	alphaLeft, rateLeft    int // µs until the timer fires; -1: off
	tCount, bcCount, bytes int
}

func (m *dcqcnModel) increase(line float64) {
	switch {
	case m.tCount <= 5 && m.bcCount <= 5:
	case m.tCount > 5 && m.bcCount > 5:
		m.rt += float64(min(m.tCount, m.bcCount)-5) * 50e6
	default:
		m.rt += 5e6
	}
	m.rt = min(m.rt, line)
	m.rc = min((m.rt+m.rc)/2, line)
	if line-m.rc < 1 {
		m.rc, m.rt = line, line
	}
}

// tick runs one µs: the timers, then a CNP if cnp, else a send of bytes.
func (m *dcqcnModel) tick(cnp bool, bytes int) {
	const line, g, b = 12.5e9, 1.0 / 256, 1 << 20
	if m.alphaLeft > 0 {
		if m.alphaLeft--; m.alphaLeft == 0 {
			m.alpha *= 1 - g
			m.alphaLeft = 55
			if m.alpha < 1e-4 {
				m.alphaLeft = -1
			}
		}
	}
	if m.rateLeft > 0 {
		if m.rateLeft--; m.rateLeft == 0 {
			m.tCount++
			m.increase(line)
			m.rateLeft = 55
		}
	}
	if m.rc >= line {
		m.rateLeft, m.bytes = -1, 0
	}
	if cnp {
		m.rt = m.rc
		m.rc = max(1.25e6, m.rc*(1-m.alpha/2))
		m.alpha = (1-g)*m.alpha + g
		m.tCount, m.bcCount, m.bytes = 0, 0, 0
		m.alphaLeft, m.rateLeft = 55, 55
		return // the timers fire 55 µs from now, the send does not count yet
	}
	if m.rc < line {
		m.bytes += bytes
		for m.bytes >= b && m.rc < line {
			m.bytes -= b
			m.bcCount++
			m.increase(line)
		}
	}
	if m.rc >= line {
		m.rateLeft, m.bytes = -1, 0
	}
}

// TestDCQCNModel drives DCQCN and the model with random CNPs and sends,
// µs by µs, and compares them at every step.
func TestDCQCNModel(t *testing.T) {
	r := testutil.Rand(t)
	for round := range 20 {
		d := NewDCQCN(DCQCNConfig{ByteCounter: 1 << 20})
		m := &dcqcnModel{rc: 12.5e9, rt: 12.5e9, alpha: 1, alphaLeft: -1, rateLeft: -1}
		cnpEvery := 1 + r.IntN(400) // mean µs between CNPs
		sendMax := r.IntN(200000)   // bytes per µs
		for tick := range 20000 {
			now := clock.Time(tick) * us
			cnp := r.IntN(cnpEvery) == 0
			bytes := 0
			if sendMax > 0 {
				bytes = r.IntN(sendMax)
			}
			m.tick(cnp, bytes)
			if cnp {
				d.OnCNP(now)
			} else {
				if d.NextTimer() <= now {
					d.OnTimer(now)
				}
				d.OnSend(now, bytes)
			}
			if math.Abs(d.Rate()-m.rc) > 1e-6*m.rc || math.Abs(d.TargetRate()-m.rt) > 1e-6*m.rt || math.Abs(d.Alpha()-m.alpha) > 1e-9 {
				t.Fatalf("round %d (CNP 1/%dµs, sends < %d B/µs), %v: rate %v target %v alpha %v; model %v %v %v",
					round, cnpEvery, sendMax, now, d.Rate(), d.TargetRate(), d.Alpha(), m.rc, m.rt, m.alpha)
			}
		}
	}
}

// TestByNameDCQCNCalibration: ByName's DCQCN runs its timers at 3 × the
// base RTT and, with the line rate known, adds 1/1000 of it per additive
// step.
func TestByNameDCQCNCalibration(t *testing.T) {
	mk, err := ByName("dcqcn", Params{LineRate: 25e6, BaseRTT: 100 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	d := mk().(*DCQCN)
	d.OnCNP(0)
	d.OnCNP(0) // the target rate is now below the line rate
	if next := d.NextTimer(); next != clock.Time(300*time.Microsecond) {
		t.Fatalf("timer after a CNP at 0: %v, want 300µs", next)
	}
	// F = 5 fast-recovery events, then each event adds R_AI to the target.
	now := clock.Time(0)
	for range 6 {
		now = d.NextTimer()
		d.OnTimer(now)
	}
	rt := d.TargetRate()
	now = d.NextTimer()
	d.OnTimer(now)
	if got := d.TargetRate() - rt; math.Abs(got-25e3) > 1e-6 {
		t.Fatalf("additive step %v B/s, want 25e3 (line rate / 1000)", got)
	}
	mk, _ = ByName("dcqcn", Params{})
	d = mk().(*DCQCN)
	d.OnCNP(0)
	if next := d.NextTimer(); next != clock.Time(300*time.Microsecond) {
		t.Fatalf("no base RTT: timer %v, want 3 × SoftwareBaseRTT", next)
	}
}

// TestDCQCNLazyMatchesPeriodic drives the model, whose timers fire every
// 55 µs, and DCQCN, which sees only the CNPs, the sends and a read now and
// then (OnTimer(now), then Rate), on the same recorded sequence: rate,
// target and alpha must be equal, bit for bit, at every read and every
// CNP, while DCQCN's NextTimer asks for at most half the wake-ups the
// model's two timers take (the alpha timer needs none).
func TestDCQCNLazyMatchesPeriodic(t *testing.T) {
	r := testutil.Rand(t)
	for round := range 20 {
		d := NewDCQCN(DCQCNConfig{ByteCounter: 1 << 20})
		m := &dcqcnModel{rc: 12.5e9, rt: 12.5e9, alpha: 1, alphaLeft: -1, rateLeft: -1}
		cnpEvery := 20 + r.IntN(2000)
		sendEvery := 1 + r.IntN(50)
		readEvery := 1 + r.IntN(300)
		fired, wakes := 0, 0
		for tick := range 30000 {
			now := clock.Time(tick) * us
			cnp := r.IntN(cnpEvery) == 0
			bytes := 0
			if r.IntN(sendEvery) == 0 {
				bytes = 4096 * (1 + r.IntN(64))
			}
			a, rl := m.alphaLeft, m.rateLeft
			m.tick(cnp, bytes)
			if a == 1 {
				fired++
			}
			if rl == 1 {
				fired++
			}
			if d.NextTimer() <= now && r.IntN(2) == 0 {
				wakes++ // a sender waiting on its pacing wakes here
				d.OnTimer(now)
			}
			switch {
			case cnp:
				d.OnCNP(now)
			case bytes > 0:
				d.OnSend(now, bytes)
			}
			if cnp || r.IntN(readEvery) == 0 {
				d.OnTimer(now)
				if d.Rate() != m.rc || d.TargetRate() != m.rt || d.Alpha() != m.alpha {
					t.Fatalf("round %d (CNP 1/%dµs, send 1/%dµs, read 1/%dµs), %v: rate %v target %v alpha %v; periodic %v %v %v",
						round, cnpEvery, sendEvery, readEvery, now, d.Rate(), d.TargetRate(), d.Alpha(), m.rc, m.rt, m.alpha)
				}
			}
		}
		if fired == 0 || 2*wakes > fired {
			t.Errorf("round %d: %d rate-timer wake-ups against %d periodic expiries", round, wakes, fired)
		}
	}
}
