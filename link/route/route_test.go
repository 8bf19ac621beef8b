package route

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/testbed"
)

func pair(t *testing.T) *testbed.Pair {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// resolve runs Resolve inside h with an empty neighbour table.
func resolve(t *testing.T, h *testbed.Host, peer netip.Addr, timeout time.Duration) (Path, error) {
	t.Helper()
	var p Path
	var rerr error
	err := h.Do(func() error {
		ns, _ := netlink.NeighList(h.Ifindex, netlink.FAMILY_V4)
		for _, n := range ns {
			netlink.NeighDel(&n)
		}
		if ns, _ := netlink.NeighList(h.Ifindex, netlink.FAMILY_V4); len(ns) != 0 {
			t.Errorf("neighbour table not empty: %v", ns)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		p, rerr = Resolve(ctx, peer)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, rerr
}

func TestResolveOnLink(t *testing.T) {
	tb := pair(t)
	for _, viaNetlink := range []bool{true, false} {
		useNetlinkTrigger = viaNetlink
		before := udpTriggers.Load()
		p, err := resolve(t, tb.A, tb.B.IP, 10*time.Second)
		useNetlinkTrigger = true
		if sentUDP := udpTriggers.Load() > before; sentUDP == viaNetlink {
			t.Errorf("netlink trigger %v: UDP datagram sent: %v", viaNetlink, sentUDP)
		}
		if err != nil {
			t.Fatalf("netlink trigger %v: %v", viaNetlink, err)
		}
		want := Path{Ifindex: tb.A.Ifindex, IfName: tb.A.Link, SrcMAC: tb.A.MAC, DstMAC: tb.B.MAC,
			Src: tb.A.IP, Dst: tb.B.IP, MTU: 1500}
		if p != want {
			t.Fatalf("netlink trigger %v: got %+v\nwant %+v", viaNetlink, p, want)
		}
		if p.NextHop() != tb.B.IP {
			t.Fatalf("NextHop %v", p.NextHop())
		}
	}
}

func TestResolveGateway(t *testing.T) {
	tb := pair(t)
	dst := netip.MustParsePrefix("10.99.0.0/24")
	err := tb.A.Do(func() error {
		return netlink.RouteAdd(&netlink.Route{
			LinkIndex: tb.A.Ifindex,
			Dst:       &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(24, 32)},
			Gw:        tb.B.IP.AsSlice(),
			MTU:       1400,
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("10.99.0.5")
	p, err := resolve(t, tb.A, peer, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p.Gateway != tb.B.IP || p.NextHop() != tb.B.IP || p.DstMAC != tb.B.MAC || p.Dst != peer || p.Src != tb.A.IP || p.MTU != 1400 {
		t.Fatalf("got %+v", p)
	}
}

func TestNoNeighbour(t *testing.T) {
	tb := pair(t)
	nobody := tb.A.Prefix.Masked().Addr().As4()
	nobody[3] = 77
	p, err := resolve(t, tb.A, netip.AddrFrom4(nobody), 300*time.Millisecond)
	if !errors.Is(err, ErrNoNeighbour) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Resolve(nobody) = %+v, %v; want ErrNoNeighbour", p, err)
	}
}

func TestNoRouteAndLoopback(t *testing.T) {
	tb := pair(t)
	// The testbed's namespaces have no default route.
	if _, err := resolve(t, tb.A, netip.MustParseAddr("192.0.2.1"), time.Second); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("Resolve(192.0.2.1) = %v, want ErrNoRoute", err)
	}
	if _, err := resolve(t, tb.A, netip.Addr{}, time.Second); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("Resolve(invalid) = %v, want ErrNoRoute", err)
	}
	p, err := resolve(t, tb.A, tb.A.IP, time.Second)
	if err != nil || p.IfName != "lo" || p.DstMAC != ([6]byte{}) || p.Dst != tb.A.IP {
		t.Fatalf("Resolve(own address) = %+v, %v", p, err)
	}
}
