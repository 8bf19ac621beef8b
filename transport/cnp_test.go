package transport

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// markCE sets ECN CE on an IPv4 frame and fixes its header checksum, as a
// switch would.
func markCE(f []byte) {
	if len(f) < 34 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return
	}
	ip := f[14:34]
	ip[1] |= 3
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
}

// TestCNP: in the classic profile, CE-marked data packets make the
// receiver send rate-limited CNPs, and a DCQCN sender cuts its rate.
func TestCNP(t *testing.T) {
	seed := testutil.Seed(t)
	var dcqcn []*cc.DCQCN
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 2 * time.Microsecond, Filter: func(f []byte) bool {
		if len(f) > 200 { // data packets, not ACKs
			markCE(f)
		}
		return true
	}}, Config{Profile: RoCE, Seed: seed, ECN: true, CC: func() cc.Controller {
		d := cc.NewDCQCN(cc.DCQCNConfig{LineRate: 12.5e9})
		dcqcn = append(dcqcn, d)
		return d
	}})
	msgs := randomMessages(testutil.Rand(t), 50, 256<<10)
	transfer(t, s, msgs)
	rx, tx := s.qb.Stats(), s.qa.Stats()
	t.Logf("receiver: %d CE marks, %d CNPs sent; sender: %d CNPs received", rx.ECNMarked, rx.CNPsSent, tx.CNPsReceived)
	if rx.ECNMarked == 0 || rx.CNPsSent == 0 || tx.CNPsReceived == 0 {
		t.Fatal("no congestion notification went round")
	}
	if rx.CNPsSent >= rx.ECNMarked {
		t.Fatalf("%d CNPs for %d marks: not rate-limited", rx.CNPsSent, rx.ECNMarked)
	}
	if r := dcqcn[0].Rate(); r >= 12.5e9 {
		t.Fatalf("DCQCN rate %v after CNPs, want below line rate", r)
	}
}

// TestLazyCCTimers: DCQCN's timers wake no engine while they would change
// nothing. After a transfer that drew CNPs, the sender's engine has no
// deadline for the 20 ms that alpha would have taken to decay 363 times
// (one wake-up per 55 µs before), and the next message, sent into a quiet
// fabric, goes out at the line rate the rate timers reached meanwhile,
// with alpha decayed.
func TestLazyCCTimers(t *testing.T) {
	seed := testutil.Seed(t)
	var dcqcn []*cc.DCQCN
	marking := true
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 2 * time.Microsecond, Filter: func(f []byte) bool {
		if marking && len(f) > 200 { // data packets, not ACKs
			markCE(f)
		}
		return true
	}}, Config{Profile: RoCE, Seed: seed, ECN: true, CC: func() cc.Controller {
		d := cc.NewDCQCN(cc.DCQCNConfig{LineRate: 12.5e9})
		dcqcn = append(dcqcn, d)
		return d
	}})
	r := testutil.Rand(t)
	transfer(t, s, randomMessages(r, 20, 64<<10))
	d := dcqcn[0]
	if s.qa.Stats().CNPsReceived == 0 || d.Rate() >= 12.5e9 {
		t.Fatalf("%d CNPs, rate %v: the transfer drew no rate cut", s.qa.Stats().CNPsReceived, d.Rate())
	}
	marking = false
	alpha := d.Alpha()
	quiet := s.clk.Now().Add(20 * time.Millisecond)
	if next := s.ea.NextDeadline(); next < quiet {
		t.Fatalf("the sender's engine wakes at %v, %v after the transfer, with nothing to send", next, next.Sub(s.clk.Now()))
	}
	s.clk.Set(quiet)
	s.ca, s.cb = s.ca[:0], s.cb[:0]
	transfer(t, s, randomMessages(r, 1, 64<<10))
	if d.Rate() != 12.5e9 || d.Alpha() >= alpha {
		t.Fatalf("after 20 ms without CNPs: rate %v, alpha %v (%v before)", d.Rate(), d.Alpha(), alpha)
	}
}
