package spray_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/xdp"
)

// TestOpenLinkUDP: the explicit settings a benchmark passes (source
// ports, receive and peer ports, frame size) reach the UDP link, and
// LinkAuto on loopback picks UDP and says why.
func TestOpenLinkUDP(t *testing.T) {
	r := testutil.Rand(t)
	b, c := testutil.LoopbackNet(r)
	ip := netip.AddrFrom4([4]byte{127, b, c, 9})
	base := uint16(20000 + r.IntN(30000))
	ents := []uint16{base + 1, base + 2, base + 3}
	ifc := spray.Interface{IP: ip, Loopback: true, MTU: 65536}
	l, kind, why, err := spray.OpenLink(spray.LinkConfig{Kind: spray.LinkUDP, Interface: ifc,
		FrameSize: 2000, Port: base, PeerPort: base + 10, Entropies: ents})
	if err != nil {
		t.Fatal(err)
	}
	info := l.Info()
	l.Close()
	if kind != spray.LinkUDP || why != "asked for" || info.FrameSize != 2000 || info.IP != ip {
		t.Fatalf("UDP link: %v %q, %+v", kind, why, info)
	}
	for _, p := range ents {
		if !slices.Contains(info.Ports, p) {
			t.Fatalf("Info().Ports %v lacks the entropy %d", info.Ports, p)
		}
	}
	l, kind, why, err = spray.OpenLink(spray.LinkConfig{Interface: ifc, Port: base}) // MTU: 1500 of lo's 65536
	if err != nil {
		t.Fatal(err)
	}
	info = l.Info()
	l.Close()
	if kind != spray.LinkUDP || why != "loopback interface" || info.FrameSize != 1514 {
		t.Fatalf("LinkAuto on loopback: %v %q, frames of %d", kind, why, info.FrameSize)
	}
	if _, _, _, err := spray.OpenLink(spray.LinkConfig{Kind: spray.LinkUDP}); !errors.Is(err, spray.ErrOptions) {
		t.Fatalf("OpenLink without an address: %v, want ErrOptions", err)
	}
}

func TestParseLinkKind(t *testing.T) {
	for _, k := range []spray.LinkKind{spray.LinkAuto, spray.LinkXDP, spray.LinkUDP, spray.LinkRaw} {
		if got, err := spray.ParseLinkKind(k.String()); got != k || err != nil {
			t.Errorf("ParseLinkKind(%q) = %v, %v", k, got, err)
		}
	}
	if _, err := spray.ParseLinkKind("tcp"); !errors.Is(err, spray.ErrOptions) {
		t.Errorf("ParseLinkKind(tcp): %v, want ErrOptions", err)
	}
}

// TestOpenLinkNamespace opens AF_XDP links inside the two namespaces of a
// testbed, as the benchmarks do (the caller enters the namespace): LinkAuto
// picks AF_XDP, an explicit frame size and queue count are kept, the
// steering program refuses a peer outside Allow and steers one inside it,
// and a message crosses intact. Root only.
func TestOpenLinkNamespace(t *testing.T) {
	testutil.SkipIfNotRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := testbed.NewPair(ctx, testbed.PairConfig{MTU: 9000, Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	open := func(h *testbed.Host, cfg spray.LinkConfig) (l link.Link, kind spray.LinkKind, why string, err error) {
		err = h.Do(func() error {
			if !cfg.Interface.IP.IsValid() {
				if cfg.Interface, err = spray.LookupInterface(h.Link, netip.Addr{}); err != nil {
					return err
				}
			}
			l, kind, why, err = spray.OpenLink(cfg)
			return err
		})
		return l, kind, why, err
	}
	la, kind, why, err := open(p.A, spray.LinkConfig{Logf: t.Logf})
	if err == nil && kind != spray.LinkXDP {
		// LinkAuto fell back: only a kernel without AF_XDP excuses that.
		la.Close()
		lx, _, _, err := open(p.A, spray.LinkConfig{Kind: spray.LinkXDP, Logf: t.Logf})
		testutil.SkipIfNotSupported(t, err, xdp.ErrNotSupported)
		lx.Close()
		t.Fatalf("LinkAuto in %s picked %v (%s), though an AF_XDP link opens there", p.A.Name, kind, why)
	}
	testutil.SkipIfNotSupported(t, err, xdp.ErrNotSupported)
	defer la.Close()
	if xl, ok := la.(*xdp.Link); !ok || len(xl.Served()) != 2 || la.Info().FrameSize != 9018 || why != "AF_XDP available" {
		t.Fatalf("LinkAuto in %s: %T %s (%q), frames of %d", p.A.Name, la, la.Info().Name, why, la.Info().FrameSize)
	}
	hostB := spray.Interface{Name: p.B.Link, Index: p.B.Ifindex, MAC: p.B.MAC, IP: p.B.IP}
	cfgB := spray.LinkConfig{Kind: spray.LinkXDP, Interface: hostB, FrameSize: p.B.MTU + 14, Queues: 1,
		Allow: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Logf: t.Logf}

	// A peer outside Allow: refused, and nothing arrives.
	lb, _, _, err := open(p.B, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	ea, eb, qa, _ := pairOver(ctx, t, la, lb)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	err = qa.Send(short, []byte("refused"))
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send to a peer that refuses us: %v", err)
	}
	steer, err := lb.(*xdp.Link).Steering().Counters()
	if err != nil || steer.Refused == 0 || steer.Steered != 0 {
		t.Fatalf("steering counters of a peer that refuses us: %+v, %v", steer, err)
	}
	eb.Close()
	ea.Close() // and the links

	// Allowed: a message crosses intact over links opened with explicit sizes.
	// A sends on its queue 0 only, which feeds B's queue 0.
	la, _, _, err = open(p.A, spray.LinkConfig{Kind: spray.LinkXDP, FrameSize: 9014, Queues: 1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if la.Info().FrameSize != 9014 || len(la.(*xdp.Link).Served()) != 1 {
		la.Close()
		t.Fatalf("explicit FrameSize and Queues: %s, frames of %d", la.Info().Name, la.Info().FrameSize)
	}
	cfgB.Allow, cfgB.Queues = []netip.Addr{p.A.IP}, 0
	lb, _, _, err = open(p.B, cfgB)
	if err != nil {
		la.Close()
		t.Fatal(err)
	}
	ea, eb, qa, qb := pairOver(ctx, t, la, lb)
	defer ea.Close()
	defer eb.Close()
	msg := make([]byte, 1<<20)
	r := testutil.Rand(t)
	for i := range msg {
		msg[i] = byte(r.Uint32())
	}
	if err := qa.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	m, err := qb.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(m.Data) != sha256.Sum256(msg) {
		t.Fatalf("message of %d bytes arrived changed (%d bytes)", len(msg), len(m.Data))
	}
	if steer, err := lb.(*xdp.Link).Steering().Counters(); err != nil || steer.Steered == 0 || steer.Refused != 0 {
		t.Fatalf("steering counters of an allowed peer: %+v, %v", steer, err)
	}
}

// pairOver starts an endpoint on each link and connects a QP on each.
func pairOver(ctx context.Context, t *testing.T, la, lb link.Link) (ea, eb *transport.Endpoint, qa, qb *transport.Conn) {
	t.Helper()
	cfg := transport.Config{Seed: testutil.Seed(t), MTU: 9014}
	ea, err := transport.NewEndpoint(la, cfg)
	if err != nil {
		lb.Close()
		t.Fatal(err)
	}
	cfg.Seed++
	eb, err = transport.NewEndpoint(lb, cfg)
	if err != nil {
		ea.Close()
		t.Fatal(err)
	}
	if qa, err = ea.CreateQP(ctx); err == nil {
		qb, err = eb.CreateQP(ctx)
	}
	if err == nil {
		err = qa.Connect(ctx, qb.Info())
	}
	if err == nil {
		err = qb.Connect(ctx, qa.Info())
	}
	if err != nil {
		ea.Close()
		eb.Close()
		t.Fatal(err)
	}
	return ea, eb, qa, qb
}
