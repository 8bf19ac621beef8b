package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// TestNoMsgLimitPeer: B's peer A is of a build before the message limit
// (B connected with QPInfo.NoMsgLimit), which drops an ACK with
// wire.AckMsgLimit as a bad header (the fabric's filter does it for A):
// B's ACKs carry no limit and every message of a transfer to a slow
// reader arrives intact. Connected without NoMsgLimit, B's ACKs carry the
// limit (so the filter would have caught them).
func TestNoMsgLimitPeer(t *testing.T) {
	seed := testutil.Seed(t)
	for _, old := range []bool{true, false} {
		name := "current peer"
		if old {
			name = "older peer"
		}
		t.Run(name, func(t *testing.T) {
			const maxMsgs, n, size = 8, 60, 64
			s := &simPair{t: t, clk: &clock.Sim{}}
			s.fab = mem.NewFabric(mem.Config{Delay: 5 * time.Microsecond}, s.clk)
			pa, err := s.fab.NewPort(macA, ipA)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := s.fab.NewPort(macB, ipB)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pa.Close(); pb.Close() })
			cfg := Config{Profile: Spray, MaxMessages: maxMsgs, Seed: seed}
			if s.ea, err = NewEngine(pa, cfg); err != nil {
				t.Fatal(err)
			}
			cfg.Seed++
			if s.eb, err = NewEngine(pb, cfg); err != nil {
				t.Fatal(err)
			}
			if s.qa, err = s.ea.CreateQP(); err != nil {
				t.Fatal(err)
			}
			if s.qb, err = s.eb.CreateQP(); err != nil {
				t.Fatal(err)
			}
			toA := s.qa.Info()
			toA.NoMsgLimit = old
			if err := s.qa.Connect(s.qb.Info()); err != nil {
				t.Fatal(err)
			}
			if err := s.qb.Connect(toA); err != nil {
				t.Fatal(err)
			}
			acks, limited := 0, 0
			s.fab.SetFilter(func(frame []byte) bool {
				var pk wire.Packet
				if wire.Decode(frame, &pk) != nil || pk.BTH.Opcode != wire.OpSprayAck || pk.IP.Src != ipB {
					return true
				}
				acks++
				if pk.Ack.Flags&wire.AckMsgLimit != 0 {
					limited++
					return !old // A, of an older build, drops it
				}
				return true
			})
			slowReaderRun(t, s, n, size, 20*time.Microsecond, clock.Never, 0)
			if acks == 0 {
				t.Fatal("B sent no ACK")
			}
			if old && limited != 0 {
				t.Fatalf("%d of B's %d ACKs to an older peer carry the message limit, want none", limited, acks)
			}
			if !old && limited == 0 {
				t.Fatalf("none of B's %d ACKs to a current peer carries the message limit", acks)
			}
			if got := s.qb.Stats().MessagesReceived; got != n {
				t.Fatalf("%d messages received, want %d", got, n)
			}
		})
	}
}
