package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// TestParsePFC: pfc=XOFF/XON sets a dynamic (a share) or static (bytes
// with a unit) XOFF and the XON hysteresis, round-trips through String,
// and refuses what no switch could be set to.
func TestParsePFC(t *testing.T) {
	for _, c := range []struct {
		in           string
		alpha        float64
		xoff, resume int
	}{
		{"leafspine:2x2x2,pfc=0.25/6k", 0.25, 0, 6 << 10},
		{"leafspine:2x2x2,pfc=200k/3028", 0, 200 << 10, 3028},
		{"leafspine:2x2x2,pfc=150000B", 0, 150000, 0},
		{"leafspine:2x2x2,pfc=/4000B", 0, 0, 4000},
		{"fattree:4,pfc=1", 1, 0, 0},
	} {
		tp, err := ParseTopo(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if tp.PFCAlpha != c.alpha || tp.PFCXOff != c.xoff || tp.PFCResume != c.resume {
			t.Errorf("%s: alpha %v, xoff %d, resume %d; want %v, %d, %d", c.in, tp.PFCAlpha, tp.PFCXOff, tp.PFCResume, c.alpha, c.xoff, c.resume)
		}
		again, err := ParseTopo(tp.String())
		if err != nil || again != tp {
			t.Errorf("%s: String %q parses to %+v, %v", c.in, tp.String(), again, err)
		}
	}
	for _, s := range []string{
		"leafspine:2x2x2,pfc=0/3k",             // no alpha
		"leafspine:2x2x2,pfc=9",                // alpha above 1
		"leafspine:2x2x2,pfc=2/3k",             // alpha above 1
		"leafspine:2x2x2,pfc=-0.1",             // negative
		"leafspine:2x2x2,pfc=1k",               // static XOFF below a frame
		"leafspine:2x2x2,pfc=10k/10k",          // XON not below XOFF
		"leafspine:2x2x2,pfc=0.125/0",          // no hysteresis
		"leafspine:2x2x2,pfc=0.125/x",          // not bytes
		"leafspine:2x2x2,pfc=NaN",              // not a number
		"leafspine:2x2x2,buffer=100k,pfc=200k", // above the buffer
	} {
		if _, err := ParseTopo(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseTopo(%q): %v, want ErrConfig", s, err)
		}
	}
	// A static XOFF above what a switch shares once headroom is set aside.
	tp, err := ParseTopo("leafspine:4x1x1,rate=10gbit,buffer=60k,pfc=59k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(FabricConfig{Topo: tp, PFC: PFCConfig{On: true}}); !errors.Is(err, ErrConfig) {
		t.Errorf("XOFF above the shared buffer: %v, want ErrConfig", err)
	}
}

// TestPFCThresholds: the same 3:1 incast lets an ingress port hold more
// of the buffer before PAUSE under a higher XOFF share, and pauses the
// senders for less time; with a static XOFF a port's account pauses at
// that many bytes. Every frame arrives under each.
func TestPFCThresholds(t *testing.T) {
	type out struct {
		maxIn  int
		buffer float64
		paused time.Duration
		pauses uint64
	}
	run := func(pfc string) out {
		n := newNet(t, "leafspine:4x1x1,rate=10gbit,hostrate=10gbit,buffer=200k"+pfc, func(c *FabricConfig) {
			c.NICFrames = 200
			c.PFC.On = true
		})
		got := 0
		n.OnDeliver = func(h int, f []byte, now clock.Time) { got++ }
		for src := 1; src < 4; src++ {
			for range 200 {
				n.Host(src).Send(udpFrame(src, 0, 9, 1000, false))
			}
		}
		var o out
		var step func()
		step = func() {
			for i := range n.ports {
				o.maxIn = max(o.maxIn, n.ports[i].inBytes)
			}
			if !n.Idle() {
				n.At(n.now+100, step)
			}
		}
		n.At(0, step)
		n.Run(clock.Never, nil)
		st := n.Stats()
		if st.Drops.Total() != 0 || got != 600 {
			t.Fatalf("pfc %q: %d of 600 delivered, drops %+v", pfc, got, st.Drops)
		}
		o.buffer, o.paused, o.pauses = st.BufferMax, st.PausedTime, st.PauseFrames
		t.Logf("pfc %q: %d pauses, paused %v, buffer max %.3f, account max %d", pfc, o.pauses, o.paused, o.buffer, o.maxIn)
		return o
	}
	low, def, high := run(",pfc=0.05"), run(""), run(",pfc=1")
	if !(low.maxIn < def.maxIn && def.maxIn < high.maxIn) || !(low.buffer < def.buffer && def.buffer < high.buffer) {
		t.Errorf("XOFF share 0.05, 1/8, 1: an ingress account of at most %d, %d, %d bytes, buffer %.3f, %.3f, %.3f: want rising",
			low.maxIn, def.maxIn, high.maxIn, low.buffer, def.buffer, high.buffer)
	}
	if high.paused >= low.paused {
		t.Errorf("paused %v at XOFF share 1, %v at 0.05: want less", high.paused, low.paused)
	}
	// A static XOFF: the account stops growing a headroom's worth of
	// frames (those on the wire and in flight) after it.
	st := run(",pfc=20k/2k")
	if st.pauses == 0 || st.maxIn < 20<<10 || st.maxIn > 20<<10+6*1000 {
		t.Errorf("static XOFF 20 KB: %d PAUSE frames, an account of at most %d bytes", st.pauses, st.maxIn)
	}
}
