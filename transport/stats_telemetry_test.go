package transport

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// TestStatsTelemetryMove checks that the counters a metrics exporter reads
// move in a lossy, reordering transfer and agree with each other: per-path
// sums equal the QP's totals, the RTT is timed, packets are held for
// reordering.
func TestStatsTelemetryMove(t *testing.T) {
	for _, prof := range []Profile{Spray, RoCE} {
		t.Run(prof.String(), func(t *testing.T) {
			seed := testutil.Seed(t)
			rng := rand.New(rand.NewPCG(seed, 2))
			mc := mem.Config{
				Seed: seed, Loss: 0.02, Reorder: 0.3, ReorderDelay: 50 * time.Microsecond,
				Delay: 5 * time.Microsecond, Jitter: 5 * time.Microsecond,
			}
			if prof == RoCE {
				// Go-Back-N resends nearly every packet under heavy
				// reordering, and resent packets give no RTT sample.
				mc.Reorder, mc.Jitter = 0, 0
				// At 2% loss a run can leave the Go-Back-N sender
				// without a single RTT sample: the
				// unlimited window puts all 857 packets in flight at
				// once, a loss among the first 16 (AckEvery) turns the
				// first feedback into a NAK, which resends everything
				// after it, and by Karn's rule no later ACK is timed
				// (classic ACKs echo no send time).
				mc.Loss = 0.005
				// At 0.5% a run can drop no data frame of the ~860 at
				// all, and Go-Back-N then
				// rightly resends nothing: drop every 150th data frame
				// (frames larger than an ACK) besides the random loss.
				var data int
				mc.Filter = func(f []byte) bool {
					if len(f) < 512 {
						return true
					}
					data++
					return data%150 != 75
				}
			}
			s := newSimPair(t, mc, Config{Profile: prof, Seed: seed})
			transfer(t, s, randomMessages(rng, 40, 256<<10))

			var snap Snapshot
			s.ea.Snapshot(&snap)
			if len(snap.QPs) != 1 || snap.QPs[0].QPN != s.qa.QPN() {
				t.Fatalf("snapshot has %d QPs (%+v), want QP %#x", len(snap.QPs), snap.QPs, s.qa.QPN())
			}
			if snap.Engine != s.ea.Stats() || snap.Engine.TxFrames == 0 {
				t.Errorf("snapshot engine stats %+v, engine says %+v", snap.Engine, s.ea.Stats())
			}
			qs := snap.QPs[0]
			st := qs.Stats
			if st != s.qa.Stats() {
				t.Errorf("snapshot QP stats %+v, QP says %+v", st, s.qa.Stats())
			}
			if st.RTTSamples == 0 || st.MinRTT <= 0 || st.SRTT < st.MinRTT {
				t.Errorf("RTT not timed: %d samples, SRTT %v, MinRTT %v", st.RTTSamples, st.SRTT, st.MinRTT)
			}
			if n := qs.RTT.Count(); n != st.RTTSamples || qs.RTT.Sum < time.Duration(n)*st.MinRTT {
				t.Errorf("RTT histogram: %d samples summing to %v; QP timed %d, min %v", n, qs.RTT.Sum, st.RTTSamples, st.MinRTT)
			}
			if st.Retransmits == 0 {
				t.Errorf("no retransmits with %d frames lost and %d filtered", s.fab.Stats().Lost, s.fab.Stats().Filtered)
			}
			var pkts, bytes, retx uint64
			for _, p := range qs.Paths {
				pkts += p.TxPackets
				bytes += p.TxBytes
				retx += p.Retransmits
				if p.TxPackets != p.Packets {
					t.Errorf("path %d: transport counted %d packets, policy %d", p.Entropy, p.TxPackets, p.Packets)
				}
				if p.TxPackets == 0 {
					t.Errorf("path %d carried nothing", p.Entropy)
				}
			}
			if pkts != st.TxPackets || bytes != st.TxBytes || retx != st.Retransmits {
				t.Errorf("paths sum to %d packets, %d bytes, %d retransmits; QP counted %d, %d, %d",
					pkts, bytes, retx, st.TxPackets, st.TxBytes, st.Retransmits)
			}
			want := 1
			if prof == Spray {
				want = s.ea.Config().Entropies
			}
			if len(qs.Paths) != want || len(s.qa.PathCounters()) != want {
				t.Errorf("%d paths in the snapshot, %d counters; want %d", len(qs.Paths), len(s.qa.PathCounters()), want)
			}

			rx := s.qb.Stats()
			if prof == Spray && rx.MaxReorderHeld == 0 {
				t.Errorf("receiver never held a packet ahead of a hole (reorder 30%%, loss 2%%)")
			}
			if rx.ReorderHeld != 0 {
				t.Errorf("receiver holds %d packets after the transfer", rx.ReorderHeld)
			}
		})
	}
}

// intPump drives two QPs by hand, one data packet and its acknowledgement
// at a time, and lets the test write the INT records that the data packet
// carries: the records a switch would have filled in.
type intPump struct {
	t      *testing.T
	s      *simPair
	now    clock.Time
	buf    []byte
	pk, ak wire.Packet
}

// send posts a one-packet message and delivers it with a path of two hops,
// the first queueing delay behind it (at 1 Gbit/s), then its ACK.
func (p *intPump) send(delay time.Duration) {
	t, s := p.t, p.s
	if err := s.qa.Post(WorkRequest{Op: OpSend, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	p.now = p.now.Add(10 * time.Microsecond)
	n, err := s.qa.PollTransmit(p.now, p.buf)
	if err != nil || n == 0 {
		t.Fatalf("data packet: %d bytes, %v", n, err)
	}
	if err := wire.Decode(p.buf[:n], &p.pk); err != nil {
		t.Fatal(err)
	}
	var recs [2 * wire.HopLen]byte
	wire.PutHop(recs[:], 0, wire.Hop{Switch: 1, Port: 1, RateMbps: 1000, QLen: uint32(delay / 8)})
	wire.PutHop(recs[:], 1, wire.Hop{Switch: 2, Port: 1, RateMbps: 1000})
	p.pk.INT = recs[:]
	p.now = p.now.Add(5 * time.Microsecond)
	s.qb.Handle(p.now, &p.pk)
	abuf := make([]byte, len(p.buf))
	n, err = s.qb.PollTransmit(p.now, abuf)
	if err != nil || n == 0 {
		t.Fatalf("ack: %d bytes, %v", n, err)
	}
	if err := wire.Decode(abuf[:n], &p.ak); err != nil {
		t.Fatal(err)
	}
	if p.ak.BTH.Opcode != wire.OpSprayAck || len(p.ak.INT) != len(recs) {
		t.Fatalf("ack opcode %v with %d INT bytes, want spray ACK with %d", p.ak.BTH.Opcode, len(p.ak.INT), len(recs))
	}
	p.now = p.now.Add(5 * time.Microsecond)
	s.qa.Handle(p.now, &p.ak)
}

func TestMicroburstsCount(t *testing.T) {
	us := time.Microsecond
	// One path (ECMP), so that runs above the threshold are runs in this
	// order: 100, 120 | 400 | 51, 52 above 50µs.
	delays := []time.Duration{us, 100 * us, 120 * us, 3 * us, 400 * us, 49 * us, 51 * us, 52 * us, 0, 50 * us}
	for _, tc := range []struct {
		name         string
		threshold    time.Duration
		events, acks uint64
	}{
		{"default 50µs", 0, 3, 5},
		{"200µs", 200 * us, 1, 1},
		{"1ns", 1, 2, 9},
		{"off", -1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSimPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{
				Seed: 1, INTHops: 2, AckEvery: 1, MicroburstThreshold: tc.threshold, Paths: PathsECMP,
			})
			p := &intPump{t: t, s: s, buf: make([]byte, 2048)}
			for _, d := range delays {
				p.send(d)
			}
			st := s.qa.Stats()
			if st.Microbursts != tc.events || st.MicroburstAcks != tc.acks {
				t.Errorf("Microbursts = %d, MicroburstAcks = %d; want %d, %d", st.Microbursts, st.MicroburstAcks, tc.events, tc.acks)
			}
			if st.INTAcks != uint64(len(delays)) || st.MaxINTQueueDelay != 400*us {
				t.Errorf("INTAcks %d (want %d), MaxINTQueueDelay %v (want 400µs)", st.INTAcks, len(delays), st.MaxINTQueueDelay)
			}
			if st.INTQueueDelay <= 0 || st.INTQueueDelay >= 400*us {
				t.Errorf("smoothed INT queue delay %v, want within (0, 400µs)", st.INTQueueDelay)
			}
			_, qh := s.qa.Histograms()
			if qh.Count() != st.INTAcks || qh.Counts[9] != 1 || qh.Sum != 826*us {
				t.Errorf("queue delay histogram %v (sum %v): want %d samples, 400µs alone in (256, 512]µs, sum 826µs", qh.Counts, qh.Sum, st.INTAcks)
			}
			pc := s.qa.PathCounters()
			if len(pc) != 1 || pc[0].Microbursts != tc.events || pc[0].MicroburstAcks != tc.acks || pc[0].INTAcks != st.INTAcks {
				t.Errorf("path counters %+v, want the QP's", pc)
			}
			if st.MessagesSent != uint64(len(delays)) {
				t.Errorf("%d messages completed, want %d", st.MessagesSent, len(delays))
			}
		})
	}
}

// TestMicroburstsPerPath: sprayed packets take turns over the paths, so a
// burst is counted per path; the QP's counts are the paths' sums.
func TestMicroburstsPerPath(t *testing.T) {
	rng := testutil.Rand(t)
	s := newSimPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{Seed: rng.Uint64(), INTHops: 2, AckEvery: 1})
	p := &intPump{t: t, s: s, buf: make([]byte, 2048)}
	// A slow model: the run state of each path.
	hot := map[uint16]bool{}
	var events, acks uint64
	for range 300 {
		d := time.Duration(rng.IntN(100)) * time.Microsecond
		p.send(d)
		e := p.pk.UDP.Src
		if d > DefaultMicroburstThreshold {
			acks++
			if !hot[e] {
				events++
			}
		}
		hot[e] = d > DefaultMicroburstThreshold
	}
	st := s.qa.Stats()
	if st.Microbursts != events || st.MicroburstAcks != acks {
		t.Errorf("Microbursts %d, MicroburstAcks %d; the model counts %d, %d", st.Microbursts, st.MicroburstAcks, events, acks)
	}
	var pe, pa uint64
	for _, c := range s.qa.PathCounters() {
		pe += c.Microbursts
		pa += c.MicroburstAcks
	}
	if pe != st.Microbursts || pa != st.MicroburstAcks || len(hot) != 8 {
		t.Errorf("paths sum to %d events, %d acks over %d paths; QP counted %d, %d", pe, pa, len(hot), st.Microbursts, st.MicroburstAcks)
	}
}

func TestOnEndpointHook(t *testing.T) {
	var seen []*Endpoint
	_, ea, eb, ca, _ := endpointPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{
		OnEndpoint: func(ep *Endpoint) { seen = append(seen, ep) },
	})
	if len(seen) != 2 || seen[0] != ea || seen[1] != eb {
		t.Fatalf("hook saw %v, want the two endpoints %p, %p", seen, ea, eb)
	}
	if got := ea.LinkInfo().IP; got != ipA {
		t.Errorf("LinkInfo().IP = %v, want %v", got, ipA)
	}
	select {
	case <-ea.Done():
		t.Fatal("Done closed before Close")
	default:
	}
	ctx := context.Background()
	if err := ca.Send(ctx, make([]byte, 10000)); err != nil {
		t.Fatal(err)
	}
	var snap Snapshot
	if err := ea.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.QPs) != 1 || snap.QPs[0].QPN != ca.Info().QPN || snap.QPs[0].Stats.MessagesSent != 1 || snap.Time == 0 || snap.Engine.TxFrames == 0 {
		t.Errorf("endpoint snapshot after one message: %+v", snap)
	}
	ea.Close()
	if err := ea.Snapshot(ctx, &snap); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Snapshot of a closed endpoint: %v, want net.ErrClosed", err)
	}
	eb.Close()
	<-ea.Done()
	<-eb.Done()
}

func TestDelayHistogram(t *testing.T) {
	rng := testutil.Rand(t)
	// The slow model: the first bucket whose bound holds d.
	bucket := func(d time.Duration) int {
		for i := range DelayBuckets - 1 {
			if d <= DelayBucketBound(i) {
				return i
			}
		}
		return DelayBuckets - 1
	}
	var h DelayHistogram
	var want [DelayBuckets]uint64
	var sum time.Duration
	edges := []time.Duration{-5, 0, 1, time.Microsecond, time.Microsecond + 1, 2 * time.Microsecond,
		DelayBucketBound(DelayBuckets - 2), DelayBucketBound(DelayBuckets-2) + 1, time.Hour}
	for i := range 2000 {
		var d time.Duration
		if i < len(edges) {
			d = edges[i]
		} else {
			d = time.Duration(rng.Int64N(int64(10 * time.Second)))
			if rng.IntN(2) == 0 {
				d = time.Duration(rng.Int64N(int64(time.Millisecond)))
			}
		}
		h.Add(d)
		want[bucket(max(d, 0))]++
		sum += max(d, 0)
	}
	if h.Counts != want || h.Sum != sum || h.Count() != 2000 {
		t.Errorf("histogram %v sum %v count %d; model %v sum %v", h.Counts, h.Sum, h.Count(), want, sum)
	}
}

// TestTelemetryHooksAllocate: the counting that the data path does for
// telemetry allocates nothing, for small (scanned) and large (mapped)
// entropy sets.
func TestTelemetryHooksAllocate(t *testing.T) {
	for _, n := range []int{8, 64} {
		s := newSimPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{Seed: 1, Entropies: n, Window: 4096})
		q := s.qa
		q.activate() // the per-path counters come with a QP's first message
		ents := q.paths.Paths()
		i := 0
		a := testing.AllocsPerRun(1000, func() {
			e := ents[i%len(ents)]
			i++
			q.pstats.onSend(e, 1000, i%7 == 0)
			q.noteINT(e, time.Duration(i%100)*time.Microsecond)
			q.noteRTT(time.Duration(i) * time.Microsecond)
		})
		if a != 0 {
			t.Errorf("%d entropies: %v allocations per packet", n, a)
		}
		var sent uint64
		for _, c := range q.PathCounters() {
			sent += c.TxPackets
		}
		if sent == 0 {
			t.Errorf("%d entropies: nothing counted", n)
		}
	}
}

// TestSnapshotAfterDestroy: a snapshot taken after a QP was destroyed lists
// the QPs that remain, and no destroyed one.
func TestSnapshotAfterDestroy(t *testing.T) {
	_, ea, _, ca, _ := endpointPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{})
	ctx := context.Background()
	var keep []*Conn
	for range 3 {
		c, err := ea.CreateQP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, c)
	}
	if _, err := keep[1].Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	var snap Snapshot
	if err := ea.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	got := map[uint32]bool{}
	for _, q := range snap.QPs {
		got[q.QPN] = true
	}
	want := []uint32{ca.Info().QPN, keep[0].Info().QPN, keep[2].Info().QPN}
	if len(snap.QPs) != len(want) || got[keep[1].Info().QPN] {
		t.Fatalf("snapshot lists %v, want %v", got, want)
	}
	for _, q := range want {
		if !got[q] {
			t.Fatalf("snapshot lists %v, want %v", got, want)
		}
	}
}
