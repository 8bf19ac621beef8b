package cm

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// A peer of version 4 (a build before the message limit, whose data path
// drops an ACK with wire.AckMsgLimit as a bad header: the fabric's filter
// does it for that side), dialing or listening, connects in version 4,
// and this side's QP sends it no message limit: messages go both ways
// intact, in clear or inside TLS (a protected QP's ACK headers are in
// clear). Between two sides of this version the ACKs carry the limit.
// Without the rule (peerQP) the older side's sends fail with
// ErrPeerUnreachable once its retries run out.
func TestCMOlderDataPath(t *testing.T) {
	seed := testutil.Seed(t)
	for _, tc := range []struct {
		name           string
		dialer, lister uint8 // the highest version each speaks (0: this one's)
		tls            bool
	}{
		{"version-4 dialer", cmVersion4, 0, false},
		{"version-4 listener", 0, cmVersion4, false},
		{"version 5", 0, 0, false},
		{"version-4 dialer in TLS", cmVersion4, 0, true},
		{"version-4 listener in TLS", 0, cmVersion4, true},
		{"version 5 in TLS", 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 5 * time.Microsecond}, clock.NewSystem())
			t.Cleanup(func() { fab.Close() })
			var set []func(*Options)
			if tc.tls {
				set = append(set, func(o *Options) { o.Security = &Security{PSK: testPSK} })
			}
			ea := memEndpoint(t, fab, macA, ipA, seed, set...)
			eb := memEndpoint(t, fab, macB, ipB, seed+1, set...)
			ea.cmv, eb.cmv = tc.dialer, tc.lister
			var old netip.Addr // the side of an older build, if any
			switch {
			case tc.dialer == cmVersion4:
				old = ipA
			case tc.lister == cmVersion4:
				old = ipB
			}
			var limited, dropped atomic.Int64
			fab.SetFilter(func(frame []byte) bool {
				var pk wire.Packet
				if wire.Decode(frame, &pk) != nil || pk.BTH.Opcode != wire.OpSprayAck || pk.Ack.Flags&wire.AckMsgLimit == 0 {
					return true
				}
				limited.Add(1)
				if pk.IP.Dst == old {
					dropped.Add(1)
					return false
				}
				return true
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := eb.Listen("old")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ca, err := ea.Dial(ctx, ln.Addr(), "old")
			if err != nil {
				t.Fatal(err)
			}
			defer ca.Close()
			cb, err := ln.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer cb.Close()
			want := uint8(cmVersion)
			if old.IsValid() {
				want = cmVersion4
			}
			if ca.ver != want || cb.ver != want {
				t.Fatalf("the connection speaks versions %d and %d, want %d", ca.ver, cb.ver, want)
			}
			if ca.Remote().NoMsgLimit != old.IsValid() || cb.Remote().NoMsgLimit != old.IsValid() {
				t.Fatalf("NoMsgLimit of the peers' QPs: dialer %v, listener %v, want %v", ca.Remote().NoMsgLimit, cb.Remote().NoMsgLimit, old.IsValid())
			}
			r := rand.New(rand.NewPCG(seed, 2))
			if err := exchange(ctx, ca, cb, testutil.RandomMessages(r, 32, 64<<10)); err != nil {
				t.Fatalf("dialer to listener: %v", err)
			}
			if err := exchange(ctx, cb, ca, testutil.RandomMessages(r, 32, 64<<10)); err != nil {
				t.Fatalf("listener to dialer: %v", err)
			}
			t.Logf("ACKs with a message limit: %d, dropped by the older side: %d", limited.Load(), dropped.Load())
			if n := dropped.Load(); n != 0 {
				t.Fatalf("%d ACKs with a message limit sent to the side of version 4", n)
			}
			if !old.IsValid() && limited.Load() == 0 {
				t.Fatal("no ACK carries a message limit between two sides of version 5")
			}
		})
	}
}
