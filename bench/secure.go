package bench

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sprayfabric/spray/transport"
)

// Protections a perf run reports (PerfResult.Protection): the names of
// spray.Protection.
const (
	ProtectionClear     = "clear"
	ProtectionEncrypted = "encrypted"
	ProtectionIntegrity = "integrity"
)

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
// then the server's.
type runSecurity struct {
	cfg  PerfConfig
	salt []byte
}

// serverSecurity returns the security of the run the client's hello h
// asks for, refusing a mismatch: a secured run needs the server's key,
// and a server with a key serves secured runs only.
func serverSecurity(own PerfConfig, h hello) (*runSecurity, error) {
	asked := h.Protection != "" && h.Protection != ProtectionClear
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
