package mem

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/rss"
)

// udpFrame writes an Ethernet | IPv4 | UDP frame from src to dst with UDP
// source port sport and a payload derived from seq, and returns it.
func udpFrame(buf []byte, dst, src [6]byte, sip, dip netip.Addr, sport uint16, seq uint64) []byte {
	const size = 14 + 20 + 8 + 64
	buf = buf[:size]
	clear(buf)
	copy(buf[0:6], dst[:])
	copy(buf[6:12], src[:])
	binary.BigEndian.PutUint16(buf[12:], 0x0800)
	ip := buf[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], size-14)
	s, d := sip.As4(), dip.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	u := ip[20:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], 4791)
	binary.BigEndian.PutUint16(u[4:], size-34)
	x := seq*0x9E3779B97F4A7C15 + 1
	for i := 8; i < len(u); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		u[i] = byte(x)
	}
	binary.BigEndian.PutUint64(u[8:], seq)
	return buf
}

func multiFabric(t *testing.T, queues int) (*Fabric, *clock.Sim, *Port, *MultiPort) {
	t.Helper()
	clk := new(clock.Sim)
	f := NewFabric(Config{Seed: testutil.Seed(t)}, clk)
	t.Cleanup(func() { f.Close() })
	a, err := f.NewPort(macOf(1), ipOf(1))
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.NewMultiPort(macOf(2), ipOf(2), queues, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, clk, a, m
}

// Frames land on the queue the RSS table gives their tuple, intact, and
// frames sent on a queue leave from that queue's pool.
func TestMultiPortSpreadsByRSS(t *testing.T) {
	const queues, frames = 4, 400
	f, _, a, m := multiFabric(t, queues)
	tab := m.RSS()
	want := map[uint64]uint64{} // seq -> hash
	wantQ := map[uint64]int{}
	var fs [1]link.Frame
	for seq := range uint64(frames) {
		sport := uint16(49152 + seq*37)
		if a.Alloc(fs[:]) != 1 {
			t.Fatal("Alloc")
		}
		fs[0].Buf = udpFrame(fs[0].Buf, macOf(2), macOf(1), ipOf(1), ipOf(2), sport, seq)
		want[seq] = hashOf(fs[0].Buf)
		wantQ[seq] = tab.QueueOf(rss.Tuple{Src: ipOf(1), Dst: ipOf(2), SrcPort: sport, DstPort: 4791})
		if n, err := a.Send(fs[:]); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
	}
	perQ := make([]int, queues)
	for i := range queues {
		drain(t, m.Queue(i), func(b []byte) {
			seq := binary.BigEndian.Uint64(b[42:])
			if hashOf(b) != want[seq] {
				t.Errorf("frame %d corrupted", seq)
			}
			if wantQ[seq] != i {
				t.Errorf("frame %d on queue %d, want %d", seq, i, wantQ[seq])
			}
			delete(want, seq)
			perQ[i]++
		})
	}
	if len(want) != 0 {
		t.Fatalf("%d frames not received", len(want))
	}
	for i, n := range perQ {
		if n < frames/queues/2 {
			t.Errorf("queue %d got %d of %d frames: RSS does not spread", i, n, frames)
		}
	}
	// Replies from queue 3 come from queue 3's pool and reach a.
	q3 := m.Queue(3)
	if q3.Alloc(fs[:]) != 1 {
		t.Fatal("Alloc on queue 3")
	}
	if fs[0].ID>>32 != uint64(q3.idx) {
		t.Fatalf("queue 3 lent buffer of port %d", fs[0].ID>>32)
	}
	fs[0].Buf = udpFrame(fs[0].Buf, macOf(1), macOf(2), ipOf(2), ipOf(1), 1000, 7)
	if n, _ := q3.Send(fs[:]); n != 1 {
		t.Fatal("Send on queue 3")
	}
	if got := drain(t, a, nil); got != 1 {
		t.Fatalf("a received %d frames, want 1", got)
	}
	if s := q3.Stats(); s.TxFrames != 1 || s.RxFrames != uint64(perQ[3]) {
		t.Errorf("queue 3 stats %+v", s)
	}
	checkConservation(t, f)
	checkPools(t, f)
	if s := f.Stats(); s.Misuse != 0 {
		t.Fatalf("misuse %d", s.Misuse)
	}
}

// The MultiPort's own Recv serves every queue and its Release returns
// frames of any queue; a frame from another port is refused and counted.
func TestMultiPortAggregate(t *testing.T) {
	f, _, a, m := multiFabric(t, 3)
	var fs [1]link.Frame
	for seq := range uint64(30) {
		a.Alloc(fs[:])
		fs[0].Buf = udpFrame(fs[0].Buf, macOf(2), macOf(1), ipOf(1), ipOf(2), uint16(5000+seq), seq)
		a.Send(fs[:])
	}
	var rx [64]link.Frame
	n, err := m.Recv(rx[:])
	if err != nil || n != 30 {
		t.Fatalf("Recv = %d, %v; want 30", n, err)
	}
	m.Release(rx[:n])
	m.Release(rx[:1]) // double release
	if s := f.Stats(); s.Misuse != 1 || s.Delivered != 30 {
		t.Fatalf("stats %+v: want 30 delivered, 1 misuse", s)
	}
	if s := m.Stats(); s.RxFrames != 30 {
		t.Fatalf("summed RxFrames %d", s.RxFrames)
	}
	checkPools(t, f)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(-1); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait after Close = %v", err)
	}
	if _, err := m.Recv(rx[:]); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Recv after Close = %v", err)
	}
}

// A frame arriving on any queue ends the MultiPort's Wait under the real
// clock; a queue closed on its own drops what RSS sends it.
func TestMultiPortWaitRealClock(t *testing.T) {
	f := NewFabric(Config{Delay: 2 * time.Millisecond}, clock.NewSystem())
	defer f.Close()
	a, _ := f.NewPort(macOf(1), ipOf(1))
	m, err := f.NewMultiPort(macOf(2), ipOf(2), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	tab := m.RSS()
	// A source port that queue 1 receives.
	ports := tab.PortsFor(nil, rss.Tuple{Src: ipOf(1), Dst: ipOf(2), DstPort: 4791}, 1, 1, 1024, 65535)
	var fs [1]link.Frame
	a.Alloc(fs[:])
	fs[0].Buf = udpFrame(fs[0].Buf, macOf(2), macOf(1), ipOf(1), ipOf(2), ports[0], 1)
	a.Send(fs[:])
	var rx [4]link.Frame
	got := 0
	for range 100 {
		if err := m.Wait(time.Second); err != nil {
			t.Fatal(err)
		}
		n, _ := m.Recv(rx[:])
		m.Release(rx[:n])
		if got += n; got > 0 {
			break
		}
	}
	if got != 1 {
		t.Fatalf("received %d frames, want 1", got)
	}
	m.Queue(1).Close()
	a.Alloc(fs[:])
	fs[0].Buf = udpFrame(fs[0].Buf, macOf(2), macOf(1), ipOf(1), ipOf(2), ports[0], 2)
	a.Send(fs[:])
	if s := f.Stats(); s.RxDrops != 1 {
		t.Fatalf("RxDrops %d after sending to a closed queue, want 1", s.RxDrops)
	}
}

func TestMultiPortBadConfig(t *testing.T) {
	f := NewFabric(Config{}, new(clock.Sim))
	defer f.Close()
	if _, err := f.NewMultiPort(macOf(1), ipOf(1), 0, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("0 queues: %v", err)
	}
	bad := rss.Spread(4, 8, nil)
	if _, err := f.NewMultiPort(macOf(1), ipOf(1), 2, &bad); !errors.Is(err, ErrConfig) {
		t.Errorf("table naming queue 3 of 2: %v", err)
	}
	if _, err := f.NewMultiPort(macOf(1), ipOf(1), 2, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.NewPort(macOf(1), ipOf(1)); !errors.Is(err, ErrMACInUse) {
		t.Errorf("MAC of a multi-queue port reused: %v", err)
	}
}
