package cc

import (
	"math"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
)

func TestFixed(t *testing.T) {
	var zero Fixed
	if zero.Window() != 0 || zero.Rate() != 0 || zero.NextTimer() != clock.Never {
		t.Fatalf("zero Fixed: window %d rate %v timer %v, want unlimited, unpaced, never", zero.Window(), zero.Rate(), zero.NextTimer())
	}
	var c Controller = NewFixed(1.25e9, 64<<10)
	c.OnSend(1, 4096)
	c.OnAck(Sample{Now: 2, AckedBytes: 4096, RTT: time.Microsecond, ECNCount: 3, INT: make([]Hop, 2)})
	c.OnLoss(3, 4096)
	c.OnTimeout(4)
	c.OnCNP(5)
	c.OnTimer(6)
	if c.Window() != 64<<10 || c.Rate() != 1.25e9 {
		t.Fatalf("Fixed changed after events: window %d rate %v", c.Window(), c.Rate())
	}
	for _, f := range []Fixed{{BytesPerSec: -1, WindowBytes: -5}, {BytesPerSec: math.NaN()}, {BytesPerSec: math.Inf(1)}} {
		if f.Window() != 0 || f.Rate() != 0 {
			t.Errorf("%+v: window %d rate %v, want 0, 0", f, f.Window(), f.Rate())
		}
	}
}

// run drives a backlogged sender through p in simulated time: each packet
// goes at the pacer's earliest time (never before the previous one, plus
// gap(i) of idle time). It returns the send times.
func run(p *Pacer, n int, size func(i int) int, rate func(i int) float64, gap func(i int) time.Duration, start clock.Time) []clock.Time {
	times := make([]clock.Time, n)
	now := start
	for i := range n {
		now = now.Add(gap(i))
		if next := p.Next(now, rate(i)); next > now {
			now = next
		}
		times[i] = now
		p.OnSend(now, size(i), rate(i))
	}
	return times
}

func none(int) time.Duration { return 0 }

// TestPacerLongRunRate sends 1e6 packets at rates whose packet spacing is
// not a whole number of nanoseconds: per-packet rounding would be off by
// up to 1%; the pacer must be within 0.1%.
func TestPacerLongRunRate(t *testing.T) {
	r := testutil.Rand(t)
	const n = 1000000
	for _, rate := range []float64{1.25e9 * 0.8, 3e9 + 7, 12.5e9 / 3, 25e9, 1e6 + 1} {
		for _, burst := range []int{0, 9000} {
			sizes := make([]int, n)
			var total float64
			for i := range sizes {
				sizes[i] = 64 + r.IntN(1500)
				total += float64(sizes[i])
			}
			p := NewPacer(burst)
			times := run(p, n, func(i int) int { return sizes[i] }, func(int) float64 { return rate }, none, 12345)
			// Bytes after the first packet over the time they took.
			got := (total - float64(sizes[0])) / (float64(times[n-1]-times[0]) * 1e-9)
			// (The initial burst is negligible against ~800 MB.)
			if err := math.Abs(got-rate) / rate; err > 0.001 {
				t.Errorf("rate %.0f burst %d: average %.0f B/s, off by %.4f%%", rate, burst, got, 100*err)
			}
		}
	}
}

// TestPacerBurstBound checks, for every pair of sends, that the bytes sent
// between them fit the burst plus the rate, with idle gaps that refill the
// bucket at random.
func TestPacerBurstBound(t *testing.T) {
	r := testutil.Rand(t)
	const n = 200000
	for _, burst := range []int{0, 1500, 64 << 10} {
		rate := 1e9 + float64(r.IntN(1e9))
		sizes := make([]int, n)
		gaps := make([]time.Duration, n)
		for i := range n {
			sizes[i] = 64 + r.IntN(9000)
			if r.IntN(50) == 0 {
				gaps[i] = time.Duration(r.IntN(200000))
			}
		}
		p := NewPacer(burst)
		times := run(p, n, func(i int) int { return sizes[i] }, func(int) float64 { return rate },
			func(i int) time.Duration { return gaps[i] }, 0)
		// Sent(i..j-1) <= burst + rate*(t_j - t_i) + 1ns of rate, for i < j:
		// with S_i the bytes before send i, (S_j - rate t_j) - (S_i - rate t_i)
		// <= bound; keep the running minimum of S_i - rate t_i.
		bound := float64(burst) + rate*1e-9
		var S float64
		minv := math.Inf(1)
		maxExcess := math.Inf(-1)
		for j := range n {
			v := S - rate*float64(times[j])*1e-9
			if j > 0 {
				maxExcess = max(maxExcess, v-minv)
			}
			minv = min(minv, v)
			S += float64(sizes[j])
		}
		if maxExcess > bound {
			t.Errorf("burst %d rate %.0f: %.1f bytes beyond the rate in some interval, bound %.1f", burst, rate, maxExcess, bound)
		}
	}
}

// TestPacerBurstUse checks that the burst is there to be used: after an
// idle period, a burst's worth of packets goes at once, and no more.
func TestPacerBurstUse(t *testing.T) {
	const burst, size, rate = 64 << 10, 1500, 1e9
	p := NewPacer(burst)
	times := run(p, 1000, func(int) int { return size }, func(int) float64 { return rate }, none, 0)
	now := times[len(times)-1].Add(time.Millisecond) // refills 1 MB: the bucket is full
	sent := 0
	for p.Next(now, rate) <= now {
		p.OnSend(now, size, rate)
		sent += size
	}
	// Packets go while the bucket is not in debt: burst/size of them, plus
	// the one that overdraws it.
	if want := (burst/size + 1) * size; sent != want {
		t.Fatalf("after idle: %d bytes at once, want %d", sent, want)
	}
}

func TestPacerRateChange(t *testing.T) {
	const n = 500000
	for _, rates := range [][2]float64{{1e9, 3e9 + 1}, {5e9, 1.1e8}} {
		p := NewPacer(0)
		rate := func(i int) float64 {
			if i < n {
				return rates[0]
			}
			return rates[1]
		}
		times := run(p, 2*n, func(int) int { return 1000 + 17 }, rate, none, 0)
		for k, seg := range [][2]int{{0, n}, {n, 2 * n}} {
			// Packets seg[0]..seg[1]-1 leave at the segment's rate.
			got := float64((seg[1]-seg[0]-1)*1017) / (float64(times[seg[1]-1]-times[seg[0]]) * 1e-9)
			if err := math.Abs(got-rates[k]) / rates[k]; err > 0.001 {
				t.Errorf("%v segment %d: %.0f B/s, off by %.4f%%", rates, k, got, 100*err)
			}
		}
		// The first packet at the new rate waits out the debt of the last
		// one at the old rate (its size, plus under a nanosecond's worth at
		// the old rate), at the new rate.
		lo, hi := 1017e9/rates[1], (1017+rates[0]*1e-9)*1e9/rates[1]
		if d := float64(times[n] - times[n-1]); d < lo-1 || d > hi+1 {
			t.Errorf("%v: gap at the change %.0f ns, want %.1f..%.1f", rates, d, lo, hi)
		}
	}
}

func TestPacerExactSpacing(t *testing.T) {
	p := NewPacer(0)
	// 1000 bytes at 1e9 B/s: one packet per 1000 ns, from the first on.
	for i := range 10 {
		now := clock.Time(5000 + 1000*i)
		if next := p.Next(now, 1e9); next != now {
			t.Fatalf("packet %d may go at %v, want %v", i, next, now)
		}
		if next := p.Next(now-1, 1e9); i > 0 && next != now {
			t.Fatalf("packet %d asked 1 ns early: may go at %v, want %v", i, next, now)
		}
		p.OnSend(now, 1000, 1e9)
	}
}

func TestPacerUnpacedAndEdges(t *testing.T) {
	var zero Pacer // usable: no burst
	if zero.Next(100, 1e9) > 100 {
		t.Fatal("zero Pacer holds the first packet")
	}
	zero.OnSend(100, 1000, 1e9)
	if got := zero.Next(100, 1e9); got != 1100 {
		t.Fatalf("zero Pacer: next at %v, want 1100", got)
	}
	p := NewPacer(3000)
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		for range 100 {
			if next := p.Next(50, rate); next > 50 {
				t.Fatalf("rate %v: unpaced packet held until %v", rate, next)
			}
			p.OnSend(50, 9000, rate)
		}
	}
	// Unpaced traffic leaves the bucket full: a 3000-byte burst at once.
	for i := range 3 {
		if next := p.Next(50, 1e6); next > 50 {
			t.Fatalf("burst packet %d held until %v", i, next)
		}
		p.OnSend(50, 1500, 1e6)
	}
	if next := p.Next(50, 1e6); next <= 50 {
		t.Fatal("burst exceeded")
	}
	// A rate so low that the wait overflows a Time.
	p.OnSend(50, 1<<30, 1e-300)
	if next := p.Next(50, 1e-300); next != clock.Never {
		t.Fatalf("huge wait: %v, want never", next)
	}
	if p.Burst() != 3000 || NewPacer(-5).Burst() != 0 {
		t.Fatal("Burst")
	}
}

func TestNoAllocs(t *testing.T) {
	p := NewPacer(1500)
	var c Controller = NewFixed(1e9, 1<<20)
	var now clock.Time
	allocs := testing.AllocsPerRun(1000, func() {
		now = max(now, p.Next(now, c.Rate()))
		p.OnSend(now, 1500, c.Rate())
		c.OnSend(now, 1500)
		c.OnAck(Sample{Now: now, AckedBytes: 1500})
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
}

func BenchmarkPacer(b *testing.B) {
	p := NewPacer(0)
	var now clock.Time
	b.ReportAllocs()
	for b.Loop() {
		now = max(now, p.Next(now, 3e9+7))
		p.OnSend(now, 1500, 3e9+7)
	}
}
