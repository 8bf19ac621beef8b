package bench

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/sprayfabric/spray/internal/peek"
	"github.com/sprayfabric/spray/transport"
)

// Protections a perf run reports (PerfResult.Protection): the names of
// spray.Protection.
const (
	ProtectionClear     = "clear"
	ProtectionEncrypted = "encrypted"
	ProtectionIntegrity = "integrity"
	// ProtectionTLS is a kernel TCP run inside a TLS control connection
	// (RemoteRun.TLS).
	ProtectionTLS = "tls"
)

// perfKeysLabel is the label of the packet secrets a secured remote run
// exports from its TLS control connection (RFC 8446, section 7.5).
const perfKeysLabel = "EXPORTER-spray-perf-keys"

// perfNonceLen is the length of each side's nonce in a secured remote run.
const perfNonceLen = 32

// ErrPerfAuth is returned by a secured remote perf run whose peer does
// not hold the same pre-shared key, or has none.
var ErrPerfAuth = errors.New("bench: perf peer not authenticated")

// protection returns the protection of c's spray QPs.
func (c PerfConfig) protection() string {
	switch {
	case c.PSK == nil:
		return ProtectionClear
	case c.IntegrityOnly:
		return ProtectionIntegrity
	}
	return ProtectionEncrypted
}

// perfKeys derives a secured run's two packet secrets from the
// pre-shared key, the run's salt (fresh for every run) and both QPNs, so
// that no two QPs or runs share a key.
func perfKeys(psk, salt []byte, clientQPN, serverQPN uint32) (toServer, toClient [32]byte, err error) {
	info := make([]byte, 0, 24)
	info = append(info, "spray-perf-keys"...)
	info = binary.BigEndian.AppendUint32(info, clientQPN)
	info = binary.BigEndian.AppendUint32(info, serverQPN)
	k, err := hkdf.Key(sha256.New, psk, salt, string(info), 64)
	if err != nil {
		return toServer, toClient, err
	}
	copy(toServer[:], k)
	copy(toClient[:], k[32:])
	return toServer, toClient, nil
}

// perfProof is role's proof ("client" or "server") that it holds psk,
// bound to the run's salt.
func perfProof(psk, salt []byte, role string) []byte {
	m := hmac.New(sha256.New, psk)
	m.Write([]byte(role))
	m.Write(salt)
	return m.Sum(nil)
}

// secureQP installs the packet keys of one end of a secured run on qp,
// before Connect; nothing for a clear one.
func (c PerfConfig) secureQP(ctx context.Context, qp *transport.Conn, salt []byte, clientQPN, serverQPN uint32, client bool) error {
	if c.PSK == nil {
		return nil
	}
	toServer, toClient, err := perfKeys(c.PSK, salt, clientQPN, serverQPN)
	if err != nil {
		return err
	}
	s := transport.Security{Send: toServer, Recv: toClient, IntegrityOnly: c.IntegrityOnly}
	if !client {
		s.Send, s.Recv = toClient, toServer
	}
	return qp.Secure(ctx, s)
}

// securePair secures a local run's two QPs with a fresh salt, before
// either connects.
func (c PerfConfig) securePair(ctx context.Context, client, server *transport.Conn) error {
	if c.PSK == nil {
		return nil
	}
	salt := make([]byte, 2*perfNonceLen)
	rand.Read(salt)
	cq, sq := client.Info().QPN, server.Info().QPN
	if err := c.secureQP(ctx, client, salt, cq, sq, true); err != nil {
		return fmt.Errorf("bench: securing the client's QP: %w", err)
	}
	if err := c.secureQP(ctx, server, salt, cq, sq, false); err != nil {
		return fmt.Errorf("bench: securing the server's QP: %w", err)
	}
	return nil
}

// runSecurity is one secured remote run: the configuration of the side
// (its key; the client's IntegrityOnly) and the salt, the client's nonce
// then the server's; or, over TLS, the session its keys are exported from.
type runSecurity struct {
	cfg  PerfConfig
	salt []byte
	cs   *tls.ConnectionState
}

// protection returns the protection of the run's QP.
func (r *runSecurity) protection() string {
	if r.cfg.IntegrityOnly {
		return ProtectionIntegrity
	}
	return ProtectionEncrypted
}

// secure installs the run's packet keys on qp, before Connect: exported
// from the TLS session (context: the client's QPN, then the server's),
// or derived from the pre-shared key (perfKeys).
func (r *runSecurity) secure(ctx context.Context, qp *transport.Conn, clientQPN, serverQPN uint32, client bool) error {
	if r.cs == nil {
		return r.cfg.secureQP(ctx, qp, r.salt, clientQPN, serverQPN, client)
	}
	k, err := r.cs.ExportKeyingMaterial(perfKeysLabel, binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, clientQPN), serverQPN), 64)
	if err != nil {
		return err
	}
	s := transport.Security{IntegrityOnly: r.cfg.IntegrityOnly}
	copy(s.Send[:], k[:32])
	copy(s.Recv[:], k[32:])
	if !client {
		s.Send, s.Recv = s.Recv, s.Send
	}
	return qp.Secure(ctx, s)
}

// serverSecurity returns the security of the run the client's hello h
// asks for, refusing a mismatch: a secured run needs the server's key,
// and a server with a key serves secured runs only.
func serverSecurity(own PerfConfig, h hello, cs *tls.ConnectionState) (*runSecurity, error) {
	asked := h.Protection != "" && h.Protection != ProtectionClear
	if cs != nil {
		if h.Protection != ProtectionEncrypted && h.Protection != ProtectionIntegrity {
			return nil, fmt.Errorf("%w: a client over TLS asks for protection %q, want encrypted or integrity", ErrPerfAuth, h.Protection)
		}
		return &runSecurity{cfg: PerfConfig{IntegrityOnly: h.Protection == ProtectionIntegrity}, cs: cs}, nil
	}
	switch {
	case asked && own.PSK == nil:
		return nil, fmt.Errorf("%w: the client asks for a secured QP (%s), the server has no pre-shared key (--psk)", ErrPerfAuth, h.Protection)
	case !asked && own.PSK != nil:
		return nil, fmt.Errorf("%w: the server requires a secured QP: give the client its pre-shared key (--psk)", ErrPerfAuth)
	case !asked:
		return nil, nil
	case h.Protection != ProtectionEncrypted && h.Protection != ProtectionIntegrity:
		return nil, fmt.Errorf("bench: unknown protection %q", h.Protection)
	case len(h.Nonce) != perfNonceLen:
		return nil, fmt.Errorf("bench: a nonce of %d bytes, want %d", len(h.Nonce), perfNonceLen)
	}
	sec := &runSecurity{cfg: PerfConfig{PSK: own.PSK, IntegrityOnly: h.Protection == ProtectionIntegrity}, salt: make([]byte, 2*perfNonceLen)}
	copy(sec.salt, h.Nonce)
	rand.Read(sec.salt[perfNonceLen:])
	return sec, nil
}

// acceptTLS reads a client's first byte: a ClientHello starts the TLS
// session of own (nil: refused, this server has no certificate); anything
// else is the clear protocol, returned as is (the caller refuses it when
// own is set, after reading its hello). It returns the connection to
// speak on and, over TLS, the session's state.
func acceptTLS(ctx context.Context, c net.Conn, own *tls.Config) (net.Conn, *tls.ConnectionState, error) {
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return nil, nil, fmt.Errorf("bench: reading the client's hello: %w", runErr(ctx, err))
	}
	pc := peek.Prefixed(c, first[:])
	if first[0] != peek.TLSHandshake {
		return pc, nil, nil
	}
	if own == nil {
		// The client's TLS reads this as a record that is not TLS.
		json.NewEncoder(c).Encode(hello{Err: "the perf server has no certificate (--cert, --key)"})
		return nil, nil, fmt.Errorf("%w: the client speaks TLS, this server has no certificate (--cert, --key)", ErrPerfAuth)
	}
	ts := tls.Server(pc, own)
	if err := ts.HandshakeContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("%w: the TLS handshake with the client: %w", ErrPerfAuth, runErr(ctx, err))
	}
	cs := ts.ConnectionState()
	return ts, &cs, nil
}

// dialTLS runs the client's TLS handshake with the server at addr on c.
func dialTLS(ctx context.Context, c net.Conn, own *tls.Config, addr string) (*tls.Conn, error) {
	cfg := own
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	ts := tls.Client(c, cfg)
	err := ts.HandshakeContext(ctx)
	var rh tls.RecordHeaderError
	var ce *tls.CertificateVerificationError
	var oe *net.OpError
	switch {
	case err == nil:
		return ts, nil
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case errors.As(err, &rh):
		return nil, fmt.Errorf("%w: the perf server at %s does not speak TLS (give it --cert and --key)", ErrPerfAuth, addr)
	case errors.As(err, &ce):
		return nil, fmt.Errorf("%w: the perf server at %s: its certificate: %v (check --ca, and that the certificate names the address dialed)", ErrPerfAuth, addr, ce.Err)
	case errors.As(err, &oe) && oe.Op == "remote error":
		return nil, refusedCert(oe, addr)
	}
	return nil, fmt.Errorf("%w: the TLS handshake with %s: %w", ErrPerfAuth, addr, err)
}

// tlsRefusal returns ErrPerfAuth naming the cause when err is the TLS alert
// of a server that refused this side's certificate (in TLS 1.3 it comes
// on the client's first read after its handshake), else err.
func tlsRefusal(err error, addr string) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return refusedCert(oe, addr)
	}
	return err
}

func refusedCert(oe *net.OpError, addr string) error {
	return fmt.Errorf("%w: the perf server at %s refused this side's certificate: %v (give --cert and --key signed by a CA of the server's --ca)", ErrPerfAuth, addr, oe.Err)
}
