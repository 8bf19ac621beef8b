package xdp

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
)

// TestMultiBufferRoundTrip: with MaxFrame above one chunk, frames of every
// length up to MaxFrame arrive intact (the long ones from reassembly
// buffers) and leave intact as chained descriptors; every chunk and slot
// returns to its pool.
func TestMultiBufferRoundTrip(t *testing.T) {
	const rxF, txF, ring, maxFrame = 256, 32, 64, 9014
	c, k := newFakeSG(4096, rxF, txF, ring, maxFrame)
	if !c.sg || c.txSlot != 3 {
		t.Fatalf("sg %v, txSlot %d; want true, 3", c.sg, c.txSlot)
	}
	r := rand.New(rand.NewPCG(testutil.Seed(t), 1))
	fs := make([]link.Frame, 8)
	for round := range 200 {
		var sent [][]byte
		for i := range 1 + r.IntN(6) {
			p := pkt(uint64(round*8+i), 60+r.IntN(maxFrame-59))
			if !k.deliverSG(p) {
				break
			}
			sent = append(sent, p)
		}
		var got [][]byte
		for len(got) < len(sent) {
			n := c.recv(fs)
			if n == 0 {
				t.Fatalf("round %d: received %d of %d", round, len(got), len(sent))
			}
			for _, f := range fs[:n] {
				got = append(got, append([]byte(nil), f.Buf...))
			}
			c.release(fs[:n])
		}
		for i := range sent {
			if !bytes.Equal(got[i], sent[i]) {
				t.Fatalf("round %d frame %d: %d bytes received, %d sent, or content differs", round, i, len(got[i]), len(sent[i]))
			}
		}
		// Transmit as many frames of random lengths.
		n := c.alloc(fs[:len(sent)])
		var want [][]byte
		for i := range fs[:n] {
			l := 14 + r.IntN(maxFrame-13)
			if len(fs[i].Buf) != maxFrame {
				t.Fatalf("Alloc gave %d bytes, want %d", len(fs[i].Buf), maxFrame)
			}
			fs[i].Buf = fs[i].Buf[:l]
			copy(fs[i].Buf, pkt(uint64(round), l))
			want = append(want, pkt(uint64(round), l))
		}
		k.tx = nil
		if q, err := c.send(fs[:n]); q != n || err != nil {
			t.Fatalf("send: %d of %d, %v", q, n, err)
		}
		for k.transmit(ring) > 0 {
		}
		c.reap()
		if len(k.tx) != len(want) {
			t.Fatalf("round %d: %d frames transmitted, want %d", round, len(k.tx), len(want))
		}
		for i := range want {
			if !bytes.Equal(k.tx[i], want[i]) {
				t.Fatalf("round %d: TX frame %d differs (%d bytes, want %d)", round, i, len(k.tx[i]), len(want[i]))
			}
		}
		checkPools(t, c, rxF, txF)
	}
	var st Stats
	c.stats(&st)
	if st.RxMultiBuffer == 0 || st.RxBadDescs != 0 || st.BadCompletions != 0 || st.RxOversize != 0 || st.TxFree != txF || st.RxHeld != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMultiBufferHostile: a frame whose last descriptor has not come yet
// waits; one longer than MaxFrame, or in more pieces than the kernel makes,
// is dropped and counted, its chunks reused; one in many short pieces is
// taken; a caller that holds every reassembly buffer gets no
// more long frames until it releases one; a reassembly buffer released
// twice, or a frame ID of another socket, is counted and refused.
func TestMultiBufferHostile(t *testing.T) {
	const rxF, ring, maxFrame = 512, 512, 5000
	c, k := newFakeSG(4096, rxF, 16, ring, maxFrame)
	fs := make([]link.Frame, jumboBuffers+8)

	// Two pieces published, the second still marked "more to come".
	_, fc := k.idx(0)
	f := *fc
	a0, a1 := *k.addrAt(0, f)+headroom, *k.addrAt(0, f+1)+headroom
	*fc = f + 2
	copy(k.umem[a0:], pkt(1, 3840))
	copy(k.umem[a1:], pkt(2, 3840))
	k.postRxOpt(a0, 3840, pktContd)
	k.postRxOpt(a1, 3840, pktContd)
	if n := c.recv(fs); n != 0 {
		t.Fatalf("incomplete frame: recv returned %d", n)
	}
	// A third piece ends it: 7,780 bytes is more than MaxFrame.
	a2 := *k.addrAt(0, f+2) + headroom
	*fc = f + 3
	k.postRxOpt(a2, 100, 0)
	if n := c.recv(fs); n != 0 {
		t.Fatalf("over-long frame: recv returned %d", n)
	}
	// A frame of more pieces than the kernel makes, short as it is.
	f = *fc
	for i := range uint32(maxFrags + 1) {
		opt := uint32(pktContd)
		if i == maxFrags {
			opt = 0
		}
		k.postRxOpt(*k.addrAt(0, f+i)+headroom, 10, opt)
	}
	*fc = f + maxFrags + 1
	if n := c.recv(fs); n != 0 {
		t.Fatalf("frame of %d pieces: recv returned %d", maxFrags+1, n)
	}
	st := checkPools(t, c, rxF, 16)
	if st.RxOversize != 2 {
		t.Fatalf("RxOversize %d, want 2", st.RxOversize)
	}
	// A frame in many short pieces, as a zero-copy driver may deliver it,
	// is taken whole.
	f = *fc
	want := pkt(4, 4000)
	for i := range uint32(8) {
		opt := uint32(pktContd)
		if i == 7 {
			opt = 0
		}
		addr := *k.addrAt(0, f+i) + headroom
		copy(k.umem[addr:], want[i*500:(i+1)*500])
		k.postRxOpt(addr, 500, opt)
	}
	*fc = f + 8
	if n := c.recv(fs); n != 1 || !bytes.Equal(fs[0].Buf, want) {
		t.Fatalf("frame of 8 short pieces: recv returned %d", n)
	}
	c.release(fs[:1])

	// Hold every reassembly buffer.
	held := 0
	for range jumboBuffers + 1 {
		if !k.deliverSG(pkt(3, 4500)) {
			t.Fatal("fake kernel out of room")
		}
	}
	for held < jumboBuffers {
		n := c.recv(fs[held:])
		if n == 0 {
			break
		}
		held += n
	}
	if held != jumboBuffers {
		t.Fatalf("held %d long frames, want %d", held, jumboBuffers)
	}
	if n := c.recv(fs[held:]); n != 0 {
		t.Fatalf("recv with every reassembly buffer held: %d", n)
	}
	c.release(fs[:1])
	if n := c.recv(fs[held:]); n != 1 || !bytes.Equal(fs[held].Buf, pkt(3, 4500)) {
		t.Fatalf("after a release: recv %d", n)
	}
	c.release(fs[1 : held+1])
	c.release(fs[:1]) // released before
	foreign := link.Frame{ID: 1<<idQueueShift | idJumbo}
	c.release([]link.Frame{foreign})
	st = checkPools(t, c, rxF, 16)
	if st.BadReleases != 2 || c.jHeld != 0 || len(c.jfree) != jumboBuffers {
		t.Fatalf("bad releases %d (want 2), %d buffers held, %d free", st.BadReleases, c.jHeld, len(c.jfree))
	}
}

// TestTaggedIDs: a socket of a Link hands out IDs carrying its tag and
// refuses IDs of another socket.
func TestTaggedIDs(t *testing.T) {
	c, k := newFake(2048, 16, 16, 16)
	c.tag = 2 << idQueueShift
	k.deliver(pkt(1, 100))
	fs := make([]link.Frame, 2)
	if n := c.recv(fs); n != 1 || fs[0].ID>>idQueueShift != 2 {
		t.Fatalf("recv %d, ID %#x", n, fs[0].ID)
	}
	other := fs[0]
	other.ID &= idAddrMask
	c.release([]link.Frame{other})
	c.release(fs[:1])
	if n := c.alloc(fs[1:]); n != 1 || fs[1].ID>>idQueueShift != 2 {
		t.Fatalf("alloc %d, ID %#x", n, fs[1].ID)
	}
	bad := fs[1]
	bad.ID = bad.ID&idAddrMask | 3<<idQueueShift
	if q, _ := c.send([]link.Frame{bad}); q != 0 {
		t.Fatal("sent a frame with another socket's tag")
	}
	fs[1].Buf = fs[1].Buf[:60]
	if q, _ := c.send(fs[1:2]); q != 1 {
		t.Fatal("did not send its own frame")
	}
	st := checkPools(t, c, 16, 16)
	if st.BadReleases != 1 || st.TxDropped != 1 {
		t.Fatalf("bad releases %d, tx dropped %d; want 1, 1", st.BadReleases, st.TxDropped)
	}
}
