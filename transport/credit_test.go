package transport

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// fanIn is n sender engines, each with a QP to its own QP on one receiver
// engine, over a link/mem fabric under a simulated clock: the receiver's
// port is where the senders' packets queue.
type fanIn struct {
	t     *testing.T
	clk   *clock.Sim
	fab   *mem.Fabric
	recv  *Engine
	sends []*Engine
	qs    []*QP // the senders' QPs
	qr    []*QP // the receiver's QPs, qr[i] the peer of qs[i]
	rc    []Completion
	sc    []Completion
}

// fanInRate is the fabric's rate in the fan-in tests, in bits/s.
const fanInRate = 10e9

func newFanIn(t *testing.T, n int, mc mem.Config, sendCfg, recvCfg Config) *fanIn {
	t.Helper()
	f := &fanIn{t: t, clk: &clock.Sim{}}
	f.fab = mem.NewFabric(mc, f.clk)
	port := func(i int) *mem.Port {
		mac := [6]byte{0x02, 0, 0, 0, byte(i >> 8), byte(i)}
		p, err := f.fab.NewPort(mac, netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	var err error
	recvCfg.Seed = sendCfg.Seed + 1000
	if f.recv, err = NewEngine(port(1), recvCfg); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c := sendCfg
		c.Seed += uint64(i)
		e, err := NewEngine(port(2+i), c)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := e.CreateQP()
		if err != nil {
			t.Fatal(err)
		}
		qr, err := f.recv.CreateQP()
		if err != nil {
			t.Fatal(err)
		}
		if err := qs.Connect(qr.Info()); err != nil {
			t.Fatal(err)
		}
		if err := qr.Connect(qs.Info()); err != nil {
			t.Fatal(err)
		}
		f.sends, f.qs, f.qr = append(f.sends, e), append(f.qs, qs), append(f.qr, qr)
	}
	return f
}

// run steps every engine until done or limit (simulated).
func (f *fanIn) run(limit clock.Time, done func() bool) error {
	all := append([]*Engine{f.recv}, f.sends...)
	for !done() {
		now := f.clk.Now()
		work := false
		for _, e := range all {
			w, err := e.Step(now)
			if err != nil {
				return err
			}
			work = work || w
		}
		f.rc = f.recv.Completions(f.rc)
		for _, e := range f.sends {
			f.sc = e.Completions(f.sc)
		}
		if work {
			continue
		}
		next := f.fab.NextDelivery()
		for _, e := range all {
			next = clock.Min(next, e.NextDeadline())
		}
		switch {
		case next == clock.Never:
			return fmt.Errorf("deadlock at %v: nothing in flight and no timer armed", now)
		case next > limit:
			return fmt.Errorf("not done after %v of simulated time", limit)
		case next <= now:
			next = now + 1
		}
		f.clk.Set(next)
	}
	return nil
}

// transfer sends one message of size bytes from every sender, checks that
// each arrives intact and returns the simulated time the last took.
func (f *fanIn) transfer(size int, rng *rand.Rand) time.Duration {
	f.t.Helper()
	msgs := make([][]byte, len(f.qs))
	start := f.clk.Now()
	for i, q := range f.qs {
		msgs[i] = make([]byte, size)
		for j := range msgs[i] {
			msgs[i][j] = byte(rng.Uint32())
		}
		if err := q.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: msgs[i]}); err != nil {
			f.t.Fatal(err)
		}
	}
	err := f.run(clock.Time(time.Minute), func() bool { return len(f.rc) >= len(msgs) && len(f.sc) >= len(msgs) })
	if err != nil {
		f.t.Fatalf("%v (received %d/%d)", err, len(f.rc), len(msgs))
	}
	end := f.clk.Now()
	for _, c := range f.rc {
		i := -1
		for k, q := range f.qr {
			if q.QPN() == c.QPN {
				i = k
			}
		}
		if i < 0 || c.Err != nil || hash(c.Data) != hash(msgs[i]) {
			f.t.Fatalf("message on QP %#x (sender %d): err %v, %d bytes, intact %v", c.QPN, i, c.Err, len(c.Data), i >= 0 && hash(c.Data) == hash(msgs[i]))
		}
	}
	for _, c := range f.sc {
		if c.Err != nil {
			f.t.Fatalf("send completion: %v", c.Err)
		}
	}
	return end.Sub(start)
}

// creditSum adds the credit counters of qs.
func creditSum(qs []*QP) QPStats {
	var s QPStats
	for _, q := range qs {
		o := q.Stats()
		s.CreditRequestsSent += o.CreditRequestsSent
		s.CreditRequestsReceived += o.CreditRequestsReceived
		s.CreditGrantsSent += o.CreditGrantsSent
		s.CreditGrantsReceived += o.CreditGrantsReceived
		s.UnsolicitedPackets += o.UnsolicitedPackets
		s.CreditWaits += o.CreditWaits
		s.CreditFallbacks += o.CreditFallbacks
		s.CreditRejected += o.CreditRejected
		s.Retransmits += o.Retransmits
		s.TxPackets += o.TxPackets
	}
	return s
}

func creditConfig(seed uint64, on bool) Config {
	return Config{Seed: seed, LineRate: fanInRate / 8, Credits: on, MinRTO: time.Millisecond}
}

func fanInFabric(seed uint64) mem.Config {
	return mem.Config{Seed: seed, Delay: 2 * time.Microsecond, Bandwidth: fanInRate, QueueBytes: 64 << 20, Frames: 1 << 16}
}

// TestCreditLoneSender: a lone sender with credits finishes within two
// round trips of the time without (the unsolicited window covers the
// first round trip's wait for credit), and its receiver's queue is lower.
// The pacer books each frame's Ethernet preamble and gap, which link/mem
// does not serialize: 24 bytes in 1,514, the allowance on the rate.
func TestCreditLoneSender(t *testing.T) {
	seed := testutil.Seed(t)
	var took [2]time.Duration
	var peak [2]uint64
	for i, on := range []bool{false, true} {
		f := newFanIn(t, 1, fanInFabric(seed), creditConfig(seed, on), creditConfig(seed, on))
		took[i] = f.transfer(1<<20, rand.New(rand.NewPCG(seed, 1)))
		peak[i] = f.fab.Stats().MaxQueueBytes
		s := creditSum(f.qs)
		t.Logf("credits %v: %v, queue peak %d B, %+v", on, took[i], peak[i], s)
		if on && (s.CreditRequestsSent == 0 || creditSum(f.qr).CreditGrantsSent == 0 || s.UnsolicitedPackets == 0) {
			t.Errorf("credits on: no requests, grants or unsolicited packets: %+v", s)
		}
	}
	rtt := 2 * 2 * time.Microsecond
	if limit := took[0]*(1514+creditWireOverhead)/1514 + 2*rtt; took[1] > limit {
		t.Errorf("with credits %v, without %v: above %v (two round trips and the preamble's share)", took[1], took[0], limit)
	}
	if peak[1] > peak[0] {
		t.Errorf("queue peak %d B with credits, %d B without", peak[1], peak[0])
	}
}

// TestCreditFanIn: 32 senders to one receiver: with credits the
// receiver's queue peaks at under a quarter of its peak without, and every
// byte arrives intact.
func TestCreditFanIn(t *testing.T) {
	seed := testutil.Seed(t)
	var peak [2]uint64
	var took [2]time.Duration
	for i, on := range []bool{false, true} {
		cfg := creditConfig(seed, on)
		cfg.CreditUnsolicited = 4 << 10
		f := newFanIn(t, 32, fanInFabric(seed), cfg, cfg)
		took[i] = f.transfer(256<<10, rand.New(rand.NewPCG(seed, 2)))
		peak[i] = f.fab.Stats().MaxQueueBytes
		s := creditSum(f.qs)
		t.Logf("credits %v: %v, queue peak %d B, retransmits %d of %d packets; sender %+v", on, took[i], peak[i], s.Retransmits, s.TxPackets, s)
	}
	if peak[0] < 32*1514 {
		t.Errorf("queue peak %d B without credits: below one frame per sender", peak[0])
	}
	if peak[1]*4 > peak[0] {
		t.Errorf("queue peak %d B with credits, %d B without: want under a quarter", peak[1], peak[0])
	}
	// The link carries 32 x 256 KiB at 10 Gb/s in 6.7 ms; credits must
	// not leave it idle for long.
	if took[1] > took[0]*11/10 {
		t.Errorf("fan-in took %v with credits, %v without", took[1], took[0])
	}
}

// TestCreditGrantGrows: with 64 senders at 10 Gb/s each turn comes long
// after the sender's last ACK, so grants go as frames of their own; a
// grant then adds more packets (64 senders: 4), and grant frames stay
// under a third of the credited data packets (2 packets a grant would make
// them half). The pacer's round (about 300 µs) is longer than the least
// retry: the senders wait for it and ask once a message, not once a round.
// With 8 senders a grant adds the usual couple (grantPkts).
func TestCreditGrantGrows(t *testing.T) {
	seed := testutil.Seed(t)
	for waiting, want := range map[int]int{1: 2, 8: 2, 32: 2, 64: 4, 1023: 8} {
		p := creditPacer{ring: make([]*QP, waiting)}
		if got := p.grantPkts(); got != want {
			t.Errorf("%d senders waiting: a grant adds %d packets, want %d", waiting, got, want)
		}
	}
	for _, tc := range []struct {
		senders        int
		minPer, maxPer float64 // grant frames per credited data packet
	}{{64, 0, 1.0 / 3}, {8, 0, 1}} {
		cfg := creditConfig(seed, true)
		cfg.CreditUnsolicited = 4 << 10
		f := newFanIn(t, tc.senders, fanInFabric(seed), cfg, cfg)
		f.transfer(128<<10, rand.New(rand.NewPCG(seed, 3)))
		s, r := creditSum(f.qs), creditSum(f.qr)
		credited := s.TxPackets - s.UnsolicitedPackets - s.Retransmits
		per := float64(r.CreditGrantsSent) / float64(credited)
		t.Logf("%d senders: %d grant frames for %d credited packets (%.3f a packet), %d requests", tc.senders, r.CreditGrantsSent, credited, per, s.CreditRequestsSent)
		if per > tc.maxPer || per < tc.minPer {
			t.Errorf("%d senders: %.3f grant frames a credited packet, want [%.3f, %.3f]", tc.senders, per, tc.minPer, tc.maxPer)
		}
		if s.CreditRequestsSent > uint64(2*tc.senders) {
			t.Errorf("%d senders: %d credit requests for one message each", tc.senders, s.CreditRequestsSent)
		}
	}
}

// dropFirst returns a fabric filter that drops the first n frames of
// opcode op.
func dropFirst(op wire.Opcode, n int, dropped *int) func([]byte) bool {
	return func(frame []byte) bool {
		var pk wire.Packet
		if wire.Decode(frame, &pk) != nil || pk.BTH.Opcode != op || *dropped >= n {
			return true
		}
		*dropped++
		return false
	}
}

// TestCreditLostGrant: the first grant packets are lost (and with them
// the credit of senders that have nothing in flight to be ACKed): the
// senders ask again, the receiver answers, and the transfer completes
// on credit.
func TestCreditLostGrant(t *testing.T) {
	seed := testutil.Seed(t)
	cfg := creditConfig(seed, true)
	cfg.CreditUnsolicited = 2 << 10
	mc := fanInFabric(seed)
	dropped := 0
	mc.Filter = dropFirst(wire.OpCreditGrant, 6, &dropped)
	f := newFanIn(t, 4, mc, cfg, cfg)
	f.transfer(64<<10, rand.New(rand.NewPCG(seed, 3)))
	s := creditSum(f.qs)
	t.Logf("dropped %d grants; %+v", dropped, s)
	if dropped < 6 {
		t.Fatalf("only %d grants sent to drop", dropped)
	}
	if s.CreditRequestsSent <= 4 {
		t.Errorf("%d requests: no sender asked again", s.CreditRequestsSent)
	}
	if s.CreditFallbacks != 0 {
		t.Errorf("%d senders gave up on credits", s.CreditFallbacks)
	}
}

// TestCreditLostRequest: the first credit requests are lost; the senders
// wait creditRetry, ask again (a retry, answered at once), and finish.
func TestCreditLostRequest(t *testing.T) {
	seed := testutil.Seed(t)
	cfg := creditConfig(seed, true)
	cfg.CreditUnsolicited = -1 // nothing moves before a request arrives
	mc := fanInFabric(seed)
	dropped := 0
	mc.Filter = dropFirst(wire.OpCreditRequest, 4, &dropped)
	f := newFanIn(t, 4, mc, cfg, cfg)
	f.transfer(64<<10, rand.New(rand.NewPCG(seed, 4)))
	s := creditSum(f.qs)
	t.Logf("dropped %d requests; %+v", dropped, s)
	if dropped != 4 || s.CreditRequestsSent < 8 {
		t.Errorf("dropped %d requests, %d sent: want every first one lost and asked again", dropped, s.CreditRequestsSent)
	}
	if s.CreditFallbacks != 0 || s.UnsolicitedPackets != 0 {
		t.Errorf("%d fallbacks, %d unsolicited packets: want the requests' retries to recover", s.CreditFallbacks, s.UnsolicitedPackets)
	}
}

// TestCreditPeerWithout: senders with credits to a receiver without them
// (its ACKs carry no credit) fall back to sending freely and finish; so
// do they when the receiver answers nothing of credit and the
// unsolicited window is empty (no ACK to tell): after creditMaxMisses
// unanswered requests.
func TestCreditPeerWithout(t *testing.T) {
	seed := testutil.Seed(t)
	for _, unsol := range []int{0, -1} {
		t.Run(map[int]string{0: "unsolicited", -1: "none"}[unsol], func(t *testing.T) {
			cfg := creditConfig(seed, true)
			cfg.CreditUnsolicited = unsol
			f := newFanIn(t, 4, fanInFabric(seed), cfg, creditConfig(seed, false))
			f.transfer(256<<10, rand.New(rand.NewPCG(seed, 5)))
			s := creditSum(f.qs)
			t.Logf("%+v", s)
			if s.CreditFallbacks != 4 {
				t.Errorf("%d fallbacks, want one per sender", s.CreditFallbacks)
			}
			if r := creditSum(f.qr); r.CreditGrantsSent != 0 || r.CreditRequestsReceived == 0 {
				t.Errorf("receiver without credits: %d grants sent, %d requests seen", r.CreditGrantsSent, r.CreditRequestsReceived)
			}
		})
	}
}

// TestCreditReceiverOnly: a receiver with credits and senders without:
// the senders never wait, and the receiver grants nothing.
func TestCreditReceiverOnly(t *testing.T) {
	seed := testutil.Seed(t)
	f := newFanIn(t, 4, fanInFabric(seed), creditConfig(seed, false), creditConfig(seed, true))
	f.transfer(256<<10, rand.New(rand.NewPCG(seed, 6)))
	if r := creditSum(f.qr); r.CreditGrantsSent != 0 {
		t.Errorf("%d grants to senders that asked for none", r.CreditGrantsSent)
	}
}

// TestCreditHostileRequests: a peer that asks for far more than it sends
// gets at most creditMaxOut packets of credit while it sends nothing; one
// that also claims to have used every grant gets no more than the link's
// rate; requests that are nonsense (more used than granted, a count far
// beyond the credit) are dropped and counted.
func TestCreditHostileRequests(t *testing.T) {
	seed := testutil.Seed(t)
	f := newFanIn(t, 1, fanInFabric(seed), creditConfig(seed, true), creditConfig(seed, true))
	q := f.qr[0]
	req := func(count, used uint32) {
		pk := wire.Packet{IP: wire.IP{Src: f.qs[0].lip}, BTH: wire.BTH{Opcode: wire.OpCreditRequest},
			Credit: wire.Credit{Count: count, Used: used}}
		q.Handle(f.clk.Now(), &pk)
	}
	step := func(d time.Duration) { // runs the engines for d, idle or not
		end := f.clk.Now().Add(d)
		for f.clk.Now() < end {
			for _, e := range append([]*Engine{f.recv}, f.sends...) {
				if _, err := e.Step(f.clk.Now()); err != nil {
					t.Fatal(err)
				}
			}
			next := clock.Min(f.fab.NextDelivery(), clock.Min(f.recv.NextDeadline(), f.sends[0].NextDeadline()))
			f.clk.Set(min(max(next, f.clk.Now()+1), end))
		}
	}
	req(1<<20, 0)
	step(time.Millisecond)
	if got := q.cred.cr.limit; got != creditMaxOut {
		t.Fatalf("granted %d packets to a sender that sent none, want %d", got, creditMaxOut)
	}
	// Claiming every grant used, for 1 ms: at 10 Gb/s and 1,538 bytes a
	// packet (nothing arrived: MTU and overhead) the link carries 812, and
	// the pacer grants creditOvercommit times that.
	start := q.cred.cr.limit
	for range 100 {
		req(1<<20, q.cred.cr.limit)
		step(10 * time.Microsecond)
	}
	perMs := uint32(int(creditOvercommit*fanInRate/8/1e3) / (1514 + creditWireOverhead))
	t.Logf("granted %d packets in 1 ms of claimed use (pacer: %d)", q.cred.cr.limit-start, perMs)
	if got := q.cred.cr.limit - start; got > perMs+creditGrantPkts {
		t.Errorf("granted %d packets in 1 ms, the pacer grants %d", got, perMs)
	}
	rej := q.Stats().CreditRejected
	req(q.cred.cr.limit+1<<25, 0)  // far beyond the credit
	req(1<<20, q.cred.cr.limit+10) // more used than granted
	if got := q.Stats().CreditRejected - rej; got != 2 {
		t.Errorf("%d nonsense requests counted, want 2", got)
	}
}

// TestCreditUnsolicitedShared: an engine's QPs that start bursts together
// share CreditUnsolicited: a lone QP sends all of it without credit, and
// eight QPs posting at once send about as much in all (each share
// rounds up to whole packets); every message
// arrives whole either way, and the creditSenders count returns to zero.
func TestCreditUnsolicitedShared(t *testing.T) {
	const window = 16 // packets of CreditUnsolicited
	for _, qps := range []int{1, 8} {
		t.Run(fmt.Sprint(qps), func(t *testing.T) {
			seed := testutil.Seed(t)
			cfg := creditConfig(seed, true)
			cfg.CreditUnsolicited = window * 1400
			m := newMultiPair(t, fanInFabric(seed), cfg, qps)
			r := testutil.Rand(t)
			want := map[*QP][][32]byte{}
			for i, q := range m.qa {
				msg := randomMessages(r, 1, 256<<10)[0]
				msg = append(msg, make([]byte, 64<<10)...) // beyond the window
				if err := q.Post(WorkRequest{ID: uint64(i), Op: OpSend, Data: msg}); err != nil {
					t.Fatal(err)
				}
				want[m.qb[i]] = append(want[m.qb[i]], hash(msg))
			}
			for steps := 0; pendingAny(m, want); steps++ {
				if steps > 2_000_000 {
					t.Fatal("messages still in flight after two million steps")
				}
				m.mustStep(t)
				check(t, m, want)
			}
			s := creditSum(m.qa)
			pkts := int(m.qa[0].cfg.CreditUnsolicited+m.qa[0].cfg.MTU-1) / m.qa[0].cfg.MTU
			t.Logf("%d QPs: %d packets unsolicited (window %d), %d requests", qps, s.UnsolicitedPackets, pkts, s.CreditRequestsSent)
			lo, hi := pkts, pkts+qps-1
			if u := int(s.UnsolicitedPackets); u < lo || u > hi {
				t.Errorf("%d QPs: %d packets unsolicited, want %d to %d", qps, u, lo, hi)
			}
			if m.ea.creditSenders != 0 {
				t.Errorf("%d QPs with new data counted after every message went", m.ea.creditSenders)
			}
		})
	}
}
