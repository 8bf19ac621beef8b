package spray

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestOpenLoopback opens two endpoints by address on loopback with
// nothing else set: LinkAuto picks kernel UDP and says why, and a
// connection between them moves messages intact.
func TestOpenLoopback(t *testing.T) {
	r := testutil.Rand(t)
	b, c := testutil.LoopbackNet(r)
	addrA, addrB := netip.AddrFrom4([4]byte{127, b, c, 1}), netip.AddrFrom4([4]byte{127, b, c, 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs []string
	logf := func(f string, args ...any) { logs = append(logs, f) }
	ea, err := Open(ctx, Options{Addr: addrA, Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := Open(ctx, Options{Addr: addrB, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	if k, why := ea.Link(); k != LinkUDP || why != "loopback interface" || len(logs) != 1 {
		t.Fatalf("link %v (%q), %d log lines; want udp on loopback, logged", k, why, len(logs))
	}
	if ea.CMAddr() != addrA.String()+":4791" {
		t.Fatalf("CMAddr %s", ea.CMAddr())
	}
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ea.Dial(ctx, addrB.String(), "x")
	if err != nil {
		t.Fatal(err)
	}
	bc, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := exchange(ctx, a, bc, testutil.RandomMessages(r, 10, 200<<10)); err != nil {
		t.Fatal(err)
	}
	if err := exchange(ctx, bc, a, testutil.RandomMessages(r, 10, 200<<10)); err != nil {
		t.Fatal(err)
	}
	a.Close()
}

// TestOpenBadOptions: each impossible option is refused with ErrOptions
// and a message naming what to set.
func TestOpenBadOptions(t *testing.T) {
	ctx := context.Background()
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"nothing", Options{}, "set Interface"},
		{"no such interface", Options{Interface: "nosuch0"}, "nosuch0"},
		{"address not held", Options{Addr: netip.MustParseAddr("192.0.2.77")}, "no interface holds 192.0.2.77"},
		{"IPv6", Options{Addr: netip.MustParseAddr("::1")}, "IPv4"},
		{"MTU", Options{Addr: lo, MTU: 100}, "MTU 100"},
		{"link kind", Options{Addr: lo, Link: 9}, "link kind"},
		{"queues", Options{Addr: lo, Link: LinkXDP, Queues: 4}, "lo has 1 RX queues"},
	} {
		ep, err := Open(ctx, tc.o)
		if err == nil {
			ep.Close()
			t.Fatalf("%s: Open succeeded", tc.name)
		}
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want ErrOptions saying %q", tc.name, err, tc.want)
		}
	}
}

// TestResolve finds an interface's address by name and an address's
// interface, loopback's /8 included.
func TestResolve(t *testing.T) {
	lo, err := LookupInterface("lo", netip.Addr{})
	if err != nil || !lo.Loopback || lo.IP != netip.MustParseAddr("127.0.0.1") || lo.Index == 0 {
		t.Fatalf("LookupInterface(lo) = %+v, %v", lo, err)
	}
	in := netip.MustParseAddr("127.3.4.5")
	got, err := LookupInterface("", in)
	if err != nil || got.Name != lo.Name || got.IP != in {
		t.Fatalf("LookupInterface(%v) = %+v, %v; want lo with that address", in, got, err)
	}
	if _, err := LookupInterface("lo", netip.MustParseAddr("192.0.2.1")); !errors.Is(err, ErrOptions) {
		t.Fatalf("an address the named interface lacks: %v", err)
	}
}

func TestFirstLast(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain",
		"load program: denied:\n\t0: r1\n\tR3 pointer arithmetic prohibited\n": "load program: denied: ... R3 pointer arithmetic prohibited",
	} {
		if got := firstLast(in); got != want {
			t.Errorf("firstLast(%q) = %q, want %q", in, got, want)
		}
	}
}
