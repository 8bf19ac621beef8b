package bench

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

// A perf server with a pre-shared key serves clients that hold it, with
// the protection each asks for (bytes intact, the protection reported),
// and refuses, naming the key, a client with another key or none; a
// client with a key refuses a server without one.
func TestRemotePerfSecure(t *testing.T) {
	p := newPair(t)
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	psk := []byte("00112233445566778899aabbccddeeff")
	serve := func(port uint16, own []byte) string {
		var ln net.Listener
		if err := p.B.Do(func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B.IP, port).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() {
			served <- p.B.Do(func() error { return ServePerf(ctx, ln, RemoteRun{Perf: PerfConfig{PSK: own}, Logf: t.Logf}) })
		}()
		t.Cleanup(func() { cancel(); <-served })
		return ln.Addr().String()
	}
	secured, clear := serve(DefaultControlPort, psk), serve(DefaultControlPort+1, nil)
	dial := func(addr string, pc PerfConfig) (PerfResult, error) {
		pc.Total, pc.MsgSize, pc.Pings, pc.Seed = 8<<20, 256<<10, 20, seed
		var res PerfResult
		err := p.A.Do(func() (err error) {
			res, err = DialPerf(ctx, addr, RemoteRun{Kind: KindUDP, Transport: transport.Config{Seed: seed}, Perf: pc})
			return err
		})
		return res, err
	}
	for _, io := range []bool{false, true} {
		res, err := dial(secured, PerfConfig{PSK: psk, IntegrityOnly: io})
		want := map[bool]string{false: ProtectionEncrypted, true: ProtectionIntegrity}[io]
		if err != nil || !res.Integrity || res.Protection != want {
			t.Fatalf("secured run (integrity only %v): %v, integrity %v, protection %q, want %q", io, err, res.Integrity, res.Protection, want)
		}
	}
	for _, tc := range []struct {
		name string
		addr string
		pc   PerfConfig
		want string
	}{
		{"wrong key", secured, PerfConfig{PSK: []byte("ffeeddccbbaa99887766554433221100")}, "pre-shared key"},
		{"no key", secured, PerfConfig{}, "pre-shared key"},
		{"server without key", clear, PerfConfig{PSK: psk}, "pre-shared key"},
	} {
		_, err := dial(tc.addr, tc.pc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error naming the %s", tc.name, err, tc.want)
		}
		if tc.name == "wrong key" && !errors.Is(err, ErrPerfAuth) {
			t.Fatalf("%s: %v, want ErrPerfAuth", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// testCA is a certificate authority for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "perf test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// leaf returns a certificate for ip, good for either role.
func (ca *testCA) leaf(t *testing.T, ip netip.Addr) tls.Certificate {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{ip.AsSlice()}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// A perf server with a certificate that checks its clients' serves a
// client whose certificate its CA signed, over TLS: the spray run
// (encrypted, integrity only) and the kernel TCP run (inside the session)
// intact, each reporting its protection. A clear client, one without a
// certificate, one that trusts another CA, and a TLS client of a clear
// server are refused with ErrPerfAuth.
func TestRemotePerfTLS(t *testing.T) {
	p := newPair(t)
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ca, other := newTestCA(t), newTestCA(t)
	srvTLS := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{ca.leaf(t, p.B.IP)},
		ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	cliTLS := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool, Certificates: []tls.Certificate{ca.leaf(t, p.A.IP)}}
	serve := func(port uint16, own *tls.Config) string {
		var ln net.Listener
		if err := p.B.Do(func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B.IP, port).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() {
			served <- p.B.Do(func() error { return ServePerf(ctx, ln, RemoteRun{TLS: own, Logf: t.Logf}) })
		}()
		t.Cleanup(func() { cancel(); <-served })
		return ln.Addr().String()
	}
	secured, clear := serve(DefaultControlPort+2, srvTLS), serve(DefaultControlPort+3, nil)
	dial := func(addr, kind string, own *tls.Config, io bool) (PerfResult, error) {
		pc := PerfConfig{Total: 8 << 20, MsgSize: 256 << 10, Pings: 20, Seed: seed, IntegrityOnly: io}
		var res PerfResult
		err := p.A.Do(func() (err error) {
			res, err = DialPerf(ctx, addr, RemoteRun{Kind: kind, Transport: transport.Config{Seed: seed}, Perf: pc, TLS: own})
			return err
		})
		return res, err
	}
	for _, tc := range []struct {
		kind string
		io   bool
		want string
	}{
		{KindUDP, false, ProtectionEncrypted},
		{KindUDP, true, ProtectionIntegrity},
		{KindTCP, false, ProtectionTLS},
	} {
		res, err := dial(secured, tc.kind, cliTLS, tc.io)
		if err != nil || !res.Integrity || res.Protection != tc.want {
			t.Fatalf("%s over TLS (integrity only %v): %v, integrity %v, protection %q, want %q", tc.kind, tc.io, err, res.Integrity, res.Protection, tc.want)
		}
	}
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool}
	wrongCA := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: other.pool, Certificates: cliTLS.Certificates}
	for _, tc := range []struct {
		name string
		addr string
		own  *tls.Config
		want string
	}{
		{"clear client", secured, nil, "requires TLS"},
		{"no certificate", secured, noCert, "certificate"},
		{"another CA", secured, wrongCA, "its certificate"},
		{"clear server", clear, cliTLS, "does not speak TLS"},
	} {
		_, err := dial(tc.addr, KindUDP, tc.own, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if tc.own != nil && !errors.Is(err, ErrPerfAuth) {
			t.Fatalf("%s: %v, want ErrPerfAuth", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}
