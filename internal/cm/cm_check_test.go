package cm

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// dialFails has a Dial b's service and checks that it fails with an
// error wrapping want and naming every one of names, leaving no QP on
// either side.
func dialFails(t *testing.T, a, b *Endpoint, addr string, want error, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := b.Listen("chk")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if addr == "" {
		addr = ln.Addr()
	}
	c, err := a.Dial(ctx, addr, "chk")
	if err == nil {
		c.Close()
		t.Fatalf("Dial succeeded, want an error wrapping %v naming %q", want, names)
	}
	if !errors.Is(err, want) {
		t.Fatalf("Dial: %v, want %v", err, want)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("Dial: %v, does not name %q", err, n)
		}
	}
	t.Logf("Dial: %v", err)
	if qps(t, a) != 0 || qps(t, b) != 0 {
		t.Fatalf("QPs left: %d and %d", qps(t, a), qps(t, b))
	}
}

// Endpoints whose links cannot exchange frames (kernel UDP against
// AF_XDP or AF_PACKET, whose frames carry the MAC a UDP link makes up)
// are refused at Dial, either way round, with both kinds named; AF_XDP
// and AF_PACKET, both raw frames, connect.
func TestCMLinkMismatch(t *testing.T) {
	seed := testutil.Seed(t)
	for _, k := range [][2]LinkKind{{LinkXDP, LinkUDP}, {LinkUDP, LinkRaw}} {
		t.Run(k[0].String()+"-"+k[1].String(), func(t *testing.T) {
			_, ea, eb := memPair(t, mem.Config{Seed: seed})
			ea.kind, eb.kind = k[0], k[1]
			dialFails(t, ea, eb, "", ErrIncompatible, "dialer's link is "+k[0].String(), "listener's "+k[1].String())
		})
	}
	_, ea, eb := memPair(t, mem.Config{Seed: seed})
	ea.kind, eb.kind = LinkXDP, LinkRaw
	dialTransfer(t, ea, eb, seed)
}

// loopbackPair opens two kernel UDP endpoints on a loopback network of
// their own, each with the options set gives it.
func loopbackPair(t *testing.T, setA, setB func(*Options)) (a, b *Endpoint) {
	t.Helper()
	r := testutil.Rand(t)
	n1, n2 := testutil.LoopbackNet(r)
	ctx := context.Background()
	var eps [2]*Endpoint
	for i, set := range []func(*Options){setA, setB} {
		o := Options{Addr: netip.AddrFrom4([4]byte{127, n1, n2, byte(i + 1)}), Link: LinkUDP, Logf: t.Logf}
		if set != nil {
			set(&o)
		}
		ep, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps[i] = ep
	}
	return eps[0], eps[1]
}

// Kernel UDP endpoints on loopback whose MTUs or UDP data ports differ
// are refused at Dial with both values named, instead of a transfer that
// fails seconds later (or a READ that never ends).
func TestCMLoopbackMismatch(t *testing.T) {
	t.Run("MTU", func(t *testing.T) {
		a, b := loopbackPair(t, func(o *Options) { o.MTU = 9000 }, func(o *Options) { o.MTU = 1500 })
		dialFails(t, a, b, "", ErrIncompatible, "MTU is 9000", "1500")
		dialFails(t, b, a, "", ErrIncompatible, "MTU is 1500", "9000")
	})
	t.Run("port", func(t *testing.T) {
		a, b := loopbackPair(t, nil, func(o *Options) { o.Port = 4792 })
		dialFails(t, a, b, "", ErrIncompatible, "UDP port 4791", "4792")
		dialFails(t, b, a, "", ErrIncompatible, "UDP port 4792", "4791")
	})
}

// A dialer whose request gives its QP an address other than the one its
// TCP connection comes from (a third host, a broadcast address) is
// refused with both addresses named, and a listener whose reply does so
// likewise; Options.TrustPeerIP lets the first through, never the
// broadcast address. Endpoints whose connection manager runs on their
// own address connect (TestOpenLoopback).
func TestCMPeerAddr(t *testing.T) {
	trusting, b := loopbackPair(t, func(o *Options) { o.TrustPeerIP = true }, nil)
	ln, err := b.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	lnT, err := trusting.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	victim := netip.MustParseAddr("192.0.2.7")
	ask := func(ln *Listener, ip netip.Addr) (cmMsg, error) {
		c, err := net.Dial("tcp", ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		req := connReq{qp: transport.QPInfo{QPN: 0x77, PSN: 1, MAC: macA, IP: ip}, service: "x"}
		c.Write(appendMsg(nil, msgREQ, req.marshal()))
		return readMsg(c)
	}
	for _, ip := range []netip.Addr{victim, netip.MustParseAddr("255.255.255.255")} {
		m, err := ask(ln, ip)
		if err != nil || m.typ != msgREJ {
			t.Fatalf("request for a QP at %s: %+v, %v, want a rejection", ip, m, err)
		}
		r, _ := parseRej(m.body)
		if e := r.err(); !errors.Is(e, ErrPeerAddr) || !strings.Contains(e.Error(), ip.String()) {
			t.Fatalf("request for a QP at %s: %v, want ErrPeerAddr naming it", ip, e)
		}
		t.Logf("%s: %v", ip, r.err())
	}
	if qps(t, b) != 0 {
		t.Fatalf("QPs left: %d", qps(t, b))
	}
	if m, err := ask(lnT, victim); err != nil || m.typ != msgREP {
		t.Fatalf("with TrustPeerIP: %+v, %v, want a reply", m, err)
	}
	if m, err := ask(lnT, netip.MustParseAddr("255.255.255.255")); err != nil || m.typ != msgREJ {
		t.Fatalf("broadcast with TrustPeerIP: %+v, %v, want a rejection", m, err)
	}

	// A listener, written out by hand, that names a third host's QP.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	got := make(chan uint8, 1)
	go func() {
		c, err := tl.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		m, err := readMsg(c)
		if err != nil {
			got <- 0
			return
		}
		rep := connRep{qp: transport.QPInfo{QPN: 0x88, PSN: 1, MAC: macB, IP: victim}}
		c.Write(appendMsgV(nil, m.version, msgREP, rep.marshalV(m.version)))
		m, _ = readMsg(c)
		got <- m.typ
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = b.Dial(ctx, tl.Addr().String(), "x")
	if !errors.Is(err, ErrPeerAddr) || !strings.Contains(err.Error(), victim.String()) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("Dial to a listener naming %s: %v, want ErrPeerAddr naming both addresses", victim, err)
	}
	if typ := <-got; typ != msgREJ {
		t.Fatalf("the listener got message type %d after its reply, want a rejection", typ)
	}
	if qps(t, b) != 0 {
		t.Fatalf("dialer QPs left: %d", qps(t, b))
	}
}

// A DREQ injected on the path of a clear connection closes the
// listener's side, which answers with a DREP; the dialer, which never
// asked, closes at once: Err says why, and Send fails at once with that
// error instead of timing out against a QP that is gone. Against a
// secured connection the same bytes are not a DREQ but a record that
// fails TLS: the listener's channel ends, and neither side believes
// it. Both Conns stay open and move messages both ways (SHA-256).
func TestCMInjectedDREQ(t *testing.T) {
	for _, sec := range []*Security{nil, {PSK: testPSK}} {
		name := "clear"
		if sec != nil {
			name = "secured"
		}
		t.Run(name, func(t *testing.T) {
			seed := testutil.Seed(t)
			_, ea, eb := secPair(t, seed, sec, sec)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := eb.Listen("x")
			if err != nil {
				t.Fatal(err)
			}
			p := newTapProxy(t, ln.Addr())
			a, b := connectVia(t, ea, eb, ln, p.addr())
			if err := exchange(ctx, a, b, [][]byte{[]byte("before")}); err != nil {
				t.Fatal(err)
			}
			p.inject(appendMsgV(nil, a.ver, msgDREQ, nil))
			if sec != nil {
				<-b.rdone // the listener's channel has ended
				if n := eb.CMStats().ChannelsCut; n != 1 {
					t.Fatalf("ChannelsCut %d, want 1", n)
				}
				r := rand.New(rand.NewPCG(seed, 3))
				if err := exchange(ctx, a, b, testutil.RandomMessages(r, 8, 64<<10)); err != nil {
					t.Fatalf("dialer to listener after the injection: %v", err)
				}
				if err := exchange(ctx, b, a, testutil.RandomMessages(r, 8, 64<<10)); err != nil {
					t.Fatalf("listener to dialer after the injection: %v", err)
				}
				if a.Err() != nil || b.Err() != nil {
					t.Fatalf("after the injection: Err %v and %v, want both open", a.Err(), b.Err())
				}
				a.Close()
				b.Close()
				if qps(t, ea) != 0 || qps(t, eb) != 0 {
					t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
				}
				return
			}
			<-b.Done()
			if b.Err() != ErrPeerClosed {
				t.Fatalf("listener's Err %v, want ErrPeerClosed", b.Err())
			}
			select {
			case <-a.Done():
			case <-ctx.Done():
				t.Fatalf("the dialer's Conn never closed (Err %v)", a.Err())
			}
			if err := a.Err(); !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "never sent") {
				t.Fatalf("dialer's Err %v, want ErrPeerGone saying it never sent a DREQ", err)
			}
			err = a.Send(ctx, []byte("after"))
			if !errors.Is(err, ErrPeerGone) || !errors.Is(err, net.ErrClosed) || errors.Is(err, transport.ErrPeerUnreachable) {
				t.Fatalf("Send after: %v, want the dialer's Err", err)
			}
			t.Logf("Send after the injection: %v", err)
			if qps(t, ea) != 0 || qps(t, eb) != 0 {
				t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
			}
		})
	}
}
