package spray_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/nexthop"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// routed is a link that follows next hops (AF_XDP and raw links do).
type routed interface{ NextHops() *nexthop.Table }

// fabric builds a leaf-spine testbed, or skips without root.
func fabric(t *testing.T, spec string) *testbed.Fabric {
	t.Helper()
	testutil.SkipIfNotRoot(t)
	cfg, err := testbed.ParseLeafSpine(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := testbed.NewLeafSpine(ctx, cfg)
	if err != nil {
		t.Fatalf("%s: %v", spec, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// routedPair opens an endpoint of kind and profile on each host, listens
// on b and dials from a, each call in its host's namespace.
func routedPair(ctx context.Context, t *testing.T, a, b *testbed.Host, kind spray.LinkKind, prof transport.Profile, tc transport.Config) (ea, eb *spray.Endpoint, ca, cb *spray.Conn) {
	t.Helper()
	open := func(h *testbed.Host, seed uint64) *spray.Endpoint {
		var ep *spray.Endpoint
		err := h.Do(func() error {
			var err error
			c := tc
			c.Seed = seed
			ep, err = spray.Open(ctx, spray.Options{Interface: h.Link, Link: kind, Profile: prof, Transport: c, Logf: t.Logf})
			return err
		})
		if err != nil {
			t.Fatalf("open %s link in %s: %v", kind, h.Name, err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	seed := testutil.Seed(t)
	eb = open(b, seed)
	ea = open(a, seed+1)
	var ln *spray.Listener
	if err := b.Do(func() (err error) { ln, err = eb.Listen("rt"); return err }); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *spray.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- c
	}()
	if err := a.Do(func() (err error) { ca, err = ea.Dial(ctx, ln.Addr(), "rt"); return err }); err != nil {
		t.Fatalf("dial %s from %s: %v", ln.Addr(), a.Name, err)
	}
	if cb = <-accepted; cb == nil {
		t.FailNow()
	}
	return ea, eb, ca, cb
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// sendRecv sends msgs from a and checks that b receives them intact.
func sendRecv(ctx context.Context, a, b *spray.Conn, msgs [][]byte) error {
	errc := make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if err := a.Send(ctx, m); err != nil {
				errc <- fmt.Errorf("send: %w", err)
				return
			}
		}
		errc <- nil
	}()
	for i, want := range msgs {
		got, err := b.Recv(ctx)
		if err != nil {
			return fmt.Errorf("recv %d: %w", i, err)
		}
		if sha256.Sum256(got.Data) != sha256.Sum256(want) {
			return fmt.Errorf("message %d: %d bytes, want %d, contents differ", i, len(got.Data), len(want))
		}
	}
	return <-errc
}

// useConn moves data over a connection the ways a user does: messages
// both ways, an RDMA WRITE into and an RDMA READ from a region of the
// acceptor, every byte checked by SHA-256; then the dialer closes and the
// acceptor sees the end.
func useConn(ctx context.Context, t *testing.T, r *rand.Rand, eb *spray.Endpoint, ca, cb *spray.Conn) {
	t.Helper()
	msgs := func() [][]byte {
		ms := make([][]byte, 6)
		for i := range ms {
			ms[i] = randomBytes(r, r.IntN(96<<10)+1)
		}
		return ms
	}
	if err := sendRecv(ctx, ca, cb, msgs()); err != nil {
		t.Fatalf("dialer to acceptor: %v", err)
	}
	if err := sendRecv(ctx, cb, ca, msgs()); err != nil {
		t.Fatalf("acceptor to dialer: %v", err)
	}

	// WRITE into the acceptor's region, named in a message.
	dst := make([]byte, 300<<10)
	mw, err := eb.Register(ctx, dst, transport.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	src := randomBytes(r, len(dst))
	readable := randomBytes(r, 200<<10)
	mr, err := eb.Register(ctx, readable, transport.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.Send(ctx, spray.AppendRemote(spray.AppendRemote(nil, mw.Remote(0)), mr.Remote(0))); err != nil {
		t.Fatal(err)
	}
	m, err := ca.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := len(spray.AppendRemote(nil, transport.Remote{}))
	if len(m.Data) != 2*n {
		t.Fatalf("regions message of %d bytes, want %d", len(m.Data), 2*n)
	}
	to, err := spray.ParseRemote(m.Data[:n])
	if err != nil {
		t.Fatal(err)
	}
	from, err := spray.ParseRemote(m.Data[n:])
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(ctx, src, to); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := ca.Send(ctx, []byte("written")); err != nil {
		t.Fatal(err)
	}
	if m, err := cb.Recv(ctx); err != nil || string(m.Data) != "written" {
		t.Fatalf("recv after write: %q, %v", m.Data, err)
	}
	if sha256.Sum256(dst) != sha256.Sum256(src) {
		t.Fatalf("RDMA WRITE of %d bytes arrived changed", len(src))
	}
	got := make([]byte, len(readable))
	if err := ca.Read(ctx, got, from); err != nil {
		t.Fatalf("read: %v", err)
	}
	if sha256.Sum256(got) != sha256.Sum256(readable) {
		t.Fatalf("RDMA READ of %d bytes arrived changed", len(got))
	}

	if err := ca.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := cb.Recv(ctx); err != io.EOF {
		t.Fatalf("acceptor's Recv after the dialer closed: %v, want io.EOF", err)
	}
	if err := ca.Send(ctx, []byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Send after Close: %v, want net.ErrClosed", err)
	}
}

// gatewayMAC returns the MAC address of h's default gateway, from h's
// neighbour table.
func gatewayMAC(t *testing.T, h *testbed.Host) (netip.Addr, [6]byte) {
	t.Helper()
	var gw netip.Addr
	var mac [6]byte
	err := h.Do(func() error {
		rs, err := netlink.RouteGet(net.IPv4(1, 1, 1, 1))
		if err != nil || len(rs) == 0 {
			return fmt.Errorf("no default route: %v", err)
		}
		gw, _ = netip.AddrFromSlice(rs[0].Gw.To4())
		ns, err := netlink.NeighList(h.Ifindex, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if a, _ := netip.AddrFromSlice(n.IP.To4()); a == gw && len(n.HardwareAddr) == 6 {
				copy(mac[:], n.HardwareAddr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return gw, mac
}

// TestAcrossRouters connects hosts on different leaves (and, on 2x2x2,
// two hosts of one leaf, which the leaf routes between too) over AF_XDP
// and raw links, in both profiles, and uses every operation of a Conn:
// the links must address frames to the leaf, not to the peer, whose MAC
// the handshake carried. Root only.
func TestAcrossRouters(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	r := testutil.Rand(t)
	for _, spec := range []string{"leafspine:1x2x1", "leafspine:2x2x2"} {
		t.Run(spec, func(t *testing.T) {
			f := fabric(t, spec)
			pairs := [][2]*testbed.Host{{f.Host(0, 0), f.Host(1, 0)}}
			if f.Config.Hosts > 1 {
				pairs = [][2]*testbed.Host{{f.Host(0, 0), f.Host(1, 1)}, {f.Host(0, 1), f.Host(0, 0)}}
			}
			for _, kind := range []spray.LinkKind{spray.LinkXDP, spray.LinkRaw} {
				for _, prof := range []transport.Profile{transport.Spray, transport.RoCE} {
					for _, p := range pairs {
						a, b := p[0], p[1]
						t.Run(fmt.Sprintf("%s/%s/%s-%s", kind, prof, a.Name[len(f.Prefix):], b.Name[len(f.Prefix):]), func(t *testing.T) {
							ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
							defer cancel()
							ea, eb, ca, cb := routedPair(ctx, t, a, b, kind, prof, transport.Config{})
							useConn(ctx, t, r, eb, ca, cb)
							_, gwMAC := gatewayMAC(t, a)
							nh, ok := ea.Endpoint.Link().(routed)
							if !ok || nh.NextHops() == nil {
								t.Fatalf("%T follows no next hops", ea.Endpoint.Link())
							}
							if mac, ok := nh.NextHops().Lookup(b.IP); !ok || mac != gwMAC || mac == b.MAC {
								t.Fatalf("frames to %v go to %x (%v); the leaf is %x, the peer %x", b.IP, mac, ok, gwMAC, b.MAC)
							}
						})
					}
				}
			}
		})
	}
}

// TestNextHopChanges changes the MAC address of the dialer's leaf port
// in the middle of a connection, twice, without the leaf announcing it:
// once with the dialer's neighbour entry for the leaf flushed (as when it
// fails), once silently, with short neighbour timers, so that the entry
// fails when the kernel probes the old address and the link has it
// resolved again. Traffic resumes each time, to the new MAC. Root only.
// (TestConfirmStale guards the confirmation of STALE entries, which this
// setup's kernel traffic makes moot.)
func TestNextHopChanges(t *testing.T) {
	f := fabric(t, "leafspine:1x2x1")
	a, b, leaf := f.Host(0, 0), f.Host(1, 0), f.Leaves[0]
	// Short neighbour timers on the dialer's interface.
	err := a.Do(func() error {
		for k, v := range map[string]string{"base_reachable_time_ms": "500", "delay_first_probe_time": "1",
			"retrans_time_ms": "100", "ucast_solicit": "2"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/neigh/"+a.Link+"/"+k, []byte(v), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A budget of retransmissions that outlasts the kernel's resolution.
	tc := transport.Config{MaxRTO: 500 * time.Millisecond, MaxRetries: 60}
	ea, _, ca, cb := routedPair(ctx, t, a, b, spray.LinkXDP, transport.Spray, tc)
	nh := ea.Endpoint.Link().(routed).NextHops()
	r := testutil.Rand(t)
	send := func(what string) {
		t.Helper()
		if err := sendRecv(ctx, ca, cb, [][]byte{randomBytes(r, 64<<10), randomBytes(r, 1000)}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	send("before")
	gw, _ := gatewayMAC(t, a)
	port := leaf.Ports[0]
	for i, how := range []string{"flushed", "silent"} {
		newMAC := [6]byte{0x02, 0x72, 0x74, 0, 0, byte(i + 1)}
		before := nh.Stats().Changes
		err := leaf.Do(func() error {
			l, err := netlink.LinkByIndex(port.Ifindex)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetHardwareAddr(l, newMAC[:]); err != nil {
				return err
			}
			// A leaf that had to resolve the dialer again would tell it
			// its new MAC in its ARP request: it knows the dialer.
			return netlink.NeighSet(&netlink.Neigh{LinkIndex: port.Ifindex, IP: a.IP.AsSlice(),
				HardwareAddr: a.MAC[:], State: netlink.NUD_PERMANENT})
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, mac := gatewayMAC(t, a); mac == newMAC {
			t.Fatalf("%s: the dialer learnt the leaf's new MAC before any test of it", how)
		}
		if how == "flushed" {
			err = a.Do(func() error {
				return netlink.NeighDel(&netlink.Neigh{LinkIndex: a.Ifindex, IP: gw.AsSlice()})
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		send(how)
		if mac, ok := nh.Lookup(b.IP); !ok || mac != newMAC {
			t.Fatalf("%s: frames to %v go to %x (%v), want the leaf's new %x", how, b.IP, mac, ok, newMAC)
		}
		if st := nh.Stats(); st.Changes <= before {
			t.Fatalf("%s: next hop changes %d, were %d", how, st.Changes, before)
		}
	}
}

// TestOpenLinkKeepDstMAC: OpenLink's AF_XDP and raw links follow next
// hops unless LinkConfig.KeepDstMAC. Root only.
func TestOpenLinkKeepDstMAC(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	for _, kind := range []spray.LinkKind{spray.LinkXDP, spray.LinkRaw} {
		for _, keep := range []bool{false, true} {
			err := p.A.Do(func() error {
				ifc, err := spray.LookupInterface(p.A.Link, netip.Addr{})
				if err != nil {
					return err
				}
				l, _, _, err := spray.OpenLink(spray.LinkConfig{Kind: kind, Interface: ifc, KeepDstMAC: keep, Logf: t.Logf})
				if err != nil {
					return err
				}
				defer l.Close()
				if nh, ok := l.(routed); !ok || (nh.NextHops() == nil) != keep {
					return fmt.Errorf("%T follows next hops: %v", l, ok && nh.NextHops() != nil)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s, KeepDstMAC %v: %v", kind, keep, err)
			}
		}
	}
}
