package cm

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/wire"
)

var (
	macX = [6]byte{2, 0, 0, 0, 0, 0x66}
	ipX  = netip.MustParseAddr("10.9.0.66")
)

// onPath is an attacker on a link/mem fabric between two endpoints: it
// sees every frame (a copy), can hold back the frames towards the
// dialer, and injects frames from a port of its own, with any source.
type onPath struct {
	fab    *mem.Fabric
	x      *mem.Port
	ea, eb *Endpoint
	hold   atomic.Bool // drop frames towards the dialer (macA)
	mu     sync.Mutex
	frames [][]byte
}

func newOnPath(t *testing.T, seed uint64, sec *Security) *onPath {
	t.Helper()
	o := &onPath{}
	o.fab = mem.NewFabric(mem.Config{Seed: seed, Filter: func(f []byte) bool {
		o.mu.Lock()
		o.frames = append(o.frames, bytes.Clone(f))
		o.mu.Unlock()
		return !(o.hold.Load() && [6]byte(f[:6]) == macA && f[22] != forgedTTL)
	}}, clock.NewSystem())
	t.Cleanup(func() { o.fab.Close() })
	// Retransmission timeouts must not end the QP while the attacker
	// holds its acknowledgements back.
	patient := func(op *Options) { op.Security, op.Transport.MaxRetries = sec, 1000 }
	o.ea = memEndpoint(t, o.fab, macA, ipA, seed, patient)
	o.eb = memEndpoint(t, o.fab, macB, ipB, seed+1, patient)
	var err error
	if o.x, err = o.fab.NewPort(macX, ipX); err != nil {
		t.Fatal(err)
	}
	return o
}

// seen returns the frames captured so far.
func (o *onPath) seen() [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]byte(nil), o.frames...)
}

// data returns the decoded spray data packets captured towards dst.
func (o *onPath) data(dst [6]byte) []wire.Packet {
	var ps []wire.Packet
	for _, f := range o.seen() {
		var p wire.Packet
		if wire.Decode(f, &p) == nil && p.Eth.Dst == dst && p.BTH.Opcode == wire.OpSprayData {
			ps = append(ps, p)
		}
	}
	return ps
}

// send puts raw frames on the fabric from the attacker's port.
func (o *onPath) send(t *testing.T, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		fs := make([]link.Frame, 1)
		if o.x.Alloc(fs) != 1 {
			t.Fatal("no transmit buffer on the attacker's port")
		}
		n := copy(fs[0].Buf, f)
		fs[0].Buf = fs[0].Buf[:n]
		if _, err := o.x.Send(fs); err != nil {
			t.Fatal(err)
		}
	}
}

// forgedTTL marks the attacker's frames, which hold lets through.
const forgedTTL = 61

// forge encodes pk as if the listener (toDialer) or the dialer sent it to
// the other's QP qpn, and injects it.
func (o *onPath) forge(t *testing.T, toDialer bool, qpn uint32, pk *wire.Packet, payload []byte) {
	t.Helper()
	pk.Eth = wire.Eth{Dst: macB, Src: macA}
	pk.IP = wire.IP{Src: ipA, Dst: ipB, TTL: forgedTTL}
	if toDialer {
		pk.Eth = wire.Eth{Dst: macA, Src: macB}
		pk.IP = wire.IP{Src: ipB, Dst: ipA, TTL: forgedTTL}
	}
	pk.UDP = wire.UDP{Src: 0xC001, Dst: wire.UDPPort}
	pk.BTH.DestQP, pk.BTH.PKey = qpn, 0xFFFF
	buf := make([]byte, 2048)
	n, err := wire.Encode(buf, pk, payload)
	if err != nil {
		t.Fatal(err)
	}
	o.send(t, buf[:n])
}

// waitStats waits until ok holds for c's QP counters (the attacker's
// frame has been processed), and fails the test if it never does.
func waitStats(t *testing.T, c *Conn, what string, ok func(transport.QPStats) bool) transport.QPStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Stats(context.Background())
		if err == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened (counters %+v, %v)", what, st, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// An attacker on the path, who sees every frame and injects its own:
// against a clear connection it reads the payload, fails the listener's
// QP with a WRITE under a wrong key, and fails the dialer's with a NAK
// naming the message it is sending; against a secured one it finds no
// payload in any frame (unless both sides asked for integrity only,
// where it reads but cannot forge), and every forged frame (the WRITE, the NAK) and
// every frame of the connection it replays is dropped and counted before
// it touches the QP, whose messages then cross intact (SHA-256).
func TestSecureOnPath(t *testing.T) {
	marker := []byte("a secret that must not cross in clear")
	for _, sec := range []*Security{nil, {PSK: testPSK}, {PSK: testPSK, IntegrityOnly: true}} {
		name := "clear"
		switch {
		case sec != nil && sec.IntegrityOnly:
			name = "integrity"
		case sec != nil:
			name = "secured"
		}
		secured := sec != nil
		// connect sets up a connection over a new fabric and moves a
		// message carrying the marker.
		connect := func(t *testing.T) (*onPath, *Conn, *Conn) {
			seed := testutil.Seed(t)
			o := newOnPath(t, seed, sec)
			ln, err := o.eb.Listen("x")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			a, b := connectVia(t, o.ea, o.eb, ln, "")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := mrand.New(mrand.NewPCG(seed, 4))
			msg := make([]byte, 16<<10)
			for i := range msg {
				msg[i] = byte(r.Uint32())
			}
			msg = append(msg, marker...)
			if err := exchange(ctx, a, b, [][]byte{msg}); err != nil {
				t.Fatal(err)
			}
			return o, a, b
		}
		// intact checks that the connection still moves messages both
		// ways, byte-exact.
		intact := func(t *testing.T, a, b *Conn) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := mrand.New(mrand.NewPCG(testutil.Seed(t), 7))
			if err := exchange(ctx, a, b, testutil.RandomMessages(r, 4, 32<<10)); err != nil {
				t.Fatalf("dialer to listener after the attack: %v", err)
			}
			if err := exchange(ctx, b, a, testutil.RandomMessages(r, 4, 32<<10)); err != nil {
				t.Fatalf("listener to dialer after the attack: %v", err)
			}
		}
		t.Run(name+"/read", func(t *testing.T) {
			o, _, _ := connect(t)
			found := false
			for _, f := range o.seen() {
				found = found || bytes.Contains(f, marker)
			}
			if want := !secured || sec.IntegrityOnly; found != want {
				t.Fatalf("the payload found in a frame on the path: %v, want %v", found, want)
			}
		})
		t.Run(name+"/write-wrong-rkey", func(t *testing.T) {
			o, a, b := connect(t)
			// At a PSN inside the listener's window, under the next
			// message ID: both read off the captured frames.
			var last wire.Packet
			for _, p := range o.data(macB) {
				if p.BTH.PSN >= last.BTH.PSN {
					last = p
				}
			}
			payload := []byte("spoofed payload")
			o.forge(t, false, b.Info().QPN, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayData, PSN: (last.BTH.PSN + 5) & 0xFFFFFF},
				Data: wire.Data{Kind: wire.KindWrite, MsgID: last.Data.MsgID + 1, MsgLen: uint32(len(payload)), TxTime: 1},
				RETH: wire.RETH{VA: 0xDEAD0000, RKey: 0xBAD, Len: uint32(len(payload))}}, payload)
			if !secured {
				waitStats(t, b, "the listener's QP failing on the forged WRITE", func(s transport.QPStats) bool { return s.RemoteAccessErrors == 1 })
				return
			}
			st := waitStats(t, b, "the forged WRITE dropped", func(s transport.QPStats) bool { return s.Security.Unsecured == 1 })
			if st.RemoteAccessErrors != 0 {
				t.Fatalf("the forged WRITE reached the QP: %d remote access errors", st.RemoteAccessErrors)
			}
			intact(t, a, b)
		})
		t.Run(name+"/nak", func(t *testing.T) {
			o, a, b := connect(t)
			// Hold the listener's acknowledgements back, so that the
			// dialer's next message stays outstanding, and name it.
			o.hold.Store(true)
			before := len(o.data(macB))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			msg := bytes.Repeat([]byte("m"), 3000)
			sent := make(chan error, 1)
			go func() { sent <- a.Send(ctx, msg) }()
			var first wire.Packet
			for first.Data.MsgID == 0 {
				if ds := o.data(macB); len(ds) > before {
					first = ds[before]
				}
				if ctx.Err() != nil {
					t.Fatal("the dialer sent nothing")
				}
				time.Sleep(time.Millisecond)
			}
			o.forge(t, true, a.Info().QPN, &wire.Packet{BTH: wire.BTH{Opcode: wire.OpSprayAck},
				Ack: wire.Ack{CumPSN: first.BTH.PSN, AckedPSN: first.BTH.PSN, SackBase: first.BTH.PSN, SackWords: 1,
					MsgID: first.Data.MsgID, Syndrome: wire.NakRemoteAccessError}}, nil)
			if !secured {
				if err := <-sent; !errors.Is(err, transport.ErrRemoteAccess) {
					t.Fatalf("Send after a forged NAK: %v, want the remote access error the NAK claims", err)
				}
				return
			}
			st := waitStats(t, a, "the forged NAK dropped", func(s transport.QPStats) bool { return s.Security.Unsecured >= 1 })
			if st.NaksReceived != 0 || st.RejectedNaks != 0 {
				t.Fatalf("the forged NAK reached the QP: %d taken, %d rejected", st.NaksReceived, st.RejectedNaks)
			}
			o.hold.Store(false)
			if err := <-sent; err != nil {
				t.Fatalf("Send after a forged NAK: %v", err)
			}
			got, err := b.Recv(ctx)
			if err != nil || !bytes.Equal(got.Data, msg) {
				t.Fatalf("Recv: %d bytes, %v; want the message sent", len(got.Data), err)
			}
			intact(t, a, b)
		})
		if !secured {
			continue
		}
		t.Run(name+"/replay", func(t *testing.T) {
			o, a, b := connect(t)
			old := o.seen() // every frame of the connection, both ways
			o.send(t, old...)
			var sa, sb transport.QPStats
			waitStats(t, b, "the replayed frames dropped", func(s transport.QPStats) bool {
				sa, _ = a.Stats(context.Background())
				sb = s
				return sa.Security.Replayed+sa.Security.TooOld+sb.Security.Replayed+sb.Security.TooOld == uint64(len(old))
			})
			if sa.Security.Dropped()+sb.Security.Dropped() != uint64(len(old)) {
				t.Fatalf("replayed frames counted as forged: %+v and %+v", sa.Security, sb.Security)
			}
			t.Logf("%d frames replayed, dropped: dialer %+v, listener %+v", len(old), sa.Security, sb.Security)
			intact(t, a, b) // the next message Recv returns is a new one
		})
	}
}
