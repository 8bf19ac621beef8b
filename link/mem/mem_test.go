package mem

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
)

func macOf(i int) [6]byte { return [6]byte{0x02, 0, 0, 0, 0, byte(i)} }

func ipOf(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) }

// simFabric makes a fabric under a simulated clock with n ports (MACs
// macOf(0..n-1)).
func simFabric(t testing.TB, cfg Config, n int) (*Fabric, *clock.Sim, []*Port) {
	t.Helper()
	clk := new(clock.Sim)
	f := NewFabric(cfg, clk)
	ports := make([]*Port, n)
	for i := range ports {
		p, err := f.NewPort(macOf(i), ipOf(i))
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	t.Cleanup(func() { f.Close() })
	return f, clk, ports
}

const hdrLen = MinFrameLen + 8 // Ethernet header + sequence number

// fill writes a test frame from src to dst carrying seq and a payload that
// depends on seq, and returns the frame resliced to size.
func fill(buf []byte, dst, src [6]byte, seq uint64, size int) []byte {
	buf = buf[:size]
	copy(buf[0:6], dst[:])
	copy(buf[6:12], src[:])
	binary.BigEndian.PutUint16(buf[12:14], 0x88B5) // local experimental ethertype
	binary.BigEndian.PutUint64(buf[14:22], seq)
	x := seq*0x9E3779B97F4A7C15 + 1
	for i := hdrLen; i < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		buf[i] = byte(x)
	}
	return buf
}

func frameSeq(b []byte) uint64 { return binary.BigEndian.Uint64(b[14:22]) }

func hashOf(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// sendOne sends one frame of size bytes with seq from src to dst and
// returns its hash; it fails the test when no buffer is free.
func sendOne(t testing.TB, src *Port, dst [6]byte, seq uint64, size int) uint64 {
	t.Helper()
	var fs [1]link.Frame
	if src.Alloc(fs[:]) != 1 {
		t.Fatalf("Alloc: pool empty at seq %d", seq)
	}
	fs[0].Buf = fill(fs[0].Buf, dst, src.Info().MAC, seq, size)
	h := hashOf(fs[0].Buf)
	if n, err := src.Send(fs[:]); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	return h
}

// drain receives and releases everything due at p, calling fn on each frame.
func drain(t testing.TB, p *Port, fn func(b []byte)) int {
	t.Helper()
	var fs [BatchSize]link.Frame
	total := 0
	for {
		n, err := p.Recv(fs[:])
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range fs[:n] {
			if fn != nil {
				fn(fr.Buf)
			}
		}
		p.Release(fs[:n])
		total += n
		if n < len(fs) {
			return total
		}
	}
}

// checkConservation asserts that every frame is accounted for once.
func checkConservation(t testing.TB, f *Fabric) {
	t.Helper()
	s := f.Stats()
	in := s.Sent + s.Duplicated
	out := s.Delivered + s.Lost + s.Blackholed + s.Filtered + s.NoRoute + s.QueueDrops + s.RxDrops + uint64(s.InFlight)
	if in != out {
		t.Fatalf("frames not conserved: sent+dup %d != accounted %d (%+v)", in, out, s)
	}
}

// checkPools asserts that each port's buffers are each in exactly one
// place and that no free list holds a buffer twice.
func checkPools(t testing.TB, f *Fabric) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	inFlight := map[uint64]bool{}
	for _, p := range f.ports {
		for _, e := range p.rxq {
			id := frameID(e.owner, e.buf)
			if inFlight[id] {
				t.Fatalf("buffer %x queued twice", id)
			}
			inFlight[id] = true
		}
	}
	for _, p := range f.ports {
		if len(p.bufs) > f.cfg.Frames {
			t.Fatalf("port %d has %d buffers > Frames %d", p.idx, len(p.bufs), f.cfg.Frames)
		}
		seen := make([]bool, len(p.bufs))
		for _, b := range p.free {
			if seen[b] || p.bufs[b].state != stFree {
				t.Fatalf("port %d: free list holds buffer %d twice or in state %d", p.idx, b, p.bufs[b].state)
			}
			seen[b] = true
		}
		for b, buf := range p.bufs {
			id := frameID(p.idx, uint32(b))
			switch {
			case buf.state == stFree && !seen[b]:
				t.Fatalf("port %d: free buffer %d not in the free list", p.idx, b)
			case buf.state == stFlight != inFlight[id]:
				t.Fatalf("port %d: buffer %d state %d, queued %v", p.idx, b, buf.state, inFlight[id])
			}
		}
	}
}

func TestFramesArriveIntact(t *testing.T) {
	seed := testutil.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	cfg := Config{Seed: seed, Loss: 0.02, Dup: 0.02, Reorder: 0.1, ReorderDelay: 20 * time.Microsecond,
		Delay: 5 * time.Microsecond, Jitter: time.Microsecond, Bandwidth: 100e9, FrameSize: 2048, Frames: 256}
	f, clk, ports := simFabric(t, cfg, 3)
	sent := map[uint64]uint64{} // seq -> hash
	got := map[uint64]int{}
	check := func(b []byte) {
		seq := frameSeq(b)
		h, ok := sent[seq]
		if !ok {
			t.Fatalf("received a frame never sent: seq %d", seq)
		}
		if hashOf(b) != h {
			t.Fatalf("seq %d: frame corrupted", seq)
		}
		got[seq]++
	}
	var seq uint64
	for range 20000 {
		src := r.IntN(3)
		dst := (src + 1 + r.IntN(2)) % 3
		seq++
		sent[seq] = sendOne(t, ports[src], macOf(dst), seq, hdrLen+r.IntN(2048-hdrLen+1))
		clk.Advance(time.Duration(r.IntN(300)) * time.Nanosecond)
		for _, p := range ports {
			drain(t, p, check)
		}
	}
	for t0 := f.NextDelivery(); t0 != clock.Never; t0 = f.NextDelivery() {
		clk.Set(t0)
		for _, p := range ports {
			drain(t, p, check)
		}
	}
	s := f.Stats()
	dups := 0
	for _, n := range got {
		if n > 2 {
			t.Fatalf("a frame arrived %d times", n)
		}
		dups += n - 1
	}
	if s.QueueDrops != 0 || s.RxDrops != 0 {
		t.Fatalf("unexpected drops: %+v", s)
	}
	if uint64(len(got)) != s.Sent-s.Lost || uint64(dups) != s.Duplicated {
		t.Fatalf("received %d distinct, %d dups; stats %+v", len(got), dups, s)
	}
	if s.Lost == 0 || s.Duplicated == 0 || s.Reordered == 0 {
		t.Fatalf("faults did not happen: %+v", s)
	}
	checkConservation(t, f)
	checkPools(t, f)
}

func TestLossRate(t *testing.T) {
	const n = 100000
	for _, loss := range []float64{0.001, 0.05, 0.5} {
		f, _, ports := simFabric(t, Config{Seed: testutil.Seed(t), Loss: loss, Frames: 64}, 2)
		received := 0
		for i := range n {
			sendOne(t, ports[0], macOf(1), uint64(i), 64)
			received += drain(t, ports[1], nil)
		}
		s := f.Stats()
		want := loss * n
		sd := math.Sqrt(n * loss * (1 - loss))
		if math.Abs(float64(s.Lost)-want) > 6*sd+5 {
			t.Errorf("loss %v: lost %d of %d, want %.0f +- %.0f", loss, s.Lost, n, want, 6*sd+5)
		}
		if uint64(received) != n-s.Lost || s.Delivered != uint64(received) {
			t.Errorf("loss %v: received %d, lost %d, delivered %d", loss, received, s.Lost, s.Delivered)
		}
	}
}

// TestBurstTime: a burst ends once it has lasted BurstTime, however few
// frames it took: a sender that goes quiet for longer than that finds the
// link good again. Without BurstTime the same burst (a mean of a million
// frames) takes every frame.
func TestBurstTime(t *testing.T) {
	for _, bt := range []time.Duration{0, time.Millisecond} {
		t.Run(bt.String(), func(t *testing.T) {
			f, clk, ports := simFabric(t, Config{Seed: testutil.Seed(t), BurstLoss: 0.01, BurstLen: 1 << 20, BurstTime: bt, Frames: 64}, 2)
			got := 0
			const n = 2000
			for i := range n {
				sendOne(t, ports[0], macOf(1), uint64(i), 64)
				drain(t, ports[1], func([]byte) { got++ })
				clk.Advance(100 * time.Microsecond) // ten frames per BurstTime
			}
			lost := int(f.Stats().Lost)
			t.Logf("%d delivered, %d lost", got, lost)
			if got+lost != n {
				t.Fatalf("%d delivered + %d lost, sent %d", got, lost, n)
			}
			if bt == 0 {
				// The first burst begins within the first few hundred
				// frames and never ends.
				if got > n/2 {
					t.Fatalf("%d of %d frames delivered with unbounded bursts", got, n)
				}
				return
			}
			// Bursts begin at 1% of frames and last ten frames: about 9%
			// lost.
			if lost == 0 || lost > n/5 {
				t.Fatalf("%d of %d frames lost with %v bursts", lost, n, bt)
			}
		})
	}
}

func TestBurstLoss(t *testing.T) {
	const n, p, L = 200000, 0.002, 8
	f, _, ports := simFabric(t, Config{Seed: testutil.Seed(t), BurstLoss: p, BurstLen: L, Frames: 64}, 2)
	lost := make([]bool, n)
	for i := range n {
		lost[i] = true
		sendOne(t, ports[0], macOf(1), uint64(i), 64)
		drain(t, ports[1], func(b []byte) { lost[frameSeq(b)] = false })
	}
	var bursts, total int
	for i := range n {
		if lost[i] {
			total++
			if i == 0 || !lost[i-1] {
				bursts++
			}
		}
	}
	if uint64(total) != f.Stats().Lost {
		t.Fatalf("receiver missed %d frames, Lost = %d", total, f.Stats().Lost)
	}
	// Stationary loss of the Gilbert-Elliott channel: pL / (1 - p + pL).
	want := p * L / (1 - p + p*L)
	if got := float64(total) / n; math.Abs(got-want) > 0.35*want {
		t.Errorf("burst loss rate %.4f, want %.4f +- 35%%", got, want)
	}
	// Bursts may touch each other, so the observed mean length is a little
	// longer than L.
	if mean := float64(total) / float64(bursts); mean < 0.75*L || mean > 1.35*L {
		t.Errorf("mean burst length %.2f over %d bursts, want about %d", mean, bursts, L)
	}
}

func TestDupAndReorderCounted(t *testing.T) {
	cfg := Config{Seed: testutil.Seed(t), Dup: 0.05, Reorder: 0.2, ReorderDelay: 50 * time.Microsecond,
		Delay: 10 * time.Microsecond, Frames: 1024}
	f, clk, ports := simFabric(t, cfg, 2)
	count := map[uint64]int{}
	var maxSeq uint64
	var late, dups uint64
	seen := func(b []byte) {
		s := frameSeq(b)
		count[s]++
		if count[s] > 1 {
			dups++
		}
		if s < maxSeq && count[s] == 1 {
			late++
		}
		maxSeq = max(maxSeq, s)
	}
	for i := 1; i <= 20000; i++ {
		sendOne(t, ports[0], macOf(1), uint64(i), 100)
		clk.Advance(time.Microsecond)
		drain(t, ports[1], seen)
	}
	for t0 := f.NextDelivery(); t0 != clock.Never; t0 = f.NextDelivery() {
		clk.Set(t0)
		drain(t, ports[1], seen)
	}
	s := f.Stats()
	if s.Duplicated == 0 || dups != s.Duplicated {
		t.Errorf("receiver saw %d duplicates, Duplicated = %d", dups, s.Duplicated)
	}
	// A duplicate that arrives after a later frame also counts as reordered;
	// the receiver's count of first arrivals is a lower bound.
	if late == 0 || s.Reordered < late || s.Reordered > late+dups {
		t.Errorf("receiver saw %d late frames (%d dups), Reordered = %d", late, dups, s.Reordered)
	}
	if len(count) != 20000 {
		t.Errorf("%d distinct frames arrived, want 20000", len(count))
	}
}

func TestReorderedMatchesReceiver(t *testing.T) {
	// Without duplicates the receiver's own count is exact.
	cfg := Config{Seed: testutil.Seed(t), Reorder: 0.3, ReorderDelay: 20 * time.Microsecond, Jitter: 3 * time.Microsecond}
	f, clk, ports := simFabric(t, cfg, 3)
	var maxSeq [3]uint64
	late := 0
	for i := 1; i <= 5000; i++ {
		src := i % 2 // two senders into port 2: order is per sender
		sendOne(t, ports[src], macOf(2), uint64(i), 64)
		clk.Advance(time.Microsecond)
		drain(t, ports[2], func(b []byte) {
			s, from := frameSeq(b), b[11]
			if s < maxSeq[from] {
				late++
			}
			maxSeq[from] = max(maxSeq[from], s)
		})
	}
	if s := f.Stats(); s.Reordered == 0 || s.Reordered != uint64(late) {
		t.Fatalf("receiver saw %d reordered, Reordered = %d", late, s.Reordered)
	}
}

func TestBandwidthExactInSimTime(t *testing.T) {
	f, clk, ports := simFabric(t, Config{Bandwidth: 1e9}, 2)
	sendOne(t, ports[0], macOf(1), 1, 1500)
	if got := f.NextDelivery(); got != 12000 {
		t.Fatalf("1500 B at 1 Gbit/s due at %v, want 12µs", got)
	}
	clk.Set(11999)
	if n := drain(t, ports[1], nil); n != 0 {
		t.Fatalf("frame received 1 ns early")
	}
	clk.Set(12000)
	if n := drain(t, ports[1], nil); n != 1 {
		t.Fatalf("frame not received when due")
	}

	// Back to back at 3 Gbit/s with 1000-byte frames: frame k (from 1) is
	// fully serialized at k*8000/3 ns, receivable at the next whole ns, plus
	// the propagation delay.
	f, clk, ports = simFabric(t, Config{Bandwidth: 3e9, Delay: 7 * time.Microsecond, Frames: 512}, 2)
	const k = 300
	for i := 1; i <= k; i++ {
		sendOne(t, ports[0], macOf(1), uint64(i), 1000)
	}
	for i := int64(1); i <= k; i++ {
		want := clock.Time((i*8000+2)/3 + 7000)
		if got := f.NextDelivery(); got != want {
			t.Fatalf("frame %d due at %d ns, want %d", i, got, want)
		}
		clk.Set(want)
		var seqs []uint64
		drain(t, ports[1], func(b []byte) { seqs = append(seqs, frameSeq(b)) })
		if len(seqs) != 1 || seqs[0] != uint64(i) {
			t.Fatalf("at %v received %v, want [%d]", want, seqs, i)
		}
	}

	// Two senders share the destination's FIFO.
	f, clk, ports = simFabric(t, Config{Bandwidth: 8e9}, 3) // 1 byte/ns
	clk.Set(1000)
	sendOne(t, ports[0], macOf(2), 1, 500)
	sendOne(t, ports[1], macOf(2), 2, 500)
	if got := f.NextDelivery(); got != 1500 {
		t.Fatalf("first frame due %v, want 1500", got)
	}
	clk.Set(1999)
	if n := drain(t, ports[2], nil); n != 1 {
		t.Fatalf("received %d at 1999, want 1", n)
	}
	if got := f.NextDelivery(); got != 2000 {
		t.Fatalf("second frame due %v, want 2000", got)
	}
}

func TestQueueOverflowDrops(t *testing.T) {
	f, clk, ports := simFabric(t, Config{Bandwidth: 1e9, QueueBytes: 10000}, 2)
	for i := range 20 {
		sendOne(t, ports[0], macOf(1), uint64(i), 1000)
	}
	if s := f.Stats(); s.QueueDrops != 10 || s.InFlight != 10 {
		t.Fatalf("QueueDrops %d, InFlight %d; want 10, 10", s.QueueDrops, s.InFlight)
	}
	// Half drained (5 frames serialized at 8 µs each): 5 more fit.
	clk.Set(40000)
	for i := range 6 {
		sendOne(t, ports[0], macOf(1), uint64(100+i), 1000)
	}
	if s := f.Stats(); s.QueueDrops != 11 {
		t.Fatalf("QueueDrops %d, want 11", s.QueueDrops)
	}
	clk.Set(clock.Time(f.Stats().Sent) * 8000)
	var got []uint64
	drain(t, ports[1], func(b []byte) { got = append(got, frameSeq(b)) })
	want := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 101, 102, 103, 104}
	if !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	checkConservation(t, f)
}

func TestPoolExhaustionAndRecovery(t *testing.T) {
	f, _, ports := simFabric(t, Config{Frames: 8}, 2)
	a, b := ports[0], ports[1]
	fs := make([]link.Frame, 16)
	if n := a.Alloc(fs); n != 8 {
		t.Fatalf("Alloc = %d, want 8 (the pool)", n)
	}
	for i := range fs[:8] {
		if len(fs[i].Buf) != DefaultFrameSize || cap(fs[i].Buf) != DefaultFrameSize {
			t.Fatalf("Alloc buffer len %d cap %d", len(fs[i].Buf), cap(fs[i].Buf))
		}
		fs[i].Buf = fill(fs[i].Buf, macOf(1), macOf(0), uint64(i), 64)
	}
	if n := a.Alloc(fs[8:]); n != 0 {
		t.Fatalf("Alloc on empty pool = %d", n)
	}
	if n, err := a.Send(fs[:8]); n != 8 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if n := a.Alloc(fs); n != 0 {
		t.Fatalf("Alloc with every buffer in flight = %d", n)
	}
	rx := make([]link.Frame, 16)
	if n, _ := b.Recv(rx); n != 8 {
		t.Fatalf("Recv = %d", n)
	}
	if n := a.Alloc(fs); n != 0 {
		t.Fatalf("Alloc with every buffer held by the receiver = %d", n)
	}
	b.Release(rx[:3])
	if n := a.Alloc(fs); n != 3 {
		t.Fatalf("Alloc after 3 releases = %d", n)
	}
	b.Release(rx[3:8])
	if n := a.Alloc(fs[3:]); n != 5 {
		t.Fatalf("Alloc after all releases = %d", n)
	}
	// Sending zero-length frames hands buffers back unsent.
	for i := range fs[:8] {
		fs[i].Buf = fs[i].Buf[:0]
	}
	if n, _ := a.Send(fs[:8]); n != 0 || a.Stats().TxDropped != 8 {
		t.Fatalf("Send of empty frames = %d, TxDropped %d", n, a.Stats().TxDropped)
	}
	if n := a.Alloc(fs); n != 8 {
		t.Fatalf("Alloc after returning = %d", n)
	}
	if s := f.Stats(); s.Misuse != 0 {
		t.Fatalf("Misuse = %d", s.Misuse)
	}
	checkPools(t, f)
}

func TestRxQueueBound(t *testing.T) {
	f, _, ports := simFabric(t, Config{Frames: 4, Delay: time.Microsecond}, 3)
	for i := range 4 {
		sendOne(t, ports[0], macOf(2), uint64(i), 64)
	}
	for i := range 4 {
		sendOne(t, ports[1], macOf(2), uint64(10+i), 64)
	}
	if s := f.Stats(); s.RxDrops != 4 || s.InFlight != 4 || ports[2].Stats().RxDropped != 4 {
		t.Fatalf("RxDrops %d, InFlight %d, port RxDropped %d; want 4, 4, 4", s.RxDrops, s.InFlight, ports[2].Stats().RxDropped)
	}
	// The dropped frames' buffers are back with their senders.
	fs := make([]link.Frame, 4)
	if n := ports[1].Alloc(fs); n != 4 {
		t.Fatalf("sender whose frames were dropped can Alloc %d", n)
	}
}

// TestNoRouteAndMACs: a frame to a MAC no port has is counted in NoRoute;
// a closed port's MAC routes nowhere, also from a sender that sent to it
// just before (its cached route), and to the new port that takes it.
func TestNoRouteAndMACs(t *testing.T) {
	f, _, ports := simFabric(t, Config{}, 2)
	if _, err := f.NewPort(macOf(1), ipOf(9)); !errors.Is(err, ErrMACInUse) {
		t.Fatalf("duplicate MAC: %v", err)
	}
	sendOne(t, ports[0], macOf(7), 1, 64)
	sendOne(t, ports[0], [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 2, 64)
	if s := f.Stats(); s.NoRoute != 2 {
		t.Fatalf("NoRoute = %d", s.NoRoute)
	}
	sendOne(t, ports[0], macOf(1), 0, 64) // the sender's route to macOf(1) is cached
	if n := drain(t, ports[1], nil); n != 1 {
		t.Fatalf("port 1 received %d", n)
	}
	ports[1].Close()
	sendOne(t, ports[0], macOf(1), 3, 64)
	if s := f.Stats(); s.NoRoute != 3 {
		t.Fatalf("NoRoute after close = %d", s.NoRoute)
	}
	p, err := f.NewPort(macOf(1), ipOf(1))
	if err != nil {
		t.Fatalf("MAC of a closed port not reusable: %v", err)
	}
	sendOne(t, ports[0], macOf(1), 4, 64)
	if n := drain(t, p, nil); n != 1 {
		t.Fatalf("new port received %d", n)
	}
	if info := p.Info(); info.MAC != macOf(1) || info.IP != ipOf(1) || info.FrameSize != DefaultFrameSize || info.Name != "mem" {
		t.Fatalf("Info = %+v", info)
	}
}

func TestFaultsAtRunTime(t *testing.T) {
	f, clk, ports := simFabric(t, Config{Seed: testutil.Seed(t), Frames: 64}, 3)
	send := func(k int, dst int) int {
		got := 0
		for i := range k {
			sendOne(t, ports[0], macOf(dst), uint64(i), 64)
			got += drain(t, ports[dst], nil)
		}
		return got
	}
	if n := send(100, 1); n != 100 {
		t.Fatalf("perfect fabric delivered %d/100", n)
	}
	f.SetLoss(1)
	if n := send(100, 1); n != 0 || f.Stats().Lost != 100 {
		t.Fatalf("SetLoss(1): delivered %d, Lost %d", n, f.Stats().Lost)
	}
	f.SetLoss(0)
	f.Blackhole(true)
	if n := send(50, 1); n != 0 || f.Stats().Blackholed != 50 {
		t.Fatalf("Blackhole: delivered %d, Blackholed %d", n, f.Stats().Blackholed)
	}
	f.Blackhole(false)
	ports[1].Blackhole(true)
	if n1, n2 := send(10, 1), send(10, 2); n1 != 0 || n2 != 10 || f.Stats().Blackholed != 60 {
		t.Fatalf("port blackhole: delivered %d to the down port, %d to the up one", n1, n2)
	}
	ports[1].Blackhole(false)
	// A filter drops one "path": frames whose sequence number is odd.
	f.SetFilter(func(b []byte) bool { return frameSeq(b)%2 == 0 })
	if n := send(100, 1); n != 50 || f.Stats().Filtered != 50 {
		t.Fatalf("filter: delivered %d, Filtered %d", n, f.Stats().Filtered)
	}
	f.SetFilter(nil)
	f.SetDelay(time.Millisecond, 0)
	sendOne(t, ports[0], macOf(1), 1, 64)
	if got := f.NextDelivery(); got != clk.Now().Add(time.Millisecond) {
		t.Fatalf("SetDelay: due %v", got)
	}
	f.SetBandwidth(8e9)
	f.SetDelay(0, 0)
	sendOne(t, ports[0], macOf(2), 1, 1000)
	if got := ports[2].NextDelivery(); got != clk.Now().Add(1000) {
		t.Fatalf("SetBandwidth: due %v", got)
	}
	f.SetDup(1)
	f.SetReorder(1, time.Microsecond)
	f.SetBurstLoss(0.5, 3)
	c := f.Config()
	if c.Dup != 1 || c.Reorder != 1 || c.ReorderDelay != time.Microsecond || c.BurstLoss != 0.5 || c.BurstLen != 3 || c.Bandwidth != 8e9 {
		t.Fatalf("Config after setters = %+v", c)
	}
	f.SetLoss(math.NaN())
	f.SetDup(7)
	if c := f.Config(); c.Loss != 0 || c.Dup != 1 {
		t.Fatalf("setters did not clamp: Loss %v Dup %v", c.Loss, c.Dup)
	}
	checkConservation(t, f)
}

func TestMisuseIsCountedNotFatal(t *testing.T) {
	f, _, ports := simFabric(t, Config{Frames: 4}, 2)
	a, b := ports[0], ports[1]
	fs := make([]link.Frame, 4)
	a.Alloc(fs)
	for i := range fs {
		fs[i].Buf = fill(fs[i].Buf, macOf(1), macOf(0), uint64(i), 64)
	}
	misuse := uint64(0)
	expect := func(what string) {
		t.Helper()
		misuse++
		if got := f.Stats().Misuse; got != misuse {
			t.Fatalf("%s: Misuse = %d, want %d", what, got, misuse)
		}
	}
	if n, _ := b.Send(fs[:1]); n != 0 {
		t.Fatal("port sent a frame another port allocated")
	}
	expect("send via wrong port")
	if n, _ := a.Send([]link.Frame{{Buf: fs[0].Buf, ID: 1 << 40}}); n != 0 {
		t.Fatal("sent a frame with a foreign ID")
	}
	expect("foreign ID")
	shifted := fs[1]
	shifted.Buf = shifted.Buf[2:]
	if n, _ := a.Send([]link.Frame{shifted}); n != 0 {
		t.Fatal("sent a resliced buffer")
	}
	expect("resliced buffer")
	if n, _ := a.Send([]link.Frame{shifted}); n != 0 {
		t.Fatal("sent a buffer twice")
	}
	expect("buffer sent twice")
	if n, _ := a.Send(fs[2:3]); n != 1 {
		t.Fatal("valid send refused")
	}
	rx := make([]link.Frame, 4)
	if n, _ := b.Recv(rx); n != 1 {
		t.Fatalf("Recv = %d", n)
	}
	a.Release(rx[:1])
	expect("release by a port that did not receive")
	b.Release(rx[:1])
	b.Release(rx[:1])
	expect("double release")
	a.Release([]link.Frame{{ID: 99}})
	expect("release of an unknown ID")
	b.Release(fs[3:4])
	expect("release of a transmit buffer")
	checkPools(t, f)
	// Frames 1 (resliced) and 2 are back, 0 and 3 are still allocated.
	if n := a.Alloc(fs); n != 2 {
		t.Fatalf("Alloc after misuse = %d, want 2", n)
	}
}

func TestCloseSemantics(t *testing.T) {
	f, _, ports := simFabric(t, Config{Delay: time.Microsecond}, 2)
	a, b := ports[0], ports[1]
	sendOne(t, a, macOf(1), 1, 64)
	rx := make([]link.Frame, 1)
	fs := make([]link.Frame, 1)
	a.Alloc(fs)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if s := f.Stats(); s.RxDrops != 1 || s.InFlight != 0 {
		t.Fatalf("frame in flight to a closed port: %+v", s)
	}
	if _, err := b.Recv(rx); !errors.Is(err, link.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := b.Wait(time.Second); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if n := b.Alloc(rx); n != 0 {
		t.Fatalf("Alloc after Close = %d", n)
	}
	a.Close()
	fs[0].Buf = fill(fs[0].Buf, macOf(1), macOf(0), 2, 64)
	if n, err := a.Send(fs); n != 0 || !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close = %d, %v", n, err)
	}
	b.Wake() // harmless after Close
	if _, err := f.NewPort(macOf(5), ipOf(5)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := f.NewPort(macOf(6), ipOf(6)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("NewPort after fabric Close: %v", err)
	}
	checkPools(t, f)
}

// TestRealClock runs two goroutines over the system clock: frames with a
// propagation delay wake the receiver's Wait, a Send from the pool-starved
// sender resumes after the receiver releases, and Close unblocks a Wait
// with no limit. It leaves no goroutine behind.
func TestRealClock(t *testing.T) {
	base := runtime.NumGoroutine()
	f := NewFabric(Config{Delay: 200 * time.Microsecond, Frames: 4}, clock.NewSystem())
	a, _ := f.NewPort(macOf(0), ipOf(0))
	b, _ := f.NewPort(macOf(1), ipOf(1))
	const total = 200
	done := make(chan error)
	go func() { // receiver
		got := 0
		rx := make([]link.Frame, 8)
		for got < total {
			if err := b.Wait(-1); err != nil {
				done <- err
				return
			}
			n, err := b.Recv(rx)
			if err != nil {
				done <- err
				return
			}
			for i := range rx[:n] {
				if frameSeq(rx[i].Buf) != uint64(got+i) {
					t.Errorf("frame %d arrived as %d", got+i, frameSeq(rx[i].Buf))
				}
			}
			b.Release(rx[:n])
			got += n
		}
		done <- nil
	}()
	fs := make([]link.Frame, 4)
	for seq := 0; seq < total; {
		n := a.Alloc(fs[:min(4, total-seq)])
		if n == 0 { // all 4 buffers in flight: wait for the receiver
			if err := a.Wait(-1); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for i := range fs[:n] {
			fs[i].Buf = fill(fs[i].Buf, macOf(1), macOf(0), uint64(seq), 100)
			seq++
		}
		a.Send(fs[:n])
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { done <- b.Wait(-1) }()
	b.Close()
	if err := <-done; !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait unblocked by Close returned %v", err)
	}
	a.Wake()
	if err := a.Wait(-1); err != nil {
		t.Fatalf("Wait after Wake: %v", err)
	}
	if err := a.Wait(time.Millisecond); err != nil {
		t.Fatalf("Wait with timeout: %v", err)
	}
	f.Close()
	for i := 0; runtime.NumGoroutine() > base; i++ {
		if i == 1000 {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), base)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentPorts runs one engine goroutine per port, all sending to
// each other, for the race detector and the conservation check.
func TestConcurrentPorts(t *testing.T) {
	const nports, perPort = 4, 2000
	f := NewFabric(Config{Seed: testutil.Seed(t), Loss: 0.01, Dup: 0.01, Jitter: 20 * time.Microsecond, Frames: 32}, clock.NewSystem())
	ports := make([]*Port, nports)
	for i := range ports {
		ports[i], _ = f.NewPort(macOf(i), ipOf(i))
	}
	done := make(chan struct{})
	var finished atomic.Int32
	for i, p := range ports {
		go func() {
			defer func() { done <- struct{}{} }()
			fs := make([]link.Frame, 8)
			rx := make([]link.Frame, 8)
			sent := 0
			// Keep receiving until every port has sent all its frames, so
			// that no sender starves on buffers held in a quiet port's queue.
			for finished.Load() < nports {
				n := p.Alloc(fs[:min(len(fs), perPort-sent)])
				for j := range fs[:n] {
					fs[j].Buf = fill(fs[j].Buf, macOf((i+1+sent%(nports-1))%nports), macOf(i), uint64(sent), 80)
					sent++
				}
				p.Send(fs[:n])
				if n > 0 && sent == perPort {
					finished.Add(1)
				}
				m, _ := p.Recv(rx)
				p.Release(rx[:m])
				if n == 0 && m == 0 {
					p.Wait(100 * time.Microsecond)
				}
			}
		}()
	}
	for range ports {
		<-done
	}
	f.Close()
	checkConservation(t, f)
	checkPools(t, f)
	if s := f.Stats(); s.Sent != nports*perPort || s.Misuse != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// trace runs a fixed scenario and returns every observable outcome.
func trace(t *testing.T, seed uint64) ([]uint64, FabricStats) {
	cfg := Config{Seed: seed, Loss: 0.05, BurstLoss: 0.01, BurstLen: 4, Dup: 0.05, Reorder: 0.1,
		ReorderDelay: 10 * time.Microsecond, Delay: time.Microsecond, Jitter: 500, Bandwidth: 25e9, QueueBytes: 20000, Frames: 128}
	f, clk, ports := simFabric(t, cfg, 3)
	var out []uint64
	for i := range 3000 {
		sendOne(t, ports[i%3], macOf((i+1)%3), uint64(i), 64+i%1400)
		if i%4 == 0 {
			clk.Advance(time.Microsecond)
		}
		for j, p := range ports {
			drain(t, p, func(b []byte) { out = append(out, uint64(j)<<56|uint64(clk.Now())<<20|frameSeq(b)) })
		}
	}
	return out, f.Stats()
}

func TestSameSeedSameOutcomes(t *testing.T) {
	seed := testutil.Seed(t)
	a, sa := trace(t, seed)
	b, sb := trace(t, seed)
	if !slices.Equal(a, b) || sa != sb {
		t.Fatalf("same seed, different outcomes: %+v vs %+v", sa, sb)
	}
	c, sc := trace(t, seed+1)
	if slices.Equal(a, c) {
		t.Fatalf("seeds %d and %d gave the same outcomes %+v", seed, seed+1, sc)
	}
}

func TestZeroAllocsPerFrame(t *testing.T) {
	cfg := Config{Seed: testutil.Seed(t), Loss: 0.01, Dup: 0.01, Reorder: 0.1, ReorderDelay: time.Microsecond,
		Delay: time.Microsecond, Jitter: 100, Bandwidth: 100e9, Frames: 256}
	f, clk, ports := simFabric(t, cfg, 2)
	fs := make([]link.Frame, BatchSize)
	rx := make([]link.Frame, BatchSize)
	var seq uint64
	round := func() {
		n := ports[0].Alloc(fs)
		for i := range fs[:n] {
			fs[i].Buf = fill(fs[i].Buf, macOf(1), macOf(0), seq, 1024)
			seq++
		}
		ports[0].Send(fs[:n])
		clk.Advance(20 * time.Microsecond)
		for {
			m, _ := ports[1].Recv(rx)
			ports[1].Release(rx[:m])
			if m == 0 {
				break
			}
		}
	}
	for range 100 { // warm up: pools and queues reach their size
		round()
	}
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Fatalf("%v allocations per batch of %d frames", allocs, BatchSize)
	}
	if s := f.Stats(); s.Delivered < 200*BatchSize/2 {
		t.Fatalf("delivered only %d", s.Delivered)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	bad := []Config{
		{Loss: -0.1}, {Dup: 1.5}, {Reorder: math.NaN()}, {BurstLoss: 2}, {BurstLen: -1}, {BurstTime: -1},
		{Delay: -1}, {Jitter: -1}, {ReorderDelay: -1}, {Bandwidth: -1}, {Bandwidth: math.Inf(1)},
		{QueueBytes: -1}, {FrameSize: 10}, {Frames: -1},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: Validate = %v", c, err)
		}
	}
	// NewFabric clamps instead.
	f := NewFabric(Config{Loss: -1, Dup: 3, FrameSize: 5, Bandwidth: math.NaN()}, new(clock.Sim))
	if c := f.Config(); c.Loss != 0 || c.Dup != 1 || c.FrameSize != MinFrameLen || c.Bandwidth != 0 ||
		c.Frames != DefaultFrames || c.QueueBytes != DefaultQueueBytes || c.BurstLen != 1 {
		t.Fatalf("clamped config %+v", c)
	}
}

// BenchmarkSendRecv moves batches of 64 1500-byte frames through a port
// pair under a simulated clock, with loss, jitter and a rate limit on.
func BenchmarkSendRecv(b *testing.B) {
	cfg := Config{Loss: 0.001, Jitter: 100, Bandwidth: 400e9, Frames: 256}
	_, clk, ports := simFabric(b, cfg, 2)
	fs := make([]link.Frame, BatchSize)
	rx := make([]link.Frame, BatchSize)
	b.ReportAllocs()
	b.SetBytes(BatchSize * 1500)
	for b.Loop() {
		n := ports[0].Alloc(fs)
		for i := range fs[:n] {
			fs[i].Buf = fs[i].Buf[:1500]
			copy(fs[i].Buf, []byte{0x02, 0, 0, 0, 0, 1})
		}
		ports[0].Send(fs[:n])
		clk.Advance(2 * time.Microsecond)
		for {
			m, _ := ports[1].Recv(rx)
			ports[1].Release(rx[:m])
			if m == 0 {
				break
			}
		}
	}
}

// TestUntimedOrder: on a fabric without delay, jitter, reordering or
// bandwidth, whose Send reads no clock, frames are due at once (the next
// Recv takes them, NextDelivery is not after now) in the order they were
// sent; a delay set at run time holds the frames sent after it for that
// long, and not those before.
func TestUntimedOrder(t *testing.T) {
	f, clk, ports := simFabric(t, Config{Seed: testutil.Seed(t)}, 2)
	clk.Set(clock.Time(time.Millisecond))
	var seq uint64
	for range 5 {
		seq++
		sendOne(t, ports[0], macOf(1), seq, hdrLen)
		clk.Advance(time.Microsecond)
	}
	if d := f.NextDelivery(); d > clk.Now() {
		t.Fatalf("NextDelivery %v after now %v on an untimed fabric", d, clk.Now())
	}
	var got []uint64
	take := func(b []byte) { got = append(got, frameSeq(b)) }
	if n := drain(t, ports[1], take); n != 5 || !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("received %v, want frames 1 to 5 in order", got)
	}
	seq++
	sendOne(t, ports[0], macOf(1), seq, hdrLen) // untimed: due at once
	f.SetDelay(10*time.Microsecond, 0)
	seq++
	sendOne(t, ports[0], macOf(1), seq, hdrLen) // held 10 µs
	got = got[:0]
	if drain(t, ports[1], take); !slices.Equal(got, []uint64{6}) {
		t.Fatalf("received %v after the delay was set, want frame 6 only", got)
	}
	if d, want := f.NextDelivery(), clk.Now().Add(10*time.Microsecond); d != want {
		t.Fatalf("NextDelivery %v, want %v", d, want)
	}
	clk.Advance(10 * time.Microsecond)
	got = got[:0]
	if drain(t, ports[1], take); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("received %v once the delay passed, want frame 7", got)
	}
	checkConservation(t, f)
}
