package xdp_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/xdp"
)

// pump drives one socket the way an engine loop does: it sends its share
// of numbered frames to the peer, never more than window ahead of what the
// peer has received (flow control, so that the veth path has no reason to
// drop), and receives and checks the peer's frames.
type pump struct {
	s        *xdp.Socket
	src, dst [6]byte
	dir      byte   // direction tag of the frames this pump sends
	total    uint64 // frames to send
	expect   uint64 // frames to receive
	window   uint64
	peer     *pump

	sent   atomic.Uint64 // frames queued by Send
	recvd  atomic.Uint64 // distinct good frames received
	parked atomic.Bool

	seen        []uint64 // bitmap of received sequence numbers
	dups, bad   uint64
	sendDropped uint64
	stalled     bool
	err         error
}

func newPumps(a, b *side, sa, sb *xdp.Socket, ab, ba uint64) (pa, pb *pump) {
	return newPumpsDir(a, b, sa, sb, ab, ba, 0)
}

// newPumpsDir tags a's frames with dir and b's with dir+1.
func newPumpsDir(a, b *side, sa, sb *xdp.Socket, ab, ba uint64, dir byte) (pa, pb *pump) {
	pa = &pump{s: sa, src: a.mac, dst: b.mac, dir: dir, total: ab, expect: ba, window: 128}
	pb = &pump{s: sb, src: b.mac, dst: a.mac, dir: dir + 1, total: ba, expect: ab, window: 128}
	pa.peer, pb.peer = pb, pa
	pa.seen = make([]uint64, (ba+63)/64)
	pb.seen = make([]uint64, (ab+63)/64)
	return pa, pb
}

// stallLimit ends a run in which nothing moved for this long (lost frames
// would otherwise block the window forever); the test then reports them.
const stallLimit = 10 * time.Second

func (p *pump) run() {
	tx := make([]link.Frame, 64)
	rx := make([]link.Frame, 64)
	lastProgress := time.Now()
	for p.sent.Load() < p.total || p.recvd.Load() < p.expect {
		progress := false
		if sent := p.sent.Load(); sent < p.total {
			inflight := sent - p.peer.recvd.Load()
			if inflight < p.window {
				want := min(p.window-inflight, uint64(len(tx)), p.total-sent)
				n := p.s.Alloc(tx[:want])
				for i := range n {
					l := buildFrame(tx[i].Buf, p.dst, p.src, sent+uint64(i), p.dir)
					tx[i].Buf = tx[i].Buf[:l]
				}
				if n > 0 {
					q, err := p.s.Send(tx[:n])
					if err != nil {
						p.err = err
						return
					}
					p.sendDropped += uint64(n - q) // resent with the same numbers
					p.sent.Add(uint64(q))
					progress = q > 0
				}
			}
		}
		n, err := p.s.Recv(rx)
		if err != nil {
			p.err = err
			return
		}
		if n > 0 {
			good := uint64(0)
			for _, f := range rx[:n] {
				seq, dir, ok := parseFrame(f.Buf)
				if !ok || dir != p.peer.dir || seq >= p.expect {
					p.bad++
					continue
				}
				w, bit := seq/64, uint64(1)<<(seq%64)
				if p.seen[w]&bit != 0 {
					p.dups++
					continue
				}
				p.seen[w] |= bit
				good++
			}
			p.s.Release(rx[:n])
			p.recvd.Add(good)
			progress = true
			if p.peer.parked.Load() {
				p.peer.s.Wake()
			}
		}
		if progress {
			lastProgress = time.Now()
			continue
		}
		if time.Since(lastProgress) > stallLimit {
			p.stalled = true
			return
		}
		p.parked.Store(true)
		if sent := p.sent.Load(); sent == p.total || sent-p.peer.recvd.Load() >= p.window {
			if err := p.s.Wait(20 * time.Millisecond); err != nil {
				p.err = err
			}
		}
		p.parked.Store(false)
	}
	// The last frames may wait on the TX ring (Config.KickDelay).
	if err := p.s.Flush(); err != nil {
		p.err = err
	}
}

// exchange runs both pumps to the end and checks the outcome: every frame
// arrived exactly once and intact, or the kernel counted the loss; the
// counters agree; and every frame is back in its pool.
func exchange(t *testing.T, a, b *side, sa, sb *xdp.Socket, ab, ba uint64) {
	t.Helper()
	steeredA, steeredB := a.steered(t), b.steered(t)
	pa, pb := newPumps(a, b, sa, sb, ab, ba)
	start := time.Now()
	done := make(chan struct{})
	go func() { pb.run(); close(done) }()
	pa.run()
	<-done
	el := time.Since(start)
	t.Logf("%d+%d frames in %v: %.0f frames/s", ab, ba, el.Round(time.Millisecond), float64(ab+ba)/el.Seconds())
	for _, p := range []*pump{pa, pb} {
		if p.err != nil {
			t.Fatalf("pump %d: %v", p.dir, p.err)
		}
	}
	drain(t, sa)
	drain(t, sb)
	if got := a.steered(t) - steeredA; got != pa.recvd.Load() {
		t.Errorf("steering program on %s redirected %d frames, socket received %d", a.name, got, pa.recvd.Load())
	}
	if got := b.steered(t) - steeredB; got != pb.recvd.Load() {
		t.Errorf("steering program on %s redirected %d frames, socket received %d", b.name, got, pb.recvd.Load())
	}
	for _, p := range []*pump{pa, pb} {
		st := p.s.Stats()
		pst := p.peer.s.Stats()
		t.Logf("dir %d receiver stats %+v", p.peer.dir, st)
		lost := p.expect - p.recvd.Load()
		kernel := st.RxDropped + pst.TxDeviceDrops + pst.TxInvalidDescs
		if p.dups != 0 || p.bad != 0 {
			t.Errorf("dir %d: %d duplicated, %d bad frames", p.peer.dir, p.dups, p.bad)
		}
		if lost != kernel {
			t.Errorf("dir %d: lost %d frames, the kernel counted %d drops (stalled %v)", p.peer.dir, lost, kernel, p.stalled)
		}
		if st.RxFrames != p.recvd.Load()+p.dups+p.bad {
			t.Errorf("dir %d: RxFrames %d, pump saw %d", p.peer.dir, st.RxFrames, p.recvd.Load()+p.dups+p.bad)
		}
		if pst.TxFrames != p.peer.sent.Load() || pst.Completions != pst.TxFrames {
			t.Errorf("dir %d: TxFrames %d, Completions %d, pump sent %d", p.peer.dir, pst.TxFrames, pst.Completions, p.peer.sent.Load())
		}
		if pst.TxDropped != p.peer.sendDropped {
			t.Errorf("dir %d: TxDropped %d, Send returned %d short", p.peer.dir, pst.TxDropped, p.peer.sendDropped)
		}
		if st.RxBadDescs+st.BadReleases+st.BadCompletions != 0 {
			t.Errorf("dir %d: bad descriptors: %+v", p.peer.dir, st)
		}
	}
}

// drain waits for the kernel to complete every frame in flight and checks
// that both pools are full again.
func drain(t *testing.T, s *xdp.Socket) {
	t.Helper()
	drainTo(t, s, xdp.DefaultFrames, xdp.DefaultFrames)
}

// drainTo is drain for a socket with rxFrames and txFrames in its pools.
func drainTo(t *testing.T, s *xdp.Socket, rxFrames, txFrames int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().TxInFlight > 0 && time.Now().Before(deadline) {
		s.Wait(time.Millisecond)
	}
	st := s.Stats()
	if st.RxFree != rxFrames || st.RxHeld != 0 || st.TxFree != txFrames || st.TxHeld != 0 || st.TxInFlight != 0 {
		t.Errorf("%s: pools not full at the end: rx free %d held %d, tx free %d held %d in flight %d",
			s.Info().Name, st.RxFree, st.RxHeld, st.TxFree, st.TxHeld, st.TxInFlight)
	}
}
