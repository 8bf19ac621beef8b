//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport/wire"

	"golang.org/x/sys/unix"
)

// pinTestDir returns a directory for one test's pins on a bpffs of its
// own, mounted on a temporary directory and unmounted at the end of the
// test, so that nothing of the test reaches the host's /sys/fs/bpf.
func pinTestDir(tb testing.TB) string {
	tb.Helper()
	fs := tb.TempDir()
	// A kernel without bpffs: ENODEV.
	testutil.SkipIfNotSupported(tb, MountBPFFS(fs), syscall.ENODEV)
	tb.Cleanup(func() { _ = unix.Unmount(fs, unix.MNT_DETACH) })
	return filepath.Join(fs, "pins")
}

// TestFabricPin pins a fabric attached to a veth pair, closes it, and checks
// that the programs keep counting and dropping without it, that another
// handle from LoadPinnedFabric reads the same counters and changes faults,
// and that Unpin and Close leave no program, link or map behind.
func TestFabricPin(t *testing.T) {
	p := newVethPair(t)
	dir := pinTestDir(t)
	f, err := LoadFabric()
	if err != nil {
		t.Fatal(err)
	}
	tx, rx := PortID{Switch: 2, Port: 1}, PortID{Switch: 1, Port: 1}
	if err := f.AttachPortAt(p.b, p.bIdx, PortConfig{ID: tx, RateMbps: 100}); err != nil {
		t.Fatal(err)
	}
	if err := f.Pin(dir); err != nil {
		f.Close()
		t.Fatalf("Pin: %v", err)
	}
	// A port attached after Pin is pinned too.
	if err := f.AttachPortAt(p.a, p.aIdx, PortConfig{ID: rx}); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Pin(dir); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("second Pin: %v, want ErrInvalidConfig", err)
	}
	ids, err := f.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids.Programs) != 4 || len(ids.Links) != 4 || len(ids.Maps) != len(fabricMapNames) {
		t.Fatalf("Objects = %+v: want 4 programs, 4 links, %d maps", ids, len(fabricMapNames))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// Closed but pinned: the programs still run.
	sock := udpListen(t, p.a, p.aIP, 5000)
	dst := netip.AddrPortFrom(p.aIP, 5000)
	udpSend(t, p.b, p.bIP, dst, "one", "two", "three")
	for _, want := range []string{"one", "two", "three"} {
		if got := udpRecv(t, sock); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if alive, err := ids.Alive(); err != nil || len(alive) != 4+4+len(fabricMapNames) {
		t.Fatalf("after Close of a pinned fabric, alive %v (%v): want every object", alive, err)
	}

	g, err := LoadPinnedFabric(dir)
	if err != nil {
		t.Fatalf("LoadPinnedFabric: %v", err)
	}
	if c := portCounters(t, g, tx); c.Packets < 3 {
		t.Errorf("reopened tx counters %v: want the 3 datagrams", c)
	}
	if c := portCounters(t, g, rx); c.RxPackets < 3 {
		t.Errorf("reopened rx counters %v: want the 3 datagrams", c)
	}
	if pc, err := g.PortConfig(tx); err != nil || pc.RateMbps != 100 || pc.Faults.Blackhole {
		t.Errorf("PortConfig(tx) = %+v, %v", pc, err)
	}
	if err := g.SetFaults(tx, Faults{Blackhole: true, Trim: true}); err != nil {
		t.Fatal(err)
	}
	if pc, err := g.PortConfig(tx); err != nil || !pc.Faults.Blackhole || !pc.Faults.Trim {
		t.Errorf("PortConfig(tx) after SetFaults = %+v, %v", pc, err)
	}
	if _, err := g.PortConfig(PortID{9, 9}); !errors.Is(err, ErrUnknownPort) {
		t.Errorf("PortConfig of an unknown port: %v", err)
	}
	before := portCounters(t, g, tx)
	rawSendDropped(t, p, otherFrames(t)["udp other port"])
	if d := portCounters(t, g, tx).Sub(before); d.DropBlackhole != 1 {
		t.Errorf("blackhole set through the reopened fabric: counters moved by %v", d)
	}
	ids2, err := g.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids2.Links) != 4 || len(ids2.Programs) != 4 {
		t.Errorf("reopened Objects = %+v", ids2)
	}
	if err := g.Unpin(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after Unpin: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// Objects are freed once the last reference goes; the kernel may defer
	// that briefly.
	var alive []string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if alive, err = ids.Alive(); err == nil && len(alive) == 0 {
			break
		}
	}
	if err != nil || len(alive) != 0 {
		t.Errorf("after Unpin and Close: alive %v (%v)", alive, err)
	}
	if _, err := LoadPinnedFabric(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadPinnedFabric of a removed fabric: %v, want os.ErrNotExist", err)
	}
}

// TestFabricEdgePort: a frame entering at an edge port (from a host) whose
// key an earlier copy left in flight, say dropped in a queue a second ago,
// does not count that second as queue delay nor get marked; the stale entry
// is forgotten, so the next port's ingress measures nothing either. At a
// port that is not an edge the same frame is measured (the model the edge
// flag guards against).
func TestFabricEdgePort(t *testing.T) {
	for _, edge := range []bool{false, true} {
		f := loadFabricRun(t, PortConfig{RateMbps: testRate, Edge: edge,
			ECN: ECNConfig{KMin: time.Millisecond, KMax: 2 * time.Millisecond, PMax: 1}})
		if pc, err := f.PortConfig(testPort); err != nil || pc.Edge != edge {
			t.Fatalf("PortConfig = %+v, %v", pc, err)
		}
		p, payload := sprayData(false, 0, wire.ECNECT0)
		frame := encode(t, &p, payload)
		_, out := run(t, f.egress, frame) // the earlier copy
		backdate(t, f.Fabric, time.Second)
		_, out = run(t, f.ingress, out) // the retransmission, at this port
		tos := decode(t, out).IP.TOS
		c := portCounters(t, f, testPort)
		if edge {
			if c.Measured != 0 || c.ECNMarked != 0 || tos != wire.ECNECT0 {
				t.Errorf("edge port: counters %v, TOS %#x; want nothing measured or marked", c, tos)
			}
			if n := inflightEntries(t, f.Fabric); n != 0 {
				t.Errorf("edge port kept %d stale entries", n)
			}
		} else if c.Measured != 1 || c.MaxQueueDelay < time.Second || tos != wire.ECNCE {
			t.Errorf("inner port: counters %v, TOS %#x; want the second measured and marked", c, tos)
		}
	}
}

func inflightEntries(tb testing.TB, f *Fabric) int {
	tb.Helper()
	var (
		k fabricFabricPktKey
		v fabricFabricInflightVal
		n int
	)
	it := f.maps.FabricInflight.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	return n
}
