package testbed

import (
	"errors"
	"strings"
	"testing"
)

// layoutOnly returns a fabric laid out without the kernel: switches and
// ports named and numbered as NewLeafSpine would, no namespaces.
func layoutOnly(t testing.TB, cfg LeafSpineConfig) *Fabric {
	t.Helper()
	c, err := cfg.resolve()
	if err != nil {
		t.Fatal(err)
	}
	f, _, leaves, spines := layoutFabric("spx-", c)
	sw := func(n *node) *Switch {
		s := &Switch{Name: n.name, NS: -1, closed: &f.closed}
		for _, e := range n.ports {
			s.Ports = append(s.Ports, Port{Name: e.name, Peer: e.peer.node.name, PeerPort: e.peer.name, Addr: e.addr, RateBps: e.rate})
		}
		return s
	}
	for _, n := range leaves {
		f.Leaves = append(f.Leaves, sw(n))
	}
	for _, n := range spines {
		f.Spines = append(f.Spines, sw(n))
	}
	return f
}

func TestLookupPort(t *testing.T) {
	f := layoutOnly(t, LeafSpineConfig{Hosts: 2, Leaves: 3, Spines: 2})
	for spec, want := range map[string]struct {
		sw   string
		port int
	}{
		"spine0:leaf1":      {"spine0", 1},
		"spine1:down2":      {"spine1", 2},
		"spx-spine1:2":      {"spine1", 2},
		"leaf0:up1":         {"leaf0", 3},
		"leaf0:spine0":      {"leaf0", 2},
		"leaf2:host2-1":     {"leaf2", 1},
		"leaf2:spx-host2-0": {"leaf2", 0},
		"leaf1:down1":       {"leaf1", 1},
	} {
		sw, port, err := f.LookupPort(spec)
		if err != nil {
			t.Errorf("LookupPort(%q): %v", spec, err)
			continue
		}
		if got := strings.TrimPrefix(sw.Name, f.Prefix); got != want.sw || port != want.port {
			t.Errorf("LookupPort(%q) = %s port %d, want %s port %d", spec, got, port, want.sw, want.port)
		}
	}
	for _, spec := range []string{"", ":", "spine0", "spine0:", ":leaf0", "spine2:leaf0", "spine0:leaf3",
		"leaf0:host1-0", "leaf0:4", "leaf0:-1", "host0-0:eth0", "spine0:leaf1:x"} {
		if _, _, err := f.LookupPort(spec); !errors.Is(err, ErrConfig) {
			t.Errorf("LookupPort(%q) = %v, want ErrConfig", spec, err)
		}
	}
}

// FuzzLookupPort: any spec either names a port that exists or is refused
// with ErrConfig; a found port's switch is one of the fabric's.
func FuzzLookupPort(f *testing.F) {
	for _, s := range []string{"spine0:leaf1", "leaf0:up1", "leaf1:0", "spx-leaf0:host0-0", "x:y", ":", "leaf0:"} {
		f.Add(s)
	}
	fab := layoutOnly(f, LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 2})
	f.Fuzz(func(t *testing.T, spec string) {
		sw, port, err := fab.LookupPort(spec)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("LookupPort(%q): %v, not ErrConfig", spec, err)
			}
			return
		}
		if port < 0 || port >= len(sw.Ports) {
			t.Fatalf("LookupPort(%q) = port %d of %d", spec, port, len(sw.Ports))
		}
		for _, s := range append(append([]*Switch(nil), fab.Leaves...), fab.Spines...) {
			if s == sw {
				return
			}
		}
		t.Fatalf("LookupPort(%q) returned a switch that is not the fabric's", spec)
	})
}
