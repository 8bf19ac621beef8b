package cm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/rss"
	"github.com/sprayfabric/spray/transport"
)

// noRSS hides a multi-queue port's RSS configuration: a device whose RSS
// the endpoint cannot read (four engines, no steering to offer).
type noRSS struct{ link.Multi }

// multiEndpoint opens an Endpoint on a new 4-queue port of fab (four
// engines), whose RSS it knows unless hide.
func multiEndpoint(t *testing.T, fab *mem.Fabric, mac [6]byte, ip netip.Addr, seed uint64, hide bool) *Endpoint {
	t.Helper()
	mp, err := fab.NewMultiPort(mac, ip, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	var l link.Link = mp
	if hide {
		l = noRSS{mp}
	}
	ep, err := NewEndpoint(l, Options{
		CMAddr:       "127.0.0.1:0",
		TrustPeerIP:  true,
		CloseTimeout: 10 * time.Second,
		Transport:    transport.Config{Seed: seed, MaxRetries: 50},
		Logf:         t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	if ep.Engines() != 4 {
		t.Fatalf("%d engines, want 4", ep.Engines())
	}
	return ep
}

// handOvers returns the frames ep's engines handed over to each other.
func handOvers(t *testing.T, ep *Endpoint) uint64 {
	t.Helper()
	st, err := ep.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.HandedOver
}

// dialTransfer has a dial b's service, moves messages both ways, checked
// by SHA-256, and closes the connection.
func dialTransfer(t *testing.T, a, b *Endpoint, seed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := b.Listen("steer")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ca, err := a.Dial(ctx, ln.Addr(), "steer")
	if err != nil {
		t.Fatal(err)
	}
	cb, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := min(a.cmTop(), b.cmTop()); ca.ver != want || cb.ver != want {
		t.Fatalf("the connection speaks versions %d and %d, want %d", ca.ver, cb.ver, want)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	if err := exchange(ctx, ca, cb, testutil.RandomMessages(r, 16, 128<<10)); err != nil {
		t.Fatalf("dialer to listener: %v", err)
	}
	if err := exchange(ctx, cb, ca, testutil.RandomMessages(r, 16, 128<<10)); err != nil {
		t.Fatalf("listener to dialer: %v", err)
	}
	ca.Close()
	cb.Close()
}

// Two endpoints with four engines each and RSS set up connections whose
// frames land on their QPs' engines in both directions: the handshake
// (version 2 and later) carries each side's key, table and queue, the
// listener creates its QP steered, the dialer steers its own on the
// reply. With a version-2 peer on either side the connection agrees on version 2 and is steered all the same;
// with a listener that speaks version 1 only, the dialer falls back to
// version 1: the transfer still works, without steering (frames handed
// over).
func TestCMSteering(t *testing.T) {
	seed := testutil.Seed(t)
	for _, tc := range []struct {
		name           string
		dialer, lister uint8 // the highest version each speaks (0: this one's)
		steer          bool
	}{
		{"this version", 0, 0, true},
		{"version-3 listener", 0, cmVersion3, true},
		{"version-2 listener", 0, cmVersion2, true},
		{"version-2 dialer", cmVersion2, 0, true},
		{"version-1 listener", 0, cmVersion1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 5 * time.Microsecond}, clock.NewSystem())
			t.Cleanup(func() { fab.Close() })
			ea := multiEndpoint(t, fab, macA, ipA, seed, false)
			eb := multiEndpoint(t, fab, macB, ipB, seed+1, false)
			ea.cmv, eb.cmv = tc.dialer, tc.lister
			dialTransfer(t, ea, eb, seed)
			ha, hb := handOvers(t, ea), handOvers(t, eb)
			t.Logf("hand-overs: dialer %d, listener %d", ha, hb)
			if tc.steer && (ha != 0 || hb != 0) {
				t.Fatalf("steered connection: %d and %d frames handed over, want none", ha, hb)
			}
			if !tc.steer && (ha == 0 || hb == 0) {
				t.Fatalf("unsteered connection: %d and %d frames handed over, want some on both", ha, hb)
			}
		})
	}
}

// When only one side knows its RSS (the other's device has none, or its
// endpoint runs one engine), the frames towards it land on its QP's
// engine and those towards the other are handed over, whichever side
// dials; nothing else changes.
func TestCMSteeringOneSide(t *testing.T) {
	seed := testutil.Seed(t)
	for _, dialerRSS := range []bool{true, false} {
		t.Run(fmt.Sprintf("dialer RSS %v", dialerRSS), func(t *testing.T) {
			fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 5 * time.Microsecond}, clock.NewSystem())
			t.Cleanup(func() { fab.Close() })
			ea := multiEndpoint(t, fab, macA, ipA, seed, !dialerRSS)
			eb := multiEndpoint(t, fab, macB, ipB, seed+1, dialerRSS)
			dialTransfer(t, ea, eb, seed)
			withRSS, without := ea, eb
			if !dialerRSS {
				withRSS, without = eb, ea
			}
			if n := handOvers(t, withRSS); n != 0 {
				t.Fatalf("the side with RSS handed %d frames over", n)
			}
			if n := handOvers(t, without); n == 0 {
				t.Fatal("the side without RSS handed nothing over")
			}
		})
	}
}

// v1QPInfo is a version-1 QP description, written out by hand: QPN, PSN,
// MAC, address length and IPv4 address.
func v1QPInfo(q transport.QPInfo) []byte {
	b := binary.BigEndian.AppendUint32(nil, q.QPN)
	b = binary.BigEndian.AppendUint32(b, q.PSN)
	b = append(b, q.MAC[:]...)
	ip := q.IP.As4()
	return append(append(b, 4), ip[:]...)
}

// readV1QPInfo reads a version-1 QP description by hand.
func readV1QPInfo(b []byte) (transport.QPInfo, error) {
	if len(b) != 19 || b[14] != 4 {
		return transport.QPInfo{}, fmt.Errorf("QP info %x", b)
	}
	q := transport.QPInfo{QPN: binary.BigEndian.Uint32(b), PSN: binary.BigEndian.Uint32(b[4:]), IP: netip.AddrFrom4([4]byte(b[15:19]))}
	copy(q.MAC[:], b[8:14])
	return q, nil
}

// v1Msg is a version-1 message: header, body.
func v1Msg(typ uint8, body []byte) []byte {
	return append([]byte{'S', 'P', 'C', 'M', 1, typ, byte(len(body) >> 8), byte(len(body))}, body...)
}

// readV1 reads one message that must be of version 1 and type typ, with
// a body of at most 512 bytes.
func readV1(c net.Conn, typ uint8) ([]byte, error) {
	var h [8]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(h[6:]))
	if string(h[:4]) != "SPCM" || h[4] != 1 || h[5] != typ || n > 512 {
		return nil, fmt.Errorf("header %x, want version 1, type %d", h, typ)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

// bothWays sends a message each way between a connection-manager Conn and
// a transport Conn and checks them by SHA-256.
func bothWays(ctx context.Context, c *Conn, q *transport.Conn, r *rand.Rand) error {
	msgs := testutil.RandomMessages(r, 2, 64<<10)
	errc := make(chan error, 1)
	go func() { errc <- c.Send(ctx, msgs[0]) }()
	m, err := q.Recv(ctx)
	if err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return err
	}
	if sha256.Sum256(m.Data) != sha256.Sum256(msgs[0]) {
		return errors.New("message to the version-1 peer corrupted")
	}
	go func() { errc <- q.Send(ctx, msgs[1]) }()
	if m, err = c.Recv(ctx); err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return err
	}
	if sha256.Sum256(m.Data) != sha256.Sum256(msgs[1]) {
		return errors.New("message from the version-1 peer corrupted")
	}
	return nil
}

// A version-1 peer, its side of the protocol written out by hand, works
// with this side both ways. As listener, it rejects the version-2
// request as version 1 does (as another version, or as malformed when a
// large RSS table makes the body exceed 512 bytes); Dial then asks again
// in version 1 on a new TCP connection, and every later message of the
// connection (RTU, DREQ) is in version 1. As dialer, its version-1 request gets a version-1
// reply of exactly version 1's layout, and a DREQ a version-1 DREP.
func TestCMVersion1Peer(t *testing.T) {
	seed := testutil.Seed(t)
	r := rand.New(rand.NewPCG(seed, 2))
	fab, ea, eb := memPair(t, mem.Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A dialer with a large RSS table sends a request beyond version 1's
	// bound, which a version-1 listener refuses as malformed, not as
	// another version: Dial falls back all the same.
	bigTab := rss.Spread(4, 1024, nil)
	mp, err := fab.NewMultiPort([6]byte{2, 0, 0, 0, 0, 3}, netip.MustParseAddr("10.9.0.3"), 4, &bigTab)
	if err != nil {
		t.Fatal(err)
	}
	big, err := NewEndpoint(mp, Options{CMAddr: "127.0.0.1:0", TrustPeerIP: true, CloseTimeout: 10 * time.Second, Transport: transport.Config{Seed: seed + 2, MaxRetries: 50}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	for _, dialer := range []*Endpoint{ea, big} {
		t.Run(fmt.Sprintf("listener, %d engines", dialer.Engines()), func(t *testing.T) {
			v1Listener(t, ctx, dialer, eb, r)
		})
	}

	t.Run("dialer", func(t *testing.T) {
		ln, err := eb.Listen("svc")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		tc, err := net.Dial("tcp", ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(time.Minute))
		q, err := ea.Endpoint.CreateQP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := append([]byte{byte(eb.cfg.Profile)}, v1QPInfo(q.Info())...)
		req = append(append(req, 3), "svc"...)
		tc.Write(v1Msg(msgREQ, req))
		body, err := readV1(tc, msgREP)
		if err != nil {
			t.Fatalf("reply to a version-1 request: %v", err)
		}
		remote, err := readV1QPInfo(body)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(ctx, remote); err != nil {
			t.Fatal(err)
		}
		tc.Write(v1Msg(msgRTU, nil))
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := bothWays(ctx, c, q, r); err != nil {
			t.Fatal(err)
		}
		tc.Write(v1Msg(msgDREQ, nil))
		if b, err := readV1(tc, msgDREP); err != nil || len(b) != 0 {
			t.Fatalf("answer to a version-1 DREQ: %x, %v", b, err)
		}
		<-c.Done()
		if _, err := c.Recv(ctx); !errors.Is(err, io.EOF) && !errors.Is(err, ErrPeerClosed) {
			t.Fatalf("Recv after the peer's DREQ: %v", err)
		}
		q.Destroy(ctx)
		if qps(t, eb) != 0 {
			t.Fatalf("listener QPs left: %d", qps(t, eb))
		}
	})

	// The same with real endpoints, one of them made a version-1 peer.
	t.Run("endpoints", func(t *testing.T) {
		for _, v1Dialer := range []bool{true, false} {
			_, a, b := memPair(t, mem.Config{Seed: seed})
			if v1Dialer {
				a.cmv = cmVersion1
			} else {
				b.cmv = cmVersion1
			}
			dialTransfer(t, a, b, seed)
		}
	})
}

// v1Listener has dialer Dial a version-1 listener written out by hand,
// whose QPs are on peer's transport endpoint, moves a message each way
// and closes the connection.
func v1Listener(t *testing.T, ctx context.Context, dialer, peer *Endpoint, r *rand.Rand) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	type result struct {
		q   *transport.Conn
		c   net.Conn
		err error
	}
	got := make(chan result, 1)
	go func() {
		p, err := func() (result, error) {
			// Version 1's listener: a header of another version is
			// refused as such, unless its body exceeds 512 bytes, which
			// is refused as malformed before the version is looked at;
			// either REJ names version 1.
			c1, err := tl.Accept()
			if err != nil {
				return result{}, err
			}
			defer c1.Close()
			var h [8]byte
			if _, err := io.ReadFull(c1, h[:]); err != nil || h[4] != cmVersion {
				return result{}, fmt.Errorf("first request: header %x, %v; want version 2", h, err)
			}
			reason, text := uint8(rejVersion), "version 2 not supported"
			if n := binary.BigEndian.Uint16(h[6:]); n > 512 {
				reason, text = rejBadRequest, fmt.Sprintf("malformed connection message: body of %d bytes", n)
			} else if _, err := io.ReadFull(c1, make([]byte, n)); err != nil {
				return result{}, err
			}
			c1.Write(v1Msg(msgREJ, append([]byte{reason, 1, byte(len(text))}, text...)))
			c2, err := tl.Accept()
			if err != nil {
				return result{}, err
			}
			body, err := readV1(c2, msgREQ)
			if err != nil {
				return result{c: c2}, err
			}
			// profile, QP info (19 bytes), service length, service
			if len(body) != 1+19+1+len("svc") || body[0] != byte(dialer.cfg.Profile) || string(body[21:]) != "svc" {
				return result{c: c2}, fmt.Errorf("version-1 request %x", body)
			}
			remote, err := readV1QPInfo(body[1:20])
			if err != nil {
				return result{c: c2}, err
			}
			q, err := peer.Endpoint.CreateQP(ctx)
			if err != nil {
				return result{c: c2}, err
			}
			if err := q.Connect(ctx, remote); err != nil {
				return result{c: c2}, err
			}
			c2.Write(v1Msg(msgREP, v1QPInfo(q.Info())))
			if _, err := readV1(c2, msgRTU); err != nil {
				return result{c: c2}, err
			}
			return result{q: q, c: c2}, nil
		}()
		p.err = err
		got <- p
	}()
	c, err := dialer.Dial(ctx, tl.Addr().String(), "svc")
	if err != nil {
		t.Fatalf("Dial to a version-1 listener: %v", err)
	}
	p := <-got
	if p.err != nil {
		t.Fatal(p.err)
	}
	defer p.c.Close()
	if err := bothWays(ctx, c, p.q, r); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		_, err := readV1(p.c, msgDREQ)
		if err == nil {
			p.q.Destroy(ctx)
			_, err = p.c.Write(v1Msg(msgDREP, nil))
		}
		closed <- err
	}()
	c.Close()
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	if qps(t, dialer) != 0 {
		t.Fatalf("dialer QPs left: %d", qps(t, dialer))
	}
}
