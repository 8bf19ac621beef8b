package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"

	"golang.org/x/sys/unix"
)

// assertObjectsGone waits (the kernel frees objects once their last
// reference goes, which it may defer briefly) until none of ids exists.
func assertObjectsGone(t *testing.T, ids ebpf.ObjectIDs) {
	t.Helper()
	var alive []string
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if alive, err = ids.Alive(); err == nil && len(alive) == 0 {
			return
		}
	}
	t.Fatalf("fabric programs left behind: %v (%v)", alive, err)
}

// TestLeafSpineTeardownWithPrograms: an in-process fabric with its programs
// attached leaves no namespace, link, program or map after Close, and no
// pin.
func TestLeafSpineTeardownWithPrograms(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	f, err := NewLeafSpine(context.Background(), LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 2, Rate: "100mbit"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	prog, err := f.AttachPrograms(ebpf.ECNConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Programs() != prog {
		t.Fatal("Programs() is not what AttachPrograms returned")
	}
	if prog.PinDir() != "" {
		t.Fatalf("an in-process fabric is pinned in %s", prog.PinDir())
	}
	ids, err := prog.Objects()
	if err != nil {
		t.Fatal(err)
	}
	// Each leaf has a host port and two uplinks, each spine two ports: 10
	// ports, with an ingress and an egress program and link each.
	if len(ids.Links) != 20 || len(ids.Programs) != 20 {
		t.Fatalf("Objects = %d links, %d programs; want 20 of each", len(ids.Links), len(ids.Programs))
	}
	for _, sw := range append(append([]*Switch(nil), f.Leaves...), f.Spines...) {
		for i, p := range sw.Ports {
			pc, err := prog.PortConfig(f.PortID(sw, i))
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Contains(p.Peer, "host"); pc.Edge != want {
				t.Errorf("%s:%s (to %s) Edge %v, want %v", sw.Name, p.Name, p.Peer, pc.Edge, want)
			}
		}
	}
	r := listenUDP(t, f.Host(1, 0))
	sprayUDP(t, f.Host(0, 0), netip.AddrPortFrom(f.Host(1, 0).IP, uint16(r.port())), 4, 10, 200)
	st, err := f.Status(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var pkts uint64
	for _, p := range st {
		pkts += p.Packets
	}
	if pkts < 40 {
		t.Fatalf("the programs counted %d packets for 40 datagrams", pkts)
	}
	if alive, err := ids.Alive(); err != nil || len(alive) != 20+20+len(ids.Maps) {
		t.Fatalf("before Close: %d of the objects alive (%v)", len(alive), err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, f.Prefix)
	assertObjectsGone(t, ids)
	if _, err := os.Stat(filepath.Join(ownerDir, f.Prefix)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("owner file after Close: %v", err)
	}
}

// privateState points the persistent fabrics' state directory and bpffs
// at temporary ones for the test (and the processes it starts, through
// the environment): a bpffs of its own, unmounted at the end, so that no
// state file or pin of a test reaches the host's /run/spray or
// /sys/fs/bpf.
func privateState(t *testing.T) {
	t.Helper()
	state, bpffs := t.TempDir(), t.TempDir()
	if err := unix.Mount("bpf", bpffs, "bpf", 0, "mode=0700"); err != nil {
		testutil.SkipIfNotSupported(t, fmt.Errorf("mount a bpffs on %s: %w", bpffs, err), unix.ENODEV)
	}
	oldState, oldFS, oldPins := StateDir, BPFFS, PinRoot
	StateDir, BPFFS, PinRoot = state, bpffs, bpffs+"/spray"
	t.Setenv(EnvStateDir, state)
	t.Setenv(EnvBPFFS, bpffs)
	t.Cleanup(func() {
		StateDir, BPFFS, PinRoot = oldState, oldFS, oldPins
		_ = unix.Unmount(bpffs, unix.MNT_DETACH)
	})
}

// TestPersistentLeafSpine builds a fabric that outlives its handle, reopens
// it by name, reads its status, breaks a spine port with a blackhole, and
// removes it: nothing is left, CleanupStale never touched it.
func TestPersistentLeafSpine(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	privateState(t)
	name := fmt.Sprintf("tbt%d", os.Getpid()%100000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := UpLeafSpine(ctx, name, LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 2, Rate: "100mbit"},
		ebpf.ECNConfig{KMin: 20 * time.Microsecond, KMax: 200 * time.Microsecond, PMax: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DownLeafSpine(name) })
	prefix, pinDir := f.Prefix, f.Programs().PinDir()
	if prefix != PersistentPrefixOf(name) || pinDir != filepath.Join(PinRoot, prefix) {
		t.Fatalf("prefix %q, pins in %q", prefix, pinDir)
	}
	if _, err := UpLeafSpine(ctx, name, LeafSpineConfig{Hosts: 1, Leaves: 1, Spines: 1}, ebpf.ECNConfig{}); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second UpLeafSpine of %q: %v, want os.ErrExist", name, err)
	}
	ids, err := f.Programs().Objects()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := CleanupStale(); err != nil {
		t.Fatal(err)
	}
	if left, _ := Leftovers(prefix); len(left) != 6 {
		t.Fatalf("after Close and CleanupStale: %v, want the 6 namespaces", left)
	}
	if alive, err := ids.Alive(); err != nil || len(alive) != len(ids.Programs)+len(ids.Links)+len(ids.Maps) {
		t.Fatalf("after Close: alive %v (%v), want every program, link and map", alive, err)
	}
	names, err := PersistentNames()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range names {
		found = found || n == name
	}
	if !found {
		t.Fatalf("PersistentNames = %v, without %q", names, name)
	}

	g, err := OpenLeafSpine(name)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Name != name || len(g.Hosts) != 2 || len(g.Spines) != 2 || g.Host(1, 0).IP != netip.MustParseAddr("10.80.1.1") {
		t.Fatalf("reopened fabric: name %q, %d hosts, %d spines", g.Name, len(g.Hosts), len(g.Spines))
	}
	before, err := g.Status(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var pkts, drops uint64
	for _, p := range before {
		if !p.Programs {
			t.Errorf("port %s:%s has no programs", p.Switch, p.Port)
		}
		pkts += p.Packets
	}
	r := listenUDP(t, g.Host(1, 0))
	dst := netip.AddrPortFrom(g.Host(1, 0).IP, uint16(r.port()))
	sprayUDP(t, g.Host(0, 0), dst, 8, 20, 500)
	after, err := g.Status(ctx, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var pktsAfter uint64
	for _, p := range after {
		pktsAfter += p.Packets
	}
	if pktsAfter < pkts+160 {
		t.Fatalf("program counters %d -> %d for 160 datagrams", pkts, pktsAfter)
	}

	// Utilization while traffic runs: leaf0's uplinks carry it, no
	// shaped port runs much above its rate.
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		a := g.Host(0, 0)
		sent <- a.Do(func() error {
			var conns []net.PacketConn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range 8 {
				c, err := net.ListenPacket("udp4", net.JoinHostPort(a.IP.String(), "0"))
				if err != nil {
					return err
				}
				conns = append(conns, c)
			}
			msg := make([]byte, 1000)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return nil
				default:
				}
				if _, err := conns[i%len(conns)].WriteTo(msg, net.UDPAddrFromAddrPort(dst)); err != nil {
					return err
				}
				if i%10 == 9 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}()
	busy, err := g.Status(ctx, 300*time.Millisecond)
	close(stop)
	if serr := <-sent; serr != nil {
		t.Fatal(serr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var uplinks float64
	for _, p := range busy {
		if p.Switch == "leaf0" && strings.HasPrefix(p.Port, "up") {
			uplinks += p.Utilization
		}
		if p.Utilization < 0 || p.Utilization > 150 {
			t.Errorf("%s:%s utilization %.1f%%", p.Switch, p.Port, p.Utilization)
		}
	}
	if uplinks < 1 {
		t.Errorf("leaf0's uplinks at %.2f%% together while host0-0 sends", uplinks)
	}
	t.Logf("leaf0 uplinks' utilization summed: %.1f%% of one link", uplinks)

	// Blackhole spine0's port to leaf1.
	sw, port, err := g.LookupPort("spine0:leaf1")
	if err != nil {
		t.Fatal(err)
	}
	if sw != g.Spines[0] || port != 1 {
		t.Fatalf("LookupPort(spine0:leaf1) = %s port %d", sw.Name, port)
	}
	for _, bad := range []string{"spine9:leaf1", "spine0:leaf7", "spine0", "leaf0:9"} {
		if _, _, err := g.LookupPort(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("LookupPort(%q) = %v, want ErrConfig", bad, err)
		}
	}
	id := g.PortID(sw, port)
	if err := g.Programs().SetFaults(id, ebpf.Faults{Blackhole: true}); err != nil {
		t.Fatal(err)
	}
	sprayUDP(t, g.Host(0, 0), dst, 16, 5, 500)
	st, err := g.Status(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st {
		if p.ID == id {
			drops = p.DropBlackhole
			if !p.Faults.Blackhole {
				t.Errorf("status of %v shows faults %+v", id, p.Faults)
			}
		}
	}
	if drops == 0 {
		t.Fatalf("no blackhole drops on %v after 16 flows", id)
	}
	t.Logf("blackhole on spine0:leaf1 dropped %d frames", drops)
	if err := g.SetLinkDown("leaf0", "spine1", true); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := OpenLeafSpine(name)
	if err != nil {
		t.Fatal(err)
	}
	st, err = h.Status(ctx, 0)
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	downs := 0
	for _, p := range st {
		if p.Down {
			downs++
		}
	}
	if downs != 2 {
		t.Errorf("reopened after SetLinkDown: %d ports down, want 2", downs)
	}
	r.stop()

	if err := DownLeafSpine(name); err != nil {
		t.Fatal(err)
	}
	assertGone(t, prefix)
	for _, p := range []string{pinDir, statePath(name), filepath.Join(ownerDir, prefix)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after DownLeafSpine: %v", p, err)
		}
	}
	assertObjectsGone(t, ids)
	if err := DownLeafSpine(name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second DownLeafSpine: %v, want os.ErrNotExist", err)
	}
	if _, err := OpenLeafSpine(name); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenLeafSpine after DownLeafSpine: %v, want os.ErrNotExist", err)
	}
	for _, bad := range []string{"", "-x", "a/b", "a.b", "waytoolongnameforatestbed0"} {
		if _, err := OpenLeafSpine(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("OpenLeafSpine(%q) = %v, want ErrConfig", bad, err)
		}
	}
}
