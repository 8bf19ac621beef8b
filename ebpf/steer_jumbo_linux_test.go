//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestSteerJumbo: the steering program attaches in native mode to a veth
// with a 9000-byte MTU (veth refuses programs without the xdp.frags flag
// there), and a 8,000-byte datagram to the steered port, which arrives in
// several buffers, is judged on its whole length: with no socket for its
// queue it passes (NoSocket), intact, rather than being dropped as
// truncated.
func TestSteerJumbo(t *testing.T) {
	p := newVethPair(t)
	for _, x := range []struct {
		ns  func() *netlink.Handle
		dev string
	}{
		{func() *netlink.Handle { h, _ := netlink.NewHandleAt(p.a); return h }, "spt-a"},
		{func() *netlink.Handle { h, _ := netlink.NewHandleAt(p.b); return h }, "spt-b"},
	} {
		h := x.ns()
		l, err := h.LinkByName(x.dev)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetMTU(l, 9000); err != nil {
			t.Fatalf("MTU 9000 on %s: %v", x.dev, err)
		}
		h.Close()
	}
	s := loadTest(t, SteerConfig{})
	inNS(t, p.a, func() {
		if err := s.Attach(p.aIdx, Native); err != nil {
			t.Fatalf("attach native to a veth of MTU 9000: %v", err)
		}
	})
	sock := udpListen(t, p.a, p.aIP, DefaultPort)
	msg := bytes.Repeat([]byte("jumbo spray "), 8000/12)
	before := counters(t, s)
	udpSend(t, p.b, p.bIP, netip.AddrPortFrom(p.aIP, DefaultPort), string(msg))
	buf := make([]byte, 9000)
	sock.SetReadDeadline(time.Now().Add(guard))
	n, err := sock.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("jumbo datagram: %d bytes, %v; intact %v", n, err, bytes.Equal(buf[:n], msg))
	}
	if d := counters(t, s).Sub(before); d.NoSocket != 1 || d.Malformed != 0 {
		t.Errorf("counters moved by %v; want NoSocket 1, Malformed 0", d)
	}
}
