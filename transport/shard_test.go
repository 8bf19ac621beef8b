package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
)

// shardSim is two sharded endpoints (Shards) over multi-queue link/mem
// ports under a simulated clock, stepped by hand.
type shardSim struct {
	clk    *clock.Sim
	fab    *mem.Fabric
	a, b   *Shards
	ma, mb *mem.MultiPort
	// comps is by QP, not by QP number: each endpoint numbers its own
	// QPs, and A and B can give the same number (at SPRAY_SEED=11 they do).
	comps map[*QP][]Completion
}

func newShardSim(t *testing.T, mc mem.Config, cfg Config, queues int) *shardSim {
	t.Helper()
	s := &shardSim{clk: &clock.Sim{}, comps: map[*QP][]Completion{}}
	s.fab = mem.NewFabric(mc, s.clk)
	t.Cleanup(func() { s.fab.Close() })
	var err error
	if s.ma, err = s.fab.NewMultiPort(macA, ipA, queues, nil); err != nil {
		t.Fatal(err)
	}
	if s.mb, err = s.fab.NewMultiPort(macB, ipB, queues, nil); err != nil {
		t.Fatal(err)
	}
	if s.a, err = NewShards(s.ma, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Seed++
	if s.b, err = NewShards(s.mb, cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// connect creates n QP pairs, A's i-th connected to B's i-th.
func (s *shardSim) connect(t *testing.T, n int) (qa, qb []*QP) {
	t.Helper()
	for range n {
		x, err := s.a.CreateQP()
		if err != nil {
			t.Fatal(err)
		}
		y, err := s.b.CreateQP()
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Connect(y.Info()); err != nil {
			t.Fatal(err)
		}
		if err := y.Connect(x.Info()); err != nil {
			t.Fatal(err)
		}
		qa, qb = append(qa, x), append(qb, y)
	}
	return qa, qb
}

func (s *shardSim) run(limit clock.Time, done func() bool) error {
	var buf []Completion
	for !done() {
		now := s.clk.Now()
		wa, err := s.a.Step(now)
		if err != nil {
			return err
		}
		wb, err := s.b.Step(now)
		if err != nil {
			return err
		}
		for _, sh := range []*Shards{s.a, s.b} {
			for _, e := range sh.Engines() {
				buf = e.Completions(buf[:0])
				for _, c := range buf {
					q := e.QP(c.QPN)
					s.comps[q] = append(s.comps[q], c)
				}
			}
		}
		if wa || wb {
			continue
		}
		next := clock.Min(clock.Min(s.a.NextDeadline(), s.b.NextDeadline()), s.fab.NextDelivery())
		switch {
		case next == clock.Never:
			return fmt.Errorf("deadlock at %v", now)
		case next > limit:
			return fmt.Errorf("not done after %v of simulated time", limit)
		case next <= now:
			next = now + 1
		}
		s.clk.Set(next)
	}
	return nil
}

func sumStats(st []EngineStats) EngineStats {
	var s EngineStats
	for _, x := range st {
		s.add(x)
	}
	return s
}

// Many QPs between two endpoints with four queues each, under loss and
// reordering: every message arrives byte-exact on its QP, every QP lives
// on the engine its number names, and frames that RSS put on another
// engine's queue were handed over.
func TestShardsTransfer(t *testing.T) {
	const queues, nqp, msgs = 4, 12, 6
	seed := testutil.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	s := newShardSim(t, mem.Config{
		Seed: seed, Loss: 0.01, Reorder: 0.2, ReorderDelay: 20 * time.Microsecond,
		Delay: 5 * time.Microsecond, Jitter: 2 * time.Microsecond,
	}, Config{Seed: seed, MinRTO: time.Millisecond}, queues)
	qa, qb := s.connect(t, nqp)
	want := map[uint32][][32]byte{}
	for i, q := range qa {
		if o := s.a.Owner(q.qpn); s.a.Engines()[o].QP(q.qpn) != q || o != i%queues {
			t.Fatalf("QP %#x not on engine %d", q.qpn, o)
		}
		for j, m := range randomMessages(rng, msgs, 200<<10) {
			if err := q.Post(WorkRequest{ID: uint64(j + 1), Op: OpSend, Data: m}); err != nil {
				t.Fatal(err)
			}
			want[qb[i].qpn] = append(want[qb[i].qpn], sha256.Sum256(m))
		}
	}
	err := s.run(clock.Time(time.Minute), func() bool {
		for i := range qa {
			if len(s.comps[qa[i]]) < msgs || len(s.comps[qb[i]]) < msgs {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range qa {
		for j, c := range s.comps[qa[i]] {
			if c.Err != nil || c.ID != uint64(j+1) {
				t.Fatalf("QP %d send %d: id %d, %v", i, j, c.ID, c.Err)
			}
		}
		for j, c := range s.comps[qb[i]] {
			if c.Op != OpRecv || sha256.Sum256(c.Data) != want[qb[i].qpn][j] {
				t.Fatalf("QP %d message %d: op %v, %d bytes, hash mismatch", i, j, c.Op, len(c.Data))
			}
		}
	}
	for _, sh := range []*Shards{s.a, s.b} {
		st := sh.Stats()
		sum := sumStats(st)
		if sum.HandedOver == 0 || sum.HandedIn != sum.HandedOver {
			t.Errorf("handed over %d, handed in %d: want equal and > 0", sum.HandedOver, sum.HandedIn)
		}
		if sum.UnknownQP != 0 || sum.Malformed() != 0 || sum.HandoverDrops != 0 {
			t.Errorf("stats %+v", sum)
		}
		for i, e := range st {
			if e.RxFrames == 0 || e.TxFrames == 0 {
				t.Errorf("engine %d idle: %+v", i, e)
			}
		}
		t.Logf("per engine: %+v", st)
	}
	if fs := s.fab.Stats(); fs.Misuse != 0 {
		t.Fatalf("link misuse %d", fs.Misuse)
	}
}

// A hand-over ring that fills drops frames, counted, and the transfer
// still completes byte-exact: the drops are losses that the QP recovers.
func TestShardsFullRing(t *testing.T) {
	seed := testutil.Seed(t)
	s := newShardSim(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond},
		Config{Seed: seed, MinRTO: time.Millisecond, HandoverSlots: 2, Entropies: 64}, 4)
	qa, qb := s.connect(t, 1)
	msg := make([]byte, 4<<20)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if err := qa[0].Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	err := s.run(clock.Time(time.Minute), func() bool { return len(s.comps[qb[0]]) == 1 && len(s.comps[qa[0]]) == 1 })
	if err != nil {
		t.Fatal(err)
	}
	if c := s.comps[qb[0]][0]; sha256.Sum256(c.Data) != sha256.Sum256(msg) {
		t.Fatal("message corrupted")
	}
	sum := sumStats(s.b.Stats())
	if sum.HandoverDrops == 0 {
		t.Fatalf("no hand-over drops with 2-slot rings: %+v", sum)
	}
	if qa[0].Stats().Retransmits == 0 {
		t.Error("drops recovered without retransmission")
	}
	t.Logf("receiver: %d handed over, %d dropped on full rings", sum.HandedOver, sum.HandoverDrops)
}

// A frame for a QP that no engine owns is counted where its owner would
// be, and bad frames are counted, not handed around.
func TestShardsUnknownQP(t *testing.T) {
	seed := testutil.Seed(t)
	s := newShardSim(t, mem.Config{Seed: seed}, Config{Seed: seed}, 4)
	qa, err := s.a.CreateQP()
	if err != nil {
		t.Fatal(err)
	}
	qb, err := s.b.CreateQP()
	if err != nil {
		t.Fatal(err)
	}
	if s.b.QP(qb.qpn) != qb {
		t.Fatal("Shards.QP does not find the QP")
	}
	info := qb.Info()
	info.QPN ^= 0x10000 // a number B does not have
	if err := qa.Connect(info); err != nil {
		t.Fatal(err)
	}
	if err := qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: make([]byte, 100)}); err != nil {
		t.Fatal(err)
	}
	s.run(clock.Time(5*time.Millisecond), func() bool { return false })
	sum := sumStats(s.b.Stats())
	if sum.UnknownQP == 0 {
		t.Fatalf("no UnknownQP counted: %+v", sum)
	}
}

// Endpoints with four engines each on the real clock: many Conns send at
// once, every message arrives byte-exact, the per-engine counters add up
// to the endpoint's. Run with -race.
func TestEndpointSharded(t *testing.T) {
	const queues, nqp, msgs = 4, 8, 4
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed, Loss: 0.005, Delay: 5 * time.Microsecond}, clock.NewSystem())
	defer fab.Close()
	ma, _ := fab.NewMultiPort(macA, ipA, queues, nil)
	mb, _ := fab.NewMultiPort(macB, ipB, queues, nil)
	// Retries enough to outlast a loaded machine's scheduling stalls.
	cfg := Config{Seed: seed, MinRTO: time.Millisecond, MaxRetries: 50}
	ea, err := NewEndpoint(ma, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Seed++
	eb, err := NewEndpoint(mb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	if ea.Engines() != queues {
		t.Fatalf("%d engines, want %d", ea.Engines(), queues)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 5))
	var wg sync.WaitGroup
	errs := make(chan error, 2*nqp)
	for i := range nqp {
		ca, cb := connectQPs(ctx, t, ea, eb)
		data := randomMessages(rng, msgs, 256<<10)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for _, m := range data {
				if err := ca.Send(ctx, m); err != nil {
					errs <- fmt.Errorf("conn %d send: %w", i, err)
					cancel() // the receivers would wait for nothing
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for j, m := range data {
				got, err := cb.Recv(ctx)
				if err != nil {
					errs <- fmt.Errorf("conn %d recv: %w", i, err)
					return
				}
				if sha256.Sum256(got.Data) != sha256.Sum256(m) {
					errs <- fmt.Errorf("conn %d message %d corrupted", i, j)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The last ACKs and retransmits still move after the final Recv: read
	// the counters once the endpoint has gone quiet, or two reads differ.
	per := quietEngineStats(ctx, t, eb)
	sum, _ := eb.Stats(ctx)
	if len(per) != queues || sumStats(per) != sum {
		t.Fatalf("per-engine stats %+v do not add up to %+v", per, sum)
	}
	if sum.HandedOver == 0 || sum.HandedIn != sum.HandedOver {
		t.Errorf("handed over %d, handed in %d: want equal and > 0", sum.HandedOver, sum.HandedIn)
	}
	var snap Snapshot
	if err := eb.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Engines) != queues || len(snap.QPs) != nqp {
		t.Errorf("snapshot: %d engines, %d QPs", len(snap.Engines), len(snap.QPs))
	}
	// A region registered once is reachable through every engine.
	buf := make([]byte, 64<<10)
	mr, err := eb.Register(ctx, buf, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := ea.CreateQP(ctx)
	cb, _ := eb.CreateQP(ctx)
	ca.Connect(ctx, cb.Info())
	cb.Connect(ctx, ca.Info())
	src := make([]byte, len(buf))
	for i := range src {
		src[i] = byte(i ^ i>>8)
	}
	if err := ca.Write(ctx, src, mr.Remote(0)); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(buf) != sha256.Sum256(src) {
		t.Fatal("WRITE through a sharded endpoint corrupted")
	}
	ea.Close()
	if _, err := ea.CreateQP(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("CreateQP after Close: %v", err)
	}
	if _, err := ea.Register(ctx, buf, AccessRemoteWrite); !errors.Is(err, ErrClosed) {
		t.Fatalf("Register after Close: %v", err)
	}
}

func TestEndpointEnginesConfig(t *testing.T) {
	fab := mem.NewFabric(mem.Config{}, clock.NewSystem())
	defer fab.Close()
	m, _ := fab.NewMultiPort(macA, ipA, 4, nil)
	if _, err := NewEndpoint(m, Config{Engines: 3}); !errors.Is(err, ErrConfig) {
		t.Errorf("Engines 3 on 4 queues: %v", err)
	}
	p, _ := fab.NewPort(macB, ipB)
	if _, err := NewEndpoint(p, Config{Engines: 2}); !errors.Is(err, ErrConfig) {
		t.Errorf("Engines 2 on one queue: %v", err)
	}
	ep, err := NewEndpoint(m, Config{Engines: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if ep.Engines() != 1 {
		t.Errorf("Engines 1 runs %d engines", ep.Engines())
	}
}

// Zero Configs give unpredictable QP numbers, PSNs, rkeys and region
// addresses; equal seeds give equal ones.
func TestUnpredictableByDefault(t *testing.T) {
	type ids struct {
		qpn, psn, rkey uint32
		va             uint64
	}
	draw := func(cfg Config) ids {
		fab := mem.NewFabric(mem.Config{}, new(clock.Sim))
		defer fab.Close()
		p, _ := fab.NewPort(macA, ipA)
		e, err := NewEngine(p, cfg)
		if err != nil {
			t.Fatal(err)
		}
		q, err := e.CreateQP()
		if err != nil {
			t.Fatal(err)
		}
		mr := e.Register(make([]byte, 4096), AccessRemoteWrite)
		return ids{q.Info().QPN, q.Info().PSN, mr.RKey, mr.Addr}
	}
	a, b := draw(Config{}), draw(Config{})
	if a.qpn == b.qpn || a.psn == b.psn || a.rkey == b.rkey || a.va == b.va {
		t.Errorf("zero Configs drew equal values: %+v and %+v", a, b)
	}
	if a.qpn < minQPN || a.qpn > maxQPN || b.qpn < minQPN || b.qpn > maxQPN {
		t.Errorf("QPNs %#x, %#x out of range", a.qpn, b.qpn)
	}
	s1, s2 := draw(Config{Seed: 42}), draw(Config{Seed: 42})
	if s1 != s2 {
		t.Errorf("seed 42 drew %+v then %+v", s1, s2)
	}
	if s3 := draw(Config{Seed: 43}); s3 == s1 {
		t.Errorf("seeds 42 and 43 drew the same %+v", s1)
	}
}

// Regions registered and removed while engines look them up concurrently
// (run with -race).
func TestRegionsConcurrent(t *testing.T) {
	rng, _ := newRand(0, mrStream)
	tab := newMRTable(rng, false)
	stable := tab.register(make([]byte, 1<<16), AccessRemoteWrite)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, ok := tab.target(stable.RKey, stable.Addr, 100, 0, 100); !ok {
					t.Error("stable region not found")
					return
				}
			}
		}()
	}
	var regs []*MR
	for i := range 200 {
		regs = append(regs, tab.register(make([]byte, 1<<(i%16)), AccessRemoteWrite))
		if i%3 == 0 {
			if err := tab.deregister(regs[0]); err != nil {
				t.Error(err)
			}
			regs = regs[1:]
		}
	}
	close(stop)
	wg.Wait()
	// No two live regions overlap.
	all := append(regs, stable)
	for i, x := range all {
		for _, y := range all[i+1:] {
			if x.Addr < y.Addr+uint64(len(y.Buf)) && y.Addr < x.Addr+uint64(len(x.Buf)) {
				t.Fatalf("regions at %#x and %#x overlap", x.Addr, y.Addr)
			}
		}
	}
}

// The steady data path of a sharded pair allocates nothing: a 64 KiB
// message each way through engines that hand frames over.
func BenchmarkShardsTransfer(b *testing.B) {
	s := &shardSim{clk: &clock.Sim{}, comps: map[*QP][]Completion{}}
	s.fab = mem.NewFabric(mem.Config{Seed: 1}, s.clk)
	defer s.fab.Close()
	s.ma, _ = s.fab.NewMultiPort(macA, ipA, 4, nil)
	s.mb, _ = s.fab.NewMultiPort(macB, ipB, 4, nil)
	var err error
	if s.a, err = NewShards(s.ma, Config{Seed: 1}); err != nil {
		b.Fatal(err)
	}
	if s.b, err = NewShards(s.mb, Config{Seed: 2}); err != nil {
		b.Fatal(err)
	}
	x, _ := s.a.CreateQP()
	y, _ := s.b.CreateQP()
	x.Connect(y.Info())
	y.Connect(x.Info())
	buf := make([]byte, 64<<10)
	mr := s.b.Register(buf, AccessRemoteWrite)
	msg := make([]byte, len(buf))
	var comps []Completion
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := x.Post(WorkRequest{ID: 1, Op: OpWrite, Data: msg, Remote: mr.Remote(0)}); err != nil {
			b.Fatal(err)
		}
		for done := false; !done; {
			now := s.clk.Now()
			wa, _ := s.a.Step(now)
			wb, _ := s.b.Step(now)
			for _, e := range s.a.Engines() {
				comps = e.Completions(comps[:0])
				done = done || len(comps) > 0
			}
			if !wa && !wb && !done {
				next := clock.Min(clock.Min(s.a.NextDeadline(), s.b.NextDeadline()), s.fab.NextDelivery())
				if next == clock.Never {
					b.Fatal("stalled")
				}
				s.clk.Set(max(next, now+1))
			}
		}
	}
	st := sumStats(s.b.Stats())
	b.ReportMetric(float64(st.HandedOver)/float64(b.N), "handovers/op")
}

var _ link.Multi = (*mem.MultiPort)(nil)

// Pinned engines run; a CPU the process may not use fails NewEndpoint
// with an error instead of leaving an engine unpinned.
func TestEndpointPinned(t *testing.T) {
	testutil.SkipUnlessLinux(t, "pinning an engine to a CPU")
	fab := mem.NewFabric(mem.Config{}, clock.NewSystem())
	defer fab.Close()
	m, _ := fab.NewMultiPort(macA, ipA, 2, nil)
	if _, err := NewEndpoint(m, Config{CPUs: []int{1023}}); err == nil {
		t.Fatal("pinning to CPU 1023 succeeded")
	}
	m2, _ := fab.NewMultiPort(macB, ipB, 2, nil)
	ep, err := NewEndpoint(m2, Config{CPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if _, err := ep.CreateQP(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Busy-polling endpoints move messages byte-exact.
func TestEndpointBusyPoll(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond},
		Config{Seed: seed, BusyPoll: 50 * time.Microsecond, MaxRetries: 50})
	defer ea.Close()
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 9))
	msgs := randomMessages(rng, 20, 64<<10)
	sent := make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if err := ca.Send(ctx, m); err != nil {
				sent <- err
				cancel()
				return
			}
		}
		sent <- nil
	}()
	for i, m := range msgs {
		got, err := cb.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got.Data) != sha256.Sum256(m) {
			t.Fatalf("message %d corrupted", i)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// quietEngineStats returns ep's per-engine counters once two reads 20 ms
// apart agree, failing the test if ctx ends first.
func quietEngineStats(ctx context.Context, t *testing.T, ep *Endpoint) []EngineStats {
	t.Helper()
	var last []EngineStats
	for {
		per, err := ep.EngineStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if last != nil && slices.Equal(per, last) {
			return per
		}
		last = per
		select {
		case <-ctx.Done():
			t.Fatalf("endpoint never went quiet: %+v", per)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Busy-polling endpoints answer each other: a Recv that polls takes a
// message before its ACK is sent (the ACK leaves with the answer or from
// the engine goroutine), and every ping and pong arrives byte-exact.
func TestEndpointBusyPollPingPong(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb, ca, cb := endpointPair(t, mem.Config{Seed: seed, Delay: 5 * time.Microsecond},
		Config{Seed: seed, BusyPoll: 50 * time.Microsecond, MaxRetries: 50})
	defer ea.Close()
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rounds = 300
	echoed := make(chan error, 1)
	go func() {
		for range rounds {
			m, err := cb.Recv(ctx)
			if err == nil {
				err = cb.Send(ctx, m.Data)
			}
			m.Release()
			if err != nil {
				echoed <- err
				cancel()
				return
			}
		}
		echoed <- nil
	}()
	for i := range rounds {
		ping := []byte(fmt.Sprintf("ping %d of %d", i, rounds))
		if err := ca.Send(ctx, ping); err != nil {
			t.Fatal(err)
		}
		pong, err := ca.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pong.Data, ping) {
			t.Fatalf("round %d: pong %q, want %q", i, pong.Data, ping)
		}
		pong.Release()
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
}
