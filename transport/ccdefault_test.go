package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

func TestProfileCC(t *testing.T) {
	if c, ok := ProfileCC(Spray, cc.Params{PacketBytes: 1400})().(*cc.Auto); !ok || c.Using() != "swift" {
		t.Fatalf("spray: %T", c)
	}
	if c, ok := ProfileCC(RoCE, cc.Params{PacketBytes: 1400})().(*cc.DCQCN); !ok {
		t.Fatalf("roce: %T", c)
	}
	a, b := ProfileCC(Spray, cc.Params{}), ProfileCC(Spray, cc.Params{})
	if a() == b() {
		t.Fatal("controllers shared between QPs")
	}
}

// TestDefaultCCSpray: with Config.CC nil a spray QP runs the profile's
// controller, in units of its own payload, and keeps a shallow bottleneck
// queue from overflowing, where the unlimited window (cc.Fixed{})
// overflows it. Every message arrives intact either way.
func TestDefaultCCSpray(t *testing.T) {
	seed := testutil.Seed(t)
	msgs := randomMessages(testutil.Rand(t), 40, 256<<10)
	fabric := mem.Config{Seed: seed, Delay: 5 * time.Microsecond, Bandwidth: 1e9, QueueBytes: 32 << 10}
	drops := map[string]uint64{}
	for _, tc := range []struct {
		name string
		mk   func() cc.Controller
	}{{"default", nil}, {"fixed", func() cc.Controller { return cc.Fixed{} }}} {
		s := newSimPair(t, fabric, Config{Seed: seed, CC: tc.mk})
		if tc.mk == nil {
			if _, none := s.qa.ctrl.(noController); !none {
				t.Fatalf("a QP that has sent nothing holds a %T", s.qa.ctrl)
			}
			s.qa.activate() // what its first message does
			a, ok := s.qa.ctrl.(*cc.Auto)
			if !ok {
				t.Fatalf("default controller %T, want *cc.Auto", s.qa.ctrl)
			}
			if w := a.Window(); w != 16*s.qa.seg { // ByName's 16 packets when the rate is unknown
				t.Fatalf("initial window %d bytes, want 16 packets of the QP's %d-byte payload", w, s.qa.seg)
			}
		}
		transfer(t, s, msgs)
		drops[tc.name] = s.fab.Stats().QueueDrops
		t.Logf("%s: %d queue drops, %d retransmits", tc.name, drops[tc.name], s.qa.Stats().Retransmits)
	}
	if drops["fixed"] == 0 {
		t.Fatal("the unlimited window did not overflow the queue: the bottleneck tests nothing")
	}
	if drops["default"] != 0 {
		t.Fatalf("the default controller overflowed the queue %d times", drops["default"])
	}
}

// TestDefaultCCRoCE: with Config.CC nil a RoCE QP runs DCQCN and marks its
// data packets ECN-capable although Config.ECN is false, so that a switch
// that CE-marks ECN-capable packets slows it down (CNPs); with a controller
// of its own and ECN off, nothing is marked.
func TestDefaultCCRoCE(t *testing.T) {
	seed := testutil.Seed(t)
	msgs := randomMessages(testutil.Rand(t), 20, 256<<10)
	fabric := mem.Config{Seed: seed, Delay: 2 * time.Microsecond, Filter: func(f []byte) bool {
		if len(f) > 200 && len(f) >= 34 && f[15]&3 != 0 { // an ECN-capable data packet
			markCE(f)
		}
		return true
	}}
	s := newSimPair(t, fabric, Config{Profile: RoCE, Seed: seed})
	s.qa.activate() // what its first message does
	d, ok := s.qa.ctrl.(*cc.DCQCN)
	if !ok {
		t.Fatalf("default controller %T, want *cc.DCQCN", s.qa.ctrl)
	}
	start := d.Rate()
	transfer(t, s, msgs)
	rx, tx := s.qb.Stats(), s.qa.Stats()
	t.Logf("default: %d CE marks, %d CNPs received; rate %.3g -> %.3g B/s", rx.ECNMarked, tx.CNPsReceived, start, d.Rate())
	if rx.ECNMarked == 0 || tx.CNPsReceived == 0 || d.Rate() >= start {
		t.Fatal("the default controller got no congestion notification or did not slow down")
	}

	s = newSimPair(t, fabric, Config{Profile: RoCE, Seed: seed, CC: func() cc.Controller { return cc.Fixed{} }})
	transfer(t, s, msgs)
	if n := s.qb.Stats().ECNMarked; n != 0 {
		t.Fatalf("ECN off: %d packets CE-marked, want none ECN-capable", n)
	}
}
