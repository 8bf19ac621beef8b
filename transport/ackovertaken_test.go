package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// lateRig is a sender QP and a receiver QP driven by hand, without a link:
// the test takes the sender's data frames, hands them to the receiver in
// the order and at the (simulated) times it chooses, and reads the ACKs
// the receiver sends at each time.
type lateRig struct {
	t      *testing.T
	qa, qb *QP
	cfg    Config
	data   [][]byte // the sender's data frames, in the order sent
	buf    []byte
	pk     wire.Packet
}

// newLateRig sends one message of n full packets from A, packet i at
// 1ms + i µs. The receiver acknowledges every 64 packets or after 10 ms, and
// the sender's window (128 packets) never asks for prompt ACKs, so only the
// last packet of the message carries AckReq.
func newLateRig(t *testing.T, n int) *lateRig {
	t.Helper()
	cfg := Config{Profile: Spray, Seed: 1, MTU: 9014, Entropies: 8, AckEvery: 64, AckDelay: 10 * time.Millisecond}
	seg := payloadSize(&cfg, false)
	w := 128 * (seg + 200)
	cfg.CC = func() cc.Controller { return cc.Fixed{WindowBytes: w} }
	// The pair's engines and fabric are never stepped: they only build
	// and connect the QPs.
	s := newSimPair(t, mem.Config{Seed: 1}, cfg)
	r := &lateRig{t: t, qa: s.qa, qb: s.qb, cfg: s.ea.Config(), buf: make([]byte, cfg.MTU)}
	msg := make([]byte, n*seg)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if err := r.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		now := clock.Time(time.Millisecond + time.Duration(i)*time.Microsecond)
		k, err := r.qa.PollTransmit(now, r.buf)
		if err != nil || k == 0 {
			t.Fatalf("data packet %d: %d bytes, %v", i, k, err)
		}
		r.data = append(r.data, append([]byte(nil), r.buf[:k]...))
		if err := wire.Decode(r.data[i], &r.pk); err != nil {
			t.Fatal(err)
		}
		if r.pk.BTH.AckReq != (i == n-1) {
			t.Fatalf("data packet %d of %d: AckReq %v (the test needs it on the last only)", i, n, r.pk.BTH.AckReq)
		}
	}
	return r
}

// psn returns the PSN of data packet i.
func (r *lateRig) psn(i int) psn.PSN {
	if err := wire.Decode(r.data[i], &r.pk); err != nil {
		r.t.Fatal(err)
	}
	return psn.New(r.pk.BTH.PSN)
}

// deliver hands data packet i to the receiver at now; resent, it carries
// the send time tx instead of its own (a resend of the packet leaves at tx).
func (r *lateRig) deliver(now clock.Time, i int, resent clock.Time) {
	r.t.Helper()
	if err := wire.Decode(r.data[i], &r.pk); err != nil {
		r.t.Fatal(err)
	}
	if resent != 0 {
		r.pk.Data.TxTime = uint64(resent)
	}
	r.qb.Handle(now, &r.pk)
}

// acks returns the ACKs the receiver sends at now.
func (r *lateRig) acks(now clock.Time) []wire.Ack {
	r.t.Helper()
	var out []wire.Ack
	for {
		if now >= r.qb.NextTimeout() {
			r.qb.HandleTimeout(now)
		}
		k, err := r.qb.PollTransmit(now, r.buf)
		if err != nil {
			r.t.Fatal(err)
		}
		if k == 0 {
			return out
		}
		if err := wire.Decode(r.buf[:k], &r.pk); err != nil {
			r.t.Fatal(err)
		}
		if r.pk.BTH.Opcode != wire.OpSprayAck {
			r.t.Fatalf("receiver sent opcode %v, want only ACKs", r.pk.BTH.Opcode)
		}
		out = append(out, r.pk.Ack)
	}
}

// TestSprayAckOvertaken: the receiver's rule for a packet that arrives after
// one sent later (it was overtaken on another path). Packets 0 and 1 of a
// message are sent in that order; 1 arrives first. A receiver that
// acknowledges every 64 packets or after 10 ms (simulated time throughout):
//   - reported: an ACK (the delayed-ACK timer's) already reported packet 1
//     when 0 arrives: 0 is acknowledged at once, not 10 ms later (the
//     sender saw 1 acknowledged; its loss timers run from 0's send time);
//   - joins: 0 arrives before any ACK reported 1: no ACK at once; the one
//     ACK the timer sends reports both (one ACK, not two);
//   - resent: what fills the hole is a resend of 0 (sent after 1): it
//     waits like any other packet, though an ACK already reported 1.
func TestSprayAckOvertaken(t *testing.T) {
	const t0 = clock.Time(2 * time.Millisecond) // packet 1 arrives
	for _, tc := range []struct {
		name     string
		reported bool // the timer's ACK reports 1 before 0 arrives
		resent   bool // 0 arrives as a resend, sent after 1
		atOnce   bool // want an ACK at once when 0 arrives
	}{
		{"reported", true, false, true},
		{"joins", false, false, false},
		{"resent", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newLateRig(t, 4)
			p0, p1, p2 := r.psn(0), r.psn(1), r.psn(2)
			delay := r.cfg.AckDelay
			r.deliver(t0, 1, 0)
			if a := r.acks(t0); len(a) != 0 {
				t.Fatalf("packet 1 beyond the hole at packet 0: %d ACKs at once, want 0 (it waits for AckEvery or AckDelay)", len(a))
			}
			now := t0 + clock.Time(time.Microsecond)
			if tc.reported {
				now = t0.Add(delay)
				a := r.acks(now)
				if len(a) != 1 || psn.New(a[0].CumPSN) != p0 || psn.New(a[0].AckedPSN) != p1 {
					t.Fatalf("after AckDelay: ACKs %+v, want one reporting packet %d beyond cum %d", a, p1, p0)
				}
				now += clock.Time(5 * time.Microsecond)
			}
			var resent clock.Time
			if tc.resent {
				resent = now - clock.Time(20*time.Microsecond)
			}
			sent := r.qb.Stats().AcksSent
			r.deliver(now, 0, resent)
			a := r.acks(now)
			t.Logf("packet 0 arrived at %v: %d ACKs at once (%d sent before)", now, len(a), sent)
			if !tc.atOnce {
				if len(a) != 0 {
					t.Fatalf("packet 0 (PSN %d) arrived: %d ACKs at once, want 0 (it joins the next ACK)", p0, len(a))
				}
				// The next ACK is the delayed-ACK timer's, AckDelay after
				// the first packet it holds arrived, and reports both.
				due := r.qb.NextTimeout()
				first := t0
				if tc.reported {
					first = now
				}
				if want := first.Add(delay); due != want {
					t.Fatalf("the receiver's next timeout at %v, want %v (AckDelay after %v)", due, want, first)
				}
				if a = r.acks(due - 1); len(a) != 0 {
					t.Fatalf("%d ACKs before AckDelay ran out", len(a))
				}
				a = r.acks(due)
			}
			if tc.atOnce && len(a) == 0 {
				t.Fatalf("packet 0 (PSN %d) arrived after an ACK reported packet 1: no ACK at once, want one (it waits AckDelay, %v)", p0, delay)
			}
			if len(a) != 1 || psn.New(a[0].CumPSN) != p2 {
				t.Fatalf("ACKs %+v, want one with cum PSN %d (packets 0 and 1 received)", a, p2)
			}
			if got := r.qb.Stats().AcksSent - sent; got != 1 {
				t.Fatalf("receiver counted %d ACKs sent, want 1", got)
			}
		})
	}
}
