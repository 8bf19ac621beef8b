package transport

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// roceDrop names a frame that rocePlan drops: the n-th transmission (1 the
// first) of data PSN start+off, or the n-th sequence NAK when nak is set.
type roceDrop struct {
	off uint32
	n   int
	nak bool
}

// roceRun sends one 64-packet message (1 KiB packets) over a RoCE sim
// pair on a 10µs fabric whose filter drops the frames of drops, and
// returns the pair, the simulated time it took and the number of data
// frames with a PSN above the first dropped one that were sent after that
// drop and before that PSN's next transmission (the responder must drop
// every one of them as out of order).
func roceRun(t *testing.T, cfg Config, drops []roceDrop) (*simPair, time.Duration, uint64) {
	t.Helper()
	seed := testutil.Seed(t)
	cfg.Profile, cfg.Seed = RoCE, seed
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 10 * time.Microsecond}, cfg)
	start := psn.New(s.qa.Info().PSN)
	seen := map[uint32]int{} // transmissions per data PSN offset
	naks := 0
	gap, gapOpen := uint32(0), false
	var behind uint64
	s.fab.SetFilter(func(f []byte) bool {
		var pk wire.Packet
		if err := wire.Decode(f, &pk); err != nil {
			t.Errorf("undecodable frame: %v", err)
			return true
		}
		isNak := pk.BTH.Opcode == wire.OpAcknowledge && pk.AETH.Syndrome == wire.NakPSNSequenceError
		isData := pk.IP.Src == ipA && pk.BTH.Opcode <= wire.OpWriteOnlyImm
		if !isNak && !isData {
			return true
		}
		var off uint32
		if isNak {
			naks++
		} else {
			off = uint32(psn.New(pk.BTH.PSN).Diff(start))
			seen[off]++
			if gapOpen {
				switch {
				case off == gap:
					gapOpen = false
				case off > gap:
					behind++
				}
			}
		}
		for _, d := range drops {
			if d.nak == isNak && ((isNak && d.n == naks) || (!isNak && d.off == off && d.n == seen[off])) {
				if isData && !gapOpen && behind == 0 {
					gap, gapOpen = off, true
				}
				return false
			}
		}
		return true
	})
	msg := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(seed, 6))
	for i := range msg {
		msg[i] = byte(rng.Uint32())
	}
	t0 := s.clk.Now()
	transfer(t, s, [][]byte{msg})
	return s, s.clk.Now().Sub(t0), behind
}

// TestRoCEResponderNAKOnce: a Go-Back-N responder that finds a gap sends
// one NAK (PSN sequence error) and then drops every later packet, silently,
// until the missing PSN arrives; the requester goes back to the NAK'd PSN
// at once, with no timeout.
func TestRoCEResponderNAKOnce(t *testing.T) {
	s, took, behind := roceRun(t, Config{}, []roceDrop{{off: 10, n: 1}})
	rx, tx := s.qb.Stats(), s.qa.Stats()
	t.Logf("took %v; responder: %d NAKs, %d out-of-order drops; requester: %d NAKs, %d retransmits, %d timeouts",
		took, rx.NaksSent, rx.OutOfOrderDrops, tx.NaksReceived, tx.Retransmits, tx.Timeouts)
	if behind == 0 {
		t.Fatal("no packet followed the dropped one before its resend: the test did not open a gap")
	}
	if rx.NaksSent != 1 || tx.NaksReceived != 1 {
		t.Fatalf("%d NAKs sent, %d received; want one for one gap", rx.NaksSent, tx.NaksReceived)
	}
	if rx.OutOfOrderDrops != behind {
		t.Fatalf("responder dropped %d packets out of order, but %d followed the gap before its resend", rx.OutOfOrderDrops, behind)
	}
	if tx.Timeouts != 0 {
		t.Fatalf("%d timeouts: the NAK should repair the gap", tx.Timeouts)
	}
	// Go-Back-N: everything from the NAK'd PSN that had been sent goes
	// again.
	if tx.Retransmits != behind+1 {
		t.Fatalf("%d retransmits, want the NAK'd packet and the %d after it", tx.Retransmits, behind)
	}
	if took >= AckTimeout(DefaultLocalAckTimeout) {
		t.Fatalf("took %v: as long as a timeout", took)
	}
}

// TestRoCEFixedTimer: what the NAK cannot repair (a lost tail packet, a
// lost NAK, a lost retransmission) waits for the Local ACK Timeout,
// 4.096µs x 2^LocalAckTimeout, exactly once: no RTT estimate shortens it
// and nothing else (no probe, no second NAK) comes first.
func TestRoCEFixedTimer(t *testing.T) {
	cases := []struct {
		name  string
		drops []roceDrop
		naks  uint64 // NAKs the responder sends
	}{
		{"tail", []roceDrop{{off: 63, n: 1}}, 0},
		{"nak", []roceDrop{{off: 10, n: 1}, {nak: true, n: 1}}, 1},
		{"retransmission", []roceDrop{{off: 10, n: 1}, {off: 10, n: 2}}, 1},
	}
	for _, exp := range []int{0, 10} {
		timer := AckTimeout(DefaultLocalAckTimeout)
		if exp != 0 {
			timer = AckTimeout(exp)
		}
		for _, c := range cases {
			t.Run(c.name+"/"+timer.String(), func(t *testing.T) {
				s, took, _ := roceRun(t, Config{LocalAckTimeout: exp}, c.drops)
				rx, tx := s.qb.Stats(), s.qa.Stats()
				t.Logf("took %v; responder: %d NAKs, %d out-of-order drops; requester: %d retransmits, %d timeouts",
					took, rx.NaksSent, rx.OutOfOrderDrops, tx.Retransmits, tx.Timeouts)
				if tx.Timeouts != 1 {
					t.Fatalf("%d timeouts, want 1", tx.Timeouts)
				}
				if rx.NaksSent != c.naks {
					t.Fatalf("responder sent %d NAKs, want %d", rx.NaksSent, c.naks)
				}
				// The message takes a few hundred µs without loss.
				if took < timer || took > timer+2*time.Millisecond {
					t.Fatalf("took %v, want the %v timer plus the transfer", took, timer)
				}
			})
		}
	}
}

// TestRoCEAdaptiveTimer: a negative LocalAckTimeout gives the RoCE profile
// the adaptive timer (MinRTO here), far shorter than the fixed one.
func TestRoCEAdaptiveTimer(t *testing.T) {
	_, took, _ := roceRun(t, Config{LocalAckTimeout: -1, MinRTO: time.Millisecond}, []roceDrop{{off: 63, n: 1}})
	if took < time.Millisecond || took > 3*time.Millisecond {
		t.Fatalf("tail loss repaired after %v, want about MinRTO (1ms)", took)
	}
}

func TestLocalAckTimeoutConfig(t *testing.T) {
	if got := AckTimeout(14); got != 67108864*time.Nanosecond {
		t.Fatalf("AckTimeout(14) = %v", got)
	}
	c, err := Config{Profile: RoCE}.withDefaults(1514)
	if err != nil || c.LocalAckTimeout != DefaultLocalAckTimeout {
		t.Fatalf("default LocalAckTimeout %d, %v", c.LocalAckTimeout, err)
	}
	if _, err := (Config{Profile: RoCE, LocalAckTimeout: MaxLocalAckTimeout + 1}).withDefaults(1514); err == nil {
		t.Fatal("LocalAckTimeout 30 accepted")
	}
}

// TestDefaultRetries: with the default timers, a QP whose peer never
// answers fails with ErrPeerUnreachable after about 2 s of silence in the
// Spray profile (DefaultSprayMaxRetries timeouts from the initial 2 ms,
// doubling to 100 ms) and after 8 Local ACK Timeouts of 67.1 ms in the RoCE profile.
func TestDefaultRetries(t *testing.T) {
	for _, tc := range []struct {
		prof     Profile
		min, max time.Duration
	}{
		{Spray, 2100 * time.Millisecond, 2400 * time.Millisecond},
		{RoCE, 8 * AckTimeout(DefaultLocalAckTimeout), 9 * AckTimeout(DefaultLocalAckTimeout)},
	} {
		t.Run(tc.prof.String(), func(t *testing.T) {
			s := newSimPair(t, mem.Config{Loss: 1}, Config{Profile: tc.prof})
			if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: make([]byte, 100)}); err != nil {
				t.Fatal(err)
			}
			var failed error
			done := func() bool {
				for _, c := range s.ca {
					failed = c.Err
				}
				return failed != nil
			}
			// The failure leaves nothing in flight: run may stop there
			// with "deadlock" before it looks at the completions again.
			if err := s.run(clock.Time(0).Add(time.Minute), done); err != nil && !done() {
				t.Fatal(err)
			}
			at := time.Duration(s.clk.Now())
			if !errors.Is(failed, ErrPeerUnreachable) || at < tc.min || at > tc.max {
				t.Fatalf("failed at %v with %v; want ErrPeerUnreachable between %v and %v", at, failed, tc.min, tc.max)
			}
		})
	}
}
