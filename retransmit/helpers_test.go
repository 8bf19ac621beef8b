package retransmit

import (
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
)

const us = clock.Time(time.Microsecond)

// check recomputes the counters from the ring, the slow obvious way, and
// compares them with the incremental ones.
func (s *Scoreboard) check() error {
	out := s.Outstanding()
	if out < 0 || out > s.cfg.Capacity {
		return fmt.Errorf("outstanding %d not in [0, %d]", out, s.cfg.Capacity)
	}
	if out > 0 && s.slot(s.una).flags&fAcked != 0 {
		return fmt.Errorf("oldest unacked %d is acked", s.una)
	}
	var pkts, byts, queued int
	for p := s.una; p != s.next; p = p.Next() {
		e := s.slot(p)
		i := uint32(p) & s.mask
		bit := s.queue[i>>6]>>(i&63)&1 == 1
		if bit != (e.flags&fQueued != 0) {
			return fmt.Errorf("PSN %d: queue bit %v, flags %08b", p, bit, e.flags)
		}
		switch {
		case e.flags&fAcked != 0:
			if e.flags&(fLost|fQueued|fPending) != 0 {
				return fmt.Errorf("PSN %d acked with flags %08b", p, e.flags)
			}
		case e.flags&fLost == 0:
			pkts++
			byts += int(e.bytes)
		}
		if e.flags&fQueued != 0 {
			queued++
			if e.flags&fPending != 0 {
				return fmt.Errorf("PSN %d both queued and pending", p)
			}
		}
	}
	total := 0
	for _, w := range s.queue {
		total += bits.OnesCount64(w)
	}
	if total != queued || queued != s.nQueued {
		return fmt.Errorf("queue: %d bits, %d flagged, nQueued %d", total, queued, s.nQueued)
	}
	if pkts != s.inPkts || byts != s.inBytes {
		return fmt.Errorf("in flight: counted %d/%dB, kept %d/%dB", pkts, byts, s.inPkts, s.inBytes)
	}
	ip, _ := s.InFlight()
	if ip > out {
		return fmt.Errorf("in flight %d > outstanding %d", ip, out)
	}
	return nil
}

func mustCheck(t testing.TB, s *Scoreboard) {
	t.Helper()
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

func mustNew(t testing.TB, cfg Config, first psn.PSN) *Scoreboard {
	t.Helper()
	s, err := New(cfg, first)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// firsts are the initial PSNs every scripted test runs from: zero, and just
// before the 24-bit wrap so that the script crosses it.
var firsts = []psn.PSN{0, 1<<24 - 3}

func forFirsts(t *testing.T, f func(t *testing.T, first psn.PSN)) {
	for _, first := range firsts {
		t.Run(fmt.Sprintf("first=%d", first), func(t *testing.T) { f(t, first) })
	}
}

// sendNew sends one new packet of 1000 bytes tagged with its PSN, on
// entropy 0: one path, where RACK is RFC 8985's.
func sendNew(t testing.TB, s *Scoreboard, now clock.Time) psn.PSN {
	t.Helper()
	p := s.Next()
	if err := s.OnSend(now, p, 1000, uint64(p), 0); err != nil {
		t.Fatalf("OnSend(%d): %v", p, err)
	}
	return p
}

// resendLost pops every queued PSN and resends it at now, returning them.
func resendLost(t testing.TB, s *Scoreboard, now clock.Time) []psn.PSN {
	t.Helper()
	var out []psn.PSN
	for {
		p, tag, ok := s.PopLost()
		if !ok {
			return out
		}
		if tag != uint64(p) {
			t.Fatalf("PopLost tag %d for PSN %d", tag, p)
		}
		if err := s.OnSend(now, p, 1000, tag, 7); err != nil {
			t.Fatalf("resend %d: %v", p, err)
		}
		out = append(out, p)
	}
}

// sackOf builds a spray ACK: cumulative PSN cum, SACK bits for ps anchored
// at cum, triggered by acked.
func sackOf(cum, acked psn.PSN, ps ...psn.PSN) Ack {
	a := Ack{Cum: cum, SackBase: cum, Acked: acked, HasAcked: true, Sack: make([]uint64, 4)}
	for _, p := range ps {
		d := p.Diff(cum)
		if d >= 0 && d < 256 {
			a.Sack[d/64] |= 1 << (d % 64)
		}
	}
	return a
}

// split separates events into acknowledged and lost PSNs.
func split(ev []Event) (acked, lost []psn.PSN) {
	for _, e := range ev {
		if e.Lost {
			lost = append(lost, e.PSN)
		} else {
			acked = append(acked, e.PSN)
		}
	}
	return acked, lost
}

func psns(first psn.PSN, idx ...int) []psn.PSN {
	out := make([]psn.PSN, len(idx))
	for i, k := range idx {
		out[i] = first.Add(uint32(k))
	}
	return out
}

func samePSNs(a, b []psn.PSN) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
