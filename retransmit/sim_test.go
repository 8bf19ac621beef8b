package retransmit

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/psn"
)

// simMsg is a data packet, an ACK or a NAK on its way.
type simMsg struct {
	at   clock.Time
	seq  uint64
	kind uint8 // msgData, msgAck, msgNak
	idx  uint64
	p    psn.PSN
	cum  psn.PSN
	base psn.PSN
	sack [4]uint64
}

const (
	msgData = iota
	msgAck
	msgNak
)

type simQueue []simMsg

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simMsg)) }
func (q *simQueue) Pop() any {
	old := *q
	m := old[len(old)-1]
	*q = old[:len(old)-1]
	return m
}

// simParams describes one simulated transfer.
type simParams struct {
	mode              Mode
	first             psn.PSN
	packets           int
	window            int // packets in flight, standing in for congestion control
	capacity          int
	dataLoss, ackLoss float64
	delay, jitter     time.Duration // one-way: delay + uniform [0, jitter)
	spike             float64       // probability of an extra 10x delay (SelectiveRepeat)
}

// simLink delivers with loss and delay; in order (one path) for GoBackN,
// reordered (sprayed) otherwise.
type simLink struct {
	rng     *rand.Rand
	q       *simQueue
	seq     *uint64
	loss    float64
	p       simParams
	ordered bool
	last    clock.Time
}

func (l *simLink) send(now clock.Time, m simMsg) {
	if l.rng.Float64() < l.loss {
		return
	}
	d := l.p.delay
	if l.p.jitter > 0 {
		d += time.Duration(l.rng.Int64N(int64(l.p.jitter)))
	}
	if !l.ordered && l.rng.Float64() < l.p.spike {
		d *= 10
	}
	m.at = now.Add(d)
	if l.ordered {
		m.at = max(m.at, l.last)
		l.last = m.at
	}
	*l.seq++
	m.seq = *l.seq
	heap.Push(l.q, m)
}

// simulate runs one transfer of p.packets through a Scoreboard, a lossy
// network and a receiver model, and checks against the receiver's truth
// that every packet is acknowledged exactly once, only after it arrived,
// and never declared lost after it was acknowledged.
func simulate(t testing.TB, rng *rand.Rand, p simParams) (Stats, clock.Time) {
	t.Helper()
	s := mustNew(t, Config{Mode: p.mode, Capacity: p.capacity, MaxRetries: 12}, p.first)
	var q simQueue
	var seq uint64
	data := &simLink{rng: rng, q: &q, seq: &seq, loss: p.dataLoss, p: p, ordered: p.mode == GoBackN}
	acks := &simLink{rng: rng, q: &q, seq: &seq, loss: p.ackLoss, p: p, ordered: p.mode == GoBackN}

	received := make([]bool, p.packets) // receiver truth
	var rcvCum int                      // receiver: every idx below arrived
	nakSent := false                    // GoBackN receiver: one NAK per gap
	acked := make([]bool, p.packets)    // sender's view, from Events
	nAcked, sent := 0, 0
	dst := make([]Event, 0, s.Config().Capacity)
	now := clock.Time(0)

	checkEvents := func(ev []Event) {
		if len(ev) > s.Config().Capacity {
			t.Fatalf("%d events in one call, capacity %d", len(ev), s.Config().Capacity)
		}
		for _, e := range ev {
			idx := int(e.Tag)
			if idx >= p.packets || e.PSN != p.first.Add(uint32(idx)) || e.Bytes != 100+idx%900 {
				t.Fatalf("event %+v does not match what was sent", e)
			}
			if acked[idx] {
				t.Fatalf("%v: event %+v for PSN %d already acknowledged", now, e, e.PSN)
			}
			if e.Lost {
				continue
			}
			if !received[idx] {
				t.Fatalf("%v: PSN %d acknowledged but never received", now, e.PSN)
			}
			acked[idx] = true
			nAcked++
		}
	}
	send := func(idx int, resend bool) {
		pp := p.first.Add(uint32(idx))
		err := s.OnSend(now, pp, 100+idx%900, uint64(idx), uint16(rng.Uint32()))
		if resend && errors.Is(err, ErrUnexpectedPSN) && acked[idx] {
			return // acknowledged since PopLost: nothing to send
		}
		if err != nil {
			t.Fatalf("OnSend(%d): %v", pp, err)
		}
		data.send(now, simMsg{kind: msgData, idx: uint64(idx), p: pp})
	}
	receive := func(m simMsg) {
		idx := int(m.idx)
		if p.mode == GoBackN {
			switch {
			case idx == rcvCum:
				received[idx] = true
				rcvCum++
				nakSent = false
				acks.send(now, simMsg{kind: msgAck, cum: p.first.Add(uint32(rcvCum))})
			case idx > rcvCum:
				if !nakSent {
					nakSent = true
					acks.send(now, simMsg{kind: msgNak, cum: p.first.Add(uint32(rcvCum))})
				}
			default:
				acks.send(now, simMsg{kind: msgAck, cum: p.first.Add(uint32(rcvCum))})
			}
			return
		}
		received[idx] = true
		for rcvCum < p.packets && received[rcvCum] {
			rcvCum++
		}
		a := simMsg{kind: msgAck, p: m.p, cum: p.first.Add(uint32(rcvCum)), base: p.first.Add(uint32(rcvCum))}
		for d := range 256 {
			if k := rcvCum + d; k < p.packets && received[k] {
				a.sack[d/64] |= 1 << (d % 64)
			}
		}
		acks.send(now, a)
	}

	for step := 0; nAcked < p.packets; step++ {
		if step > 5_000_000 {
			t.Fatalf("no completion after %d steps: %d/%d acknowledged, %+v", step, nAcked, p.packets, s.Stats())
		}
		for s.HasLost() {
			if n, _ := s.InFlight(); n >= p.window {
				break
			}
			pp, tag, _ := s.PopLost()
			if pp != p.first.Add(uint32(tag)) {
				t.Fatalf("PopLost %d with tag %d", pp, tag)
			}
			send(int(tag), true)
		}
		for sent < p.packets && !s.Full() && !s.HasLost() {
			if n, _ := s.InFlight(); n >= p.window {
				break
			}
			send(sent, false)
			sent++
		}
		next := clock.Never
		if len(q) > 0 {
			next = q[0].at
		}
		timeout := s.NextTimeout()
		if next == clock.Never && timeout == clock.Never {
			t.Fatalf("%v: stalled with %d/%d acknowledged: nothing in the network and no timer, %+v",
				now, nAcked, p.packets, s.Stats())
		}
		if timeout <= next {
			now = max(now, timeout)
			ev, kind, err := s.OnTimeout(now, dst[:0])
			if err != nil || kind == None {
				t.Fatalf("%v: OnTimeout %v %v", now, kind, err)
			}
			checkEvents(ev)
		} else {
			m := heap.Pop(&q).(simMsg)
			now = m.at
			var ev []Event
			switch m.kind {
			case msgData:
				receive(m)
			case msgAck:
				a := Ack{Cum: m.cum}
				if p.mode == SelectiveRepeat {
					a.SackBase, a.Sack, a.Acked, a.HasAcked = m.base, m.sack[:], m.p, true
				}
				ev, _ = s.OnAck(now, a, dst[:0])
			case msgNak:
				ev, _ = s.OnNak(now, m.cum, dst[:0])
			}
			checkEvents(ev)
		}
		if err := s.check(); err != nil {
			t.Fatalf("%v: %v", now, err)
		}
	}
	if s.Outstanding() != 0 || s.HasLost() || s.NextTimeout() != clock.Never {
		t.Fatalf("after the transfer: Outstanding %d HasLost %v NextTimeout %v",
			s.Outstanding(), s.HasLost(), s.NextTimeout())
	}
	if n, b := s.InFlight(); n != 0 || b != 0 {
		t.Fatalf("after the transfer: in flight %d/%d", n, b)
	}
	st := s.Stats()
	if st.Acked != uint64(p.packets) || st.Sent != uint64(p.packets) || st.BadAcks != 0 {
		t.Fatalf("stats %+v", st)
	}
	return st, now
}

func TestSimulation(t *testing.T) {
	rng := testutil.Rand(t)
	for run := range 12 {
		p := simParams{
			mode:     Mode(run % 2),
			first:    psn.New(rng.Uint32()),
			packets:  1500,
			window:   8 + rng.IntN(120),
			capacity: 16 + rng.IntN(400),
			dataLoss: []float64{0, 0.01, 0.05, 0.2}[rng.IntN(4)],
			ackLoss:  []float64{0, 0.01, 0.1}[rng.IntN(3)],
			delay:    time.Duration(5+rng.IntN(20)) * time.Microsecond,
			jitter:   time.Duration(rng.IntN(30)) * time.Microsecond,
			spike:    []float64{0, 0.01}[rng.IntN(2)],
		}
		if run < 4 {
			p.first = 1<<24 - 100
		}
		t.Run(fmt.Sprintf("%d-%v", run, p.mode), func(t *testing.T) {
			st, end := simulate(t, rng, p)
			t.Logf("%+v\n%+v, done at %v", p, st, end)
			if p.dataLoss > 0 && st.Retransmitted == 0 {
				t.Fatalf("%v data loss and no retransmission", p.dataLoss)
			}
		})
	}
}

// BenchmarkSimRecovery measures loss recovery in the simulated sprayed
// fabric: 200 transfers (fixed seeds) of 300 packets, 10µs + [0, 10µs)
// one-way delay, 10% data and 5% ACK loss, 32 packets in flight. It reports
// per transfer the RTOs, the tail loss probes and the completion time.
func BenchmarkSimRecovery(b *testing.B) {
	const runs = 200
	var st Stats
	var total, worst time.Duration
	for b.Loop() {
		st, total, worst = Stats{}, 0, 0
		for seed := range uint64(runs) {
			rng := rand.New(rand.NewPCG(seed, 1))
			p := simParams{mode: SelectiveRepeat, first: 5, packets: 300, window: 32, capacity: 256,
				dataLoss: 0.1, ackLoss: 0.05, delay: 10 * time.Microsecond, jitter: 10 * time.Microsecond}
			s, end := simulate(b, rng, p)
			st.RTOs += s.RTOs
			st.TLPs += s.TLPs
			st.Retransmitted += s.Retransmitted
			total += time.Duration(end)
			worst = max(worst, time.Duration(end))
		}
	}
	b.ReportMetric(float64(st.RTOs)/runs, "rtos/transfer")
	b.ReportMetric(float64(st.TLPs)/runs, "tlps/transfer")
	b.ReportMetric(float64(st.Retransmitted)/runs, "resends/transfer")
	b.ReportMetric(float64(total/runs)/1e3, "mean-µs")
	b.ReportMetric(float64(worst)/1e3, "worst-µs")
}
