package ebpf

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestConfigPlan(t *testing.T) {
	p, err := SteerConfig{}.plan()
	if err != nil {
		t.Fatal(err)
	}
	if p.port != DefaultPort || p.queues != DefaultQueues || len(p.local) != 0 || len(p.allow) != 0 {
		t.Errorf("zero config plans to %+v", p)
	}

	cfg := SteerConfig{
		Port:   9000,
		Queues: 8,
		Local: []netip.Addr{
			netip.MustParseAddr("::ffff:10.0.0.1"),
			netip.MustParseAddr("10.0.0.1"),
			netip.MustParseAddr("fe80::1%eth0"),
		},
		Allow: []netip.Addr{netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::2")},
	}
	p, err = cfg.plan()
	if err != nil {
		t.Fatal(err)
	}
	wantLocal := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1")}
	if p.port != 9000 || p.queues != 8 || !slices.Equal(p.local, wantLocal) ||
		!slices.Equal(p.allow, []netip.Addr{netip.MustParseAddr("fd00::2")}) {
		t.Errorf("plan = %+v; want the mapped address unmapped, the zone dropped, duplicates merged", p)
	}

	many := func(n int) []netip.Addr {
		var as []netip.Addr
		for i := range n {
			as = append(as, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		}
		return as
	}
	for name, c := range map[string]SteerConfig{
		"negative queues":  {Queues: -1},
		"too many queues":  {Queues: MaxQueues + 1},
		"zero local":       {Local: []netip.Addr{{}}},
		"zero allow":       {Allow: []netip.Addr{netip.MustParseAddr("10.0.0.1"), {}}},
		"too many local":   {Local: many(MaxLocal + 1)},
		"too many allowed": {Allow: many(MaxAllow + 1)},
	} {
		if _, err := c.plan(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	for name, c := range map[string]SteerConfig{
		"max local, duplicated": {Local: append(many(MaxLocal), many(MaxLocal)...)},
		"max allowed":           {Allow: many(MaxAllow)},
		"max queues":            {Queues: MaxQueues},
	} {
		if _, err := c.plan(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestConfigClone(t *testing.T) {
	a := SteerConfig{Local: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Allow: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
	b := a.Clone()
	b.Local[0] = netip.MustParseAddr("10.0.0.9")
	b.Allow[0] = netip.MustParseAddr("10.0.0.9")
	if a.Local[0] != netip.MustParseAddr("10.0.0.1") || a.Allow[0] != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("Clone shares memory: %+v", a)
	}
}

func TestAddrKey(t *testing.T) {
	fam, b := addrKey(netip.MustParseAddr("192.0.2.7"))
	if fam != 4 || b != [16]byte{192, 0, 2, 7} {
		t.Errorf("IPv4 key = %d %v", fam, b)
	}
	fam, b = addrKey(netip.MustParseAddr("fd00::7"))
	if fam != 6 || b != netip.MustParseAddr("fd00::7").As16() {
		t.Errorf("IPv6 key = %d %v", fam, b)
	}
}

func TestCountersAndModes(t *testing.T) {
	a := SteerCounters{Steered: 10, Passed: 20, Malformed: 3, Refused: 4, NoSocket: 5, NoRoom: 6}
	b := SteerCounters{Steered: 1, Passed: 2, Malformed: 3, Refused: 0, NoSocket: 5, NoRoom: 4}
	if got := a.Sub(b); got != (SteerCounters{Steered: 9, Passed: 18, Refused: 4, NoRoom: 2}) {
		t.Errorf("Sub = %+v", got)
	}
	if got := a.String(); got != "steered=10 passed=20 malformed=3 refused=4 nosocket=5 noroom=6" {
		t.Errorf("String = %q", got)
	}
	for m, want := range map[AttachMode]string{Auto: "auto", Native: "native", Generic: "generic", 9: "AttachMode(9)"} {
		if m.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(m), m.String(), want)
		}
	}
}
