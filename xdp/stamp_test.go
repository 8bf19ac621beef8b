package xdp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/sprayfabric/spray/link"
)

// stamped returns frame with the steering program's arrival stamp ts in
// front.
func stamped(ts int64, frame []byte) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(ts)), frame...)
}

// TestStampedConfig: a Stamped socket's default MaxFrame leaves room for the
// stamp in one chunk, so it stays single-buffer; a MaxFrame that fills the
// chunk makes it multi-buffer, as the stamp would not fit; Info's FrameSize
// (MaxFrame) never includes the stamp.
func TestStampedConfig(t *testing.T) {
	cfg, err := Config{Ifindex: 1, Stamped: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxFrame != DefaultFrameSize-headroom-StampLen || cfg.multiBuffer() {
		t.Errorf("default stamped MaxFrame %d, multi-buffer %v; want %d, false", cfg.MaxFrame, cfg.multiBuffer(), DefaultFrameSize-headroom-StampLen)
	}
	cfg, _ = Config{Ifindex: 1}.withDefaults()
	if cfg.MaxFrame != DefaultFrameSize-headroom {
		t.Errorf("default MaxFrame %d without stamps", cfg.MaxFrame)
	}
	cfg, _ = Config{Ifindex: 1, Stamped: true, MaxFrame: DefaultFrameSize - headroom}.withDefaults()
	if !cfg.multiBuffer() {
		t.Error("a stamped MaxFrame of a full chunk is not multi-buffer")
	}
	cfg, _ = Config{Ifindex: 1, MaxFrame: DefaultFrameSize - headroom}.withDefaults()
	if cfg.multiBuffer() {
		t.Error("an unstamped MaxFrame of a full chunk is multi-buffer")
	}
}

// TestStampedRecv: a Stamped socket hands out each frame without its
// stamp, the stamp in RxTime, for single-chunk and reassembled multi-buffer
// frames alike, up to MaxFrame bytes behind the stamp; frames too short for
// a stamp and an Ethernet header, or longer than MaxFrame, are counted and
// their chunks recycled; TX frames stay MaxFrame long.
func TestStampedRecv(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		const rxF, txF, ring = 16, 8, 16
		c, k := newFakeStamped(2048, rxF, txF, ring, 0, StampLen)
		if c.sg || c.maxLen != 2048-headroom-StampLen {
			t.Fatalf("sg %v, maxLen %d", c.sg, c.maxLen)
		}
		fs := make([]link.Frame, 8)
		sent := [][]byte{pkt(1, 60), pkt(2, c.maxLen), pkt(3, 14)}
		for i, p := range sent {
			k.deliver(stamped(int64(1000+i), p))
		}
		k.deliver(stamped(7, pkt(4, 13))) // too short
		k.deliver(make([]byte, StampLen)) // a stamp alone
		k.deliver(pkt(5, 5))              // not even a stamp
		n := c.recv(fs)
		if n != len(sent) {
			t.Fatalf("received %d frames, want %d", n, len(sent))
		}
		bytesIn := 0
		for i := range sent {
			if !bytes.Equal(fs[i].Buf, sent[i]) || fs[i].RxTime != int64(1000+i) {
				t.Errorf("frame %d: %d bytes, RxTime %d; want %d bytes intact, RxTime %d", i, len(fs[i].Buf), fs[i].RxTime, len(sent[i]), 1000+i)
			}
			bytesIn += len(sent[i])
		}
		st := checkPools(t, c, rxF, txF)
		if st.RxBadDescs != 3 || st.RxBytes != uint64(bytesIn) || st.RxHeld != len(sent) {
			t.Errorf("RxBadDescs %d, RxBytes %d, RxHeld %d; want 3, %d, %d", st.RxBadDescs, st.RxBytes, st.RxHeld, bytesIn, len(sent))
		}
		c.release(fs[:n])
		if st := checkPools(t, c, rxF, txF); st.RxHeld != 0 || st.BadReleases != 0 {
			t.Errorf("after release: %+v", st)
		}
		// Every chunk comes back: as many frames as the pool holds pass.
		for round := range 3 * rxF {
			k.deliver(stamped(int64(round), pkt(uint64(round), 64)))
			if c.recv(fs[:1]) != 1 || fs[0].RxTime != int64(round) {
				t.Fatalf("round %d: no frame, or RxTime %d", round, fs[0].RxTime)
			}
			c.release(fs[:1])
		}
		if c.alloc(fs[:1]) != 1 || len(fs[0].Buf) != c.maxLen {
			t.Errorf("Alloc gave %d bytes, want MaxFrame %d", len(fs[0].Buf), c.maxLen)
		}
	})
	t.Run("multi-buffer", func(t *testing.T) {
		const rxF, txF, ring, maxFrame = 64, 8, 64, 9018
		c, k := newFakeStamped(4096, rxF, txF, ring, maxFrame, StampLen)
		if !c.sg || c.rxMax != maxFrame+StampLen {
			t.Fatalf("sg %v, rxMax %d", c.sg, c.rxMax)
		}
		fs := make([]link.Frame, 8)
		sent := [][]byte{pkt(1, maxFrame), pkt(2, 4096-headroom), pkt(3, 5000)}
		for i, p := range sent {
			if !k.deliverSG(stamped(int64(50+i), p)) {
				t.Fatal("fake kernel full")
			}
		}
		k.deliverSG(stamped(9, pkt(4, maxFrame+1))) // too long
		n := c.recv(fs)
		if n != len(sent) {
			t.Fatalf("received %d frames, want %d", n, len(sent))
		}
		for i := range sent {
			if !bytes.Equal(fs[i].Buf, sent[i]) || fs[i].RxTime != int64(50+i) {
				t.Errorf("frame %d: %d bytes, RxTime %d; want %d bytes intact, RxTime %d", i, len(fs[i].Buf), fs[i].RxTime, len(sent[i]), 50+i)
			}
		}
		c.release(fs[:n])
		if st := checkPools(t, c, rxF, txF); st.RxOversize != 1 || st.RxHeld != 0 {
			t.Errorf("RxOversize %d, RxHeld %d; want 1, 0", st.RxOversize, st.RxHeld)
		}
		if c.alloc(fs[:1]) != 1 || len(fs[0].Buf) != maxFrame {
			t.Errorf("Alloc gave %d bytes, want MaxFrame %d", len(fs[0].Buf), maxFrame)
		}
	})
}
