package xdp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/xdp"
)

// An endpoint on a Link can offer RSS steering.
var _ transport.RSSReader = (*xdp.Link)(nil)

// TestLinkRSSOnVeth: a veth has no RSS hash. The link says so with an error
// wrapping ErrNotSupported and rss.ErrNoRSS and an empty table, and an
// endpoint with an engine per queue on it offers no steering (the hash is
// unknown: frames reach their engine over the hand-over rings).
func TestLinkRSSOnVeth(t *testing.T) {
	x := newRouted(t, 2, 1500)
	l := x.openLink(t, xdp.LinkConfig{Socket: xdp.Config{RingSize: 512, RxFrames: 512, TxFrames: 512}})
	tab, err := l.RSSTable()
	if !errors.Is(err, xdp.ErrNotSupported) || !errors.Is(err, rss.ErrNoRSS) {
		t.Fatalf("RSSTable on veth: %v, want ErrNotSupported and rss.ErrNoRSS", err)
	}
	if len(tab.Indir) != 0 || len(l.RSS().Indir) != 0 || len(l.RSS().Key) != 0 {
		t.Fatalf("veth RSS table %+v, want none", l.RSS())
	}
	ep, err := transport.NewEndpoint(l, transport.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	if ep.Engines() != 2 {
		t.Fatalf("%d engines on a 2-queue link", ep.Engines())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		c, err := ep.CreateQP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := ep.Steering(c); ok {
			t.Errorf("steering %+v offered on a device without RSS", st)
		}
	}
}
