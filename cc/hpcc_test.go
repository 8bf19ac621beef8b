package cc

import (
	"math"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// port is a synthetic switch egress port that stamps INT records: its
// transmitted-bytes counter and clock advance as if it sent at util × its
// line rate, with a queue of qlen bytes.
type port struct {
	sw, port uint16
	mbps     uint32
	ts       uint64
	tx       uint32
}

func (p *port) bytesPerSec() float64 { return float64(p.mbps) * 1e6 / 8 }

// step advances the port by dt at utilization util (of its line rate) and
// returns its record.
func (p *port) step(dt time.Duration, util float64, qlen uint32) Hop {
	p.ts += uint64(dt)
	p.tx += uint32(p.bytesPerSec() * util * dt.Seconds())
	return Hop{Switch: p.sw, Port: p.port, RateMbps: p.mbps, TS: p.ts, QLen: qlen, TxBytes: p.tx}
}

func records(hops ...Hop) []Hop { return hops }

// hpccRun drives h with one ACK of pkt bytes every dt, keeping inflight
// packets outstanding (a new packet goes for each ACK), with the INT
// records from rec. It calls each after every ACK.
type hpccRun struct {
	h    *HPCC
	now  clock.Time
	pkt  int
	dt   time.Duration
	each func()
}

func newHPCCRun(h *HPCC, inflight, pkt int, dt time.Duration) *hpccRun {
	r := &hpccRun{h: h, pkt: pkt, dt: dt}
	for range inflight {
		h.OnSend(0, pkt)
	}
	return r
}

func (r *hpccRun) acks(n int, rec func() []Hop) {
	for range n {
		r.now = r.now.Add(r.dt)
		r.h.OnAck(Sample{Now: r.now, AckedBytes: r.pkt, RTT: 10 * time.Microsecond, INT: rec()})
		r.h.OnSend(r.now, r.pkt)
		if r.each != nil {
			r.each()
		}
	}
}

const (
	hpccT    = 10 * time.Microsecond
	hpccLine = 12.5e9 // 100 Gb/s
)

// qlenFor returns the queue that adds q to the utilization of p.
func qlenFor(p *port, q float64) uint32 {
	return uint32(q * p.bytesPerSec() * hpccT.Seconds())
}

func TestHPCCDefaults(t *testing.T) {
	h := NewHPCC(HPCCConfig{})
	// W_init = line rate × base RTT = 12.5e9 B/s × 10µs.
	if h.Window() != 125000 || h.Rate() != 12.5e9 || h.NextTimer() != clock.Never {
		t.Fatalf("defaults: window %d rate %v timer %v, want 125000, 12.5e9, never", h.Window(), h.Rate(), h.NextTimer())
	}
	// An ACK without INT changes nothing.
	h.OnAck(Sample{Now: 1, AckedBytes: 4096, RTT: time.Microsecond})
	h.OnLoss(2, 4096)
	h.OnTimeout(3)
	h.OnCNP(4)
	if h.Window() != 125000 {
		t.Fatalf("window moved without INT: %d", h.Window())
	}
	bad := NewHPCC(HPCCConfig{BaseRTT: -1, LineRate: math.NaN(), Eta: 7, InitWindow: -3, AdditiveIncrease: math.Inf(1), MinWindow: -1, QueueOffset: -5})
	if bad.Window() != 125000 || bad.Rate() != 12.5e9 {
		t.Fatalf("bad config: window %d rate %v, want the defaults", bad.Window(), bad.Rate())
	}
}

// TestHPCCCut checks the multiplicative decrease: at a hop loaded to
// U = 1.2 > η, each RTT multiplies the window by about η/U, the rate
// follows window/T, and a sudden overload cuts the window on the next ACK,
// before the reference window moves.
func TestHPCCCut(t *testing.T) {
	const eta, u = 0.95, 1.2
	h := NewHPCC(HPCCConfig{BaseRTT: hpccT, LineRate: hpccLine})
	p := &port{sw: 1, port: 2, mbps: 100000}
	r := newHPCCRun(h, 10, 1000, time.Microsecond)
	rec := func() []Hop { return records(p.step(r.dt, 1, qlenFor(p, u-1))) }
	r.acks(100, rec) // the EWMA settles: (1-0.1)^100
	if got := h.Utilization(); math.Abs(got-u) > 0.01 {
		t.Fatalf("utilization %.4f, want %.2f", got, u)
	}
	updates := 0
	prev := h.Window()
	r.each = func() {
		if want := min(hpccLine, float64(h.Window())*1e9/float64(hpccT)); math.Abs(h.Rate()-want) > 1e9/float64(hpccT) {
			t.Fatalf("rate %.0f for window %d, want %.0f", h.Rate(), h.Window(), want)
		}
		w := h.Window()
		if w == prev {
			return
		}
		updates++
		if prev > 20000 {
			if ratio := float64(w) / float64(prev); math.Abs(ratio-eta/u) > 0.01 {
				t.Errorf("update %d: window %d -> %d, ratio %.4f, want η/U = %.4f", updates, prev, w, ratio, eta/u)
			}
		}
		prev = w
	}
	r.acks(110, rec) // 10 RTTs of ~11 ACKs
	if updates < 8 || updates > 11 {
		t.Errorf("%d window updates in 10 RTTs", updates)
	}
	if w := h.Window(); w > 125000*3/10 {
		t.Errorf("window %d after 10 RTTs at U=1.2, want about %d", w, int(125000*math.Pow(eta/u, 10)))
	}

	// Fast reaction: a sudden queue of 2 BDPs cuts the window on the
	// very next ACKs, within the RTT, without moving the reference window.
	h = NewHPCC(HPCCConfig{BaseRTT: hpccT, LineRate: hpccLine})
	p = &port{sw: 1, port: 2, mbps: 100000}
	r = newHPCCRun(h, 1000, 100, time.Microsecond) // a long RTT's worth in flight
	r.acks(50, func() []Hop { return records(p.step(r.dt, 0.5, 0)) })
	wc := h.RefWindow()
	r.acks(6, func() []Hop { return records(p.step(r.dt, 1, qlenFor(p, 2))) })
	if h.RefWindow() != wc {
		t.Fatalf("reference window moved within an RTT: %d -> %d", wc, h.RefWindow())
	}
	// U from the paper's EWMA (τ/T = 0.1 per ACK here), computed apart
	// from the controller: 49 ACKs at 0.5 (the first record only sets the
	// hop's reference), one at 1 (the queue is the smaller of the record's
	// and the previous one's), five at 1 + 2 (line rate and 2 BDPs queued).
	var uo float64
	for i := range 49 + 1 + 5 {
		x := 0.5
		switch {
		case i == 49:
			x = 1
		case i > 49:
			x = 3
		}
		uo = 0.9*uo + 0.1*x
	}
	if got := h.Utilization(); math.Abs(got-uo) > 1e-6 {
		t.Fatalf("utilization %.6f after the overload, want %.6f", got, uo)
	}
	// W = Wc·η/U + W_AI, W_AI = W_init·(1-η)/100 by default.
	if w, want := h.Window(), float64(wc)*eta/uo+125000*(1-eta)/100; math.Abs(float64(w)-want) > 1 {
		t.Fatalf("window %d after the overload, want Wc·η/U + W_AI = %.0f", w, want)
	}
	if h.Window() > wc*9/10 {
		t.Fatalf("window %d not cut from %d", h.Window(), wc)
	}
}

// TestHPCCGrow checks the increase: below η the reference window grows by
// W_AI per RTT for MaxStage RTTs, then multiplicatively by about η/U, and
// never beyond W_init.
func TestHPCCGrow(t *testing.T) {
	const eta = 0.95
	h := NewHPCC(HPCCConfig{BaseRTT: hpccT, LineRate: hpccLine, AdditiveIncrease: 500})
	p := &port{sw: 1, port: 2, mbps: 100000}
	r := newHPCCRun(h, 10, 1000, time.Microsecond)
	r.acks(200, func() []Hop { return records(p.step(r.dt, 1, qlenFor(p, 0.3))) })
	if h.Window() > 40000 {
		t.Fatalf("setup: window %d, want it cut", h.Window())
	}
	low := func() []Hop { return records(p.step(r.dt, 0.5, 0)) }
	for h.Utilization() >= eta {
		r.acks(1, low)
	}
	var refs []int
	prev := h.RefWindow()
	r.each = func() {
		if wc := h.RefWindow(); wc != prev {
			refs = append(refs, wc-prev)
			prev = wc
		}
	}
	r.acks(80, low) // about 7 RTTs
	if len(refs) < 6 {
		t.Fatalf("%d reference updates, want 6 or more", len(refs))
	}
	for i, d := range refs[:5] {
		if d < 499 || d > 501 {
			t.Errorf("stage %d: reference window grew by %d, want W_AI = 500 (all: %v)", i, d, refs)
		}
	}
	// The 6th update: W = Wc·η/U + W_AI with U ≈ 0.5: about ×1.9.
	if d := refs[5]; d < prev/4 {
		t.Errorf("after MaxStage stages the window grew by %d only (all: %v)", d, refs)
	}
	r.acks(500, low)
	if h.Window() != 125000 || h.Rate() != hpccLine {
		t.Errorf("window %d rate %.0f after a long idle period, want W_init and line rate", h.Window(), h.Rate())
	}
}

// TestHPCCMeasure checks the utilization from the records: the counter
// wraps, the most loaded of several hops counts, records of several paths
// (spraying) are kept apart, and stale records are ignored.
func TestHPCCMeasure(t *testing.T) {
	for _, tc := range []struct {
		name string
		want float64
		rec  func(a, b, c *port) []Hop
	}{
		{"wrap", 0.8, func(a, _, _ *port) []Hop { return records(a.step(time.Microsecond, 0.8, 0)) }},
		{"max of hops", 1.1, func(a, b, _ *port) []Hop {
			return records(a.step(time.Microsecond, 0.3, 0), b.step(time.Microsecond, 1, qlenFor(b, 0.1)))
		}},
		{"two paths", 0.7, func() func(a, b, c *port) []Hop {
			i := 0
			return func(a, b, c *port) []Hop {
				i++
				if i%2 == 0 {
					return records(a.step(2*time.Microsecond, 0.7, 0), b.step(2*time.Microsecond, 0.2, 0))
				}
				return records(a.step(0, 0, 0), c.step(2*time.Microsecond, 0.6, qlenFor(c, 0.1)))
			}
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHPCC(HPCCConfig{BaseRTT: hpccT, LineRate: hpccLine})
			a := &port{sw: 1, port: 1, mbps: 100000, tx: math.MaxUint32 - 5000, ts: 1e9}
			b := &port{sw: 2, port: 7, mbps: 40000, tx: 123456789}
			c := &port{sw: 3, port: 7, mbps: 25000, tx: 987654321}
			r := newHPCCRun(h, 10, 1000, time.Microsecond)
			r.acks(200, func() []Hop { return tc.rec(a, b, c) })
			if got := h.Utilization(); math.Abs(got-tc.want) > 0.02 {
				t.Fatalf("utilization %.4f, want %.2f", got, tc.want)
			}
		})
	}
	// A stale record (an older packet's, reordered) changes nothing.
	h := NewHPCC(HPCCConfig{BaseRTT: hpccT, LineRate: hpccLine})
	a := &port{sw: 1, port: 1, mbps: 100000}
	r := newHPCCRun(h, 10, 1000, time.Microsecond)
	old := a.step(time.Microsecond, 1, 0)
	r.acks(100, func() []Hop { return records(a.step(time.Microsecond, 0.5, 0)) })
	u, w := h.Utilization(), h.Window()
	old.QLen = 1 << 30
	h.OnAck(Sample{Now: r.now, AckedBytes: 1000, INT: records(old)})
	if h.Utilization() != u || h.Window() != w {
		t.Fatalf("stale record moved U %.3f -> %.3f, window %d -> %d", u, h.Utilization(), w, h.Window())
	}
	// Zero-rate records are harmless.
	h.OnAck(Sample{Now: r.now, AckedBytes: 1000, INT: make([]Hop, 3)})
	if h.Utilization() != u || h.Window() != w {
		t.Fatal("empty records moved the controller")
	}
}

// TestHPCCManyHops fills the hop table past its size: it stays bounded and
// keeps working.
func TestHPCCManyHops(t *testing.T) {
	h := NewHPCC(HPCCConfig{})
	ports := make([]port, 3*hpccHops)
	for i := range ports {
		ports[i] = port{sw: uint16(i), port: 1, mbps: 100000}
	}
	r := newHPCCRun(h, 10, 1000, time.Microsecond)
	for round := range 20 {
		for i := range ports {
			if round < 10 || i < 4 {
				r.acks(1, func() []Hop { return records(ports[i].step(time.Microsecond, 1.5, 0)) })
			}
		}
	}
	if u := h.Utilization(); math.Abs(u-1.5) > 0.05 {
		t.Fatalf("utilization %.3f, want 1.5", u)
	}
	if cap(h.hops) > hpccHops {
		t.Fatalf("hop table of %d entries, want at most %d", cap(h.hops), hpccHops)
	}
}

// TestHPCCHopTableGrows: the hop table holds what the records named, not
// its largest size: three ports seen take at most 4 entries, and the
// utilization is measured all the same.
func TestHPCCHopTableGrows(t *testing.T) {
	h := NewHPCC(HPCCConfig{})
	if cap(h.hops) != 0 {
		t.Fatalf("a new controller holds %d hop entries", cap(h.hops))
	}
	a, b, c := port{sw: 1, port: 1, mbps: 100000}, port{sw: 2, port: 7, mbps: 100000}, port{sw: 3, port: 2, mbps: 100000}
	r := newHPCCRun(h, 10, 1000, time.Microsecond)
	r.acks(200, func() []Hop {
		return records(a.step(time.Microsecond, 0.5, 0), b.step(time.Microsecond, 1.2, 0), c.step(time.Microsecond, 0.3, 0))
	})
	if u := h.Utilization(); math.Abs(u-1.2) > 0.05 {
		t.Fatalf("utilization %.3f, want 1.2 (the busiest hop)", u)
	}
	if len(h.hops) != 3 || cap(h.hops) > 4 {
		t.Fatalf("hop table %d of %d entries for 3 ports", len(h.hops), cap(h.hops))
	}
}

// TestHPCCConverges runs four HPCC senders through a fluid model of one
// 100 Gb/s bottleneck: together they settle near η of the link with almost
// no queue, each near a fair share.
func TestHPCCConverges(t *testing.T) {
	const n = 4
	const dt = 100 * time.Nanosecond
	const B = hpccLine
	var hs [n]*HPCC
	for i := range hs {
		hs[i] = NewHPCC(HPCCConfig{BaseRTT: hpccT, LineRate: B, MaxStage: 5})
	}
	var (
		queue, tx float64
		ts        uint64
		now       clock.Time
	)
	// Every µs one sender (in turn) gets an ACK whose record shows the
	// link as it was one base RTT earlier.
	type snap struct {
		ts    uint64
		q, tx float64
	}
	hist := make([]snap, 0, 1<<16)
	var util, qsum float64
	var samples int
	for step := range 200000 { // 20 ms
		now = now.Add(dt)
		ts += uint64(dt)
		in := 0.0
		for _, h := range hs {
			in += h.Rate() * dt.Seconds()
		}
		out := min(in+queue, B*dt.Seconds())
		queue += in - out
		tx += out
		hist = append(hist, snap{ts: ts, q: queue, tx: tx})
		lag := int(hpccT / dt)
		if step >= lag && step%10 == 0 {
			s := hist[len(hist)-1-lag]
			i := (step / 10) % n
			rec := records(Hop{Switch: 1, Port: 1, RateMbps: 100000, TS: s.ts, QLen: uint32(s.q), TxBytes: uint32(uint64(s.tx))})
			hs[i].OnSend(now, 1000)
			hs[i].OnAck(Sample{Now: now, AckedBytes: 1000, RTT: hpccT, INT: rec})
		}
		if len(hist) == cap(hist) {
			hist = append(hist[:0], hist[len(hist)-lag-1:]...)
		}
		if step > 100000 {
			util += out / (B * dt.Seconds())
			qsum += queue
			samples++
		}
	}
	util /= float64(samples)
	qsum /= float64(samples)
	if util < 0.85 || util > 1.0 {
		t.Errorf("link utilization %.3f, want near η = 0.95", util)
	}
	if bdp := B * hpccT.Seconds(); qsum > 0.1*bdp {
		t.Errorf("mean queue %.0f bytes, want under a tenth of a BDP (%.0f)", qsum, bdp)
	}
	for i, h := range hs {
		if share := h.Rate() / B; share < 0.1 || share > 0.5 {
			t.Errorf("sender %d: %.3f of the link, want near %.3f", i, share, 0.95/n)
		}
	}
	t.Logf("utilization %.3f, mean queue %.0f bytes", util, qsum)
}

// TestHPCCSoftwareFabric checks ByName's calibration for spray's test
// fabric on a 200 Mb/s bottleneck with T = 100µs (B·T = 2500 bytes, under
// two frames). At 90% of the link, every record shows one frame of queue
// (the frame's own wait for the shaper's tokens) and, now and then, a
// burst entering the shaper at many times the link rate: the paper's
// measurement reads U > 1.4 and cuts the window to its minimum, ByName's
// reads U near 0.9 and keeps growing it. A real queue above the frame
// still cuts it.
func TestHPCCSoftwareFabric(t *testing.T) {
	const (
		T     = 100 * time.Microsecond
		line  = 25e6 // 200 Mb/s
		frame = 1400 + 182
	)
	mk, err := ByName("hpcc", Params{LineRate: line, BaseRTT: T, PacketBytes: 1400})
	if err != nil {
		t.Fatal(err)
	}
	run := func(h *HPCC, extraQueue uint32) *hpccRun {
		p := &port{sw: 1, port: 2, mbps: 200}
		r := newHPCCRun(h, 1, frame, 60*time.Microsecond)
		i := 0
		r.acks(400, func() []Hop {
			i++
			if i%5 == 0 { // a burst: 2 frames into the shaper within 2µs
				p.ts += uint64(2 * time.Microsecond)
				p.tx += 2 * frame
				return records(Hop{Switch: p.sw, Port: p.port, RateMbps: p.mbps, TS: p.ts, QLen: frame + extraQueue, TxBytes: p.tx})
			}
			return records(p.step(r.dt, 0.9, frame+extraQueue))
		})
		return r
	}
	paper := NewHPCC(HPCCConfig{BaseRTT: T, LineRate: line})
	run(paper, 0)
	if u := paper.Utilization(); u < 1.3 {
		t.Errorf("paper's measurement: U %.3f, want above 1.3 (a frame of queue is 0.63 of B·T)", u)
	}
	if w := paper.Window(); w != paper.minWindow() {
		t.Errorf("paper's measurement: window %d, want the minimum %d", w, paper.minWindow())
	}
	sw := mk().(*HPCC)
	start := sw.Window()
	sw.setWindow(1500)
	run(sw, 0)
	if u := sw.Utilization(); u < 0.8 || u > 1.0 {
		t.Errorf("ByName's calibration: U %.3f, want near the link's 0.9 plus the bursts", u)
	}
	if w := sw.Window(); w < 2400 || w != start {
		t.Errorf("ByName's calibration: window %d after 24ms at 90%% of the link, want it back at W_init %d", w, start)
	}
	// Two frames queued beyond the sender's own: U ≈ 0.9 + 2·frame/(B·T).
	sw = mk().(*HPCC)
	run(sw, 2*frame)
	if u := sw.Utilization(); u < 1.8 {
		t.Errorf("a real queue: U %.3f, want above 1.8", u)
	}
	if w := sw.Window(); w != sw.minWindow() {
		t.Errorf("a real queue: window %d, want the minimum %d", w, sw.minWindow())
	}
	// The minimum is a frame: one packet in flight, paced at a frame per
	// T at the slowest (less paces a QP below its share of a slow spine).
	if w, r := sw.Window(), sw.Rate(); w < frame || r < frame/T.Seconds()*0.99 {
		t.Errorf("a real queue: window %d, rate %.0f B/s, want at least a frame (%d) and a frame per T", w, r, frame)
	}
}

func FuzzHPCC(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add(encodeHops(Hop{Switch: 1, RateMbps: 1, TS: 5, QLen: math.MaxUint32, TxBytes: 7}))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := NewHPCC(HPCCConfig{})
		now := clock.Time(0)
		for len(data) > 0 {
			n := min(len(data), int(data[0])%(3*hopLen+1))
			data = data[1:]
			n = min(n, len(data))
			now += 1000
			h.OnSend(now, 1000)
			h.OnAck(Sample{Now: now, AckedBytes: 1000, INT: decodeHops(data[:n])})
			data = data[n:]
			if w, r := h.Window(), h.Rate(); w < 1 || w > 125000 || !(r > 0) || r > 12.5e9 {
				t.Fatalf("window %d rate %v", w, r)
			}
		}
	})
}

// TestHPCCDrift checks that the reference window still moves about once
// per RTT when the byte counts drift apart: a sender whose spurious
// retransmissions are sent but never acknowledged a second time.
func TestHPCCDrift(t *testing.T) {
	h := NewHPCC(HPCCConfig{BaseRTT: hpccT, LineRate: hpccLine})
	p := &port{sw: 1, port: 2, mbps: 100000}
	r := newHPCCRun(h, 10, 1000, time.Microsecond)
	h.OnSend(0, 1<<40) // bytes that will never be acknowledged
	prev, updates := h.RefWindow(), 0
	r.each = func() {
		if wc := h.RefWindow(); wc != prev {
			updates++
			prev = wc
		}
	}
	r.acks(200, func() []Hop { return records(p.step(r.dt, 1, qlenFor(p, 0.5))) })
	// 200 µs at one update per 2 × max(T, RTT) = 20µs.
	if updates < 8 || updates > 11 {
		t.Fatalf("%d reference updates in 200µs, want about 10", updates)
	}
}

func BenchmarkHPCCOnAck(b *testing.B) {
	h := NewHPCC(HPCCConfig{})
	ps := []port{{sw: 1, port: 1, mbps: 100000}, {sw: 2, port: 3, mbps: 100000}, {sw: 3, port: 1, mbps: 100000}}
	rec := make([]Hop, len(ps))
	var now clock.Time
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		for i := range ps {
			rec[i] = ps[i].step(time.Microsecond, 0.9, 1000)
		}
		h.OnSend(now, 4096)
		h.OnAck(Sample{Now: now, AckedBytes: 4096, RTT: 12 * time.Microsecond, INT: rec})
	}
}

// TestHPCCMinInflight: with Params.AckEvery, ByName's HPCC keeps a window
// of at least AckEvery frames, so that a receiver that acknowledges every
// AckEvery packets gets them; at a queue that drives the computed window
// to its minimum the pacing rate is still that minimum over T, not the
// larger window's. Without AckEvery the window is the computed one.
func TestHPCCMinInflight(t *testing.T) {
	const (
		T     = 200 * time.Microsecond
		line  = 25e6 // 200 Mb/s
		frame = 3400 + 182
	)
	for _, every := range []int{0, 4} {
		mk, err := ByName("hpcc", Params{LineRate: line, BaseRTT: T, PacketBytes: 3400, AckEvery: every})
		if err != nil {
			t.Fatal(err)
		}
		h := mk().(*HPCC)
		p := &port{sw: 1, port: 2, mbps: 200}
		r := newHPCCRun(h, 1, frame, 60*time.Microsecond)
		r.acks(400, func() []Hop { return records(p.step(r.dt, 1, 4*frame)) }) // a standing queue of 4 frames
		wantW := frame
		if every > 0 {
			wantW = every * frame
		}
		if w := h.Window(); w != wantW {
			t.Errorf("AckEvery %d: window %d at a standing queue, want %d", every, w, wantW)
		}
		if rate, want := h.Rate(), float64(frame)/T.Seconds(); math.Abs(rate-want) > want*0.01 {
			t.Errorf("AckEvery %d: rate %.0f B/s, want the minimum window over T, %.0f", every, rate, want)
		}
	}
}
