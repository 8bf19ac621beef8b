package spray

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// loopbackPeers opens two endpoints on loopback UDP; B accepts QPs on
// demand.
func loopbackPeers(tb testing.TB) (*Endpoint, *Endpoint, netip.Addr) {
	tb.Helper()
	r := testutil.Rand(tb)
	b, c := testutil.LoopbackNet(r)
	addrA, addrB := netip.AddrFrom4([4]byte{127, b, c, 1}), netip.AddrFrom4([4]byte{127, b, c, 2})
	ctx := context.Background() // the endpoints live as long as it
	ea, err := Open(ctx, Options{Addr: addrA, Logf: func(string, ...any) {}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ea.Close() })
	eb, err := Open(ctx, Options{Addr: addrB, Logf: func(string, ...any) {}, Transport: transport.Config{Peers: transport.PeerConfig{Accept: true}}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { eb.Close() })
	return ea, eb, addrB
}

// TestSendToLoopback: over kernel UDP on loopback, SendTo reaches a peer
// that never listened, with no connection manager request, and the peer
// answers on the Conn AcceptPeer gives it.
func TestSendToLoopback(t *testing.T) {
	testutil.RealClock(t)
	ea, eb, addrB := loopbackPeers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs := testutil.RandomMessages(testutil.Rand(t), 4, 200<<10)
	to := transport.PeerAddr{IP: addrB}
	for _, m := range msgs {
		if err := ea.SendTo(ctx, to, m); err != nil {
			t.Fatal(err, ea.Err(), eb.Err())
		}
	}
	c, err := eb.AcceptPeer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range msgs {
		m, err := c.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Data, want) {
			t.Fatalf("message %d differs", i)
		}
	}
	if err := c.Send(ctx, []byte("answer")); err != nil {
		t.Fatal(err)
	}
	ca, err := ea.Peer(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := ca.Recv(ctx); err != nil || string(m.Data) != "answer" {
		t.Fatalf("answer: %q, %v", m.Data, err)
	}
	if st := eb.CMStats(); st.Accepted != 0 {
		t.Fatalf("the connection manager saw %d requests", st.Accepted)
	}
}

// BenchmarkFirstMessage is the time a 64-byte message to a new peer takes
// to complete over loopback UDP: on a QP made on demand (SendTo), and on
// one the connection manager sets up first (Dial, then Send). Each
// iteration reaches the peer anew; Send is the message on a QP that is
// up, one round trip.
func BenchmarkFirstMessage(b *testing.B) {
	msg := make([]byte, 64)
	ctx := context.Background()
	b.Run("SendTo", func(b *testing.B) {
		ea, eb, addrB := loopbackPeers(b)
		to := transport.PeerAddr{IP: addrB}
		for b.Loop() {
			if err := ea.SendTo(ctx, to, msg); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			ca, err := ea.Peer(ctx, to)
			if err != nil {
				b.Fatal(err)
			}
			cb, err := eb.AcceptPeer(ctx)
			if err != nil {
				b.Fatal(err)
			}
			ca.Destroy(ctx)
			cb.Destroy(ctx)
			b.StartTimer()
		}
	})
	b.Run("Send", func(b *testing.B) {
		// The same message on a QP that is up: one round trip, for scale.
		ea, _, addrB := loopbackPeers(b)
		to := transport.PeerAddr{IP: addrB}
		if err := ea.SendTo(ctx, to, msg); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := ea.SendTo(ctx, to, msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Dial+Send", func(b *testing.B) {
		ea, eb, addrB := loopbackPeers(b)
		ln, err := eb.Listen("bench")
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				c, err := ln.Accept(ctx)
				if err != nil {
					return
				}
				go func() {
					for {
						m, err := c.Recv(ctx)
						if err != nil {
							return
						}
						m.Release()
					}
				}()
			}
		}()
		for b.Loop() {
			c, err := ea.Dial(ctx, addrB.String(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Send(ctx, msg); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			c.Close()
			b.StartTimer()
		}
	})
}

// BenchmarkFirstMessagePair is BenchmarkFirstMessage between the two
// hosts of a veth testbed (network namespaces, the link LinkAuto picks:
// AF_XDP where the kernel has it). Root only.
func BenchmarkFirstMessagePair(b *testing.B) {
	testutil.SkipIfNotRoot(b)
	ctx := context.Background()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	open := func(h *testbed.Host, accept bool) *Endpoint {
		var ep *Endpoint
		err := h.Do(func() error {
			opts := Options{Addr: h.IP, Logf: func(string, ...any) {}}
			opts.Transport.Peers.Accept = accept
			var err error
			ep, err = Open(ctx, opts)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ep.Close() })
		return ep
	}
	ea, eb := open(p.A, false), open(p.B, true)
	k, _ := ea.Link()
	b.Logf("link %v", k)
	msg := make([]byte, 64)
	to := transport.PeerAddr{IP: p.B.IP, MAC: p.B.MAC}
	b.Run("SendTo", func(b *testing.B) {
		for b.Loop() {
			if err := ea.SendTo(ctx, to, msg); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			ca, _ := ea.Peer(ctx, to)
			cb, err := eb.AcceptPeer(ctx)
			if err != nil {
				b.Fatal(err)
			}
			ca.Destroy(ctx)
			cb.Destroy(ctx)
			b.StartTimer()
		}
	})
	b.Run("Dial+Send", func(b *testing.B) {
		var ln *Listener
		if err := p.B.Do(func() (err error) { ln, err = eb.Listen("bench"); return err }); err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept(ctx)
				if err != nil {
					return
				}
				go func() {
					for {
						m, err := c.Recv(ctx)
						if err != nil {
							return
						}
						m.Release()
					}
				}()
			}
		}()
		for b.Loop() {
			var c *Conn
			if err := p.A.Do(func() (err error) { c, err = ea.Dial(ctx, p.B.IP.String(), "bench"); return err }); err != nil {
				b.Fatal(err)
			}
			if err := c.Send(ctx, msg); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			c.Close()
			b.StartTimer()
		}
	})
}
