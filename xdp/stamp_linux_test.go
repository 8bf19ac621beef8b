package xdp_test

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/xdp"
)

// monotonic reads CLOCK_MONOTONIC in ns, the clock of the steering
// program's bpf_ktime_get_ns.
func monotonic(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

// stampRun sends count frames of the sizes size(seq) from a to b of p in
// batches of batch, and checks that every frame b receives is the one sent
// (SHA-256 of the bytes) and, when stamped, carries an RxTime between a
// CLOCK_MONOTONIC read before its batch was sent and one after it was
// received, not below the previous frame's (one queue, one NAPI context,
// stamped in arrival order); unstamped, RxTime is 0. It returns the
// receiver's queue stats.
func stampRun(t *testing.T, p *plainPair, la, lb *xdp.Link, count, batch int, size func(seq int) int, stamped bool) xdp.Stats {
	t.Helper()
	want := make(map[uint32][32]byte, count)
	tx := make([]link.Frame, batch)
	rx := make([]link.Frame, 64)
	var last int64
	for seq := 0; seq < count; {
		n := la.Alloc(tx[:min(batch, count-seq)])
		if n == 0 {
			la.Wait(time.Millisecond)
			continue
		}
		for i := range n {
			tx[i].Buf = jumboFrame(tx[i].Buf, p.mac[1], p.mac[0], uint32(seq+i), size(seq+i))
			want[uint32(seq+i)] = sha256.Sum256(tx[i].Buf)
		}
		sent := monotonic(t)
		if k, err := la.Send(tx[:n]); k != n || err != nil {
			t.Fatalf("Send frames %d-%d: %d, %v", seq, seq+n-1, k, err)
		}
		for got, deadline := 0, time.Now().Add(5*time.Second); got < n; {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of frames %d-%d; receiver %+v", got, seq, seq+n-1, lb.QueueStats()[0])
			}
			k, err := lb.Recv(rx)
			if err != nil {
				t.Fatal(err)
			}
			recvd := monotonic(t)
			for _, f := range rx[:k] {
				if len(f.Buf) < 46 {
					t.Fatalf("a %d-byte frame", len(f.Buf))
				}
				s := binary.LittleEndian.Uint32(f.Buf[42:])
				h, ok := want[s]
				if !ok || sha256.Sum256(f.Buf) != h || len(f.Buf) != size(int(s)) {
					t.Fatalf("frame %d: %d bytes, not the %d sent (or not sent in this batch)", s, len(f.Buf), size(int(s)))
				}
				delete(want, s)
				switch {
				case !stamped && f.RxTime != 0:
					t.Fatalf("frame %d: RxTime %d without stamps", s, f.RxTime)
				case stamped && (f.RxTime < sent || f.RxTime > recvd || f.RxTime < last):
					t.Fatalf("frame %d: RxTime %d outside [%d, %d] (sent, received) or below the previous frame's %d", s, f.RxTime, sent, recvd, last)
				}
				last = f.RxTime
			}
			lb.Release(rx[:k])
			got += k
			if k == 0 {
				lb.Wait(time.Millisecond)
			}
		}
		seq += n
	}
	return lb.QueueStats()[0]
}

// TestLinkStamp: frames received through an xdp.Link, whose steering
// program stamps them by default, carry RxTime, the CLOCK_MONOTONIC time
// they reached the host, between a read before they were sent and one after
// they were received, and arrive with every byte intact and none of the
// stamp: small frames on an MTU of 1500 (single-chunk sockets of one chunk
// less the stamp), and 9014-byte frames on an MTU of 9000, multi-buffer,
// most of them handed out in place, a few reassembled by a copy.
func TestLinkStamp(t *testing.T) {
	t.Run("small", func(t *testing.T) {
		p := newPlainPair(t, 1500, 1)
		cfg := xdp.LinkConfig{Socket: xdp.Config{RxFrames: 256, TxFrames: 256, RingSize: 256}}
		la, lb := p.open(t, 0, cfg), p.open(t, 1, cfg)
		if got := lb.Info().FrameSize; got != xdp.DefaultFrameSize-256-xdp.StampLen {
			t.Errorf("Info().FrameSize %d, want a chunk less headroom and stamp, %d", got, xdp.DefaultFrameSize-256-xdp.StampLen)
		}
		st := stampRun(t, p, la, lb, 500, 16, func(seq int) int { return 60 + seq*7%1455 }, true)
		if st.RxMultiBuffer != 0 || st.RxBadDescs != 0 {
			t.Errorf("receiver stats %+v; want no multi-buffer, no bad descriptors", st)
		}
		if c, err := lb.Steering().Counters(); err != nil || c.Steered != 500 || c.NoRoom != 0 {
			t.Errorf("steering counters %v, %v; want Steered 500", c, err)
		}
	})
	t.Run("jumbo", func(t *testing.T) {
		const count, size = 400, 9014
		p := newPlainPair(t, 9000, 1)
		cfg := xdp.LinkConfig{Socket: xdp.Config{MaxFrame: size, RxFrames: 1024, TxFrames: 256, RingSize: 1024}}
		la, lb := p.open(t, 0, cfg), p.open(t, 1, cfg)
		if got := lb.Info().FrameSize; got != size {
			t.Errorf("Info().FrameSize %d, want MaxFrame %d", got, size)
		}
		st := stampRun(t, p, la, lb, count, 8, func(seq int) int {
			if seq%4 == 3 {
				return 100 + seq // a small one now and then
			}
			return size - seq%3*1000
		}, true)
		if st.RxMultiBuffer != count*3/4 {
			t.Errorf("RxMultiBuffer %d, want %d", st.RxMultiBuffer, count*3/4)
		}
		t.Logf("%d of %d multi-buffer frames copied into a reassembly buffer", st.RxReassembled, st.RxMultiBuffer)
		if st.RxReassembled > count/10 {
			t.Errorf("%d of %d frames reassembled by a copy, want most in place", st.RxReassembled, count)
		}
		if st.RxOversize != 0 || st.RxBadDescs != 0 {
			t.Errorf("receiver stats %+v; want nothing dropped", st)
		}
	})
	t.Run("max", func(t *testing.T) {
		// Frames of exactly MaxFrame, one chunk less the stamp (the
		// default): the largest that still takes one chunk.
		p := newPlainPair(t, 4000, 1)
		mf := xdp.DefaultFrameSize - 256 - xdp.StampLen
		cfg := xdp.LinkConfig{Socket: xdp.Config{MaxFrame: mf, RxFrames: 64, TxFrames: 64, RingSize: 64}}
		la, lb := p.open(t, 0, cfg), p.open(t, 1, cfg)
		st := stampRun(t, p, la, lb, 50, 4, func(int) int { return mf }, true)
		if st.RxMultiBuffer != 0 || st.KernelRxDropped != 0 {
			t.Errorf("receiver stats %+v; want single-chunk frames, none dropped", st)
		}
	})
}

// TestLinkNoStamp: with LinkConfig.NoStamp the program stamps nothing, the
// sockets strip nothing: frames arrive intact with RxTime 0, and a socket
// keeps the whole chunk (FrameSize-256) for a frame.
func TestLinkNoStamp(t *testing.T) {
	p := newPlainPair(t, 1500, 1)
	cfg := xdp.LinkConfig{NoStamp: true, Socket: xdp.Config{RxFrames: 256, TxFrames: 256, RingSize: 256}}
	la, lb := p.open(t, 0, cfg), p.open(t, 1, cfg)
	if got := lb.Info().FrameSize; got != xdp.DefaultFrameSize-256 {
		t.Errorf("Info().FrameSize %d, want %d", got, xdp.DefaultFrameSize-256)
	}
	stampRun(t, p, la, lb, 100, 16, func(seq int) int { return 60 + seq*13%1455 }, false)
}
