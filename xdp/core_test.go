package xdp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
)

func pkt(seq uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seq*7 + uint64(i))
	}
	if n >= 8 {
		binary.LittleEndian.PutUint64(b, seq)
	}
	return b
}

// checkPools asserts the pool invariants that Stats promises.
func checkPools(t testing.TB, c *core, rxFrames, txFrames int) Stats {
	t.Helper()
	var st Stats
	c.stats(&st)
	if st.RxFree+st.RxHeld != rxFrames || st.RxFree < 0 || st.RxHeld < 0 {
		t.Fatalf("RX pool: free %d + held %d != %d", st.RxFree, st.RxHeld, rxFrames)
	}
	if st.TxFree+st.TxHeld+st.TxInFlight != txFrames || st.TxFree < 0 || st.TxHeld < 0 || st.TxInFlight < 0 {
		t.Fatalf("TX pool: free %d + held %d + in flight %d != %d", st.TxFree, st.TxHeld, st.TxInFlight, txFrames)
	}
	// Every frame is in exactly one state, and the counts agree.
	var n [7]int
	for _, s := range c.state {
		n[s]++
	}
	if n[stRxUser] != st.RxHeld || n[stTxUser] != st.TxHeld || n[stTxFree] != st.TxFree || n[stTxKernel] != st.TxInFlight {
		t.Fatalf("frame states %v disagree with stats %+v", n, st)
	}
	if n[stRxStash] != int(c.rxStash.n) {
		t.Fatalf("stash holds %d, %d frames in stash state", c.rxStash.n, n[stRxStash])
	}
	return st
}

func TestRoundTrip(t *testing.T) {
	const rxF, txF, ring = 64, 32, 16
	c, k := newFake(2048, rxF, txF, ring)
	if got := k.fillOnRing(); got != ring {
		t.Fatalf("fill ring after init holds %d, want %d", got, ring)
	}
	fs := make([]link.Frame, 8)

	// Receive: what the kernel delivers arrives intact and in order.
	for i := range 5 {
		k.deliver(pkt(uint64(i), 60+i))
	}
	n := c.recv(fs)
	if n != 5 {
		t.Fatalf("recv %d, want 5", n)
	}
	for i, f := range fs[:n] {
		if !bytes.Equal(f.Buf, pkt(uint64(i), 60+i)) {
			t.Fatalf("frame %d: bytes differ", i)
		}
		if cap(f.Buf) != len(f.Buf) {
			t.Fatalf("frame %d: cap %d > len %d", i, cap(f.Buf), len(f.Buf))
		}
	}
	st := checkPools(t, c, rxF, txF)
	if st.RxFrames != 5 || st.RxHeld != 5 {
		t.Fatalf("stats after recv: %+v", st)
	}
	c.release(fs[:n])
	st = checkPools(t, c, rxF, txF)
	if st.RxHeld != 0 || st.Fills != ring+5 {
		t.Fatalf("stats after release: %+v", st)
	}

	// Transmit: what Send queues leaves intact; completions refill the pool.
	n = c.alloc(fs)
	if n != 8 || len(fs[0].Buf) != 2048-headroom {
		t.Fatalf("alloc %d frames of %d bytes", n, len(fs[0].Buf))
	}
	for i := range n {
		p := pkt(uint64(100+i), 64)
		fs[i].Buf = fs[i].Buf[:copy(fs[i].Buf, p)]
	}
	q, err := c.send(fs[:n])
	if q != 8 || err != nil {
		t.Fatalf("send = %d, %v", q, err)
	}
	if len(k.tx) != 8 {
		t.Fatalf("kernel sent %d frames, want 8", len(k.tx))
	}
	for i, b := range k.tx {
		if !bytes.Equal(b, pkt(uint64(100+i), 64)) {
			t.Fatalf("sent frame %d differs", i)
		}
	}
	c.ready() // reaps
	st = checkPools(t, c, rxF, txF)
	if st.TxFree != txF || st.Completions != 8 || st.TxFrames != 8 || st.TxBytes != 8*64 || st.TxWakeups == 0 {
		t.Fatalf("stats after send: %+v", st)
	}
}

// TestFillRingSmallerThanPool: with more RX frames than fill ring slots,
// the rest wait in the stash and reach the ring as it drains; the kernel
// never runs dry while the caller releases.
func TestFillRingSmallerThanPool(t *testing.T) {
	const rxF, ring = 40, 8
	c, k := newFake(2048, rxF, 8, ring)
	fs := make([]link.Frame, ring)
	for round := range 50 {
		for i := range ring {
			if !k.deliver(pkt(uint64(round*ring+i), 64)) {
				t.Fatalf("round %d: kernel dropped frame %d", round, i)
			}
		}
		n := c.recv(fs)
		if n != ring {
			t.Fatalf("round %d: recv %d", round, n)
		}
		c.release(fs[:n])
		checkPools(t, c, rxF, 8)
		if got := k.fillOnRing(); got != ring {
			t.Fatalf("round %d: fill ring holds %d, want %d", round, got, ring)
		}
	}
}

// TestHostileKernel: descriptors that name frames the kernel does not own,
// addresses outside the pool and completions for frames not in flight are
// counted and skipped; the pools stay consistent.
func TestHostileKernel(t *testing.T) {
	const rxF, txF, ring = 16, 16, 16
	c, k := newFake(4096, rxF, txF, ring)
	fs := make([]link.Frame, 16)
	k.deliver(pkt(1, 64))
	n := c.recv(fs[:1])
	if n != 1 {
		t.Fatal("no frame")
	}
	held := fs[0]
	// The same frame again (a duplicated descriptor), a TX frame, an address
	// past the UMEM, a length past the frame, a zero length.
	k.postRx(held.ID, 64)
	k.postRx(uint64(rxF)*4096+headroom, 64)
	k.postRx(1<<40, 64)
	k.postRx(2*4096+headroom, 4096)
	k.postRx(3*4096+headroom, 0)
	k.deliver(pkt(2, 70))
	n = c.recv(fs)
	if n != 1 || !bytes.Equal(fs[0].Buf, pkt(2, 70)) {
		t.Fatalf("recv %d frames, want only the good one", n)
	}
	st := checkPools(t, c, rxF, txF)
	if st.RxBadDescs != 5 {
		t.Fatalf("RxBadDescs %d, want 5", st.RxBadDescs)
	}
	// Completions for frames never sent, and outside the pool.
	k.postComp(uint64(rxF) * 4096)
	k.postComp(0)
	k.postComp(1 << 50)
	c.ready()
	st = checkPools(t, c, rxF, txF)
	if st.BadCompletions != 3 || st.TxFree != txF {
		t.Fatalf("after bogus completions: %+v", st)
	}
	// A corrupt producer index far ahead of the consumer is not trusted.
	rp, _ := k.idx(2)
	*rp += 1 << 20
	if n := c.recv(fs); n != 0 {
		t.Fatalf("recv after corrupt index: %d", n)
	}
	checkPools(t, c, rxF, txF)
}

// TestCallerMisuse: double release, foreign IDs, frames resliced out of
// their buffer, too short or too long: counted, never a corrupted pool.
func TestCallerMisuse(t *testing.T) {
	const rxF, txF, ring = 8, 8, 8
	c, k := newFake(2048, rxF, txF, ring)
	fs := make([]link.Frame, 4)
	k.deliver(pkt(1, 64))
	c.recv(fs[:1])
	r := fs[0]
	c.release([]link.Frame{r, r, {ID: 1 << 40}, {ID: uint64(rxF) * 2048}})
	st := checkPools(t, c, rxF, txF)
	if st.BadReleases != 3 {
		t.Fatalf("BadReleases %d, want 3", st.BadReleases)
	}

	if c.alloc(fs) != 4 {
		t.Fatal("alloc")
	}
	fs[0].Buf = fs[0].Buf[:10]          // shorter than an Ethernet header
	fs[1].Buf = make([]byte, 64)        // memory outside the UMEM
	fs[2].Buf = fs[3].Buf[:64]          // another frame's memory
	fs[3].Buf = fs[3].Buf[100 : 100+64] // an offset inside its own frame: fine
	// Then an RX frame's ID, and fs[3] a second time.
	q, err := c.send(append(fs, link.Frame{ID: 0, Buf: make([]byte, 64)}, fs[3]))
	if err != nil || q != 1 {
		t.Fatalf("send = %d, %v; want 1 queued", q, err)
	}
	st = checkPools(t, c, rxF, txF)
	if st.TxDropped != 5 {
		t.Fatalf("TxDropped %d, want 5", st.TxDropped)
	}
	if len(k.tx) != 1 || !bytes.Equal(k.tx[0], fs[3].Buf) {
		t.Fatal("the good frame did not go out intact")
	}
}

// TestTxRingFullAndKicks: Send kicks until the kernel stops making
// progress, drops what does not fit and reports fatal kick errors.
func TestTxRingFullAndKicks(t *testing.T) {
	const rxF, txF, ring = 8, 64, 16
	c, k := newFake(2048, rxF, txF, ring)
	fs := make([]link.Frame, 64)
	k.txPaused = true
	n := c.alloc(fs)
	for i := range n {
		fs[i].Buf = fs[i].Buf[:64]
	}
	q, err := c.send(fs[:n])
	if err != nil || q != ring {
		t.Fatalf("send with a stuck device = %d, %v; want %d", q, err, ring)
	}
	st := checkPools(t, c, rxF, txF)
	if st.TxDropped != uint64(n-ring) || st.TxInFlight != ring {
		t.Fatalf("stats: %+v", st)
	}
	// The device comes back: the next kick drains the ring.
	k.txPaused = false
	k.txBudget = 4
	c.flushTx()
	c.ready()
	st = checkPools(t, c, rxF, txF)
	if st.TxInFlight != 0 || len(k.tx) != ring {
		t.Fatalf("after the device came back: sent %d, stats %+v", len(k.tx), st)
	}
	// A device drop is counted, a fatal error returned.
	if c.alloc(fs[:2]) != 2 {
		t.Fatal("alloc")
	}
	fs[0].Buf, fs[1].Buf = fs[0].Buf[:64], fs[1].Buf[:64]
	k.kickErr = errDeviceDrop
	if _, err := c.send(fs[:2]); err != nil {
		t.Fatal(err)
	}
	c.ready()
	st = checkPools(t, c, rxF, txF)
	if st.TxDeviceDrops != 1 {
		t.Fatalf("TxDeviceDrops %d, want 1", st.TxDeviceDrops)
	}
	n = c.alloc(fs[:1])
	fs[0].Buf = fs[0].Buf[:64]
	k.kickErr = errFakeFatal
	if _, err := c.send(fs[:n]); err != errFakeFatal {
		t.Fatalf("send with a failing kick: %v", err)
	}
	checkPools(t, c, rxF, txF)
}

// TestRandomOps drives the core and the fake kernel with random operations
// and compares with a slow model: FIFO queues of what was delivered and
// what was sent.
func TestRandomOps(t *testing.T) {
	r := testutil.Rand(t)
	for range 20 {
		runRandom(t, r, 2000)
	}
}

func runRandom(t *testing.T, r *rand.Rand, steps int) {
	rxF, txF := 1+r.IntN(40), 1+r.IntN(40)
	ring := 1 << r.IntN(6)
	c, k := newFake(2048, rxF, txF, ring)
	var (
		delivered, received [][]byte // model of the RX path
		queued              [][]byte // model of the TX path
		heldRx, heldTx      []link.Frame
		seq                 uint64
	)
	fs := make([]link.Frame, 64)
	for range steps {
		switch r.IntN(7) {
		case 0: // the kernel receives
			for range r.IntN(10) {
				p := pkt(seq, 14+r.IntN(200))
				seq++
				if k.deliver(p) {
					delivered = append(delivered, p)
				}
			}
		case 1: // Recv
			n := c.recv(fs[:r.IntN(len(fs))])
			for _, f := range fs[:n] {
				received = append(received, append([]byte(nil), f.Buf...))
				heldRx = append(heldRx, f)
			}
		case 2: // Release some
			r.Shuffle(len(heldRx), func(i, j int) { heldRx[i], heldRx[j] = heldRx[j], heldRx[i] })
			n := r.IntN(len(heldRx) + 1)
			c.release(heldRx[:n])
			heldRx = append(heldRx[:0], heldRx[n:]...)
		case 3: // Alloc
			n := c.alloc(fs[:r.IntN(len(fs))])
			heldTx = append(heldTx, fs[:n]...)
		case 4: // Send some
			n := r.IntN(len(heldTx) + 1)
			batch := heldTx[:n]
			var want [][]byte
			for i := range batch {
				p := pkt(seq, 14+r.IntN(200))
				seq++
				batch[i].Buf = batch[i].Buf[:copy(batch[i].Buf, p)]
				want = append(want, p)
			}
			before := len(k.tx)
			q, err := c.send(batch)
			if err != nil {
				t.Fatal(err)
			}
			// Frames are queued in order; the tail is dropped when the ring
			// is full.
			queued = append(queued, want[:q]...)
			_ = before
			heldTx = append(heldTx[:0], heldTx[n:]...)
		case 5: // the device transmits, or stalls
			k.txPaused = r.IntN(4) == 0
			k.transmit(r.IntN(20))
		case 6: // Wait's bookkeeping
			c.ready()
		}
		checkPools(t, c, rxF, txF)
	}
	// Drain and compare with the model.
	for {
		n := c.recv(fs)
		if n == 0 {
			break
		}
		for _, f := range fs[:n] {
			received = append(received, append([]byte(nil), f.Buf...))
		}
		c.release(fs[:n])
	}
	c.release(heldRx)
	c.send(heldTx)
	k.txPaused = false
	for k.transmit(1<<20) > 0 {
		c.ready()
	}
	c.ready()
	if len(received) != len(delivered) {
		t.Fatalf("received %d frames, delivered %d", len(received), len(delivered))
	}
	for i := range received {
		if !bytes.Equal(received[i], delivered[i]) {
			t.Fatalf("received frame %d differs", i)
		}
	}
	sent := k.tx
	if len(sent) < len(queued) {
		t.Fatalf("kernel sent %d frames, %d queued", len(sent), len(queued))
	}
	for i := range queued {
		if !bytes.Equal(sent[i], queued[i]) {
			t.Fatalf("sent frame %d differs", i)
		}
	}
	st := checkPools(t, c, rxF, txF)
	if st.RxFree != rxF || st.TxFree != txF {
		t.Fatalf("pools not full after drain: %+v", st)
	}
	if st.RxBadDescs+st.BadReleases+st.BadCompletions != 0 {
		t.Fatalf("bad counters on a well-behaved run: %+v", st)
	}
}

// FuzzCore interprets the input as a sequence of caller and kernel
// operations, hostile ones included, and checks that nothing panics and the
// pools stay consistent.
func FuzzCore(f *testing.F) {
	f.Add([]byte{0, 5, 1, 8, 2, 3, 3, 8, 4, 8, 5, 9})
	f.Add([]byte{7, 0, 1, 3, 8, 0, 9, 0, 1, 2, 6, 1})
	f.Add([]byte{3, 40, 4, 40, 5, 0, 9, 200, 8, 1, 1, 1, 2, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const rxF, txF, ring = 8, 8, 4
		c, k := newFake(2048, rxF, txF, ring)
		fs := make([]link.Frame, 16)
		var heldRx, heldTx []link.Frame
		for len(ops) >= 2 {
			op, arg := ops[0], int(ops[1])
			ops = ops[2:]
			switch op % 10 {
			case 0:
				for range arg % 6 {
					k.deliver(pkt(uint64(arg), 14+arg))
				}
			case 1:
				n := c.recv(fs[:arg%len(fs)])
				heldRx = append(heldRx, fs[:n]...)
			case 2:
				n := arg % (len(heldRx) + 1)
				c.release(heldRx[:n])
				heldRx = heldRx[n:]
			case 3:
				n := c.alloc(fs[:arg%len(fs)])
				heldTx = append(heldTx, fs[:n]...)
			case 4:
				n := arg % (len(heldTx) + 1)
				for i := range heldTx[:n] {
					heldTx[i].Buf = heldTx[i].Buf[:min(len(heldTx[i].Buf), 10+arg)]
				}
				c.send(heldTx[:n])
				heldTx = heldTx[n:]
			case 5:
				k.txPaused = arg%3 == 0
				k.transmit(arg % 8)
			case 6:
				c.ready()
			case 7: // hostile RX descriptor
				k.postRx(uint64(arg)*509, uint32(arg*7))
			case 8: // hostile completion
				k.postComp(uint64(arg) * 1021)
			case 9: // caller releases or sends garbage, or twice
				c.release([]link.Frame{{ID: uint64(arg) * 256}})
				if len(heldRx) > 0 {
					c.release(heldRx[:1])
					c.release(heldRx[:1])
					heldRx = heldRx[1:]
				}
				c.send([]link.Frame{{ID: uint64(arg) * 2048, Buf: make([]byte, 64)}})
			}
			checkPools(t, c, rxF, txF)
		}
	})
}

// TestZeroAllocs: the steady-state data path allocates nothing.
func TestZeroAllocs(t *testing.T) {
	c, k := newFake(2048, 64, 64, 64)
	k.discard = true
	fs := make([]link.Frame, 16)
	p := pkt(1, 100)
	allocs := testing.AllocsPerRun(500, func() {
		for range 16 {
			k.deliver(p)
		}
		n := c.recv(fs)
		c.release(fs[:n])
		n = c.alloc(fs)
		for i := range n {
			fs[i].Buf = fs[i].Buf[:100]
		}
		if q, _ := c.send(fs[:n]); q != 16 {
			t.Fatalf("queued %d", q)
		}
		c.ready()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round, want 0", allocs)
	}
	checkPools(t, c, 64, 64)
}
