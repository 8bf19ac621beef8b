package testbed

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestParsePair(t *testing.T) {
	for s, want := range map[string]PairConfig{
		"pair":                   {},
		"pair,mtu=9000":          {MTU: 9000},
		"pair,queues=4,mtu=3500": {MTU: 3500, Queues: 4},
	} {
		got, err := ParsePair(s)
		if err != nil || got != want {
			t.Errorf("ParsePair(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if again, err := ParsePair(got.String()); err != nil || again != got {
			t.Errorf("ParsePair(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
	for _, s := range []string{"", "pairs", "pair,", "pair,mtu", "pair,mtu=0", "pair,mtu=+9", "pair,mtu=70000",
		"pair,queues=0", "pair,queues=65", "pair,speed=1", "leafspine:1x1x1"} {
		if _, err := ParsePair(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParsePair(%q) = %v, want ErrConfig", s, err)
		}
	}
}

// TestPairQueues: both ends of a pair of Queues queues have that many RX
// and TX queues.
func TestPairQueues(t *testing.T) {
	p := testPair(t, PairConfig{Queues: 4, MTU: 9000})
	for _, h := range []*Host{p.A, p.B} {
		var l netlink.Link
		err := h.Do(func() (err error) {
			l, err = netlink.LinkByIndex(h.Ifindex)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if a := l.Attrs(); a.NumRxQueues != 4 || a.NumTxQueues != 4 || a.MTU != 9000 {
			t.Errorf("%s: %d RX, %d TX queues, MTU %d; want 4, 4, 9000", h.Link, a.NumRxQueues, a.NumTxQueues, a.MTU)
		}
	}
}
