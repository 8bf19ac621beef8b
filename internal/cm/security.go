package cm

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sprayfabric/spray/transport"
)

// Security configures how an Endpoint protects its connections: the
// fields of the root package's Security, which converts to it. With it, the connection manager's messages travel
// inside TLS 1.3, and each QP's packets are authenticated, and their
// payloads encrypted unless both sides ask for IntegrityOnly, with
// secrets exported from that TLS session. Give certificates (TLS), a
// pre-shared key (PSK), or both. Its zero value is not valid; Open and
// NewEndpoint copy what they need, so it may be changed afterwards.
type Security struct {
	// TLS holds the certificates, for both roles: Certificates (this
	// side's, presented as listener and, when the listener asks, as
	// dialer), RootCAs (the CAs a dialer verifies the listener against;
	// nil: the host's), ClientCAs and ClientAuth (a listener verifying
	// dialers), ServerName (the name a dialer expects in the listener's
	// certificate; empty: the host of Dial's address, an IP address
	// matched against the certificate's IP SANs). It is cloned, and
	// MinVersion raised to TLS 1.3. nil: throwaway certificates that
	// nobody verifies, which PSK must then be set to authenticate.
	TLS *tls.Config
	// PSK is a pre-shared key of at least MinPSK bytes. After the TLS
	// handshake each side sends an HMAC-SHA256, keyed with the PSK, of
	// keying material exported from the TLS session, and checks the
	// other's: only holders of the key connect, and a man in the middle,
	// who holds two TLS sessions with different exported material, cannot
	// forge either proof. nil: certificates alone authenticate.
	PSK []byte
	// IntegrityOnly asks that packets be authenticated but their
	// payloads left in clear (the fabric's tools can read them). It holds
	// when both sides ask; otherwise payloads are encrypted.
	IntegrityOnly bool
	// AllowClear lets peers without security connect, in clear: this
	// endpoint's Listeners accept clear dialers, and its Dial, refused by
	// a listener that has no security, dials again in clear. false (the
	// default): both are refused with ErrSecurityMismatch.
	AllowClear bool
}

// MinPSK is the shortest pre-shared key Security takes, in bytes.
const MinPSK = 16

// Exported keying material (RFC 8446 section 7.5) labels: one for the
// proofs of the pre-shared key, one for the QPs' packet secrets.
const (
	pskProofLabel = "EXPORTER-spray-psk-proof"
	qpSecretLabel = "EXPORTER-spray-qp-secrets"
	// pskProofLen is the length of a proof: an HMAC-SHA256.
	pskProofLen = sha256.Size
)

// security is an endpoint's Security, checked, with its TLS
// configurations built.
type security struct {
	psk           []byte
	integrityOnly bool
	allowClear    bool
	tlsFrom       *tls.Config // Security.TLS, as given
	verifies      bool        // the dialer verifies the listener's certificate
	canServe      bool        // the listener has a certificate to present
	server        *tls.Config // the listener's
	client        *tls.Config // the dialer's, before ServerName
}

// newSecurity checks s and builds its TLS configurations; nil for nil.
func newSecurity(s *Security) (*security, error) {
	if s == nil {
		return nil, nil
	}
	if s.TLS == nil && s.PSK == nil {
		return nil, fmt.Errorf("%w: Security needs certificates (TLS) or a pre-shared key (PSK)", ErrOptions)
	}
	if s.PSK != nil && len(s.PSK) < MinPSK {
		return nil, fmt.Errorf("%w: a pre-shared key of %d bytes, want at least %d", ErrOptions, len(s.PSK), MinPSK)
	}
	sec := &security{psk: bytes.Clone(s.PSK), integrityOnly: s.IntegrityOnly, allowClear: s.AllowClear}
	if s.TLS != nil {
		sec.tlsFrom = s.TLS
		sec.server, sec.client = s.TLS.Clone(), s.TLS.Clone()
		sec.verifies = !s.TLS.InsecureSkipVerify
	} else {
		sec.server = &tls.Config{}
		// The proofs of the pre-shared key authenticate both sides.
		sec.client = &tls.Config{InsecureSkipVerify: true}
	}
	for _, c := range []*tls.Config{sec.server, sec.client} {
		c.MinVersion = tls.VersionTLS13
		c.NextProtos = []string{"spray-cm"}
	}
	sec.canServe = len(sec.server.Certificates) > 0 || sec.server.GetCertificate != nil || sec.server.GetConfigForClient != nil
	if !sec.canServe && sec.psk != nil {
		cert, err := throwawayCert()
		if err != nil {
			return nil, fmt.Errorf("spray: throwaway certificate: %w", err)
		}
		sec.server.Certificates = []tls.Certificate{cert}
		sec.canServe = true
	}
	return sec, nil
}

// throwawayCert makes a self-signed Ed25519 certificate, for a listener
// that the pre-shared key authenticates.
func throwawayCert() (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "spray throwaway"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

// clientConfig returns the dialer's TLS configuration for addr.
func (s *security) clientConfig(addr string) *tls.Config {
	c := s.client
	if c.ServerName == "" && s.verifies {
		c = c.Clone()
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	return c
}

// pskProof returns role's proof ("dialer" or "listener") that it holds
// psk, bound to the TLS session cs.
func pskProof(psk []byte, cs tls.ConnectionState, role string) ([]byte, error) {
	ekm, err := cs.ExportKeyingMaterial(pskProofLabel, []byte(role), 32)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, psk)
	m.Write(ekm)
	return m.Sum(nil), nil
}

// checkProof reports whether proof is role's proof of s's pre-shared key
// on cs; true when s has none.
func (s *security) checkProof(proof []byte, cs tls.ConnectionState, role string) bool {
	if s.psk == nil {
		return true
	}
	want, err := pskProof(s.psk, cs, role)
	return err == nil && hmac.Equal(proof, want)
}

// proof returns this side's proof of the pre-shared key, nil without one.
func (s *security) proof(cs tls.ConnectionState, role string) ([]byte, error) {
	if s.psk == nil {
		return nil, nil
	}
	return pskProof(s.psk, cs, role)
}

// qpSecrets exports a connection's packet secrets from its TLS session:
// one for each direction, bound to both QPNs, so that no two QPs share a
// key even on one TLS session.
func qpSecrets(cs tls.ConnectionState, dialerQPN, listenerQPN uint32) (toListener, toDialer [32]byte, err error) {
	var ctx [8]byte
	binary.BigEndian.PutUint32(ctx[:], dialerQPN)
	binary.BigEndian.PutUint32(ctx[4:], listenerQPN)
	k, err := cs.ExportKeyingMaterial(qpSecretLabel, ctx[:], 64)
	if err != nil {
		return toListener, toDialer, err
	}
	copy(toListener[:], k)
	copy(toDialer[:], k[32:])
	return toListener, toDialer, nil
}

// Protection says how a connection's traffic is protected.
type Protection uint8

const (
	// ProtectionClear: nothing is authenticated.
	ProtectionClear Protection = iota
	// ProtectionIntegrity: the connection manager's messages travel in
	// TLS, and every packet is authenticated; payloads are in clear.
	ProtectionIntegrity
	// ProtectionEncrypted: as ProtectionIntegrity, and payloads are
	// encrypted.
	ProtectionEncrypted
)

func (p Protection) String() string {
	switch p {
	case ProtectionClear:
		return "clear"
	case ProtectionIntegrity:
		return "integrity"
	case ProtectionEncrypted:
		return "encrypted"
	}
	return fmt.Sprintf("Protection(%d)", uint8(p))
}

// endConn notes when its reads end with an error other than a timeout: a
// FIN or a reset. A TLS session reads io.EOF both after the peer's
// close_notify and after a FIN at a record's boundary; only the first
// is the peer's word (Conn.read, TestSecureChannelCut).
type endConn struct {
	net.Conn
	ended atomic.Bool
}

func (c *endConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		c.ended.Store(true)
	}
	return n, err
}

// recConn records the first bytes a dialer's TLS client reads, so that a
// listener in clear, which answers a ClientHello with a REJ of its
// protocol, can be told apart from a broken one, and its reason read.
type recConn struct {
	net.Conn
	rec []byte
}

const recMax = cmHdrLen + 3 + 255 // a REJ with its longest text

func (c *recConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if room := recMax - len(c.rec); room > 0 {
		c.rec = append(c.rec, b[:min(n, room)]...)
	}
	return n, err
}

// tlsDialError turns a failed TLS handshake with the listener at addr into
// Dial's error: ErrSecurityMismatch for a listener in clear (whose REJ,
// read from rc, names its reason; one that was full is tried again), ErrAuth
// for a certificate that does not verify or a listener that refused this
// side's.
func (s *security) tlsDialError(err error, rc *recConn, addr string) (dialRetry, error) {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) && bytes.HasPrefix(rh.RecordHeader[:], cmMagic[:]) {
		why := ""
		// The REJ may not have been read whole: the rest is on the
		// connection.
		m, rerr := readMsg(io.MultiReader(bytes.NewReader(rc.rec), io.LimitReader(rc.Conn, cmHdrLen+cmMaxBody4)))
		if rerr == nil && m.typ == msgREJ {
			if r, perr := parseRej(m.body); perr == nil {
				if r.reason == rejFull {
					return dialRetry{again: true}, fmt.Errorf("dial %s: %w", addr, r.err())
				}
				why = ": " + r.text
			}
		}
		return dialRetry{clear: s.allowClear}, fmt.Errorf("%w: the listener at %s runs its connection manager in clear, without Options.Security (set it on both sides, or Security.AllowClear on this one)%s", ErrSecurityMismatch, addr, why)
	}
	if e := authError(err, addr); e != nil {
		return dialRetry{}, e
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A full listener closes a connection it has no room to answer.
		return dialRetry{again: true}, fmt.Errorf("spray: dial %s: the TLS handshake: %w", addr, err)
	}
	return dialRetry{}, fmt.Errorf("spray: dial %s: the TLS handshake: %w", addr, err)
}

// authError returns ErrAuth naming the cause when err is a certificate
// this side could not verify or a TLS alert the listener sent (it refused
// this side's certificate), else nil.
func authError(err error, addr string) error {
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: the listener at %s: its certificate: %v (check Security.TLS.RootCAs, and ServerName against the certificate's names)", ErrAuth, addr, ce.Err)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return fmt.Errorf("%w: the listener at %s refused this side's TLS handshake: %v (its Security.TLS.ClientCAs must hold the CA of this side's certificate)", ErrAuth, addr, oe.Err)
	}
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	if errors.As(err, &ue) || errors.As(err, &he) || strings.Contains(fmt.Sprint(err), "x509:") {
		return fmt.Errorf("%w: the listener at %s: its certificate: %v", ErrAuth, addr, err)
	}
	return nil
}

// secureQP installs the packet secrets of a QP that is not yet connected.
func secureQP(ctx context.Context, qc *transport.Conn, send, recv [32]byte, integrityOnly bool) error {
	return qc.Secure(ctx, transport.Security{Send: send, Recv: recv, IntegrityOnly: integrityOnly})
}
