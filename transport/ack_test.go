package transport

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// TestSprayAcksCoalesce: a sender held by a fixed window of 8 packets,
// sprayed over paths that reorder, and a receiver told to acknowledge
// every 4 packets: the receiver sends about one acknowledgement per 4
// packets, not one per packet, and the bytes arrive intact. A window
// below 2*AckEvery packets still asks for prompt acknowledgements and does
// not wait out the delayed-ACK timer; one of AckEvery packets (what HPCC's
// MinInflight keeps) asks once per AckEvery packets, not on every packet
// that refills it, and does not wait for the timer either.
func TestSprayAcksCoalesce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		packets int     // the window, in full packets
		maxAcks float64 // acknowledgements per data packet, at most
		minAcks float64 // and at least
	}{
		{"window8", 8, 0.4, 0},
		{"window4", 4, 0.4, 0},
		{"window2", 2, 1.2, 0.45},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := testutil.Seed(t)
			rng := rand.New(rand.NewPCG(seed, 5))
			cfg := Config{Profile: Spray, Seed: seed, MTU: 9014, Entropies: 8, AckEvery: 4, AckDelay: 500 * time.Microsecond}
			seg := payloadSize(&cfg, false)
			w := tc.packets * (seg + 200)
			cfg.CC = func() cc.Controller { return cc.Fixed{WindowBytes: w} }
			s := newSimPair(t, mem.Config{
				Seed: seed, Delay: 20 * time.Microsecond, Bandwidth: 1e9,
				Reorder: 0.2, ReorderDelay: 50 * time.Microsecond,
			}, cfg)
			msgs := randomMessages(rng, 20, 2<<20)
			start := s.clk.Now()
			transfer(t, s, msgs)
			took := s.clk.Now().Sub(start)
			rx := s.qb.Stats()
			per := float64(rx.AcksSent) / float64(rx.RxPackets)
			t.Logf("%d data packets, %d acknowledgements (%.2f per packet), %d retransmits, %v simulated",
				rx.RxPackets, rx.AcksSent, per, s.qa.Stats().Retransmits, took)
			if per > tc.maxAcks || per < tc.minAcks {
				t.Fatalf("%.2f acknowledgements per data packet, want %.2f to %.2f", per, tc.minAcks, tc.maxAcks)
			}
			// Simulated time: a small window that waited for the
			// delayed-ACK timer would take at least AckDelay per window.
			if windows := time.Duration(rx.RxPackets) / time.Duration(tc.packets); tc.packets < 2*cfg.AckEvery && took >= windows*cfg.AckDelay {
				t.Fatalf("%v for %d windows of %d packets: the windows waited for the delayed-ACK timer (%v)", took, windows, tc.packets, cfg.AckDelay)
			}
		})
	}
}

// TestSprayAckSackWords: an acknowledgement carries the SACK words up to
// the last one with a bit set, not always four. Packets that arrive in
// order are acknowledged with one word (24 bytes less per ACK: on spray
// compare's testbed ACKs share the spine links with the other direction's
// data); behind a lost packet, the words that report the packets beyond
// it still go, so the sender resends only the lost one, and the bytes
// arrive intact.
func TestSprayAckSackWords(t *testing.T) {
	for _, tc := range []struct {
		name      string
		drop      bool // lose the first data packet once
		wantWords int  // the most SACK words an ACK carried: exactly, or at least with a hole
	}{
		{"inorder", false, 1},
		{"hole", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := testutil.Seed(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			cfg := Config{Profile: Spray, Seed: seed, MTU: 1514, Entropies: 8, AckEvery: 4}
			seg := payloadSize(&cfg, false)
			w := 100 * (seg + 200) // a hole stays open for up to 100 packets
			cfg.CC = func() cc.Controller { return cc.Fixed{WindowBytes: w} }
			var acks, maxWords int
			var pk wire.Packet
			dropped := !tc.drop
			s := newSimPair(t, mem.Config{Seed: seed, Delay: 20 * time.Microsecond, Bandwidth: 1e9}, cfg)
			s.fab.SetFilter(func(frame []byte) bool {
				if err := wire.Decode(frame, &pk); err != nil {
					return true
				}
				switch pk.BTH.Opcode {
				case wire.OpSprayAck:
					acks++
					maxWords = max(maxWords, int(pk.Ack.SackWords))
				case wire.OpSprayData:
					if !dropped && pk.Data.Offset == 0 && len(pk.Payload) > 0 {
						dropped = true
						return false
					}
				}
				return true
			})
			msgs := randomMessages(rng, 8, 1<<20)
			transfer(t, s, msgs)
			retx := s.qa.Stats().Retransmits
			t.Logf("%d acknowledgements, at most %d SACK words, %d retransmits", acks, maxWords, retx)
			if acks == 0 || maxWords < tc.wantWords || !tc.drop && maxWords != tc.wantWords {
				t.Fatalf("%d acknowledgements carried at most %d SACK words, want %d", acks, maxWords, tc.wantWords)
			}
			if want := uint64(0); tc.drop && retx > 2 || !tc.drop && retx > want {
				t.Fatalf("%d retransmits: the SACK words lost track of packets that arrived", retx)
			}
		})
	}
}

// TestSmallBurstOneAck: 32 one-packet SENDs posted at once leave in one
// step, and the receiver, reading them in one batch, answers the lot
// with one ACK (each asked for one: the last packet of its message); the
// sender has every completion one round trip after the post, without
// waiting for the receiver's AckDelay, which the last message of the
// burst would otherwise hold.
func TestSmallBurstOneAck(t *testing.T) {
	const n, delay = 32, 5 * time.Microsecond
	s := newSimPair(t, mem.Config{Delay: delay}, Config{Profile: Spray, AckDelay: time.Millisecond})
	msg := make([]byte, 64)
	start := s.clk.Now()
	for i := range n {
		if err := s.qa.Post(WorkRequest{ID: uint64(i + 1), Op: OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
	}
	err := s.run(start.Add(time.Second), func() bool { return len(s.ca) >= n })
	if err != nil {
		t.Fatal(err)
	}
	took := s.clk.Now().Sub(start)
	rx := s.qb.Stats()
	t.Logf("%d messages, %d data packets, %d ACKs, all complete after %v", n, rx.RxPackets, rx.AcksSent, took)
	if rx.RxPackets != n || rx.AcksSent != 1 {
		t.Errorf("%d data packets drew %d ACKs, want %d packets and one ACK", rx.RxPackets, rx.AcksSent, n)
	}
	for _, c := range s.ca {
		if c.Err != nil {
			t.Errorf("completion %+v", c)
		}
	}
	if took >= 4*delay {
		t.Errorf("the burst completed after %v, want one round trip (%v) and well before the receiver's AckDelay", took, 2*delay)
	}
}
