//go:build linux

package udp

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/internal/sock/socktest"
)

// TestOffloadExchange sends runs of equal-size frames (the bulk path:
// UDP_SEGMENT on send, UDP_GRO on receive) mixed with short frames, over
// four entropies and two TOS values, through every combination of offload
// on either side and of a receive slice smaller than a coalesced datagram,
// and checks that every frame arrives once, intact (a hash of the
// payloads in sequence order), with its entropy and TOS, and that the
// offload counters move exactly when offload is on.
func TestOffloadExchange(t *testing.T) {
	for _, tc := range []struct {
		name       string
		txOff      bool // sender without offload
		rxOff      bool // receiver without offload
		frameSize  int
		recvSlice  int
		wantTxSegs bool
		wantRxSegs bool
	}{
		{"both", false, false, 1514, 64, true, true},
		{"small recv slice", false, false, 3514, 5, true, true},
		{"sender only", false, true, 1514, 64, true, false},
		{"receiver only", true, false, 1514, 64, false, false},
		{"jumbo", false, false, 9014, 64, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testutil.Rand(t)
			ipA, ipB := loopbackPair(r)
			base := testutil.LoopbackPort(r, 20000, 30000)
			ents := []uint16{base, base + 1, base + 2, base + 3}
			a := open(t, Config{Local: ipA, Entropies: ents, FrameSize: tc.frameSize, NoOffload: tc.txOff})
			b := open(t, Config{Local: ipB, FrameSize: tc.frameSize, NoOffload: tc.rxOff, SocketBuffer: 16 << 20})
			const total = 20000
			full := tc.frameSize - 42
			type meta struct {
				sport uint16
				tos   uint8
				plen  int
			}
			want := make([]meta, total)
			for i := range want {
				// Runs of full frames on one entropy, ending in a short
				// frame now and then, as a message's last packet does.
				run := i / 24
				m := meta{sport: ents[run%len(ents)], tos: uint8(run%2) << 2, plen: full}
				if r.IntN(10) == 0 {
					m.plen = 4 + r.IntN(full-4)
				}
				want[i] = m
			}
			hw, hg := sha256.New(), sha256.New()
			fs := make([]link.Frame, 64)
			in := make([]link.Frame, tc.recvSlice)
			got := make([][]byte, total)
			sent, n := 0, 0
			lastProgress := time.Now()
			for n < total {
				if sent < total && sent-n < 512 {
					k := a.Alloc(fs[:min(len(fs), total-sent)])
					for i := range k {
						seq := sent + i
						p := make([]byte, want[seq].plen)
						socktest.Content(p, uint32(seq))
						fs[i].Buf = buildFrame(fs[i].Buf, ipA, ipB, want[seq].sport, want[seq].tos, p)
					}
					if m, err := a.Send(fs[:k]); m != k || err != nil {
						t.Fatalf("Send = %d, %v (%+v)", m, err, a.Counters())
					}
					sent += k
				}
				k, err := b.Recv(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range in[:k] {
					h, err := parseRx(f.Buf)
					if err != nil {
						t.Fatalf("frame %d: %v", n, err)
					}
					seq := binary.BigEndian.Uint32(h.payload)
					if seq >= total || got[seq] != nil {
						t.Fatalf("seq %d duplicated or out of range", seq)
					}
					w := want[seq]
					if h.sport != w.sport || h.tos != w.tos || len(h.payload) != w.plen || h.src != ipA || h.dst != ipB {
						t.Fatalf("seq %d: got sport %d tos %#x len %d, want %+v", seq, h.sport, h.tos, len(h.payload), w)
					}
					got[seq] = append([]byte(nil), h.payload...)
				}
				b.Release(in[:k])
				n += k
				if k > 0 {
					lastProgress = time.Now()
				} else if sent-n >= 512 || sent == total {
					if err := b.Wait(100 * time.Millisecond); err != nil {
						t.Fatal(err)
					}
					if time.Since(lastProgress) > 10*time.Second {
						t.Fatalf("stalled: sent %d got %d; a %+v b %+v", sent, n, a.Counters(), b.Counters())
					}
				}
			}
			for seq := range total {
				p := make([]byte, want[seq].plen)
				socktest.Content(p, uint32(seq))
				hw.Write(p)
				hg.Write(got[seq])
			}
			if string(hw.Sum(nil)) != string(hg.Sum(nil)) {
				t.Fatal("payload hash differs")
			}
			ca, cb := a.Counters(), b.Counters()
			t.Logf("a %+v\nb %+v", ca, cb)
			if ca.TxFrames != total || cb.RxFrames != total || cb.RxDropped != 0 || ca.TxBytes != cb.RxBytes {
				t.Fatalf("counters: a %+v b %+v", ca, cb)
			}
			if (ca.TxSegmented > 0) != tc.wantTxSegs || (ca.TxSegmentMsgs > 0) != tc.wantTxSegs {
				t.Fatalf("TxSegmented %d in %d messages, want some: %v", ca.TxSegmented, ca.TxSegmentMsgs, tc.wantTxSegs)
			}
			if (cb.RxCoalesced > 0) != tc.wantRxSegs || cb.RxCoalesced < cb.RxCoalescedMsgs {
				t.Fatalf("RxCoalesced %d in %d datagrams, want some: %v", cb.RxCoalesced, cb.RxCoalescedMsgs, tc.wantRxSegs)
			}
			if a.c.Tx.Free() != a.c.Tx.Len() || b.c.Rx.Free() != b.c.Rx.Len() {
				t.Fatalf("buffers leaked: tx %d/%d rx %d/%d", a.c.Tx.Free(), a.c.Tx.Len(), b.c.Rx.Free(), b.c.Rx.Len())
			}
		})
	}
}
