package cm

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// pki is a test CA and certificates it signed.
type pki struct {
	pool *x509.CertPool
	cert *x509.Certificate
	key  ed25519.PrivateKey
}

func newPKI(t testing.TB, name string) *pki {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{pool: pool, cert: cert, key: key}
}

// leaf returns a certificate for 127.0.0.1 (where the test endpoints'
// connection managers listen), good for either role.
func (p *pki) leaf(t testing.TB, name string) tls.Certificate {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, pub, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// certSecurity is a Security whose certificate p signed and which
// verifies peers against p (dialers too when mutual).
func certSecurity(t testing.TB, p *pki, name string, mutual bool) *Security {
	c := &tls.Config{Certificates: []tls.Certificate{p.leaf(t, name)}, RootCAs: p.pool}
	if mutual {
		c.ClientCAs, c.ClientAuth = p.pool, tls.RequireAndVerifyClientCert
	}
	return &Security{TLS: c}
}

var testPSK = []byte("0123456789abcdef0123456789abcdef")

func withSec(s *Security) func(*Options) { return func(o *Options) { o.Security = s } }

// secPair opens two endpoints on a link/mem fabric with the securities
// given (nil: clear).
func secPair(t testing.TB, seed uint64, a, b *Security) (*mem.Fabric, *Endpoint, *Endpoint) {
	t.Helper()
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	return fab, memEndpoint(t, fab, macA, ipA, seed, withSec(a)), memEndpoint(t, fab, macB, ipB, seed+1, withSec(b))
}

// tapProxy relays one connection manager channel between a dialer and a
// listener byte for byte, as a box on the path would: it keeps what each
// side sent, and inject writes bytes towards the listener, on the latest
// connection, that the dialer never sent. The listener's close does not
// reach the dialer.
type tapProxy struct {
	ln       net.Listener
	mu       sync.Mutex
	seen     []byte // every byte relayed, both ways
	toLister net.Conn
	ready    chan struct{}
}

func newTapProxy(t *testing.T, target string) *tapProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tapProxy{ln: ln, ready: make(chan struct{})}
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	relay := func(dst, src net.Conn) {
		b := make([]byte, 4096)
		for {
			n, err := src.Read(b)
			p.mu.Lock()
			p.seen = append(p.seen, b[:n]...)
			dst.Write(b[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			d, err := ln.Accept()
			if err != nil {
				return
			}
			l, err := net.Dial("tcp", target)
			if err != nil {
				d.Close()
				return
			}
			p.mu.Lock()
			conns = append(conns, d, l)
			first := p.toLister == nil
			p.toLister = l
			p.mu.Unlock()
			if first {
				close(p.ready)
			}
			wg.Go(func() { relay(d, l) })
			wg.Go(func() { relay(l, d) })
		}
	})
	return p
}

func (p *tapProxy) addr() string { return p.ln.Addr().String() }

func (p *tapProxy) inject(b []byte) {
	<-p.ready
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toLister.Write(b)
}

func (p *tapProxy) captured() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.seen)
}

// connectVia has a dial b's service "secret-service" through addr (b's
// connection manager when empty) and returns both ends.
func connectVia(t *testing.T, a, b *Endpoint, ln *Listener, addr string) (*Conn, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if addr == "" {
		addr = ln.Addr()
	}
	ca, err := a.Dial(ctx, addr, ln.service)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ca, cb
}

// Endpoints that both set Security connect inside TLS, authenticated by
// a pre-shared key, certificates (one way or both), or both; messages
// cross both ways intact (SHA-256), each side reports the protection
// agreed, and the connection manager's channel, captured on the path,
// shows neither the service's name nor a message of the protocol: they
// are in TLS. The clear row shows that the capture would see them.
func TestSecureConnect(t *testing.T) {
	seed := testutil.Seed(t)
	ca := newPKI(t, "spray test CA")
	both := func(s *Security) [2]*Security { return [2]*Security{s, s} }
	for _, tc := range []struct {
		name string
		sec  [2]*Security // dialer's, listener's
		want Protection
	}{
		{"clear", [2]*Security{nil, nil}, ProtectionClear},
		{"psk", both(&Security{PSK: testPSK}), ProtectionEncrypted},
		{"certificates", [2]*Security{certSecurity(t, ca, "a", false), certSecurity(t, ca, "b", false)}, ProtectionEncrypted},
		{"mutual", [2]*Security{certSecurity(t, ca, "a", true), certSecurity(t, ca, "b", true)}, ProtectionEncrypted},
		{"certificates-and-psk", [2]*Security{
			{TLS: certSecurity(t, ca, "a", true).TLS, PSK: testPSK},
			{TLS: certSecurity(t, ca, "b", true).TLS, PSK: testPSK}}, ProtectionEncrypted},
		{"integrity-only", both(&Security{PSK: testPSK, IntegrityOnly: true}), ProtectionIntegrity},
		{"integrity-asked-by-one", [2]*Security{{PSK: testPSK, IntegrityOnly: true}, {PSK: testPSK}}, ProtectionEncrypted},
		{"allow-clear-listener", [2]*Security{nil, {PSK: testPSK, AllowClear: true}}, ProtectionClear},
		{"allow-clear-dialer", [2]*Security{{PSK: testPSK, AllowClear: true}, nil}, ProtectionClear},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ea, eb := secPair(t, seed, tc.sec[0], tc.sec[1])
			ln, err := eb.Listen("secret-service")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			p := newTapProxy(t, ln.Addr())
			a, b := connectVia(t, ea, eb, ln, p.addr())
			if a.Protection() != tc.want || b.Protection() != tc.want {
				t.Fatalf("protection %v and %v, want %v", a.Protection(), b.Protection(), tc.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := mrand.New(mrand.NewPCG(seed, 2))
			if err := exchange(ctx, a, b, testutil.RandomMessages(r, 8, 64<<10)); err != nil {
				t.Fatalf("dialer to listener: %v", err)
			}
			if err := exchange(ctx, b, a, testutil.RandomMessages(r, 8, 64<<10)); err != nil {
				t.Fatalf("listener to dialer: %v", err)
			}
			a.Close()
			b.Close()
			seen := p.captured()
			inClear := bytes.Contains(seen, []byte("secret-service")) || bytes.Contains(seen, cmMagic[:])
			if inClear != (tc.want == ProtectionClear) {
				t.Fatalf("the channel's %d bytes show the protocol in clear: %v, want %v", len(seen), inClear, tc.want == ProtectionClear)
			}
			if qps(t, ea) != 0 || qps(t, eb) != 0 {
				t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
			}
		})
	}
}

// A peer with the wrong key, CA, certificate or name is refused at Dial
// with ErrAuth naming the cause, and one side with security against one
// without with ErrSecurityMismatch saying which; no QP is left on
// either side, and the listener counts the dialers it refused for their
// security.
func TestSecureRefused(t *testing.T) {
	seed := testutil.Seed(t)
	ca, other := newPKI(t, "spray test CA"), newPKI(t, "another CA")
	named := certSecurity(t, ca, "b", false)
	named.TLS.ServerName = "listener.example"
	for _, tc := range []struct {
		name     string
		sec      [2]*Security // dialer's, listener's
		want     error
		names    []string
		refusals uint64 // the listener's AuthFailed
	}{
		{"wrong-psk", [2]*Security{{PSK: testPSK}, {PSK: []byte("another key, 32 bytes long......")}}, ErrAuth, []string{"pre-shared key"}, 1},
		{"psk-against-certificates", [2]*Security{{PSK: testPSK}, certSecurity(t, ca, "b", false)}, ErrAuth, []string{"pre-shared key"}, 0},
		{"wrong-ca", [2]*Security{certSecurity(t, other, "a", false), certSecurity(t, ca, "b", false)}, ErrAuth, []string{"certificate", "unknown authority"}, 1},
		{"wrong-name", [2]*Security{named, certSecurity(t, ca, "b", false)}, ErrAuth, []string{"certificate", "listener.example"}, 1},
		{"client-certificate-refused", [2]*Security{{TLS: &tls.Config{Certificates: []tls.Certificate{other.leaf(t, "a")}, RootCAs: ca.pool}},
			certSecurity(t, ca, "b", true)}, ErrAuth, []string{"refused this side's TLS handshake"}, 1},
		{"no-client-certificate", [2]*Security{{TLS: &tls.Config{RootCAs: ca.pool}}, certSecurity(t, ca, "b", true)}, ErrAuth, []string{"refused this side's TLS handshake"}, 1},
		{"clear-dialer", [2]*Security{nil, {PSK: testPSK}}, ErrSecurityMismatch, []string{"requires security"}, 0},
		{"clear-listener", [2]*Security{{PSK: testPSK}, nil}, ErrSecurityMismatch, []string{"runs its connection manager in clear", "has no security"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ea, eb := secPair(t, seed, tc.sec[0], tc.sec[1])
			dialFails(t, ea, eb, "", tc.want, tc.names...)
			waitAuthFailed(t, eb, tc.refusals)
		})
	}
}

// waitAuthFailed waits until ep's connection manager has counted want
// requests that failed for their security (its side of a handshake may
// end after the dialer's), and fails the test if it counts another number.
func waitAuthFailed(t *testing.T, ep *Endpoint, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := ep.CMStats().AuthFailed
		if got == want && (want > 0 || ep.CMStats().HalfOpen == 0) {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("the listener counted %d requests that failed for their security, want %d", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// A man in the middle who terminates TLS towards each side (the
// throwaway certificates of pre-shared key mode are not verified) and
// relays the connection manager's messages cannot pass the dialer's
// proof of the key off as its own: the proof is bound to the dialer's
// TLS session, not the one the listener sees. Dial fails with ErrAuth,
// the listener counts the refusal and keeps no QP.
func TestSecurePSKManInTheMiddle(t *testing.T) {
	seed := testutil.Seed(t)
	_, ea, eb := secPair(t, seed, &Security{PSK: testPSK}, &Security{PSK: testPSK})
	ln, err := eb.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cert, err := throwawayCert()
	if err != nil {
		t.Fatal(err)
	}
	mitm, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"spray-cm"}})
	if err != nil {
		t.Fatal(err)
	}
	defer mitm.Close()
	relayed := make(chan uint8, 4)
	go func() {
		defer close(relayed)
		d, err := mitm.Accept()
		if err != nil {
			return
		}
		defer d.Close()
		l, err := tls.Dial("tcp", ln.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"spray-cm"}})
		if err != nil {
			return
		}
		defer l.Close()
		d.SetDeadline(time.Now().Add(time.Minute))
		l.SetDeadline(time.Now().Add(time.Minute))
		m, err := readMsg(d) // the dialer's REQ, with its proof
		if err != nil {
			return
		}
		relayed <- m.typ
		l.Write(appendMsgV(nil, m.version, m.typ, m.body))
		m, err = readMsg(l) // the listener's answer
		if err != nil {
			return
		}
		relayed <- m.typ
		d.Write(appendMsgV(nil, m.version, m.typ, m.body))
		io.Copy(io.Discard, d)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := ea.Dial(ctx, mitm.Addr().String(), "x")
	if err == nil {
		c.Close()
		t.Fatal("Dial through a man in the middle succeeded")
	}
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "pre-shared key") {
		t.Fatalf("Dial through a man in the middle: %v, want ErrAuth naming the pre-shared key", err)
	}
	t.Logf("Dial: %v", err)
	if typ := <-relayed; typ != msgREQ {
		t.Fatalf("the man in the middle relayed message type %d, want the request", typ)
	}
	if typ := <-relayed; typ != msgREJ {
		t.Fatalf("the listener answered the relayed request with type %d, want a rejection", typ)
	}
	waitAuthFailed(t, eb, 1)
	if qps(t, ea) != 0 || qps(t, eb) != 0 {
		t.Fatalf("QPs left: %d and %d", qps(t, ea), qps(t, eb))
	}
}

// Security that cannot work is refused by NewEndpoint (no certificate
// nor key, a short key) and Listen (no certificate to present).
func TestSecurityOptions(t *testing.T) {
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	for i, s := range []*Security{{}, {PSK: []byte("short")}, {IntegrityOnly: true}} {
		p, err := fab.NewPort([6]byte{2, 0, 0, 0, 1, byte(i)}, netip.AddrFrom4([4]byte{10, 9, 1, byte(i + 1)}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewEndpoint(p, Options{CMAddr: "127.0.0.1:0", Security: s}); !errors.Is(err, ErrOptions) {
			t.Fatalf("Security %+v: %v, want ErrOptions", s, err)
		}
	}
	ep := memEndpoint(t, fab, macA, ipA, seed, withSec(&Security{TLS: &tls.Config{RootCAs: x509.NewCertPool()}}))
	if _, err := ep.Listen("x"); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "no certificate") {
		t.Fatalf("Listen without a certificate: %v, want ErrOptions", err)
	}
}

// The packet secrets of a connection: the two directions differ, both
// sides derive the same ones, and another pair of QPNs on the same TLS
// session gives others.
func TestQPSecrets(t *testing.T) {
	cert, err := throwawayCert()
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := net.Pipe()
	srv := tls.Server(c1, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	cli := tls.Client(c2, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	defer srv.Close()
	dl, dd, _ := qpSecrets(cli.ConnectionState(), 0x11, 0x22)
	ll, ld, _ := qpSecrets(srv.ConnectionState(), 0x11, 0x22)
	ol, _, _ := qpSecrets(cli.ConnectionState(), 0x11, 0x23)
	if dl != ll || dd != ld {
		t.Fatal("the two sides derived different secrets")
	}
	if dl == dd || dl == ol || dl == [32]byte{} {
		t.Fatal("secrets repeat across directions or QPs")
	}
}
