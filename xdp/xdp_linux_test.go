package xdp_test

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/xdp"
)

// TestReceiveIntact: frames of random length and content sent from the
// peer namespace arrive intact (same SHA-256 multiset) and the counters on
// both sides match.
func TestReceiveIntact(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{})
	sb := b.open(t, xdp.Config{})
	if sa.Mode() != xdp.Copy {
		t.Errorf("mode on veth = %v, want copy", sa.Mode())
	}
	if got := sa.Info(); got.FrameSize != 4096-256 || got.MAC != a.mac || got.Name != "xdp:"+a.name+"/q0" {
		t.Errorf("Info() = %+v", got)
	}
	r := testutil.Rand(t)
	const total = 3000
	sent := map[[32]byte]int{}
	var sentBytes uint64
	fs := make([]link.Frame, 32)
	rx := make([]link.Frame, 64)
	got, n := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for got < total && time.Now().Before(deadline) {
		// Keep at most 256 frames in flight.
		if n < total && n-got < 256 {
			k := sb.Alloc(fs[:min(len(fs), total-n)])
			for i := range k {
				l := 42 + 8 + r.IntN(1400)
				buildFrame(fs[i].Buf, a.mac, b.mac, uint64(n+i), 1)
				binary.BigEndian.PutUint16(fs[i].Buf[16:], uint16(l-14))
				binary.BigEndian.PutUint16(fs[i].Buf[38:], uint16(l-34))
				for j := 50; j < l; j++ {
					fs[i].Buf[j] = byte(r.Uint32())
				}
				fs[i].Buf = fs[i].Buf[:l]
				sent[sha256.Sum256(fs[i].Buf)]++
				sentBytes += uint64(l)
			}
			q, err := sb.Send(fs[:k])
			if err != nil || q != k {
				t.Fatalf("Send = %d of %d, %v", q, k, err)
			}
			n += k
		}
		m, err := sa.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[:m] {
			h := sha256.Sum256(f.Buf)
			if sent[h] == 0 {
				t.Fatalf("received a frame that was not sent (%d bytes)", len(f.Buf))
			}
			sent[h]--
		}
		sa.Release(rx[:m])
		got += m
		if m == 0 && n-got >= 256 {
			sa.Wait(10 * time.Millisecond)
		}
	}
	if got != total {
		t.Fatalf("received %d of %d frames", got, total)
	}
	drain(t, sb)
	drain(t, sa)
	st, pst := sa.Stats(), sb.Stats()
	if st.RxFrames != total || st.RxBytes != sentBytes || st.RxDropped != 0 {
		t.Errorf("receiver stats %+v, want %d frames, %d bytes", st, total, sentBytes)
	}
	if pst.TxFrames != total || pst.TxBytes != sentBytes || pst.Completions != total || pst.TxDropped != 0 || pst.TxWakeups == 0 {
		t.Errorf("sender stats %+v, want %d frames, %d bytes", pst, total, sentBytes)
	}
	if got := a.steered(t); got != total {
		t.Errorf("steering program redirected %d frames, want %d", got, total)
	}
	if st.Fills != 2048+total {
		t.Errorf("Fills %d, want %d", st.Fills, 2048+total)
	}
}

// TestBidirectional: two sockets, one per veth end, exchange numbered
// frames both ways at once.
func TestBidirectional(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{})
	sb := b.open(t, xdp.Config{})
	exchange(t, a, b, sa, sb, 20000, 20000)
}

// TestKickDelayOverVeth: with the longest KickDelay, frames that Sends
// left on the TX ring still leave with a later Recv or Wait: every frame
// arrives exactly once, both ways, and the pools end whole.
func TestKickDelayOverVeth(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{KickDelay: xdp.MaxKickDelay})
	sb := b.open(t, xdp.Config{KickDelay: xdp.MaxKickDelay})
	exchange(t, a, b, sa, sb, 20000, 20000)
	st := sa.Stats()
	t.Logf("%d frames in %d kicks, %d Sends left for a later kick", st.TxFrames, st.TxWakeups, st.TxDeferredKicks)
}

// TestStress: 10 million frames (5M each way; 100k each way with -short)
// with no lost or duplicated descriptor and full pools at the end.
func TestStress(t *testing.T) {
	each := uint64(5_000_000)
	if testing.Short() {
		each = 100_000
	}
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{})
	sb := b.open(t, xdp.Config{})
	exchange(t, a, b, sa, sb, each, each)
}

// TestMultiQueue: one socket per queue; frames sent on queue q arrive on
// the peer's queue q and nowhere else.
func TestMultiQueue(t *testing.T) {
	const queues = 2
	a, b := newPairQueues(t, queues)
	cfg := xdp.Config{RxFrames: 512, TxFrames: 512, RingSize: 512}
	done := make(chan *pump, 2*queues)
	var pumps []*pump
	for q := range queues {
		cfg.Queue = q
		sa, sb := a.open(t, cfg), b.open(t, cfg)
		if sa.Queue() != q || sa.Info().Name != fmt.Sprintf("xdp:%s/q%d", a.name, q) {
			t.Fatalf("queue %d: socket says queue %d, name %q", q, sa.Queue(), sa.Info().Name)
		}
		pa, pb := newPumpsDir(a, b, sa, sb, 20000, 20000, byte(2*q))
		pumps = append(pumps, pa, pb)
		for _, p := range []*pump{pa, pb} {
			go func() { p.run(); done <- p }()
		}
	}
	for range pumps {
		<-done
	}
	for _, p := range pumps {
		if p.err != nil || p.recvd.Load() != p.expect || p.dups != 0 || p.bad != 0 {
			t.Errorf("%s: received %d of %d, %d dups, %d bad (wrong queue), err %v",
				p.s.Info().Name, p.recvd.Load(), p.expect, p.dups, p.bad, p.err)
		}
	}
}

// TestBusyPoll: with busy polling the socket still moves frames.
func TestBusyPoll(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{BusyPoll: true})
	sb := b.open(t, xdp.Config{BusyPoll: true})
	pa, pb := newPumps(a, b, sa, sb, 5000, 5000)
	done := make(chan struct{})
	go func() { pb.run(); close(done) }()
	pa.run()
	<-done
	for _, p := range []*pump{pa, pb} {
		if p.err != nil || p.recvd.Load() != p.expect || p.dups != 0 || p.bad != 0 {
			t.Errorf("dir %d: received %d of %d, %d dups, %d bad, err %v", p.peer.dir, p.recvd.Load(), p.expect, p.dups, p.bad, p.err)
		}
	}
	// The kernel holds the options; once a frame has arrived it has
	// recorded the NAPI instance to poll, if the device has one. Each Recv
	// on an empty ring then drives it with one recvfrom; without one
	// (veth in copy mode) Recv makes no system call for nothing.
	rx := make([]link.Frame, 64)
	for _, s := range []*xdp.Socket{sa, sb} {
		bp := s.BusyPoll()
		if !bp.Requested || bp.Usecs != 20 || !bp.Prefer {
			t.Errorf("busy poll options as the kernel reads them: %+v", bp)
		}
		t.Logf("busy poll: %+v", bp)
		want := uint64(0)
		if bp.NapiID != 0 {
			want = 1
		}
		before, empty := s.Stats().RxWakeups, uint64(0)
		for range 100 {
			n, err := s.Recv(rx)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				s.Release(rx[:n]) // a stray frame: the ring was not empty
				continue
			}
			if empty++; empty == 3 {
				break
			}
		}
		if got := s.Stats().RxWakeups - before; empty != 3 || got != want*empty {
			t.Errorf("%d Recv calls on an empty busy-polling ring (NAPI id %d) made %d recvfrom calls, want %d", empty, bp.NapiID, got, want*empty)
		}
	}
}

// TestNoNeedWakeup: with need_wakeup off the socket still moves frames (it
// kicks on every Send).
func TestNoNeedWakeup(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{NoNeedWakeup: true, RxFrames: 512, TxFrames: 256, RingSize: 256, FrameSize: 2048})
	sb := b.open(t, xdp.Config{NoNeedWakeup: true, RxFrames: 512, TxFrames: 256, RingSize: 256, FrameSize: 2048})
	pa, pb := newPumps(a, b, sa, sb, 5000, 5000)
	done := make(chan struct{})
	go func() { pb.run(); close(done) }()
	pa.run()
	<-done
	for _, p := range []*pump{pa, pb} {
		if p.err != nil || p.recvd.Load() != p.expect || p.dups != 0 || p.bad != 0 {
			t.Errorf("dir %d: received %d of %d, %d dups, %d bad, err %v", p.peer.dir, p.recvd.Load(), p.expect, p.dups, p.bad, p.err)
		}
	}
}

// TestRebind: closing and reopening a socket on the same queue 20 times in
// a row succeeds every time (Open retries the kernel's EBUSY), and each
// socket, registered in the XSKMAP, receives.
func TestRebind(t *testing.T) {
	a, b := newPair(t)
	sb := b.open(t, xdp.Config{})
	for i := range 20 {
		var sa *xdp.Socket
		var err error
		a.in(t, func() {
			sa, err = xdp.Open(xdp.Config{Ifindex: a.ifindex, Logf: t.Logf, Mode: xdp.Copy, RxFrames: 256, TxFrames: 256, RingSize: 256})
		})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		a.register(t, sa)
		pa, pb := newPumps(a, b, sa, sb, 0, 10)
		pb.run()
		pa.run()
		if pa.recvd.Load() != 10 || pa.err != nil {
			t.Errorf("round %d: received %d of 10 (%v)", i, pa.recvd.Load(), pa.err)
		}
		if err := sa.Close(); err != nil {
			t.Fatalf("round %d: close: %v", i, err)
		}
	}
}

// TestCloseUnblocksWait: Close from another goroutine ends a Wait without a
// timeout; afterwards every call reports ErrClosed.
func TestCloseUnblocksWait(t *testing.T) {
	a, _ := newPair(t)
	s := a.open(t, xdp.Config{})
	fs := make([]link.Frame, 4)
	if s.Alloc(fs) != 4 {
		t.Fatal("alloc")
	}
	done := make(chan error)
	go func() { done <- s.Wait(-1) }()
	time.Sleep(50 * time.Millisecond) // let Wait reach ppoll (not needed for correctness)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Errorf("Wait after Close = %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait still blocked 30 s after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := s.Recv(fs); !errors.Is(err, link.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv after Close = %v", err)
	}
	if _, err := s.Send(fs); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Send after Close = %v", err)
	}
	if err := s.Wait(0); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Wait after Close = %v", err)
	}
	if n := s.Alloc(fs); n != 0 {
		t.Errorf("Alloc after Close = %d", n)
	}
	s.Release(fs)
	s.Wake()
	if st := s.Stats(); st.TxHeld != 4 {
		t.Errorf("Stats after Close: %+v", st)
	}
}

// TestTxPoolExhausted: with every TX frame in flight Alloc returns none;
// Wait returns once completions free some, and Alloc then succeeds.
func TestTxPoolExhausted(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{})
	sb := b.open(t, xdp.Config{TxFrames: 64})
	fs := make([]link.Frame, 64)
	rx := make([]link.Frame, 64)
	for round := range 50 {
		n := sb.Alloc(fs)
		for i := range n {
			fs[i].Buf = fs[i].Buf[:buildFrame(fs[i].Buf, a.mac, b.mac, uint64(i), 1)]
		}
		if q, err := sb.Send(fs[:n]); err != nil || q != n {
			t.Fatalf("round %d: Send = %d of %d, %v", round, q, n, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for sb.Alloc(fs[:1]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no TX frame came back: %+v", round, sb.Stats())
			}
			if err := sb.Wait(-1); err != nil {
				t.Fatal(err)
			}
		}
		sb.Send(fs[:0])
		for {
			m, _ := sa.Recv(rx)
			if m == 0 {
				break
			}
			sa.Release(rx[:m])
		}
		// Hand the frame back unsent: a frame of the wrong length is
		// dropped and counted, and returns to the pool.
		fs[0].Buf = fs[0].Buf[:1]
		sb.Send(fs[:1])
	}
	drainTo(t, sb, xdp.DefaultFrames, 64)
	if st := sb.Stats(); st.TxDropped != 50 {
		t.Errorf("TxDropped %d, want 50", st.TxDropped)
	}
}

// TestWake: Wake from another goroutine ends a Wait without a timeout.
func TestWake(t *testing.T) {
	a, _ := newPair(t)
	s := a.open(t, xdp.Config{})
	done := make(chan error)
	go func() { done <- s.Wait(-1) }()
	s.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait still blocked 30 s after Wake")
	}
}

// TestOpenErrors: bad configs and devices give typed errors.
func TestOpenErrors(t *testing.T) {
	a, _ := newPair(t)
	cases := []struct {
		cfg  xdp.Config
		want error
	}{
		{xdp.Config{Ifindex: a.ifindex, FrameSize: 1000}, xdp.ErrInvalidConfig},
		{xdp.Config{Ifindex: a.ifindex, RingSize: 1000}, xdp.ErrInvalidConfig},
		{xdp.Config{Ifindex: a.ifindex, KickDelay: -1}, xdp.ErrInvalidConfig},
		{xdp.Config{Ifindex: a.ifindex, KickDelay: xdp.MaxKickDelay + 1}, xdp.ErrInvalidConfig},
		{xdp.Config{}, xdp.ErrInvalidConfig},
		{xdp.Config{Ifindex: a.ifindex, Mode: xdp.ZeroCopy}, xdp.ErrNotSupported}, // veth has no zero-copy
		{xdp.Config{Ifindex: 999999, Mode: xdp.Copy}, nil},
		{xdp.Config{Ifindex: a.ifindex, Queue: 64, Mode: xdp.Copy}, nil},
	}
	for _, c := range cases {
		var err error
		a.in(t, func() {
			var s *xdp.Socket
			s, err = xdp.Open(c.cfg)
			if s != nil {
				s.Close()
			}
		})
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("Open(%+v) = %v, want %v", c.cfg, err, c.want)
		} else {
			t.Logf("Open: %v", err)
		}
	}
}

// TestAutoFallsBackToCopy: Auto on veth binds in copy mode and says so.
func TestAutoFallsBackToCopy(t *testing.T) {
	a, _ := newPair(t)
	var logged []string
	var s *xdp.Socket
	a.in(t, func() {
		var err error
		s, err = xdp.Open(xdp.Config{Ifindex: a.ifindex, Logf: func(f string, args ...any) { logged = append(logged, f) }})
		if err != nil {
			t.Fatal(err)
		}
	})
	defer s.Close()
	if s.Mode() != xdp.Copy || len(logged) != 1 {
		t.Errorf("mode %v, logged %q", s.Mode(), logged)
	}
}

// TestSocketZeroAllocs: a full round (Alloc, Send, Wait, Recv, Release) on a
// real socket allocates nothing.
func TestSocketZeroAllocs(t *testing.T) {
	a, b := newPair(t)
	sa := a.open(t, xdp.Config{})
	sb := b.open(t, xdp.Config{})
	tx := make([]link.Frame, 16)
	rx := make([]link.Frame, 64)
	var seq uint64
	round := func() {
		n := sb.Alloc(tx)
		for i := range n {
			tx[i].Buf = tx[i].Buf[:buildFrame(tx[i].Buf, a.mac, b.mac, seq, 1)]
			seq++
		}
		sb.Send(tx[:n])
		sa.Wait(0)
		m, _ := sa.Recv(rx)
		sa.Release(rx[:m])
		sb.Wait(0)
	}
	for range 10 {
		round()
	}
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%v allocations per round, want 0", allocs)
	}
}

// BenchmarkOneWay measures frames/s from one socket to the other over veth
// (copy mode), 106-byte frames, 128 in flight.
func BenchmarkOneWay(b *testing.B) {
	a, bb := newPair(b)
	sa := a.open(b, xdp.Config{})
	sb := bb.open(b, xdp.Config{})
	pa, pb := newPumps(a, bb, sa, sb, 0, uint64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done := make(chan struct{})
	go func() { pb.run(); close(done) }()
	pa.run()
	<-done
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "frames/s")
	if pa.recvd.Load() != uint64(b.N) {
		b.Fatalf("received %d of %d", pa.recvd.Load(), b.N)
	}
}
