package spray

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"os"

	"github.com/sprayfabric/spray/internal/cm"
)

// Security configures how an Endpoint protects its connections
// (Options.Security). With it, the connection manager's messages travel
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

// LoadPSK reads a pre-shared key from a file: its contents with
// surrounding white space trimmed, at least MinPSK bytes (a line of `openssl
// rand -hex 32` is 64). The file should be readable by its owner only. It
// must be a regular file of at most 4 KiB: a device (/dev/zero) or a FIFO
// is refused before it is read, so that a wrong path neither fills memory
// nor blocks (TestLoadPSKBounded).
func LoadPSK(path string) ([]byte, error) {
	const maxFile = 4 << 10
	regular := func(fi os.FileInfo) error {
		if !fi.Mode().IsRegular() {
			what := "not a regular file"
			switch m := fi.Mode(); {
			case m.IsDir():
				what = "a directory"
			case m&os.ModeNamedPipe != 0:
				what = "a FIFO"
			case m&os.ModeDevice != 0:
				what = "a device"
			}
			return fmt.Errorf("%w: the pre-shared key file %s is %s, want a regular file", ErrOptions, path, what)
		}
		if fi.Size() > maxFile {
			return fmt.Errorf("%w: the pre-shared key file %s has %d bytes, want at most %d", ErrOptions, path, fi.Size(), maxFile)
		}
		return nil
	}
	// Stat first: opening a FIFO blocks until a writer comes.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("spray: pre-shared key: %w", err)
	}
	if err := regular(fi); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("spray: pre-shared key: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("spray: pre-shared key: %w", err)
	} else if err := regular(fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("spray: pre-shared key: %w", err)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%w: the pre-shared key file %s has more than %d bytes", ErrOptions, path, maxFile)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinPSK {
		return nil, fmt.Errorf("%w: the pre-shared key in %s has %d bytes, want at least %d (openssl rand -hex 32 > %s)", ErrOptions, path, len(b), MinPSK, path)
	}
	return b, nil
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

func (p Protection) String() string { return cm.Protection(p).String() }
