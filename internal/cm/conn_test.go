package cm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0, 1}
	macB = [6]byte{2, 0, 0, 0, 0, 2}
	ipA  = netip.MustParseAddr("10.9.0.1")
	ipB  = netip.MustParseAddr("10.9.0.2")
)

// memEndpoint opens an Endpoint on a new port of fab whose connection
// manager listens on a free loopback TCP port; each of set may change the
// options first.
func memEndpoint(t testing.TB, fab *mem.Fabric, mac [6]byte, ip netip.Addr, seed uint64, set ...func(*Options)) *Endpoint {
	t.Helper()
	p, err := fab.NewPort(mac, ip)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		CMAddr:       "127.0.0.1:0",
		TrustPeerIP:  true, // link/mem's addresses are not the host's
		CloseTimeout: 10 * time.Second,
		Transport:    transport.Config{Seed: seed, MinRTO: time.Millisecond, MaxRTO: 20 * time.Millisecond, MaxRetries: 10},
		Logf:         t.Logf,
	}
	for _, f := range set {
		f(&opts)
	}
	ep, err := NewEndpoint(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func memPair(t *testing.T, mc mem.Config) (*mem.Fabric, *Endpoint, *Endpoint) {
	t.Helper()
	fab := mem.NewFabric(mc, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	return fab, memEndpoint(t, fab, macA, ipA, mc.Seed), memEndpoint(t, fab, macB, ipB, mc.Seed+1)
}

func qps(t *testing.T, ep *Endpoint) int {
	t.Helper()
	n, err := ep.QPs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConnections sets up several connections between two endpoints, for
// two services, over a fabric that loses and reorders frames, moves
// messages both ways on each, closes them from either side and checks that
// both sides freed their QPs and left no goroutine behind
// (TestCloseFreesQP is the transport hook's guard).
func TestConnections(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	r := testutil.Rand(t)
	_, ea, eb := memPair(t, mem.Config{Seed: seed, Loss: 0.01, Reorder: 0.2, ReorderDelay: 20 * time.Microsecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lnX, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	lnY, err := eb.Listen("y")
	if err != nil {
		t.Fatal(err)
	}
	type pair struct{ a, b *Conn }
	var ps []pair
	for i, svc := range []string{"x", "y", "x"} {
		ln := map[string]*Listener{"x": lnX, "y": lnY}[svc]
		a, err := ea.Dial(ctx, ln.Addr(), svc)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		b, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b.Service() != svc || b.Remote() != a.Info() || a.Remote() != b.Info() {
			t.Fatalf("connection %d: service %q, QPs %+v/%+v", i, b.Service(), a.Info(), b.Remote())
		}
		ps = append(ps, pair{a, b})
	}
	if qps(t, ea) != 3 || qps(t, eb) != 3 {
		t.Fatalf("QPs %d and %d, want 3 each", qps(t, ea), qps(t, eb))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(ps))
	for _, p := range ps {
		ab, ba := testutil.RandomMessages(r, 20, 64<<10), testutil.RandomMessages(r, 20, 64<<10)
		wg.Go(func() { errs <- exchange(ctx, p.a, p.b, ab) })
		wg.Go(func() { errs <- exchange(ctx, p.b, p.a, ba) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Close from the dialer, the acceptor, and both at once.
	ps[0].a.Close()
	ps[1].b.Close()
	wg.Go(func() { ps[2].a.Close() })
	ps[2].b.Close()
	wg.Wait()
	for i, p := range ps {
		for _, c := range []*Conn{p.a, p.b} {
			<-c.Done()
			if err := c.Send(ctx, []byte("late")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("conn %d: Send after Close: %v, want net.ErrClosed", i, err)
			}
		}
	}
	if _, err := ps[0].b.Recv(ctx); err != io.EOF {
		t.Fatalf("Recv after the peer closed: %v, want io.EOF", err)
	}
	if _, err := ps[0].a.Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close: %v, want ErrClosed", err)
	}
	if qps(t, ea) != 0 || qps(t, eb) != 0 {
		t.Fatalf("QPs left after Close: %d and %d", qps(t, ea), qps(t, eb))
	}
	lnX.Close()
	lnY.Close()
	if _, err := lnX.Accept(ctx); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	ea.Close()
	eb.Close()
	testutil.WaitGoroutines(t, base)
}

// TestCloseFreesQP closes a connection while a transfer runs on it and
// twice: the transfer completes or fails with net.ErrClosed, the peer gets
// the message or io.EOF, no QP is left and nothing hangs.
func TestCloseFreesQP(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	_, ea, eb := memPair(t, mem.Config{Seed: seed, Loss: 0.02})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("bulk")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ea.Dial(ctx, ln.Addr(), "bulk")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := testutil.RandomMessages(testutil.Rand(t), 1, 4<<20)[0]
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, msg) }()
	recvd := make(chan error, 1)
	go func() {
		m, err := b.Recv(ctx)
		if err == nil && sha256.Sum256(m.Data) != sha256.Sum256(msg) {
			err = fmt.Errorf("%d bytes arrived, not the %d sent", len(m.Data), len(msg))
		}
		recvd <- err
	}()
	time.Sleep(time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	sendErr, recvErr := <-sent, <-recvd
	if sendErr != nil && !errors.Is(sendErr, net.ErrClosed) {
		t.Fatalf("Send during Close: %v, want nil or net.ErrClosed", sendErr)
	}
	// A Send that completed was acknowledged: the peer must get it intact.
	if sendErr == nil && recvErr != nil || recvErr != nil && recvErr != io.EOF {
		t.Fatalf("peer's Recv: %v (Send: %v), want the message, or io.EOF if Send failed", recvErr, sendErr)
	}
	t.Logf("Send: %v; peer's Recv: %v", sendErr, recvErr)
	<-b.Done()
	if b.Err() != ErrPeerClosed {
		t.Fatalf("peer's Err %v, want ErrPeerClosed", b.Err())
	}
	if qps(t, ea) != 0 || qps(t, eb) != 0 {
		t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
	}
	ln.Close()
	ea.Close()
	eb.Close()
	testutil.WaitGoroutines(t, base)
}

// TestDialErrors: nothing listening, an unknown service, a listener gone,
// each a clear error with no QP left on either side.
func TestDialErrors(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	_, ea, eb := memPair(t, mem.Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A port nothing listens on: bind one and close it.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := tl.Addr().String()
	tl.Close()
	if _, err := ea.Dial(ctx, free, "x"); !errors.Is(err, ErrRefused) {
		t.Fatalf("Dial to nothing: %v, want ErrRefused", err)
	}
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eb.Listen("x"); !errors.Is(err, ErrOptions) {
		t.Fatalf("second Listen for one service: %v", err)
	}
	_, err = ea.Dial(ctx, ln.Addr(), "nope")
	if !errors.Is(err, ErrUnknownService) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Dial to an unknown service: %v, want ErrUnknownService naming it", err)
	}
	if _, err := ea.Dial(ctx, ln.Addr(), ""); !errors.Is(err, ErrOptions) {
		t.Fatalf("empty service: %v", err)
	}
	ln.Close()
	if _, err := ea.Dial(ctx, ln.Addr(), "x"); !errors.Is(err, ErrUnknownService) {
		t.Fatalf("Dial after the Listener closed: %v, want ErrUnknownService", err)
	}
	if qps(t, ea) != 0 || qps(t, eb) != 0 {
		t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
	}
	ea.Close()
	eb.Close()
	testutil.WaitGoroutines(t, base)
}

// TestBadRequests speaks the protocol by hand: another version, garbage,
// a truncated request and a silent client each get a rejection or a
// closed channel, and the listener keeps serving.
func TestBadRequests(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	_, ea, eb := memPair(t, mem.Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	good := connReq{qp: transport.QPInfo{QPN: 0x123, PSN: 7, MAC: macA, IP: ipA}, service: "x"}.marshal()
	v9 := appendMsg(nil, msgREQ, good)
	v9[4] = 9
	cases := []struct {
		name   string
		send   []byte
		reason uint8
	}{
		{"version 9", v9, rejVersion},
		{"bad magic", []byte("GET / HTTP/1.1\r\n\r\n"), rejBadRequest},
		{"RTU first", appendMsg(nil, msgRTU, nil), rejBadRequest},
		{"short body", appendMsg(nil, msgREQ, good[:10]), rejBadRequest},
		{"profile", appendMsg(nil, msgREQ, connReq{profile: transport.RoCE, qp: transport.QPInfo{QPN: 1, MAC: macA, IP: ipA}, service: "x"}.marshal()), rejProfile},
		{"service", appendMsg(nil, msgREQ, connReq{qp: transport.QPInfo{QPN: 1, MAC: macA, IP: ipA}, service: "y"}.marshal()), rejService},
	}
	for _, tc := range cases {
		c, err := net.Dial("tcp", ln.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		c.Write(tc.send)
		m, err := readMsg(c)
		c.Close()
		if err != nil || m.typ != msgREJ {
			t.Fatalf("%s: got %+v, %v, want a rejection", tc.name, m, err)
		}
		rej, err := parseRej(m.body)
		if err != nil || rej.reason != tc.reason || rej.text == "" {
			t.Fatalf("%s: rejection %+v, %v, want reason %d with a text", tc.name, rej, err, tc.reason)
		}
	}
	// A client that connects and says nothing does not hold up the others.
	silent, err := net.Dial("tcp", ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	a, err := ea.Dial(ctx, ln.Addr(), "x")
	if err != nil {
		t.Fatalf("Dial after the bad requests: %v", err)
	}
	a.Close()
	if qps(t, ea) != 0 {
		t.Fatalf("dialer QPs left: %d", qps(t, ea))
	}
	silent.Close()
	ea.Close()
	eb.Close()
	testutil.WaitGoroutines(t, base)
}

// TestDialVersionMismatch: a listener that rejects this side's version
// and speaks a later one only is reported as ErrVersion with its version,
// without a retry, and the dialer's QP is freed.
func TestDialVersionMismatch(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, _ := memPair(t, mem.Config{Seed: seed})
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go func() {
		c, err := tl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		readMsg(c)
		c.Write(appendMsgV(nil, cmVersion+1, msgREJ, rejection{reason: rejVersion, version: cmVersion + 1, text: fmt.Sprintf("version %d not supported", cmVersion)}.marshal()))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = ea.Dial(ctx, tl.Addr().String(), "x")
	if later := fmt.Sprintf("version %d", cmVersion+1); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), later) {
		t.Fatalf("Dial: %v, want ErrVersion naming %s", err, later)
	}
	if qps(t, ea) != 0 {
		t.Fatalf("QPs left: %d", qps(t, ea))
	}
}

// TestPeerGoneAndRestart: a peer whose channel breaks without a DREQ fails
// its Conns with ErrPeerGone; a new endpoint on the same address accepts a
// new connection that works.
func TestPeerGoneAndRestart(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	fab, ea, eb := memPair(t, mem.Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ea.Dial(ctx, ln.Addr(), "x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recvErr := make(chan error, 1)
	go func() { _, err := a.Recv(ctx); recvErr <- err }()
	b.tc.Close() // as when the peer's process dies
	if err := <-recvErr; !errors.Is(err, ErrPeerGone) {
		t.Fatalf("Recv when the peer went away: %v, want ErrPeerGone", err)
	}
	eb.Close()
	if qps(t, ea) != 0 {
		t.Fatalf("QPs left on the survivor: %d", qps(t, ea))
	}
	eb2 := memEndpoint(t, fab, macB, ipB, seed+2)
	ln2, err := eb2.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := ea.Dial(ctx, ln2.Addr(), "x")
	if err != nil {
		t.Fatalf("Dial to the restarted peer: %v", err)
	}
	b2, err := ln2.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := exchange(ctx, a2, b2, testutil.RandomMessages(testutil.Rand(t), 5, 100<<10)); err != nil {
		t.Fatal(err)
	}
	ea.Close()
	eb2.Close()
	testutil.WaitGoroutines(t, base)
}

// TestExplainUnreachable: a peer that drops every frame fails the QP with
// an error that carries the counters explaining it.
func TestExplainUnreachable(t *testing.T) {
	seed := testutil.Seed(t)
	fab, ea, eb := memPair(t, mem.Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	a, err := ea.Dial(ctx, ln.Addr(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	fab.Blackhole(true)
	// A deadline already past when Send is called: the request is never
	// posted, and the error still carries the counters.
	spent, cancelSpent := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	err = a.Send(spent, make([]byte, 1000))
	cancelSpent()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "0 ACKs received") {
		t.Fatalf("Send with a spent deadline: %v, want the deadline with the counters", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 5*time.Millisecond)
	err = a.Send(short, make([]byte, 1000))
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "0 ACKs received") {
		t.Fatalf("Send that timed out unanswered: %v, want the deadline with the counters", err)
	}
	err = a.Send(ctx, make([]byte, 100000))
	if !errors.Is(err, transport.ErrPeerUnreachable) {
		t.Fatalf("Send into a blackhole: %v, want ErrPeerUnreachable", err)
	}
	for _, want := range []string{"timeouts", "0 ACKs received", "packets sent", "never acknowledged"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	var qe *transport.QPError
	if !errors.As(err, &qe) || qe.QP.AcksReceived != 0 || qe.QP.Timeouts == 0 || strings.Count(err.Error(), "ACKs received") != 1 {
		t.Fatalf("error %q: want one *transport.QPError with the counters", err)
	}
}

// TestConnectCloseCycles connects and closes many times, from alternating
// sides: QPs and goroutines do not accumulate.
func TestConnectCloseCycles(t *testing.T) {
	base := runtime.NumGoroutine()
	seed := testutil.Seed(t)
	_, ea, eb := memPair(t, mem.Config{Seed: seed})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		a, err := ea.Dial(ctx, ln.Addr(), "x")
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		b, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Send(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if m, err := b.Recv(ctx); err != nil || len(m.Data) != 1 || m.Data[0] != byte(i) {
			t.Fatalf("cycle %d: %v %v", i, m.Data, err)
		}
		if i%2 == 0 {
			a.Close()
		} else {
			b.Close()
		}
		<-a.Done()
		<-b.Done()
	}
	if qps(t, ea) != 0 || qps(t, eb) != 0 {
		t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
	}
	ln.Close()
	ea.Close()
	eb.Close()
	testutil.WaitGoroutines(t, base)
}

// exchange sends msgs from a to b and checks that they arrive intact and
// in order.
func exchange(ctx context.Context, a, b *Conn, msgs [][]byte) error {
	return testutil.Exchange(ctx, a.Send, b.Recv, func(m transport.Message) []byte { return m.Data }, msgs)
}
