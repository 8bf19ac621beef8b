package xdp

import (
	"bytes"
	"testing"

	"github.com/sprayfabric/spray/link"
)

// TestKickDelay: with Config.KickDelay, the Sends of a stream (more than
// two since frames were last received or the caller last waited) share
// one kick while the last kick is younger than the delay; the first two
// still kick at once; what waits leaves with a Send or Recv once the last
// kick is the delay old, or with a Wait; every frame arrives intact and
// in order.
func TestKickDelay(t *testing.T) {
	const rxF, txF, ring = 8, 64, 64
	const delay = 10_000 // ns
	c, k := newFake(2048, rxF, txF, ring)
	var clk int64
	c.setKickDelay(delay, func() int64 { return clk })
	var want [][]byte
	seq := uint64(0)
	send := func(at int64) {
		t.Helper()
		clk = at
		fs := make([]link.Frame, 1)
		if c.alloc(fs) != 1 {
			t.Fatal("alloc")
		}
		p := pkt(seq, 100)
		seq++
		fs[0].Buf = fs[0].Buf[:copy(fs[0].Buf, p)]
		want = append(want, p)
		if q, err := c.send(fs); q != 1 || err != nil {
			t.Fatalf("send at %d ns = %d, %v", at, q, err)
		}
	}
	sent := func(wantSent, wantKicks int) {
		t.Helper()
		if len(k.tx) != wantSent || k.txKicks != wantKicks {
			t.Fatalf("at %d ns: %d frames sent in %d kicks, want %d in %d", clk, len(k.tx), k.txKicks, wantSent, wantKicks)
		}
	}

	send(0) // the first: at once
	sent(1, 1)
	send(1_000) // a request after its ACK: at once
	sent(2, 2)
	send(2_000) // the third in a row, 1 µs after a kick: waits
	send(3_000)
	sent(2, 2)
	if err := c.flushDue(); err != nil { // Recv before the delay: nothing
		t.Fatal(err)
	}
	sent(2, 2)
	clk = 1_000 + delay // Recv once the oldest waited the delay: one kick
	if err := c.flushDue(); err != nil {
		t.Fatal(err)
	}
	sent(4, 3)
	send(12_000) // the stream goes on, the last kick is 1 µs old: waits
	sent(4, 3)
	if err := c.flushIdle(); err != nil { // Wait kicks before it sleeps, whatever the delay
		t.Fatal(err)
	}
	sent(5, 4)
	send(13_000) // after a wait, an ACK and a request: at once
	send(14_000)
	sent(7, 6)
	// Received frames end a stream too.
	if !k.deliver(pkt(99, 100)) {
		t.Fatal("deliver")
	}
	rx := make([]link.Frame, 4)
	if n := c.recv(rx); n != 1 {
		t.Fatalf("recv = %d", n)
	}
	c.release(rx[:1])
	send(15_000)
	send(16_000)
	sent(9, 8)
	send(17_000) // the third: waits
	sent(9, 8)
	send(16_000 + delay) // a Send once the last kick is the delay old: one kick for both
	sent(11, 9)
	// A stream that has left a kernel batch's worth on the ring kicks.
	send(16_000 + delay + 1_000) // the stream goes on: waits
	sent(11, 9)
	sendN := func(n int) {
		t.Helper()
		fs := make([]link.Frame, n)
		if c.alloc(fs) != n {
			t.Fatal("alloc")
		}
		for i := range fs {
			p := pkt(seq, 60)
			seq++
			fs[i].Buf = fs[i].Buf[:copy(fs[i].Buf, p)]
			want = append(want, p)
		}
		clk++
		if q, err := c.send(fs); q != n || err != nil {
			t.Fatalf("send = %d, %v", q, err)
		}
	}
	for range 7 { // 1 + 7*4 = 29 frames wait
		sendN(kickSmall)
	}
	sent(11, 9)
	sendN(kickSmall) // 33: at once (two kicks: the kernel takes 32 per kick)
	sent(11+1+8*kickSmall, 11)
	// A Send of more than kickSmall frames kicks at once, stream or not.
	sendN(kickSmall + 1)
	sent(11+1+8*kickSmall+kickSmall+1, 12)
	var st Stats
	c.stats(&st)
	if st.TxDeferredKicks != 12 || st.TxWakeups != 12 {
		t.Fatalf("TxDeferredKicks %d, TxWakeups %d; want 12 and 12", st.TxDeferredKicks, st.TxWakeups)
	}
	for i := range want {
		if !bytes.Equal(k.tx[i], want[i]) {
			t.Fatalf("frame %d: sent %x, want %x", i, k.tx[i], want[i])
		}
	}
	checkPools(t, c, rxF, txF)
}

// TestKickDelayOff: without KickDelay every Send kicks.
func TestKickDelayOff(t *testing.T) {
	c, k := newFake(2048, 8, 64, 64)
	fs := make([]link.Frame, 1)
	for i := range 10 {
		if c.alloc(fs) != 1 {
			t.Fatal("alloc")
		}
		fs[0].Buf = fs[0].Buf[:64]
		if _, err := c.send(fs); err != nil {
			t.Fatal(err)
		}
		if len(k.tx) != i+1 || k.txKicks != i+1 {
			t.Fatalf("send %d: %d sent in %d kicks", i, len(k.tx), k.txKicks)
		}
	}
}

// TestBusyPollNapi: a busy-polling core drives the queue with a recvfrom
// on every empty Recv until the first frame arrives, then only if the
// kernel recorded a NAPI instance to poll.
func TestBusyPollNapi(t *testing.T) {
	for _, napi := range []uint32{0, 7} {
		c, k := newFake(2048, 8, 8, 16)
		c.busyPoll, k.napi = true, napi
		fs := make([]link.Frame, 8)
		c.recv(fs)
		if k.rxKicks != 1 {
			t.Fatalf("NAPI %d: an empty Recv before any frame made %d recvfrom calls, want 1", napi, k.rxKicks)
		}
		if !k.deliver(pkt(1, 100)) {
			t.Fatal("deliver")
		}
		if n := c.recv(fs); n != 1 || !bytes.Equal(fs[0].Buf, pkt(1, 100)) {
			t.Fatalf("NAPI %d: recv = %d", napi, n)
		}
		c.release(fs[:1])
		before := k.rxKicks
		for range 3 {
			c.recv(fs)
		}
		want := 0
		if napi != 0 {
			want = 3
		}
		if got := k.rxKicks - before; got != want {
			t.Fatalf("NAPI %d: 3 empty Recvs after a frame made %d recvfrom calls, want %d", napi, got, want)
		}
	}
}
