//go:build linux

package nexthop

import (
	"context"
	"net"
	"net/netip"
	"os"
	"runtime"
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

// open opens a Table on h's interface, in h's namespace.
func open(t *testing.T, h *testbed.Host, cfg Config) *Table {
	t.Helper()
	cfg.Ifindex = h.Ifindex
	var tab *Table
	if err := h.Do(func() (err error) { tab, err = Open(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tab.Close() })
	return tab
}

// eventually polls cond every 10 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", d, what)
		}
	}
}

// send passes a frame to dst through c and returns the MAC it got.
func send(c *Cache, dst netip.Addr) [6]byte {
	f := frame([6]byte{2, 0, 0, 0, 0, 0x77}, dst, false)
	c.Rewrite(f)
	return [6]byte(f)
}

func setMAC(t *testing.T, h *testbed.Host, mac [6]byte) {
	t.Helper()
	err := h.Do(func() error {
		l, err := netlink.LinkByIndex(h.Ifindex)
		if err != nil {
			return err
		}
		return netlink.LinkSetHardwareAddr(l, mac[:])
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTableFollowsRoutes: a peer on the link gets its own MAC (with an
// empty neighbour table, which the Table has the kernel fill), a
// destination behind a gateway the gateway's; when that route goes, its
// frames are left alone again; local, unroutable and foreign-interface
// destinations are left alone.
func TestTableFollowsRoutes(t *testing.T) {
	p := pair(t)
	err := p.A.Do(func() error {
		ns, _ := netlink.NeighList(p.A.Ifindex, netlink.FAMILY_V4)
		for _, n := range ns {
			netlink.NeighDel(&n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tab := open(t, p.A, Config{MissWait: time.Second})
	c := tab.NewCache()
	unchanged := [6]byte{2, 0, 0, 0, 0, 0x77}
	eventually(t, 5*time.Second, "peer on the link not resolved", func() bool { return send(c, p.B.IP) == p.B.MAC })

	far := netip.MustParseAddr("10.99.0.5")
	if got := send(c, far); got != unchanged {
		t.Fatalf("frame to %v without a route goes to %x", far, got)
	}
	route := &netlink.Route{LinkIndex: p.A.Ifindex, Dst: &net.IPNet{IP: net.IPv4(10, 99, 0, 0), Mask: net.CIDRMask(24, 32)}, Gw: p.B.IP.AsSlice()}
	if err := p.A.Do(func() error { return netlink.RouteAdd(route) }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "route added: destination not resolved to the gateway", func() bool { return send(c, far) == p.B.MAC })
	if err := p.A.Do(func() error { return netlink.RouteDel(route) }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "route removed: frames still rewritten", func() bool { return send(c, far) == unchanged })

	for _, dst := range []netip.Addr{p.A.IP, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("224.0.0.9")} {
		if got := send(c, dst); got != unchanged {
			t.Errorf("frame to %v goes to %x", dst, got)
		}
	}
	if st := tab.Stats(); st.Entries != 6 || st.Resolved != 1 || st.Notifications == 0 || st.Triggers == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTableNeighbourGone: the peer changes MAC; its neighbour entry is
// deleted (as the kernel's garbage collection or a failed probe does); the
// Table has it resolved again and takes the new MAC.
func TestTableNeighbourGone(t *testing.T) {
	p := pair(t)
	tab := open(t, p.A, Config{MissWait: time.Second})
	c := tab.NewCache()
	eventually(t, 5*time.Second, "peer not resolved", func() bool { return send(c, p.B.IP) == p.B.MAC })
	newMAC := [6]byte{2, 0x72, 0x74, 0, 0, 1}
	setMAC(t, p.B, newMAC)
	if err := p.A.Do(func() error {
		return netlink.NeighDel(&netlink.Neigh{LinkIndex: p.A.Ifindex, IP: p.B.IP.AsSlice()})
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "new MAC not taken", func() bool { return send(c, p.B.IP) == newMAC })
	if st := tab.Stats(); st.Changes != 1 {
		t.Fatalf("changes %d, want 1", st.Changes)
	}
}

// TestConfirmStale: the peer changes MAC without telling while A's entry
// for it is STALE, which the kernel leaves as it is until something uses
// it; with short neighbour timers, the Table's confirmation of the STALE
// entry makes the kernel probe the old address, fail, and resolve the new
// one.
func TestConfirmStale(t *testing.T) {
	p := pair(t)
	err := p.A.Do(func() error {
		for k, v := range map[string]string{"base_reachable_time_ms": "300", "delay_first_probe_time": "1",
			"retrans_time_ms": "100", "ucast_solicit": "2"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/neigh/"+p.A.Link+"/"+k, []byte(v), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tab := open(t, p.A, Config{Recheck: 200 * time.Millisecond, MissWait: time.Second})
	c := tab.NewCache()
	eventually(t, 5*time.Second, "peer not resolved", func() bool { return send(c, p.B.IP) == p.B.MAC })
	newMAC := [6]byte{2, 0x72, 0x74, 0, 0, 2}
	setMAC(t, p.B, newMAC)
	// The entry as it is once nothing used it for a while: STALE, with
	// the old address. (Here the two kernels' own probes of each other
	// keep their entries fresh, so it is set by hand.)
	if err := p.A.Do(func() error {
		return netlink.NeighSet(&netlink.Neigh{LinkIndex: p.A.Ifindex, IP: p.B.IP.AsSlice(),
			HardwareAddr: p.B.MAC[:], State: netlink.NUD_STALE})
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "new MAC not found", func() bool { return send(c, p.B.IP) == newMAC })
}

// TestTableClose: Close ends the goroutines, and a Cache of a closed
// Table keeps its answers and asks for nothing more.
func TestTableClose(t *testing.T) {
	p := pair(t)
	base := runtime.NumGoroutine()
	tab := open(t, p.A, Config{MissWait: time.Second})
	c := tab.NewCache()
	eventually(t, 5*time.Second, "peer not resolved", func() bool { return send(c, p.B.IP) == p.B.MAC })
	tab.Close()
	tab.Close()
	eventually(t, 5*time.Second, "goroutines left running", func() bool { return runtime.NumGoroutine() <= base })
	if send(c, p.B.IP) != p.B.MAC {
		t.Fatal("answer lost at Close")
	}
	if got := send(c, netip.MustParseAddr("10.99.0.1")); got != [6]byte{2, 0, 0, 0, 0, 0x77} {
		t.Fatalf("new destination after Close goes to %x", got)
	}
}
