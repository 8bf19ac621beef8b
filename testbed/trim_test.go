package testbed

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport/wire"
	"golang.org/x/sys/unix"
)

// TestLeafSpineTrim: on a fabric that trims, a sender at three times the
// uplink's rate gets its spray data frames through whole or cut to their
// headers (counted in TrimmedQueue), the queue drops almost none of them,
// and ACK frames sent in the stream overtake the data queued before them
// (the priority class). One spine, so that nothing but the classes
// reorders.
func TestLeafSpineTrim(t *testing.T) {
	const rate = 50e6
	f := testFabric(t, LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 1, Rate: "50mbit", BufferBytes: 64 << 10, Trim: true})
	if f.Config.TrimBytes != 48<<10 {
		t.Fatalf("trim threshold %d, want three quarters of the buffer", f.Config.TrimBytes)
	}
	progs, err := f.AttachPrograms(ebpf.ECNConfig{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Host(0, 0), f.Host(1, 0)
	// UDP payloads: a spray data packet (1,200 bytes of payload) and a
	// spray ACK, their PSN the send order.
	datagram := func(p *wire.Packet, payload []byte) []byte {
		p.Eth = wire.Eth{}
		p.IP = wire.IP{Src: a.IP, Dst: b.IP, TTL: 64}
		p.UDP = wire.UDP{Src: 50000, Dst: wire.UDPPort}
		buf := make([]byte, wire.FrameLen(p, len(payload)))
		n, err := wire.Encode(buf, p, payload)
		if err != nil {
			t.Fatal(err)
		}
		return buf[14+20+8 : n]
	}
	type arrival struct {
		op   wire.Opcode
		psn  uint32
		size int
	}
	var (
		mu  sync.Mutex
		got []arrival
	)
	var conn net.PacketConn
	if err := b.Do(func() (err error) {
		conn, err = net.ListenPacket("udp4", net.JoinHostPort(b.IP.String(), "4791"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if n >= 12 {
				mu.Lock()
				got = append(got, arrival{wire.Opcode(buf[0]), uint32(buf[9])<<16 | uint32(buf[10])<<8 | uint32(buf[11]), n})
				mu.Unlock()
			}
		}
	}()
	rcvbuf0 := udpRcvbufErrors(t, b)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.IP, wire.UDPPort))
	sent, acks := 0, 0
	var wholeLen int
	err = a.Do(func() error {
		c, err := net.ListenPacket("udp4", net.JoinHostPort(a.IP.String(), "50000"))
		if err != nil {
			return err
		}
		defer c.Close()
		// Paced by the clock at three times the rate, bounded by its own
		// work: total frames whatever the clock says, so that a sender
		// slower than the pace still ends (and its PSNs stay 24-bit).
		total := int(3*rate*3/10/8) / (1200 + 62 + 42) // 300 ms worth
		start := time.Now()
		bytesSent := 0
		for sent < total {
			due := 3 * rate * time.Since(start).Seconds()
			for sent < total && float64(bytesSent*8) < due {
				var d []byte
				if sent%20 == 19 {
					d = datagram(&wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayAck, DestQP: 5, PSN: uint32(sent), PKey: 0xffff},
						Ack: wire.Ack{CumPSN: 1, AckedPSN: 1, SackWords: 1}}, nil)
					acks++
				} else {
					d = datagram(&wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, DestQP: 5, PSN: uint32(sent), PKey: 0xffff},
						Data: wire.Data{MsgID: 1, MsgLen: 1 << 30, Kind: wire.KindSend}}, make([]byte, 1200))
					wholeLen = len(d)
				}
				if _, err := c.WriteTo(d, dst); err != nil {
					return err
				}
				bytesSent += len(d) + 42
				sent++
			}
			time.Sleep(500 * time.Microsecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The queues have drained when every frame sent has arrived or was
	// counted dropped.
	arrived := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	rcvbuf := func() uint64 { return udpRcvbufErrors(t, b) - rcvbuf0 }
	if !testutil.Poll(30*time.Second, func() bool { return uint64(arrived())+queueDrops(t, f)+rcvbuf() >= uint64(sent) }) {
		t.Fatalf("%d of %d frames arrived, %d were dropped at a queue, %d at the receiving socket: the rest vanished",
			arrived(), sent, queueDrops(t, f), rcvbuf())
	}
	conn.Close()
	<-done

	var whole, cut, ackIn, overtook int
	// An ACK overtook the queued data if a whole data frame sent before it
	// arrived after it.
	minLater := int(^uint(0) >> 1) // the lowest PSN of whole data arriving later
	for i := len(got) - 1; i >= 0; i-- {
		x := got[i]
		switch {
		case x.op == wire.OpSprayAck:
			ackIn++
			if minLater < int(x.psn) {
				overtook++
			}
		case x.size == wholeLen:
			whole++
			minLater = min(minLater, int(x.psn))
		default:
			cut++
		}
	}
	var trimmedQ, queueDrops uint64
	for _, sw := range append(append([]*Switch(nil), f.Leaves...), f.Spines...) {
		for i := range sw.Ports {
			c, err := progs.PortCounters(f.PortID(sw, i))
			if err != nil {
				t.Fatal(err)
			}
			trimmedQ += c.TrimmedQueue
		}
	}
	st, err := f.Status(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var statusTrimmed uint64
	for _, p := range st {
		queueDrops += p.DropQueue
		statusTrimmed += p.Trimmed
	}
	if statusTrimmed != trimmedQ {
		t.Errorf("Status counts %d trimmed, the programs %d", statusTrimmed, trimmedQ)
	}
	t.Logf("sent %d (%d ACKs); arrived %d whole, %d trimmed, %d ACKs (%d ahead of earlier data); trimmed at the queue %d, queue drops %d",
		sent, acks, whole, cut, ackIn, overtook, trimmedQ, queueDrops)
	if cut == 0 || uint64(cut) > trimmedQ {
		t.Errorf("%d trimmed frames arrived, %d counted trimmed: want some, all counted", cut, trimmedQ)
	}
	if queueDrops*10 > trimmedQ {
		t.Errorf("the queues dropped %d frames, want under a tenth of the %d trimmed", queueDrops, trimmedQ)
	}
	if overtook*2 < ackIn {
		t.Errorf("%d of %d ACKs arrived ahead of data sent before them, want at least half", overtook, ackIn)
	}
}

// TestLeafSpineTrimTCP: kernel TCP crosses a fabric that trims with its
// bytes intact, one frame at a time. HTB, unlike TBF, does not cut a
// segment larger than its queue into frames, and a host's TCP sends
// segments of up to 64 KiB: the hosts send one frame a segment (GSO max
// segs 1), or a 32 KiB queue drops every large segment whole.
func TestLeafSpineTrimTCP(t *testing.T) {
	f := testFabric(t, LeafSpineConfig{Hosts: 1, Leaves: 2, Spines: 1, Rate: "50mbit", BufferBytes: 32 << 10, Trim: true})
	a, b := f.Host(0, 0), f.Host(1, 0)
	msg := make([]byte, 4<<20)
	for i := range msg {
		msg[i] = byte(i * 7 / 3)
	}
	var ln net.Listener
	if err := b.Do(func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(b.IP.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		buf, _ := io.ReadAll(c)
		got <- buf
	}()
	var info *unix.TCPInfo
	err := a.Do(func() error {
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		if err := raw.Control(func(fd uintptr) {
			info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		}); err != nil {
			return err
		}
		if err != nil {
			return err
		}
		return c.(*net.TCPConn).CloseWrite()
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := <-got
	t.Logf("%d of %d bytes; sender: %d segments out, %d resent", len(buf), len(msg), info.Segs_out, info.Total_retrans)
	if !bytes.Equal(buf, msg) {
		t.Fatalf("%d bytes arrived, not the %d sent", len(buf), len(msg))
	}
	st, err := f.PortStats()
	if err != nil {
		t.Fatal(err)
	}
	up := st[len(f.Leaves[0].Ports)-1] // leaf0's uplink, which the segments queue at
	t.Logf("%s:%s sent %d bytes in %d frames, dropped %d", up.Switch, up.Port, up.TxBytes, up.TxPackets, up.QueueDrops)
	if up.TxPackets == 0 || up.TxBytes/up.TxPackets > 1514 {
		t.Fatalf("the uplink sent %d bytes in %d frames: segments larger than a frame crossed it", up.TxBytes, up.TxPackets)
	}
}
