package spray_test

import (
	"context"
	"testing"
	"time"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/xdp"
)

// TestOpenLinkKickDelay: LinkConfig.KickDelay reaches the AF_XDP sockets.
// Negative, every Send kicks (no Send is left for a later kick); a delay
// of a millisecond lets the third of three back-to-back Sends wait, and
// Flush sends what waited. BusyPoll reaches them too.
func TestOpenLinkKickDelay(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ifc := spray.Interface{Name: p.A.Link, Index: p.A.Ifindex, MAC: p.A.MAC, IP: p.A.IP}
	for _, c := range []struct {
		delay    time.Duration
		deferred bool
	}{{-1, false}, {xdp.MaxKickDelay, true}} {
		var l link.Link
		err := p.A.Do(func() error {
			var err error
			l, _, _, err = spray.OpenLink(spray.LinkConfig{Kind: spray.LinkXDP, Interface: ifc, KickDelay: c.delay, BusyPoll: true, Logf: t.Logf})
			return err
		})
		testutil.SkipIfNotSupported(t, err, xdp.ErrNotSupported)
		if err != nil {
			t.Fatal(err)
		}
		xl := l.(*xdp.Link)
		if bp := xl.Sockets()[0].BusyPoll(); !bp.Requested || bp.Usecs == 0 {
			t.Errorf("KickDelay %v: busy poll as the socket holds it: %+v", c.delay, bp)
		}
		fs := make([]link.Frame, 1)
		for range 50 * 3 {
			if l.Alloc(fs) != 1 {
				t.Fatal("Alloc came up short")
			}
			fs[0].Buf = fs[0].Buf[:60]
			clear(fs[0].Buf)
			if _, err := l.Send(fs); err != nil {
				t.Fatal(err)
			}
		}
		if err := xl.Flush(); err != nil {
			t.Fatal(err)
		}
		st := xl.QueueStats()[0]
		if got := st.TxDeferredKicks > 0; got != c.deferred || st.TxFrames != 150 || st.TxInFlight != 0 {
			t.Errorf("KickDelay %v: %d of 150 frames sent, %d in flight after Flush, %d Sends left for a later kick", c.delay, st.TxFrames, st.TxInFlight, st.TxDeferredKicks)
		}
		l.Close()
	}
}
