package spray_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/wire"
)

// spineTap is an attacker in the spine's namespace of a leaf-spine
// testbed, on the path of every frame between the leaves: an AF_PACKET
// socket on the spine's port towards one leaf sees the frames it sends
// there (and receives), and injects frames of its own on that port.
//
// The tap reads its socket only when asked (drain), never from a
// goroutine of its own: the kernel queues a copy of a frame on the socket
// before the frame leaves the port, so once a message has been delivered
// every frame it crossed is already queued, and a non-blocking read takes
// them all however loaded the machine is (a reader goroutine that had not
// yet been scheduled made TestSecureAcrossSpine see no frame).
type spineTap struct {
	fd     int
	ifidx  int
	frames [][]byte
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func newSpineTap(t *testing.T, sw *testbed.Switch, port testbed.Port) *spineTap {
	t.Helper()
	tp := &spineTap{ifidx: port.Ifindex}
	err := sw.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		tp.fd = fd
		// Room for every frame of the message the test watches.
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: port.Ifindex})
	})
	if err != nil {
		t.Fatalf("AF_PACKET socket on %s in %s: %v", port.Name, sw.Name, err)
	}
	t.Cleanup(func() { unix.Close(tp.fd) })
	return tp
}

// drain takes every frame queued on the tap's socket.
func (tp *spineTap) drain() {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(tp.fd, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		if len(tp.frames) < 100000 {
			tp.frames = append(tp.frames, bytes.Clone(buf[:n]))
		}
	}
}

// roce returns the decoded RoCE frames seen so far going to dst, with
// their raw bytes.
func (tp *spineTap) roce(dst *testbed.Host) ([]wire.Packet, [][]byte) {
	tp.drain()
	var ps []wire.Packet
	var raw [][]byte
	for _, f := range tp.frames {
		var p wire.Packet
		if wire.Decode(f, &p) == nil && p.IP.Dst == dst.IP {
			ps = append(ps, p)
			raw = append(raw, f)
		}
	}
	return ps, raw
}

func (tp *spineTap) contains(b []byte) bool {
	tp.drain()
	for _, f := range tp.frames {
		if bytes.Contains(f, b) {
			return true
		}
	}
	return false
}

func (tp *spineTap) inject(t *testing.T, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		if err := unix.Sendto(tp.fd, f, 0, &unix.SockaddrLinklayer{Ifindex: tp.ifidx, Halen: 6, Addr: [8]byte(append(f[:6:6], 0, 0))}); err != nil {
			t.Fatalf("inject: %v", err)
		}
	}
}

// qpStats waits until ok holds for c's counters, and fails the test if it
// never does.
func qpStats(t *testing.T, c *spray.Conn, what string, ok func(transport.QPStats) bool) transport.QPStats {
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
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSecureAcrossSpine puts an attacker in the spine of leafspine:1x2x1,
// on the path between a dialer on one leaf and a listener on the other,
// reading and injecting frames with AF_PACKET. Against a clear connection
// it reads a payload and fails the listener's QP with a WRITE under a
// wrong key; against a secured one (a pre-shared key) the payload is in
// no frame, the forged WRITE and every replayed frame are dropped and
// counted before they reach the QP, and the connection then moves
// messages, a WRITE and a READ intact (SHA-256). Root only.
func TestSecureAcrossSpine(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	f := fabric(t, "leafspine:1x2x1")
	a, b := f.Host(0, 0), f.Host(1, 0)
	psk := []byte("a pre-shared key for the testbed")
	marker := []byte("a secret that must not cross the spine in clear")
	r := testutil.Rand(t)
	for _, secured := range []bool{false, true} {
		name := "clear"
		if secured {
			name = "secured"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tap := newSpineTap(t, f.Spines[0], f.Spines[0].Ports[1])
			var sec *spray.Security
			if secured {
				sec = &spray.Security{PSK: psk}
			}
			_, eb, ca, cb := securedPair(ctx, t, a, b, sec)
			want := spray.ProtectionClear
			if secured {
				want = spray.ProtectionEncrypted
			}
			if ca.Protection() != want || cb.Protection() != want {
				t.Fatalf("protection %v and %v, want %v", ca.Protection(), cb.Protection(), want)
			}
			msg := append(randomBytes(r, 8<<10), marker...)
			if err := sendRecv(ctx, ca, cb, [][]byte{msg}); err != nil {
				t.Fatal(err)
			}
			ps, raw := tap.roce(b)
			if len(ps) == 0 {
				t.Fatal("the tap saw no RoCE frame towards the listener")
			}
			if got := tap.contains(marker); got == secured {
				t.Fatalf("the payload seen on the spine: %v, want %v", got, !secured)
			}

			// A WRITE under a wrong key, at a PSN inside the listener's
			// window and under the next message ID, read off the frames.
			last := ps[0]
			for _, p := range ps {
				if p.BTH.Opcode == wire.OpSprayData && p.BTH.PSN >= last.BTH.PSN {
					last = p
				}
			}
			payload := []byte("spoofed payload")
			forged := wire.Packet{Eth: last.Eth, IP: wire.IP{Src: a.IP, Dst: b.IP, TTL: 63},
				UDP:  wire.UDP{Src: 0xC001, Dst: wire.UDPPort},
				BTH:  wire.BTH{Opcode: wire.OpSprayData, PSN: (last.BTH.PSN + 5) & 0xFFFFFF, DestQP: cb.Info().QPN, PKey: 0xFFFF},
				Data: wire.Data{Kind: wire.KindWrite, MsgID: last.Data.MsgID + 1, MsgLen: uint32(len(payload)), TxTime: 1},
				RETH: wire.RETH{VA: 0xDEAD0000, RKey: 0xBAD, Len: uint32(len(payload))}}
			buf := make([]byte, 2048)
			n, err := wire.Encode(buf, &forged, payload)
			if err != nil {
				t.Fatal(err)
			}
			tap.inject(t, buf[:n])
			if !secured {
				qpStats(t, cb, "the listener's QP failing on the forged WRITE", func(s transport.QPStats) bool { return s.RemoteAccessErrors == 1 })
				return
			}
			st := qpStats(t, cb, "the forged WRITE dropped", func(s transport.QPStats) bool { return s.Security.Unsecured == 1 })
			if st.RemoteAccessErrors != 0 {
				t.Fatalf("the forged WRITE reached the QP: %d remote access errors", st.RemoteAccessErrors)
			}
			before := st.Security.Replayed + st.Security.TooOld
			tap.inject(t, raw...)
			st = qpStats(t, cb, "the replayed frames dropped", func(s transport.QPStats) bool {
				return s.Security.Replayed+s.Security.TooOld-before == uint64(len(raw))
			})
			if st.Security.BadTag != 0 || st.Security.Unsecured != 1 {
				t.Fatalf("replayed frames counted as forged: %+v", st.Security)
			}
			t.Logf("%d frames replayed and dropped: %+v", len(raw), st.Security)
			useConn(ctx, t, r, eb, ca, cb)
		})
	}
}

// securedPair opens raw-link endpoints with sec on hosts a and b, listens
// on b and dials from a.
func securedPair(ctx context.Context, t *testing.T, a, b *testbed.Host, sec *spray.Security) (ea, eb *spray.Endpoint, ca, cb *spray.Conn) {
	t.Helper()
	seed := testutil.Seed(t)
	open := func(h *testbed.Host, seed uint64) *spray.Endpoint {
		var ep *spray.Endpoint
		err := h.Do(func() (err error) {
			ep, err = spray.Open(ctx, spray.Options{Interface: h.Link, Link: spray.LinkRaw, Security: sec,
				Transport: transport.Config{Seed: seed}, Logf: t.Logf})
			return err
		})
		if err != nil {
			t.Fatalf("open in %s: %v", h.Name, err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	eb, ea = open(b, seed), open(a, seed+1)
	var ln *spray.Listener
	if err := b.Do(func() (err error) { ln, err = eb.Listen("sec"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan *spray.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- c
	}()
	if err := a.Do(func() (err error) { ca, err = ea.Dial(ctx, ln.Addr(), "sec"); return err }); err != nil {
		t.Fatal(fmt.Errorf("dial %s from %s: %w", ln.Addr(), a.Name, err))
	}
	if cb = <-accepted; cb == nil {
		t.FailNow()
	}
	return ea, eb, ca, cb
}
