//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/internal/wirecheck"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/transporttest"
	"github.com/sprayfabric/spray/transport/wire"
)

// TestFabricTrim: with Faults.Trim, a spray data packet that loss would drop
// leaves the egress program cut to its headers, byte for byte what wire.Trim
// makes of it (trim bit, PadCnt 0, Flags and INTMax 0, IP and UDP lengths,
// IPv4 header checksum, IPv6 UDP checksum, ICRC), at priority 7, counted in
// Trimmed and not as a drop, a secured packet's security header kept; scapy
// computes the same ICRC. Frames that
// cannot be trimmed (other opcodes, a packet trimmed already) are dropped
// and counted as before.
func TestFabricTrim(t *testing.T) {
	f := loadFabricRun(t, PortConfig{RateMbps: testRate, Faults: Faults{Loss: 1, Trim: true}})
	var trimmed [][]byte
	for _, v6 := range []bool{false, true} {
		for _, c := range []struct {
			intMax  uint8
			secured bool
		}{{0, false}, {3, false}, {3, true}} {
			t.Run(fmt.Sprintf("v6=%v,int=%d,secured=%v", v6, c.intMax, c.secured), func(t *testing.T) {
				p, payload := sprayData(v6, c.intMax, 0)
				p.BTH.PadCnt = 2
				if c.secured {
					p.BTH.Secured, p.Sec, p.Cipher = true, wire.Sec{Epoch: 1, Counter: 77}, newGCM(t)
				}
				frame := encode(t, &p, payload[:len(payload)-2])
				want := bytes.Clone(frame)
				n, err := wire.Trim(want)
				if err != nil {
					t.Fatal(err)
				}
				want = want[:n]
				before := portCounters(t, f, testPort)
				// Redirected to the port again, so that the qdisc takes
				// its new length.
				ret, out, prio := runPriority(t, f.egress, frame)
				if ret != retRedirect || prio != 7 {
					t.Fatalf("verdict %d, priority %d, want a redirect at 7", int32(ret), prio)
				}
				if !bytes.Equal(out, want) {
					t.Fatalf("egress left %d bytes\n% x\nwire.Trim makes %d\n% x", len(out), out, len(want), want)
				}
				got := decode(t, out)
				if !got.BTH.Trimmed || got.BTH.PSN != p.BTH.PSN || got.Data.MsgID != p.Data.MsgID || len(got.Payload) != 0 {
					t.Fatalf("decoded %+v, want the trimmed headers of PSN %#x", got.BTH, p.BTH.PSN)
				}
				d := portCounters(t, f, testPort).Sub(before)
				if d.Trimmed != 1 || d.Drops() != 0 || d.Packets != 1 || d.Bytes != uint64(len(want)) || d.INTStamped != 0 {
					t.Fatalf("counters moved by %v, want 1 trimmed packet of %d bytes, no drop", d, len(want))
				}
				trimmed = append(trimmed, out)
			})
		}
	}

	// Not trimmable: dropped as loss, as without Trim.
	p, payload := sprayData(false, 2, 0)
	whole := encode(t, &p, payload)
	once := bytes.Clone(whole)
	n, err := wire.Trim(once)
	if err != nil {
		t.Fatal(err)
	}
	ack := encode(t, &wire.Packet{
		Eth: p.Eth, IP: p.IP, UDP: p.UDP,
		BTH: wire.BTH{Opcode: wire.OpSprayAck, DestQP: 5, PSN: 9, PKey: 0xffff},
		Ack: wire.Ack{CumPSN: 9, AckedPSN: 8, SackWords: 1},
	}, nil)
	for name, frame := range map[string][]byte{"trimmed already": once[:n], "ACK": ack} {
		before := portCounters(t, f, testPort)
		if ret, _ := run(t, f.egress, frame); ret != retShot {
			t.Errorf("%s: verdict %d, want drop", name, int32(ret))
		}
		if d := portCounters(t, f, testPort).Sub(before); d.DropLoss != 1 || d.Trimmed != 0 || d.Packets != 0 {
			t.Errorf("%s: counters moved by %v, want one loss drop", name, d)
		}
	}
	// No loss: the frame goes on whole, its priority left alone.
	if err := f.SetFaults(testPort, Faults{Trim: true}); err != nil {
		t.Fatal(err)
	}
	if ret, out, prio := runPriority(t, f.egress, whole); ret != retNext || prio != 0 || decode(t, out).BTH.Trimmed {
		t.Errorf("no loss: verdict %d, priority %d, trimmed %v; want the frame whole at 0", int32(ret), prio, decode(t, out).BTH.Trimmed)
	}
	// Without Trim the same loss drops spray data.
	if err := f.SetFaults(testPort, Faults{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	if ret, _ := run(t, f.egress, whole); ret != retShot {
		t.Errorf("loss without trim: verdict %d, want drop", int32(ret))
	}

	path := filepath.Join(t.TempDir(), "trimmed.pcap")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, fr := range trimmed {
		if err := w.WritePacket(time.Unix(0, 0), fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file.Close()
	checked, err := wirecheck.CheckICRCWithScapy(path)
	switch {
	case errors.Is(err, wirecheck.ErrToolMissing):
		t.Logf("no scapy cross-check: %v", err)
	case err != nil:
		t.Fatalf("scapy: %v", err)
	case checked != len(trimmed):
		t.Fatalf("scapy checked %d of %d trimmed frames", checked, len(trimmed))
	}
}

// skbPriority is the offset of priority in struct __sk_buff.
const skbPriority = 32

// runPriority is run that also returns the skb priority the program left
// (BPF_PROG_TEST_RUN's context out).
func runPriority(tb testing.TB, prog *ebpf.Program, frame []byte) (uint32, []byte, uint32) {
	tb.Helper()
	ctxOut := make([]byte, 192)
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
		Context: make([]byte, 192), ContextOut: ctxOut}
	ret, err := prog.Run(&opts)
	if err != nil {
		tb.Fatalf("run on %d bytes: %v", len(frame), err)
	}
	return ret, opts.DataOut, binary.LittleEndian.Uint32(ctxOut[skbPriority:])
}

// retRedirect is TC_ACT_REDIRECT, bpf_redirect's verdict.
const retRedirect = 7

// redirectMark is the skb->mark of a frame the egress program trimmed and
// sent to its port again (REDIRECT_MARK in fabric.c); skbMark is mark's
// offset in struct __sk_buff.
const (
	redirectMark = 0x7370726d
	skbMark      = 8
)

// runMarked runs prog on frame with skb->mark mark and returns the mark it
// left.
func runMarked(tb testing.TB, prog *ebpf.Program, frame []byte, mark uint32) (uint32, []byte, uint32) {
	tb.Helper()
	ctx, out := make([]byte, 192), make([]byte, 192)
	binary.LittleEndian.PutUint32(ctx[skbMark:], mark)
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256), Context: ctx, ContextOut: out}
	ret, err := prog.Run(&opts)
	if err != nil {
		tb.Fatalf("run on %d bytes: %v", len(frame), err)
	}
	return ret, opts.DataOut, binary.LittleEndian.Uint32(out[skbMark:])
}

// trimLink runs the first transmission of the spray data packet with PSN
// psn through the fabric's egress program (Loss 1, Trim) on its way out,
// and sends what the program leaves.
type trimLink struct {
	link.Link
	tb     testing.TB
	f      testFabric
	psn    uint32
	done   bool
	frames *[][]byte // what the program left
}

func (l *trimLink) Send(fs []link.Frame) (int, error) {
	for i := range fs {
		var p wire.Packet
		if l.done || wire.Decode(fs[i].Buf, &p) != nil || p.BTH.Opcode != wire.OpSprayData || p.BTH.PSN != l.psn {
			continue
		}
		l.done = true
		ret, out := run(l.tb, l.f.egress, fs[i].Buf)
		if ret != retRedirect || len(out) > len(fs[i].Buf) {
			l.tb.Errorf("egress of PSN %#x: verdict %d, %d bytes", l.psn, int32(ret), len(out))
			continue
		}
		fs[i].Buf = fs[i].Buf[:copy(fs[i].Buf, out)]
		*l.frames = append(*l.frames, bytes.Clone(out))
	}
	return l.Link.Send(fs)
}

// ackLog records the spray ACKs an engine sends.
type ackLog struct {
	link.Link
	acks *[]wire.Ack
}

func (l ackLog) Send(fs []link.Frame) (int, error) {
	for _, fr := range fs {
		var p wire.Packet
		if wire.Decode(fr.Buf, &p) == nil && p.BTH.Opcode == wire.OpSprayAck {
			*l.acks = append(*l.acks, p.Ack)
		}
	}
	return l.Link.Send(fs)
}

// TestFabricTrimToNak: a packet that the fabric program trims reaches the
// receiving QP, which takes it (its ICRC checks), answers with one NAK that
// names exactly its PSN, and the sender resends that PSN alone, with no
// timeout; the message arrives intact.
func TestFabricTrimToNak(t *testing.T) {
	f := loadFabricRun(t, PortConfig{RateMbps: testRate, Faults: Faults{Loss: 1, Trim: true}})
	seed := testutil.Seed(t)
	var frames [][]byte
	var acks []wire.Ack
	var tl *trimLink
	pr := transporttest.NewPairWith(t, mem.Config{Seed: seed, Delay: 10 * time.Microsecond, Bandwidth: 10e9},
		transport.Config{Profile: transport.Spray, Seed: seed, MTU: 1500, INTHops: 2}, transporttest.Options{
			WrapA: func(l link.Link) link.Link {
				tl = &trimLink{Link: l, tb: t, f: f, frames: &frames}
				return tl
			},
			WrapB: func(l link.Link) link.Link { return ackLog{l, &acks} },
		})
	target := pr.QA.Info().PSN + 7
	tl.psn = target
	msg := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range msg {
		msg[i] = byte(rng.Uint32())
	}
	if err := pr.QA.Post(transport.WorkRequest{ID: 1, Op: transport.OpSend, Data: msg}); err != nil {
		t.Fatal(err)
	}
	if err := pr.Run(clock.Time(time.Second), func() bool { return len(pr.CA) == 1 && len(pr.CB) == 1 }); err != nil {
		t.Fatal(err)
	}
	if c := pr.CB[0]; c.Err != nil || !bytes.Equal(c.Data[:c.Len], msg) {
		t.Fatalf("receive completion %+v: the message did not arrive intact", c.Err)
	}
	if len(frames) != 1 {
		t.Fatalf("the program trimmed %d frames, want 1", len(frames))
	}
	var naks []uint32
	for _, a := range acks {
		if a.Syndrome == wire.NakPSNSequenceError {
			naks = append(naks, a.AckedPSN)
		}
	}
	a, b, rs := pr.QA.Stats(), pr.QB.Stats(), pr.QA.RetransmitStats()
	t.Logf("receiver: trims %d, NAKs %d (PSNs %x); sender: NAKs taken %d, retransmits %d, %+v", b.TrimsReceived, b.TrimNaksSent, naks, a.TrimNaksReceived, a.Retransmits, rs)
	if len(naks) != 1 || naks[0] != target {
		t.Fatalf("NAKs for PSNs %x, want one for %x", naks, target)
	}
	if b.TrimsReceived != 1 || b.TrimNaksSent != 1 || b.BadPackets != 0 || a.TrimNaksReceived != 1 {
		t.Fatalf("receiver took %d trims (%d bad packets), sent %d NAKs; sender took %d: want 1, 0, 1, 1",
			b.TrimsReceived, b.BadPackets, b.TrimNaksSent, a.TrimNaksReceived)
	}
	if a.Retransmits != 1 || rs.LostTrim != 1 || a.Timeouts != 0 || rs.TLPs != 0 {
		t.Fatalf("%d retransmits, %d timeouts, %+v: want the trimmed PSN resent once, on its NAK", a.Retransmits, a.Timeouts, rs)
	}
}

// TestFabricTrimQueue: with PortConfig.TrimQueue the egress program keeps a
// model of the port's queue that the link drains at RateMbps. Spray data
// frames go on whole while they fit under TrimQueue; the next is cut to its
// headers, byte for byte wire.Trim's, and counted in TrimmedQueue; a frame
// that cannot be trimmed (an ACK) goes on whole; once the link has had the
// time to send the queue, data goes on whole again, and frames beyond
// QueueLimit, which the full queue drops, are not left in the model. With
// PriorityClass, trimmed packets (here and at a later port) and control
// frames get that priority, data keeps 0, and a packet trimmed here is
// redirected to the port, whose qdisc took its old length, marked, and
// passes uncounted when it comes back with the mark.
func TestFabricTrimQueue(t *testing.T) {
	const rate = 10         // Mbit/s: 1,250 bytes a millisecond
	const class = 0x10010   // HTB class 1:10
	const bytesPerMs = 1250 // at rate
	p, payload := sprayData(false, 0, 0)
	whole := encode(t, &p, payload)
	cut := bytes.Clone(whole)
	n, err := wire.Trim(cut)
	if err != nil {
		t.Fatal(err)
	}
	cut = cut[:n]
	fits := 4
	thr := uint32(fits * len(whole))
	limit := 4 * thr
	f := loadFabricRun(t, PortConfig{RateMbps: rate, TrimQueue: thr, QueueLimit: limit, PriorityClass: class})
	ack := encode(t, &wire.Packet{
		Eth: p.Eth, IP: p.IP, UDP: p.UDP,
		BTH: wire.BTH{Opcode: wire.OpSprayAck, DestQP: 5, PSN: 9, PKey: 0xffff},
		Ack: wire.Ack{CumPSN: 9, AckedPSN: 8, SackWords: 1},
	}, nil)

	before := portCounters(t, f, testPort)
	start := time.Now()
	passed, trimmedAt := 0, -1
	for i := 0; i < 64 && trimmedAt < 0; i++ {
		ret, out, prio := runPriority(t, f.egress, whole)
		if !decode(t, out).BTH.Trimmed {
			if prio != 0 || ret != retNext {
				t.Fatalf("whole data frame %d: verdict %d, priority %#x; want next at 0", i, int32(ret), prio)
			}
			passed++
			continue
		}
		trimmedAt = i
		// Redirected to the port again, so that the qdisc takes its new
		// length.
		if ret != retRedirect || !bytes.Equal(out[:len(cut)], cut) || prio != class {
			t.Fatalf("frame %d: verdict %d, trimmed to\n% x\nat priority %#x; want a redirect of what wire.Trim makes\n% x\nat %#x",
				i, int32(ret), out[:len(cut)], prio, cut, class)
		}
	}
	// The model took thr bytes, and what the link sent meanwhile.
	hi := (int(thr) + int(time.Since(start).Microseconds())*bytesPerMs/1000) / len(whole)
	if trimmedAt < 0 || passed < fits || passed > hi {
		t.Fatalf("%d frames went on whole before one was trimmed (at %d), want %d to %d", passed, trimmedAt, fits, hi)
	}
	if ret, out, prio := runPriority(t, f.egress, ack); ret != retNext || !bytes.Equal(out[:len(ack)], ack) || prio != class {
		t.Errorf("ACK over the threshold: verdict %d, priority %#x, changed %v; want it whole at %#x",
			int32(ret), prio, !bytes.Equal(out[:len(ack)], ack), class)
	}
	if ret, out, prio := runPriority(t, f.egress, cut); ret != retNext || !bytes.Equal(out[:len(cut)], cut) || prio != class {
		t.Errorf("a trimmed packet: verdict %d, priority %#x; want it unchanged at %#x", int32(ret), prio, class)
	}
	// Its second pass, marked, goes to the qdisc uncounted, unmarked.
	c0 := portCounters(t, f, testPort)
	if ret, out, mark := runMarked(t, f.egress, cut, redirectMark); ret != retNext || !bytes.Equal(out[:len(cut)], cut) || mark != 0 {
		t.Errorf("second pass of the trimmed packet: verdict %d, mark %#x; want next, unchanged, mark 0", int32(ret), mark)
	}
	if d := portCounters(t, f, testPort).Sub(c0); d != (PortCounters{MaxQueueDelay: d.MaxQueueDelay}) {
		t.Errorf("second pass moved the counters by %v", d)
	}
	d := portCounters(t, f, testPort).Sub(before)
	if d.TrimmedQueue != 1 || d.Trimmed != 1 || d.Drops() != 0 || d.Packets != uint64(passed+3) {
		t.Errorf("counters moved by %v, want one trimmed for the queue, %d packets, no drop", d, passed+3)
	}

	// ACKs far beyond the limit: the model keeps at most QueueLimit, which
	// the link sends in limit/bytesPerMs ms; without the cap it would hold
	// 2,000 ACKs, which take far longer.
	for range 2000 {
		runPriority(t, f.egress, ack)
	}
	// The model is at the limit, far above the threshold: data is trimmed,
	// and marked for its second pass.
	if ret, out, mark := runMarked(t, f.egress, whole, 0); ret != retRedirect || !decode(t, out).BTH.Trimmed || mark != redirectMark {
		t.Errorf("data at a full queue: verdict %d, trimmed %v, mark %#x; want a redirect, trimmed, marked %#x",
			int32(ret), decode(t, out).BTH.Trimmed, mark, redirectMark)
	}
	drain := time.Duration(3*int(limit)/bytesPerMs) * time.Millisecond
	if ackTime := time.Duration(2000*len(ack)/bytesPerMs) * time.Millisecond; ackTime < 2*drain {
		t.Fatalf("2,000 ACKs take %v at the rate, want over twice the %v the test sleeps", ackTime, drain)
	}
	time.Sleep(drain)
	if ret, out, prio := runPriority(t, f.egress, whole); ret != retNext || decode(t, out).BTH.Trimmed || prio != 0 {
		t.Errorf("after %v idle: verdict %d, trimmed %v, priority %#x; want the frame whole at 0",
			drain, int32(ret), decode(t, out).BTH.Trimmed, prio)
	}
}
