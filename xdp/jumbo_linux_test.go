package xdp_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/xdp"
)

// plainPair is two namespaces joined by a veth pair of the given MTU, both
// ends up, with no program attached.
type plainPair struct {
	ns      [2]netns.NsHandle
	name    [2]string
	ifindex [2]int
	mac     [2][6]byte
}

func newPlainPair(t *testing.T, mtu, queues int) *plainPair {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	n := vethSeq.Add(1)
	p := &plainPair{}
	for i := range 2 {
		p.ns[i] = newNS(t)
		p.name[i] = fmt.Sprintf("xj%c%d_%d", 'a'+i, os.Getpid()%100000, n)
	}
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: p.name[0], Namespace: netlink.NsFd(p.ns[0]), MTU: mtu,
			NumTxQueues: queues, NumRxQueues: queues},
		PeerName: p.name[1], PeerNamespace: netlink.NsFd(p.ns[1]),
		PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("veth: %v", err)
	}
	for i := range 2 {
		h, err := netlink.NewHandleAt(p.ns[i])
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.LinkByName(p.name[i])
		if err == nil {
			if l.Attrs().MTU != mtu {
				err = h.LinkSetMTU(l, mtu)
			}
			if err == nil {
				err = h.LinkSetUp(l)
			}
		}
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		p.ifindex[i] = l.Attrs().Index
		copy(p.mac[i][:], l.Attrs().HardwareAddr)
	}
	return p
}

func (p *plainPair) open(t *testing.T, i int, cfg xdp.LinkConfig) *xdp.Link {
	t.Helper()
	cfg.Ifindex, cfg.MAC = p.ifindex[i], p.mac[i]
	cfg.Socket.Mode = xdp.Copy
	cfg.Logf = t.Logf
	var l *xdp.Link
	var err error
	inNS(t, p.ns[i], func() { l, err = xdp.OpenLink(cfg) })
	if err != nil {
		t.Fatalf("OpenLink on %s: %v", p.name[i], err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// jumboFrame writes an Ethernet/IPv4/UDP:4791 frame of n bytes into b with
// frame number seq and a pattern derived from it.
func jumboFrame(b []byte, dst, src [6]byte, seq uint32, n int) []byte {
	b = b[:n]
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	binary.BigEndian.PutUint32(ip[4:], 0)
	ip[8], ip[9] = 64, 17
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], []byte{10, 97, 0, 1})
	copy(ip[16:20], []byte{10, 97, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 49152+uint16(seq&0xff))
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(n-34))
	binary.BigEndian.PutUint16(udp[6:], 0)
	binary.LittleEndian.PutUint32(b[42:], seq)
	x := uint64(seq)*0x9E3779B97F4A7C15 + 7
	for i := 46; i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// TestLinkJumbo: at MTU 9000, multi-buffer links move 9014-byte frames
// (three UMEM chunks each) intact: sent as chained descriptors, steered by
// the frags-aware program, reassembled on receipt; every TX slot comes back.
func TestLinkJumbo(t *testing.T) {
	const count, size = 3000, 9014
	p := newPlainPair(t, 9000, 1)
	cfg := xdp.LinkConfig{Socket: xdp.Config{MaxFrame: size, RxFrames: 1024, TxFrames: 256, RingSize: 1024}}
	la, lb := p.open(t, 0, cfg), p.open(t, 1, cfg)
	if la.Info().FrameSize != size {
		t.Fatalf("Info().FrameSize = %d, want %d", la.Info().FrameSize, size)
	}
	var got atomic.Int64
	done := make(chan [2]int)
	go func() {
		seen := make([]bool, count)
		fs := make([]link.Frame, 64)
		want := make([]byte, size)
		n, bad := 0, 0
		last := time.Now()
		for n < count && time.Since(last) < 5*time.Second {
			k, err := lb.Recv(fs)
			if err != nil {
				t.Errorf("Recv: %v", err)
				break
			}
			for _, f := range fs[:k] {
				seq := binary.LittleEndian.Uint32(f.Buf[42:])
				if len(f.Buf) != size || seq >= count || seen[seq] ||
					string(f.Buf) != string(jumboFrame(want, p.mac[1], p.mac[0], seq, size)) {
					bad++
					continue
				}
				seen[seq] = true
				n++
			}
			lb.Release(fs[:k])
			if k > 0 {
				last = time.Now()
				got.Store(int64(n))
				continue
			}
			lb.Wait(10 * time.Millisecond)
		}
		done <- [2]int{n, bad}
	}()
	fs := make([]link.Frame, 16)
	deadline := time.Now().Add(30 * time.Second)
	for seq := 0; seq < count; {
		if int64(seq)-got.Load() >= 256 || la.Alloc(fs[:1]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("sender stuck at %d of %d (receiver at %d)", seq, count, got.Load())
			}
			la.Wait(time.Millisecond)
			continue
		}
		fs[0].Buf = jumboFrame(fs[0].Buf, p.mac[1], p.mac[0], uint32(seq), size)
		if n, err := la.Send(fs[:1]); n != 1 || err != nil {
			t.Fatalf("Send frame %d: %d, %v", seq, n, err)
		}
		seq++
	}
	r := <-done
	if r[0] != count || r[1] != 0 {
		t.Fatalf("received %d of %d jumbo frames intact, %d bad", r[0], count, r[1])
	}
	sa, sb := la.QueueStats()[0], lb.QueueStats()[0]
	if sb.RxMultiBuffer != count || sa.TxFrames != count || sa.TxDropped != 0 {
		t.Errorf("receiver got %d multi-buffer frames, sender sent %d, dropped %d; want %d, %d, 0", sb.RxMultiBuffer, sa.TxFrames, sa.TxDropped, count, count)
	}
	// In copy mode the pieces of a frame land back to back in consecutive
	// RX entries, and the frame is handed out in place: only a frame that
	// straddles the end of the pool's entries, or entries given back out
	// of order, is copied.
	t.Logf("%d of %d frames copied into a reassembly buffer", sb.RxReassembled, count)
	if sb.RxReassembled > count/10 {
		t.Errorf("%d of %d frames reassembled by a copy, want most in place", sb.RxReassembled, count)
	}
	// Every TX slot comes back once its three completions are in.
	// Wait reaps completions.
	for deadline := time.Now().Add(5 * time.Second); la.QueueStats()[0].TxInFlight > 0 && time.Now().Before(deadline); {
		la.Wait(time.Millisecond)
	}
	if st := la.QueueStats()[0]; st.BadCompletions != 0 || st.TxInFlight != 0 {
		t.Errorf("sender: %d bad completions, %d frames still in flight", st.BadCompletions, st.TxInFlight)
	}
}

// TestLinkJumboWithoutMultiBuffer: a link without multi-buffer on a device
// of MTU 9000 counts the frames too large for one UMEM chunk as dropped,
// and still receives the ones that fit. (A link left to its defaults there
// is multi-buffer for the device's MTU.)
func TestLinkJumboWithoutMultiBuffer(t *testing.T) {
	p := newPlainPair(t, 9000, 1)
	la := p.open(t, 0, xdp.LinkConfig{Socket: xdp.Config{RxFrames: 256, TxFrames: 256, RingSize: 256}})
	if got := la.Info().FrameSize; got != 9018 {
		t.Fatalf("default FrameSize on MTU 9000: %d, want 9018", got)
	}
	// The largest single-chunk MaxFrame: a chunk less the headroom and
	// the arrival stamp.
	lb := p.open(t, 1, xdp.LinkConfig{Socket: xdp.Config{MaxFrame: 4096 - 256 - xdp.StampLen, RxFrames: 256, TxFrames: 256, RingSize: 256}})
	fs := make([]link.Frame, 2)
	if la.Alloc(fs) != 2 {
		t.Fatal("no TX frames")
	}
	fs[0].Buf = jumboFrame(fs[0].Buf, p.mac[1], p.mac[0], 1, 8000)
	fs[1].Buf = jumboFrame(fs[1].Buf, p.mac[1], p.mac[0], 2, 1000)
	if n, err := la.Send(fs); n != 2 || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	rx := make([]link.Frame, 4)
	var small int
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		k, err := lb.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[:k] {
			if len(f.Buf) != 1000 {
				t.Fatalf("received a %d-byte frame", len(f.Buf))
			}
			small++
		}
		lb.Release(rx[:k])
		if small == 1 && lb.Stats().RxDropped == 1 {
			break
		}
		lb.Wait(10 * time.Millisecond)
	}
	if st := lb.QueueStats()[0]; small != 1 || st.RxDropped != 1 {
		t.Fatalf("received %d small frames, %d dropped (kernel %d); want 1 and 1", small, st.RxDropped, st.KernelRxDropped)
	}
}

// TestLinkZeroAllocs: the aggregate data path of a two-queue multi-buffer
// Link allocates nothing.
func TestLinkZeroAllocs(t *testing.T) {
	p := newPlainPair(t, 9000, 2)
	cfg := xdp.LinkConfig{Socket: xdp.Config{MaxFrame: 9014, RxFrames: 512, TxFrames: 256, RingSize: 512}}
	la, lb := p.open(t, 0, cfg), p.open(t, 1, cfg)
	tx := make([]link.Frame, 16)
	rx := make([]link.Frame, 64)
	var seq uint32
	round := func() {
		n := la.Alloc(tx)
		for i := range n {
			tx[i].Buf = jumboFrame(tx[i].Buf, p.mac[1], p.mac[0], seq, 1000+int(seq%8)*1000)
			seq++
		}
		la.Send(tx[:n])
		lb.Wait(0)
		m, _ := lb.Recv(rx)
		lb.Release(rx[:m])
		la.Wait(0)
	}
	for range 10 {
		round()
	}
	if n := len(la.Queues()); n != 2 {
		t.Fatalf("link serves %d queues, want 2", n)
	}
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%v allocations per round, want 0", allocs)
	}
}

// TestLinkWaitAfterShortQueue: when one queue's TX pool ran dry but the
// next queue filled the Alloc, the first queue's frames coming back do not
// make Wait return at once (an engine would spin).
func TestLinkWaitAfterShortQueue(t *testing.T) {
	p := newPlainPair(t, 1500, 2)
	cfg := xdp.LinkConfig{Socket: xdp.Config{RxFrames: 64, TxFrames: 16, RingSize: 64}}
	la, _ := p.open(t, 0, cfg), p.open(t, 1, cfg)
	tx := make([]link.Frame, 17)
	if n := la.Alloc(tx[:16]); n != 16 || tx[15].ID>>48 != 0 {
		t.Fatalf("Alloc = %d; want queue 0's 16 frames", n)
	}
	// Queue 0 has nothing free: this Alloc comes from queue 1.
	if n := la.Alloc(tx[16:]); n != 1 || tx[16].ID>>48 != 1 {
		t.Fatalf("Alloc = %d, ID %#x; want one frame of queue 1", n, tx[16].ID)
	}
	for i := range tx {
		tx[i].Buf = jumboFrame(tx[i].Buf, p.mac[1], p.mac[0], uint32(i), 100)
	}
	if n, err := la.Send(tx); n != 17 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); la.QueueStats()[0].TxInFlight+la.QueueStats()[1].TxInFlight > 0; {
		if time.Now().After(deadline) {
			t.Fatal("queue 0's frames never completed")
		}
		la.Wait(time.Millisecond)
	}
	start := time.Now()
	if err := la.Wait(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("idle Wait(200ms) returned after %v", d)
	}
}
