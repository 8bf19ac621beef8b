package nexthop

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

// frame returns an Ethernet frame to dst (with an 802.1Q tag when
// tagged) whose destination MAC is mac.
func frame(mac [6]byte, dst netip.Addr, tagged bool) []byte {
	b := make([]byte, 0, 100)
	b = append(b, mac[:]...)
	b = append(b, 2, 0, 0, 0, 0, 9)
	if tagged {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, 7)
	}
	if dst.Is4() {
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		ip := make([]byte, 28)
		ip[0] = 0x45
		a := dst.As4()
		copy(ip[16:], a[:])
		return append(b, ip...)
	}
	b = binary.BigEndian.AppendUint16(b, 0x86dd)
	ip := make([]byte, 48)
	ip[0] = 0x60
	a := dst.As16()
	copy(ip[24:], a[:])
	return append(b, ip...)
}

func TestDstKey(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.80.1.1"), netip.MustParseAddr("fd00::7")
	for _, tc := range []struct {
		b    []byte
		want netip.Addr
	}{
		{frame([6]byte{}, v4, false), v4},
		{frame([6]byte{}, v4, true), v4},
		{frame([6]byte{}, v6, false), v6},
		{frame([6]byte{}, v6, true), v6},
		{frame([6]byte{}, v4, false)[:14+19], netip.Addr{}}, // cut short
		{frame([6]byte{}, v6, true)[:18+39], netip.Addr{}},
		{frame([6]byte{}, v4, true)[:17], netip.Addr{}},
		{nil, netip.Addr{}},
		{append(make([]byte, 12), 0x08, 0x06, 0, 1), netip.Addr{}}, // ARP
	} {
		k, ok := dstKey(tc.b)
		if ok != tc.want.IsValid() || ok && netip.AddrFrom16(k).Unmap() != tc.want {
			t.Errorf("dstKey(% x) = %v, %v; want %v", tc.b, netip.AddrFrom16(k), ok, tc.want)
		}
	}
}

// TestCacheRewrite drives a Cache against snapshots published by hand:
// a new destination is asked for and its frames left alone, a resolved
// one gets its MAC, a changed MAC is taken at the next frame, frames to
// unresolved destinations and non-IP frames are left alone, and a nil
// Cache does nothing.
func TestCacheRewrite(t *testing.T) {
	var s shared
	s.init(-1) // no wait: the test answers by hand
	c := &Cache{s: &s}
	peer, other := netip.MustParseAddr("10.80.1.1"), netip.MustParseAddr("10.80.0.3")
	own := [6]byte{2, 0, 0, 0, 0, 1}
	router, router2 := [6]byte{2, 0, 0, 0, 0, 0xaa}, [6]byte{2, 0, 0, 0, 0, 0xbb}
	check := func(what string, dst netip.Addr, tagged bool, want [6]byte) {
		t.Helper()
		f := frame(own, dst, tagged)
		c.Rewrite(f)
		if [6]byte(f) != want {
			t.Fatalf("%s: frame to %v goes to %x, want %x", what, dst, f[:6], want)
		}
	}
	check("new destination", peer, false, own)
	select {
	case got := <-s.req:
		if got != peer {
			t.Fatalf("asked for %v, want %v", got, peer)
		}
	default:
		t.Fatal("a new destination was not asked for")
	}
	check("asked already", peer, false, own)
	if len(s.req) != 0 {
		t.Fatal("a destination asked for twice before an answer")
	}
	s.publish(map[key]slot{keyOf(peer): {mac: router, ok: true}, keyOf(other): {}})
	check("resolved", peer, false, router)
	check("resolved, tagged", peer, true, router)
	check("unresolved", other, false, own)
	check("back to resolved", peer, false, router)
	s.publish(map[key]slot{keyOf(peer): {mac: router2, ok: true}, keyOf(other): {}})
	check("changed", peer, false, router2)
	arp := append(make([]byte, 12), 0x08, 0x06, 0, 1, 0, 0)
	c.Rewrite(arp)
	if [6]byte(arp) != ([6]byte{}) {
		t.Fatalf("ARP frame rewritten: % x", arp)
	}
	var none *Cache
	f := frame(own, peer, false)
	none.Rewrite(f)
	if [6]byte(f) != own {
		t.Fatal("nil Cache rewrote a frame")
	}
}

// TestCacheNoAllocs guards the transmit path: frames to known
// destinations, alternating, allocate nothing and are answered from the
// Cache's lines.
func TestCacheNoAllocs(t *testing.T) {
	var s shared
	s.init(-1)
	c := &Cache{s: &s}
	a, b := netip.MustParseAddr("10.80.1.1"), netip.MustParseAddr("fd00::1")
	s.publish(map[key]slot{keyOf(a): {mac: [6]byte{2, 1}, ok: true}, keyOf(b): {mac: [6]byte{2, 2}, ok: true}})
	fa, fb := frame([6]byte{}, a, false), frame([6]byte{}, b, true)
	if n := testing.AllocsPerRun(1000, func() {
		c.Rewrite(fa)
		c.Rewrite(fb)
		c.Rewrite(fb)
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
	if [6]byte(fa) != [6]byte{2, 1} || [6]byte(fb) != [6]byte{2, 2} {
		t.Fatalf("frames go to %x and %x", fa[:6], fb[:6])
	}
	// Both answers come from the Cache's lines, not the map: changed
	// behind its back (a snapshot is never changed), the map is not read.
	m := s.snap.Load().m
	m[keyOf(a)], m[keyOf(b)] = slot{mac: [6]byte{9}, ok: true}, slot{mac: [6]byte{9}, ok: true}
	c.Rewrite(fa)
	c.Rewrite(fb)
	if [6]byte(fa) != [6]byte{2, 1} || [6]byte(fb) != [6]byte{2, 2} {
		t.Fatalf("alternating destinations read the map: frames go to %x and %x", fa[:6], fb[:6])
	}
}

// TestCacheWaitsForFirstAnswer: the first frame to a new destination
// waits for the answer, so that it already goes to the next hop.
func TestCacheWaitsForFirstAnswer(t *testing.T) {
	var s shared
	s.init(time.Minute)
	c := &Cache{s: &s}
	peer, router := netip.MustParseAddr("10.80.1.1"), [6]byte{2, 0, 0, 0, 0, 0xaa}
	go func() {
		dst := <-s.req
		s.publish(map[key]slot{}) // an answer about something else
		s.publish(map[key]slot{keyOf(dst): {mac: router, ok: true}})
	}()
	f := frame([6]byte{2, 0, 0, 0, 0, 1}, peer, false)
	c.Rewrite(f)
	if [6]byte(f) != router {
		t.Fatalf("first frame goes to %x, want %x", f[:6], router)
	}
}

// BenchmarkRewrite is the transmit path's cost per frame: same
// destination as the last frame, and alternating between two.
func BenchmarkRewrite(b *testing.B) {
	var s shared
	s.init(-1)
	x, y := netip.MustParseAddr("10.80.1.1"), netip.MustParseAddr("10.80.2.1")
	s.publish(map[key]slot{keyOf(x): {mac: [6]byte{2, 1}, ok: true}, keyOf(y): {mac: [6]byte{2, 2}, ok: true}})
	fx, fy := frame([6]byte{}, x, false), frame([6]byte{}, y, false)
	b.Run("same", func(b *testing.B) {
		c := &Cache{s: &s}
		b.ReportAllocs()
		for b.Loop() {
			c.Rewrite(fx)
		}
	})
	b.Run("alternating", func(b *testing.B) {
		c := &Cache{s: &s}
		b.ReportAllocs()
		for b.Loop() {
			c.Rewrite(fx)
			c.Rewrite(fy)
		}
	})
}
