package transport_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/wire"
)

var (
	fuzzMACA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	fuzzMACB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	fuzzIPA  = netip.MustParseAddr("10.0.0.1")
	fuzzIPB  = netip.MustParseAddr("10.0.0.2")
	// fuzzSecA secures the victim A (flag bit 3), fuzzSecB its peer.
	fuzzSecA = transport.Security{Send: [32]byte{0xA}, Recv: [32]byte{0xB}}
	fuzzSecB = transport.Security{Send: [32]byte{0xB}, Recv: [32]byte{0xA}}
)

// recorder is a link that keeps a copy of every frame it receives.
type recorder struct {
	link.Link
	frames [][]byte
}

func (r *recorder) Recv(fs []link.Frame) (int, error) {
	n, err := r.Link.Recv(fs)
	for _, f := range fs[:n] {
		r.frames = append(r.frames, append([]byte(nil), f.Buf...))
	}
	return n, err
}

// fuzzVictim is engine A of the fuzz target: a QP connected to a peer at
// B that it has sent a message to, over link/mem under a simulated clock.
type fuzzVictim struct {
	clk    *clock.Sim
	fab    *mem.Fabric
	e      *transport.Engine
	q      *transport.QP
	pa, pb *mem.Port
}

func newFuzzVictim(tb testing.TB, prof transport.Profile, secure bool, wrap func(link.Link) link.Link) *fuzzVictim {
	v := &fuzzVictim{clk: &clock.Sim{}}
	v.fab = mem.NewFabric(mem.Config{Seed: 1, Delay: 5 * time.Microsecond}, v.clk)
	var err error
	if v.pa, err = v.fab.NewPort(fuzzMACA, fuzzIPA); err != nil {
		tb.Fatal(err)
	}
	if v.pb, err = v.fab.NewPort(fuzzMACB, fuzzIPB); err != nil {
		tb.Fatal(err)
	}
	var l link.Link = v.pa
	if wrap != nil {
		l = wrap(l)
	}
	cfg := transport.Config{Profile: prof, Seed: 1, MTU: 1514, INTHops: 2}
	if v.e, err = transport.NewEngine(l, cfg); err != nil {
		tb.Fatal(err)
	}
	if v.q, err = v.e.CreateQP(); err != nil {
		tb.Fatal(err)
	}
	if secure {
		if err := v.q.Secure(fuzzSecA); err != nil {
			tb.Fatal(err)
		}
	}
	return v
}

// step runs the engine (and, when peer is set, that engine too) until
// neither has work left within limit of simulated time.
func (v *fuzzVictim) step(tb testing.TB, limit time.Duration, peer *transport.Engine) {
	end := v.clk.Now().Add(limit)
	for steps := 0; v.clk.Now() < end; steps++ {
		if steps > 100000 {
			tb.Fatalf("the engine asked for %d steps in %v of simulated time: it spins", steps, limit)
		}
		w, err := v.e.Step(v.clk.Now())
		if err != nil {
			tb.Fatalf("Step: %v", err)
		}
		v.e.Completions(nil)
		if peer == nil {
			// Nobody answers: what A sends to B is dropped.
			var rx [32]link.Frame
			if n, _ := v.pb.Recv(rx[:]); n > 0 {
				v.pb.Release(rx[:n])
				w = true
			}
		} else {
			pw, err := peer.Step(v.clk.Now())
			if err != nil {
				tb.Fatalf("peer Step: %v", err)
			}
			peer.Completions(nil)
			w = w || pw
		}
		if w {
			continue
		}
		next := clock.Min(v.e.NextDeadline(), v.fab.NextDelivery())
		if peer != nil {
			next = clock.Min(next, peer.NextDeadline())
		}
		if next == clock.Never || next > end {
			return
		}
		v.clk.Set(max(next, v.clk.Now()+1))
	}
}

// capture runs a short exchange between A and a real peer B (each sends
// the other a message) and returns the frames A received: data, ACKs,
// SACKs and CNPs as the transport makes them, the seeds of the fuzz
// target. It also returns B's QP info, which the victim connects to.
func capture(tb testing.TB, prof transport.Profile, secure bool) ([][]byte, transport.QPInfo) {
	var rec *recorder
	v := newFuzzVictim(tb, prof, secure, func(l link.Link) link.Link { rec = &recorder{Link: l}; return rec })
	eb, err := transport.NewEngine(v.pb, transport.Config{Profile: prof, Seed: 2, MTU: 1514, INTHops: 2})
	if err != nil {
		tb.Fatal(err)
	}
	qb, err := eb.CreateQP()
	if err != nil {
		tb.Fatal(err)
	}
	if secure {
		if err := qb.Secure(fuzzSecB); err != nil {
			tb.Fatal(err)
		}
	}
	if err := v.q.Connect(qb.Info()); err != nil {
		tb.Fatal(err)
	}
	if err := qb.Connect(v.q.Info()); err != nil {
		tb.Fatal(err)
	}
	msg := make([]byte, 6000)
	for i := range msg {
		msg[i] = byte(i)
	}
	if err := v.q.Post(transport.WorkRequest{ID: 1, Op: transport.OpSend, Data: msg}); err != nil {
		tb.Fatal(err)
	}
	if err := qb.Post(transport.WorkRequest{ID: 2, Op: transport.OpSend, Data: msg[:3000]}); err != nil {
		tb.Fatal(err)
	}
	v.step(tb, 20*time.Millisecond, eb)
	return rec.frames, qb.Info()
}

// fixFrame makes a mutated frame reach its QP: it addresses it to A,
// names A's QP (when qpn is set) and recomputes the IPv4 header checksum
// and the ICRC, so that the decoder's checks pass and the fuzzer explores
// what the QP does with the headers and payload.
func fixFrame(fr []byte, qpn uint32, setQPN bool) {
	if len(fr) < 14 {
		return
	}
	copy(fr[0:6], fuzzMACA[:])
	const ip, bth = 14, 14 + 20 + 8
	if len(fr) < bth+12+4 || binary.BigEndian.Uint16(fr[12:]) != 0x0800 || fr[ip]&0x0f != 5 {
		return
	}
	if setQPN {
		fr[bth+5], fr[bth+6], fr[bth+7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
	}
	fr[ip+10], fr[ip+11] = 0, 0
	var sum uint32
	for i := ip; i < ip+20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(fr[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(fr[ip+10:], ^uint16(sum))
	end := ip + int(binary.BigEndian.Uint16(fr[ip+2:]))
	if end > len(fr) || end < bth+12+4 {
		return
	}
	if c, err := wire.ICRC(fr[:end]); err == nil {
		binary.LittleEndian.PutUint32(fr[end-4:], c)
	}
}

// FuzzEngineReceive feeds arbitrary frames to an engine whose QP has a
// message outstanding to its peer and is ready to receive: the engine's
// whole receive path (decoding, the QP's handling of every opcode, the
// reorder, retransmit and path state it drives) must not panic, must
// count every frame it is given (RxFrames), and must keep running (Step
// returns no error; timers fire) whatever the frames say. A QP may fail
// (that is a counted, reported outcome), the engine may not.
//
// Layout: byte 0 flags (bit 0: the RoCE profile; bit 1: name A's QP;
// bit 2: fix the checksum and ICRC; bit 3: A's QP is secured, and must
// drop and count what does not authenticate), then frames, each a 2-byte
// length and its bytes. The seeds are the frames of a real exchange,
// clear and secured.
func FuzzEngineReceive(f *testing.F) {
	for i := range 4 {
		prof, secure := transport.Spray, i >= 2
		if i%2 == 1 {
			prof = transport.RoCE
		}
		frames, _ := capture(f, prof, secure)
		flags := byte(6)
		if prof == transport.RoCE {
			flags |= 1
		}
		if secure {
			flags |= 8
		}
		for i := range frames {
			in := []byte{flags}
			// Each frame alone, and runs of four in their order.
			for _, g := range frames[i:min(i+4, len(frames))] {
				in = binary.BigEndian.AppendUint16(in, uint16(len(g)))
				in = append(in, g...)
				if i%4 != 0 {
					break
				}
			}
			f.Add(in)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1 {
			return
		}
		flags := data[0]
		prof := transport.Spray
		if flags&1 != 0 {
			prof = transport.RoCE
		}
		v := newFuzzVictim(t, prof, flags&8 != 0, nil)
		peer := transport.QPInfo{QPN: 0x123, PSN: 0x1000, MAC: fuzzMACB, IP: fuzzIPB}
		if err := v.q.Connect(peer); err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, 5000)
		if err := v.q.Post(transport.WorkRequest{ID: 1, Op: transport.OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
		v.step(t, 50*time.Microsecond, nil) // the message's packets go out
		before := v.e.Stats().RxFrames
		sent := 0
		buf := make([]link.Frame, 1)
		for rest := data[1:]; len(rest) >= 2; {
			n := int(binary.BigEndian.Uint16(rest))
			rest = rest[2:]
			n = min(n, len(rest))
			fr := append([]byte(nil), rest[:n]...)
			rest = rest[n:]
			if flags&4 != 0 {
				fixFrame(fr, v.q.QPN(), flags&2 != 0)
			} else if len(fr) >= 6 {
				copy(fr[0:6], fuzzMACA[:])
			}
			if len(fr) < mem.MinFrameLen || len(fr) > 1514 {
				continue // the fabric refuses it before any engine sees it
			}
			if v.pb.Alloc(buf) != 1 {
				t.Fatal("no transmit buffer")
			}
			buf[0].Buf = append(buf[0].Buf[:0], fr...)
			if _, err := v.pb.Send(buf); err != nil {
				t.Fatal(err)
			}
			sent++
			v.step(t, 20*time.Microsecond, nil)
		}
		// Timers keep running after whatever came in: retransmissions,
		// probes, the QP's failure at worst.
		v.step(t, 5*time.Millisecond, nil)
		if got := v.e.Stats().RxFrames - before; got != uint64(sent) {
			t.Fatalf("the engine counted %d of the %d frames it was given", got, sent)
		}
	})
}
