package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// After a FIN or a reset forged on the path cuts a secured connection's
// channel (towards the listener; the dialer's side of the relay stays
// open and silent), Close on either side still reaches the peer, over
// the QP: the peer's Recv returns the closer's last message, then io.EOF,
// and its Err is ErrPeerClosed; the closer's Close is confirmed
// (CMStats.CloseUnconfirmed stays 0), both sides count the close over the
// QP, and neither endpoint holds a QP. When both sides close at once,
// both are confirmed.
func TestSecureCloseOverQP(t *testing.T) {
	for _, rst := range []bool{false, true} {
		for _, who := range []string{"listener", "dialer", "both"} {
			name := map[bool]string{false: "fin", true: "rst"}[rst] + "-" + who + "-closes"
			t.Run(name, func(t *testing.T) {
				seed := testutil.Seed(t)
				fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
				t.Cleanup(func() { fab.Close() })
				sec := &Security{PSK: testPSK}
				timeout := func(o *Options) { o.CloseTimeout = 4 * time.Second }
				ea := memEndpoint(t, fab, macA, ipA, seed, withSec(sec), timeout)
				eb := memEndpoint(t, fab, macB, ipB, seed+1, withSec(sec), timeout)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				ln, err := eb.Listen("x")
				if err != nil {
					t.Fatal(err)
				}
				p := newTapProxy(t, ln.Addr())
				a, b := connectVia(t, ea, eb, ln, p.addr())
				if err := exchange(ctx, a, b, [][]byte{[]byte("before")}); err != nil {
					t.Fatal(err)
				}
				p.cut(rst)
				<-b.rdone // the listener's channel has ended
				if n := eb.CMStats().ChannelsCut; n != 1 {
					t.Fatalf("ChannelsCut %d, want 1", n)
				}
				if who == "both" {
					var closed sync.WaitGroup
					closed.Go(func() { a.Close() })
					closed.Go(func() { b.Close() })
					closed.Wait()
					for _, ep := range []*Endpoint{ea, eb} {
						if s := ep.CMStats(); s.ClosesOverQP != 1 || s.CloseUnconfirmed != 0 {
							t.Fatalf("ClosesOverQP %d and CloseUnconfirmed %d, want 1 and 0", s.ClosesOverQP, s.CloseUnconfirmed)
						}
					}
					if qps(t, ea) != 0 || qps(t, eb) != 0 {
						t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
					}
					return
				}
				closer, peer := a, b
				if who == "listener" {
					closer, peer = b, a
				}
				last := []byte("last words")
				got := make(chan error, 1)
				go func() {
					m, err := peer.Recv(ctx)
					if err == nil && !bytes.Equal(m.Data, last) {
						err = errors.New("the last message arrived altered")
					}
					if err == nil {
						_, err = peer.Recv(ctx)
					}
					got <- err
				}()
				if err := closer.Send(ctx, last); err != nil {
					t.Fatal(err)
				}
				if err := closer.Close(); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != io.EOF {
					t.Fatalf("the peer's Recv after the last message: %v, want io.EOF", err)
				}
				select {
				case <-peer.Done():
				case <-ctx.Done():
					t.Fatal("the peer's Conn stayed up")
				}
				if peer.Err() != ErrPeerClosed {
					t.Fatalf("the peer's Err %v, want ErrPeerClosed", peer.Err())
				}
				for _, ep := range []*Endpoint{ea, eb} {
					s := ep.CMStats()
					if s.ClosesOverQP != 1 || s.CloseUnconfirmed != 0 {
						t.Fatalf("ClosesOverQP %d and CloseUnconfirmed %d, want 1 and 0", s.ClosesOverQP, s.CloseUnconfirmed)
					}
				}
				if qps(t, ea) != 0 || qps(t, eb) != 0 {
					t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
				}
			})
		}
	}
}

// An empty message with a close marker's immediate is refused on a
// secured Conn, so that an application cannot close its peer by
// accident; on a clear Conn it is an ordinary message.
func TestCloseMarkerReserved(t *testing.T) {
	for _, sec := range []*Security{nil, {PSK: testPSK}} {
		seed := testutil.Seed(t)
		_, ea, eb := secPair(t, seed, sec, sec)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ln, err := eb.Listen("x")
		if err != nil {
			t.Fatal(err)
		}
		a, b := connectVia(t, ea, eb, ln, "")
		err = a.SendImm(ctx, nil, markDREQ)
		if sec != nil {
			if !errors.Is(err, transport.ErrInvalidRequest) {
				t.Fatalf("secured SendImm of the close marker: %v, want ErrInvalidRequest", err)
			}
		} else {
			if err != nil {
				t.Fatalf("clear SendImm: %v", err)
			}
			m, err := b.Recv(ctx)
			if err != nil || !m.HasImm || m.Imm != markDREQ || m.Len != 0 {
				t.Fatalf("clear Recv: %+v, %v; want the empty message with its immediate", m, err)
			}
		}
		a.Close()
		b.Close()
	}
}
