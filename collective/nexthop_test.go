package collective_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	. "github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// TestSprayNextHop builds a world whose QPs send to the MAC that
// SprayConfig.NextHop returns (here a table from IP to MAC, as a router's
// would be), checks that every peer's IP was asked for, and that an error
// from NextHop fails the Comm with that error.
func TestSprayNextHop(t *testing.T) {
	const n = 3
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	macs := map[netip.Addr][6]byte{}
	eps := make([]*transport.Endpoint, n)
	for r := range eps {
		mac := [6]byte{2, 0, 0, 0, 9, byte(r + 1)}
		ip := netip.AddrFrom4([4]byte{10, 9, 0, byte(r + 1)})
		macs[ip] = mac
		p, err := fab.NewPort(mac, ip)
		if err != nil {
			t.Fatal(err)
		}
		if eps[r], err = transport.NewEndpoint(p, transport.Config{Seed: seed + uint64(r)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eps[r].Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	asked := map[netip.Addr]int{}
	comms, err := collectivetest.World(ctx, n, func(ctx context.Context, r int, b *Bootstrap) (*SprayComm, error) {
		return NewSprayCommConfig(ctx, eps[r], b, SprayConfig{NextHop: func(_ context.Context, ip netip.Addr) ([6]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			asked[ip]++
			return macs[ip], nil
		}})
	})
	if err != nil {
		t.Fatal(err)
	}
	for ip := range macs {
		if asked[ip] != n-1 {
			t.Errorf("NextHop asked for %v %d times, want %d", ip, asked[ip], n-1)
		}
	}
	w := world{name: "nexthop"}
	for _, c := range comms {
		w.comms = append(w.comms, c)
		t.Cleanup(func() { c.Close() })
	}
	w.run(t, func(ctx context.Context, r int, c Comm) error {
		x := []int32{int32(r), 1}
		if err := AllReduce(ctx, c, x, x, Sum, nil); err != nil {
			return err
		}
		if x[0] != 3 || x[1] != n {
			t.Errorf("rank %d: AllReduce gave %v", r, x)
		}
		return nil
	})

	errNoRoute := errors.New("no route")
	_, err = collectivetest.World(ctx, 2, func(ctx context.Context, r int, b *Bootstrap) (*SprayComm, error) {
		return NewSprayCommConfig(ctx, eps[r], b, SprayConfig{NextHop: func(context.Context, netip.Addr) ([6]byte, error) {
			return [6]byte{}, errNoRoute
		}})
	})
	if !errors.Is(err, errNoRoute) {
		t.Errorf("a failing NextHop gave %v, want %v", err, errNoRoute)
	}
}
