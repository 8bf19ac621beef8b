package transport

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/psn"
	"github.com/sprayfabric/spray/transport/wire"
)

// TestSprayINTThinning: with AckEvery 4 only the data packets likely to be
// echoed carry an INT region (those that ask for an ACK, and one in every
// AckEvery), nearly all of those get echoed (HPCC gets a sample per
// AckEvery packets or so; an ACK with no such packet since the previous
// carries none), and the
// records an ACK carries are those of the packet it names (its PSN, send
// time and entropy: RTT and path scores stay consistent). With AckEvery 1
// every packet carries the region. The fabric stamps one hop
// record on every data frame that has room (a switch); the bytes arrive
// intact over reordering paths.
func TestSprayINTThinning(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ackEvery int
		maxINT   float64 // data frames with an INT region, at most this share
		minINT   float64 // and at least
	}{
		{"every4", 4, 0.5, 0.2},
		{"every1", 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seed := testutil.Seed(t)
			rng := rand.New(rand.NewPCG(seed, 6))
			cfg := Config{Profile: Spray, Seed: seed, MTU: 9014, Entropies: 8, INTHops: 3, AckEvery: tc.ackEvery, AckDelay: 200 * time.Microsecond}
			seg := payloadSize(&cfg, false)
			w := 4 * (seg + 200)
			cfg.CC = func() cc.Controller { return cc.Fixed{WindowBytes: w} }
			var (
				pk                         wire.Packet
				data, withINT, acks, iacks int
				badEcho                    int
				ts                         uint32
				sent                       = map[sentINT]uint16{} // entropy of each transmission with INT

			)
			filter := func(frame []byte) bool {
				if err := wire.Decode(frame, &pk); err != nil {
					t.Errorf("undecodable frame: %v", err)
					return false
				}
				switch pk.BTH.Opcode {
				case wire.OpSprayData:
					data++
					ts += 1000
					ok, err := wire.StampHop(frame, wire.Hop{Switch: 1, Port: 1, RateMbps: 1000, TS: uint64(ts), TxBytes: ts})
					if err != nil {
						t.Errorf("stamping: %v", err)
					}
					if pk.Data.Flags&wire.FlagINT != 0 {
						if !ok {
							t.Errorf("PSN %d: INT region without room for a hop", pk.BTH.PSN)
						}
						withINT++
						sent[sentINT{psn.New(pk.BTH.PSN), pk.Data.TxTime}] = pk.UDP.Src
					}
				case wire.OpSprayAck:
					acks++
					if len(pk.INT) > 0 {
						iacks++
						e, ok := sent[sentINT{psn.New(pk.Ack.AckedPSN), pk.Ack.EchoTime}]
						if !ok || e != pk.Ack.Entropy {
							badEcho++
						}
					}
				}
				return true
			}
			s := newSimPair(t, mem.Config{
				Seed: seed, Delay: 20 * time.Microsecond, Bandwidth: 1e9,
				Reorder: 0.2, ReorderDelay: 50 * time.Microsecond, Filter: filter,
			}, cfg)
			transfer(t, s, randomMessages(rng, 20, 1<<20))
			share := float64(withINT) / float64(data)
			st := s.qa.Stats()
			t.Logf("%d data frames, %d with INT (%.2f); %d ACKs, %d with records (sender: %d INT ACKs of %d)",
				data, withINT, share, acks, iacks, st.INTAcks, st.AcksReceived)
			if share > tc.maxINT || share < tc.minINT {
				t.Errorf("%.2f of the data frames carried an INT region, want %.2f to %.2f", share, tc.minINT, tc.maxINT)
			}
			if badEcho > 0 {
				t.Errorf("%d of %d ACKs echoed records under a PSN, send time or entropy of a packet that carried none", badEcho, iacks)
			}
			// The regions are not wasted: nearly every one gets echoed,
			// and HPCC gets a sample at least every 2*AckEvery packets.
			if float64(iacks) < 0.9*float64(withINT) {
				t.Errorf("%d ACKs echoed records of %d packets that carried a region, want at least 90%%", iacks, withINT)
			}
			if int(st.INTAcks)*2*tc.ackEvery < data {
				t.Errorf("%d ACKs with records for %d data packets, want one per %d at least", st.INTAcks, data, 2*tc.ackEvery)
			}
		})
	}
}

// sentINT names one transmission of a data packet: its PSN and send time.
type sentINT struct {
	psn psn.PSN
	tx  uint64
}
