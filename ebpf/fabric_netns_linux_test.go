//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/transport/wire"
	"golang.org/x/sys/unix"
)

// rawSendDropped sends a frame from b's veth end that the fabric's egress
// program drops: the packet socket reports that as ENOBUFS.
func rawSendDropped(tb testing.TB, p *vethPair, frame []byte) {
	tb.Helper()
	var fd int
	inNS(tb, p.b, func() {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
	})
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: p.bIdx, Halen: 6}
	copy(sa.Addr[:], p.aMAC)
	if err := unix.Sendto(fd, frame, 0, sa); err != nil && !errors.Is(err, unix.ENOBUFS) {
		tb.Fatalf("raw send of %d bytes: %v", len(frame), err)
	}
}

// TestFabricNetns attaches the fabric programs to both ends of a veth pair:
// b's end is the sending port (switch 2), a's end the receiving one (switch
// 1). RoCE frames sent from b arrive at a UDP socket in a with a hop record
// of b's port, their queue delay measured by a's ingress; faults on b's port
// drop frames. Both ends usually have ifindex 2, each in its namespace,
// which is what the per-port program instances are for.
func TestFabricNetns(t *testing.T) {
	p := newVethPair(t)
	f := loadFabricTest(t)
	tx := PortID{Switch: 2, Port: 1}
	rx := PortID{Switch: 1, Port: 1}
	inNS(t, p.b, func() {
		if err := f.AttachPort(p.bIdx, PortConfig{ID: tx, RateMbps: testRate}); err != nil {
			t.Fatalf("AttachPort on veth: %v", err)
		}
		if err := f.AttachPort(p.bIdx, PortConfig{ID: PortID{3, 3}}); !errors.Is(err, ErrAttached) {
			t.Errorf("second AttachPort on the interface: %v, want ErrAttached", err)
		}
	})
	if err := f.AttachPortAt(p.a, p.aIdx, PortConfig{ID: rx}); err != nil {
		t.Fatalf("AttachPortAt on veth: %v", err)
	}
	if err := f.AttachPortAt(p.a, p.aIdx, PortConfig{ID: PortID{4, 4}}); !errors.Is(err, ErrAttached) {
		t.Errorf("second AttachPortAt on the interface: %v, want ErrAttached", err)
	}
	t.Logf("ifindex of a's end %d, of b's end %d", p.aIdx, p.bIdx)
	sock := udpListen(t, p.a, p.aIP, wire.UDPPort)
	other := udpListen(t, p.a, p.aIP, 5000)
	toOther := netip.AddrPortFrom(p.aIP, 5000)

	// Plain UDP goes through untouched, both ports count it.
	before := portCounters(t, f, tx)
	udpSend(t, p.b, p.bIP, toOther, "plain one", "plain two")
	for _, want := range []string{"plain one", "plain two"} {
		if got := udpRecv(t, other); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if d := portCounters(t, f, tx).Sub(before); d.Packets < 2 || d.Drops() != 0 || d.INTStamped != 0 {
		t.Errorf("sending port counters moved by %v; want at least 2 packets", d)
	}
	if c := portCounters(t, f, rx); c.RxPackets < 2 {
		t.Errorf("receiving port counters %v; want at least 2 received", c)
	}

	// roce builds a spray data frame from b to a with two INT slots.
	roce := func(psn uint32, payload string) []byte {
		pk := wire.Packet{
			IP:   wire.IP{Src: p.bIP, Dst: p.aIP, TTL: 64},
			UDP:  wire.UDP{Src: 50000, Dst: wire.UDPPort},
			BTH:  wire.BTH{Opcode: wire.OpSprayData, DestQP: 5, PSN: psn},
			Data: wire.Data{MsgLen: 4096, Flags: wire.FlagINT, INTMax: 2},
		}
		copy(pk.Eth.Dst[:], p.aMAC)
		copy(pk.Eth.Src[:], p.bMAC)
		return encode(t, &pk, []byte(payload))
	}
	// recvFrame reads one datagram from sock and puts it behind the headers
	// of sent, so that Decode checks the ICRC of what arrived.
	recvFrame := func(sent []byte) *wire.Packet {
		t.Helper()
		buf := make([]byte, 2048)
		sock.SetReadDeadline(time.Now().Add(guard))
		n, err := sock.Read(buf)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		frame := append(bytes.Clone(sent[:14+20+8]), buf[:n]...)
		return decode(t, frame)
	}

	const n = 10
	before = portCounters(t, f, tx)
	for i := range n {
		sent := roce(uint32(i), "intact payload")
		rawSend(t, p, sent)
		got := recvFrame(sent)
		if string(got.Payload) != "intact payload" || got.BTH.PSN != uint32(i) {
			t.Fatalf("frame %d: payload %q, PSN %d", i, got.Payload, got.BTH.PSN)
		}
		if len(got.INT) != wire.HopLen {
			t.Fatalf("frame %d: %d bytes of hop records, want one record", i, len(got.INT))
		}
		hop := wire.HopAt(got.INT, 0)
		if hop.Switch != tx.Switch || hop.Port != tx.Port || hop.RateMbps != testRate || hop.TS == 0 {
			t.Errorf("frame %d: hop %+v, want port %v at %d Mbit/s with a timestamp", i, hop, tx, testRate)
		}
	}
	d := portCounters(t, f, tx).Sub(before)
	if d.INTStamped != n || d.Measured != n || d.QueueDelaySum <= 0 || d.Packets < n {
		t.Errorf("sending port counters moved by %v; want %d stamped and measured", d, n)
	}
	t.Logf("veth queue delay: mean %v, max %v", d.MeanQueueDelay(), d.MaxQueueDelay)

	// Loss 1 on RoCE frames: none arrives, the sentinel sent after the loss
	// is turned off is the first to arrive.
	if err := f.SetFaults(tx, Faults{Loss: 1, RoCEOnly: true}); err != nil {
		t.Fatal(err)
	}
	before = portCounters(t, f, tx)
	for i := range n {
		rawSendDropped(t, p, roce(uint32(100+i), "lost"))
	}
	udpSend(t, p.b, p.bIP, toOther, "not RoCE")
	if got := udpRecv(t, other); got != "not RoCE" {
		t.Fatalf("got %q", got)
	}
	if err := f.SetFaults(tx, Faults{}); err != nil {
		t.Fatal(err)
	}
	sentinel := roce(200, "sentinel")
	rawSend(t, p, sentinel)
	if got := recvFrame(sentinel); string(got.Payload) != "sentinel" {
		t.Fatalf("first RoCE frame after the loss: %q, want the sentinel", got.Payload)
	}
	if d := portCounters(t, f, tx).Sub(before); d.DropLoss != n || d.Drops() != n {
		t.Errorf("counters moved by %v; want DropLoss %d", d, n)
	}

	// Blackhole: plain UDP is lost too.
	if err := f.SetFaults(tx, Faults{Blackhole: true}); err != nil {
		t.Fatal(err)
	}
	before = portCounters(t, f, tx)
	udpSend(t, p.b, p.bIP, toOther, "gone 1", "gone 2", "gone 3")
	if err := f.SetFaults(tx, Faults{}); err != nil {
		t.Fatal(err)
	}
	udpSend(t, p.b, p.bIP, toOther, "after the blackhole")
	if got := udpRecv(t, other); got != "after the blackhole" {
		t.Fatalf("got %q, want the datagram sent after the blackhole", got)
	}
	if d := portCounters(t, f, tx).Sub(before); d.DropBlackhole < 3 {
		t.Errorf("counters moved by %v; want DropBlackhole >= 3", d)
	}

	// Detaching stops the counting.
	if err := f.DetachPort(rx); err != nil {
		t.Fatal(err)
	}
	before = portCounters(t, f, tx)
	sent := roce(300, "after detach")
	rawSend(t, p, sent)
	if got := recvFrame(sent); string(got.Payload) != "after detach" {
		t.Fatalf("got %q", got.Payload)
	}
	if d := portCounters(t, f, tx).Sub(before); d.INTStamped != 1 || d.Measured != 0 {
		t.Errorf("after detaching the receiving port: counters moved by %v; want stamped 1, measured 0", d)
	}
}
