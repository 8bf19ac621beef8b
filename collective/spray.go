package collective

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/sprayfabric/spray/transport"
)

// SprayComm is a Comm over spray: one QP of a transport.Endpoint per peer.
// Send returns when the peer has acknowledged the whole message; Recv
// returns messages whole, in order, in buffers that belong to the caller.
// A Send cancelled by its context may still deliver its message later.
//
// The zero value is not usable: get one from NewSprayComm. It is safe for
// concurrent use. Close unblocks pending calls; it does not close the
// Endpoint, which stays the caller's (the transport has no call that
// destroys a QP, so the QPs stay on the Endpoint until it closes).
type SprayComm struct {
	rank, size int
	ep         *transport.Endpoint
	conns      []*transport.Conn

	closeCtx context.Context // ends on Close
	close    context.CancelFunc
}

// qpInfoLen is the encoded size of a transport.QPInfo in the bootstrap.
const qpInfoLen = 4 + 4 + 6 + 16

func putQPInfo(b []byte, qi transport.QPInfo) {
	binary.BigEndian.PutUint32(b[0:], qi.QPN)
	binary.BigEndian.PutUint32(b[4:], qi.PSN)
	copy(b[8:14], qi.MAC[:])
	a := qi.IP.As16() // IPv4 as ::ffff:a.b.c.d
	copy(b[14:30], a[:])
}

func getQPInfo(b []byte) transport.QPInfo {
	qi := transport.QPInfo{QPN: binary.BigEndian.Uint32(b[0:]), PSN: binary.BigEndian.Uint32(b[4:])}
	copy(qi.MAC[:], b[8:14])
	qi.IP = netip.AddrFrom16([16]byte(b[14:30])).Unmap()
	return qi
}

// NewSprayComm creates one QP per peer on ep, exchanges their QPInfo
// through b (rank i's contribution lists, for every rank j, the QP that
// rank j must connect to), connects them, and waits at a barrier until
// every rank has connected, so that no packet reaches a QP before it is
// ready. b is only used during the call. Every rank's Endpoint must use the
// same transport profile and MTU.
func NewSprayComm(ctx context.Context, ep *transport.Endpoint, b *Bootstrap) (*SprayComm, error) {
	return NewSprayCommConfig(ctx, ep, b, SprayConfig{})
}

// SprayConfig configures NewSprayCommConfig. The zero value is usable and
// is what NewSprayComm uses.
type SprayConfig struct {
	// NextHop, when set, returns the MAC address that frames to a peer's
	// IP address go to: a router's when the peer is behind one (route.
	// Resolve's DstMAC), as on a routed leaf-spine fabric. Nil means the
	// peer's own MAC, right for peers on the same segment and for link/mem
	// and link/udp, which ignore MACs.
	NextHop func(ctx context.Context, peer netip.Addr) ([6]byte, error)
	// PSK, when set, secures every QP (transport.Conn.Secure): packets
	// authenticated, payloads encrypted unless IntegrityOnly. Each pair
	// of ranks' keys come by HKDF-SHA256 from the key, both ranks' fresh
	// nonces and both QPNs; every rank must hold the same key (at least
	// MinPSK bytes) and proves it in the bootstrap, where a rank with
	// another key, or none, fails NewSprayCommConfig with ErrBootstrap
	// naming it (TestSprayCommSecured).
	PSK           []byte
	IntegrityOnly bool
}

// MinPSK is the shortest SprayConfig.PSK, in bytes.
const MinPSK = 16

// secTrailerLen is what a rank with SprayConfig.PSK adds to its bootstrap
// contribution: its nonce and its proof of the key.
const secTrailerLen = 32 + sha256.Size

// rankProof is rank's proof that it holds psk, bound to its nonce.
func rankProof(psk []byte, rank int, nonce []byte) []byte {
	m := hmac.New(sha256.New, psk)
	m.Write([]byte("spray-collective-rank"))
	m.Write(binary.BigEndian.AppendUint32(nil, uint32(rank)))
	m.Write(nonce)
	return m.Sum(nil)
}

// pairSecurity returns rank me's keys for its QP to peer: the pair's
// secrets by HKDF-SHA256 from psk, the lower rank's nonce then the
// higher's (salt), and the lower rank's QPN then the higher's (info); the
// first 32 bytes carry the lower rank's packets.
func pairSecurity(cfg SprayConfig, me, peer int, myNonce, peerNonce []byte, myQPN, peerQPN uint32) (transport.Security, error) {
	salt := append(append([]byte(nil), myNonce...), peerNonce...)
	info := binary.BigEndian.AppendUint32([]byte("spray-collective-keys"), myQPN)
	info = binary.BigEndian.AppendUint32(info, peerQPN)
	if peer < me {
		salt = append(append([]byte(nil), peerNonce...), myNonce...)
		info = binary.BigEndian.AppendUint32([]byte("spray-collective-keys"), peerQPN)
		info = binary.BigEndian.AppendUint32(info, myQPN)
	}
	k, err := hkdf.Key(sha256.New, cfg.PSK, salt, string(info), 64)
	if err != nil {
		return transport.Security{}, err
	}
	s := transport.Security{IntegrityOnly: cfg.IntegrityOnly}
	copy(s.Send[:], k[:32])
	copy(s.Recv[:], k[32:])
	if peer < me {
		s.Send, s.Recv = s.Recv, s.Send
	}
	return s, nil
}

// NewSprayCommConfig is NewSprayComm with a SprayConfig.
func NewSprayCommConfig(ctx context.Context, ep *transport.Endpoint, b *Bootstrap, cfg SprayConfig) (*SprayComm, error) {
	if cfg.PSK != nil && len(cfg.PSK) < MinPSK {
		return nil, fmt.Errorf("%w: a pre-shared key of %d bytes, want at least %d", ErrInvalid, len(cfg.PSK), MinPSK)
	}
	s := &SprayComm{rank: b.rank, size: b.size, ep: ep, conns: make([]*transport.Conn, b.size)}
	s.closeCtx, s.close = context.WithCancel(context.Background())
	if b.size == 1 {
		return s, nil
	}
	infoLen := b.size * qpInfoLen
	blob := make([]byte, infoLen)
	var nonce []byte
	if cfg.PSK != nil {
		nonce = make([]byte, 32)
		rand.Read(nonce)
		blob = append(append(blob, nonce...), rankProof(cfg.PSK, b.rank, nonce)...)
	}
	for j := range b.size {
		if j == b.rank {
			continue
		}
		c, err := ep.CreateQP(ctx)
		if err != nil {
			return nil, fmt.Errorf("collective: create QP for rank %d: %w", j, err)
		}
		s.conns[j] = c
		putQPInfo(blob[j*qpInfoLen:], c.Info())
	}
	table, err := b.AllGather(ctx, blob)
	if err != nil {
		return nil, err
	}
	for j, c := range s.conns {
		if c == nil {
			continue
		}
		switch n := len(table[j]); {
		case n == infoLen+secTrailerLen && cfg.PSK == nil:
			return nil, fmt.Errorf("%w: rank %d secures its QPs with a pre-shared key, this rank (%d) has none", ErrBootstrap, j, b.rank)
		case n == infoLen && cfg.PSK != nil:
			return nil, fmt.Errorf("%w: rank %d has no pre-shared key, this rank (%d) secures its QPs with one", ErrBootstrap, j, b.rank)
		case n != len(blob):
			return nil, fmt.Errorf("%w: rank %d sent %d bytes of QP info, want %d", ErrBootstrap, j, n, len(blob))
		}
		qi := getQPInfo(table[j][b.rank*qpInfoLen:])
		if cfg.PSK != nil {
			peerNonce, proof := table[j][infoLen:infoLen+32], table[j][infoLen+32:]
			if !hmac.Equal(proof, rankProof(cfg.PSK, j, peerNonce)) {
				return nil, fmt.Errorf("%w: rank %d does not hold this rank's (%d) pre-shared key", ErrBootstrap, j, b.rank)
			}
			sec, err := pairSecurity(cfg, b.rank, j, nonce, peerNonce, c.Info().QPN, qi.QPN)
			if err == nil {
				err = c.Secure(ctx, sec)
			}
			if err != nil {
				return nil, fmt.Errorf("collective: securing the QP to rank %d: %w", j, err)
			}
		}
		if cfg.NextHop != nil {
			mac, err := cfg.NextHop(ctx, qi.IP)
			if err != nil {
				return nil, fmt.Errorf("collective: next hop to rank %d at %v: %w", j, qi.IP, err)
			}
			qi.MAC = mac
		}
		if err := c.Connect(ctx, qi); err != nil {
			return nil, fmt.Errorf("collective: connect QP to rank %d: %w", j, err)
		}
	}
	if err := b.Barrier(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Rank implements Comm.
func (s *SprayComm) Rank() int { return s.rank }

// Size implements Comm.
func (s *SprayComm) Size() int { return s.size }

// Conn returns the QP connected to peer, for statistics; nil for the
// caller's own rank.
func (s *SprayComm) Conn(peer int) *transport.Conn {
	if peer < 0 || peer >= s.size {
		return nil
	}
	return s.conns[peer]
}

// withClose returns a context that also ends when the Comm closes.
func (s *SprayComm) withClose(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closeCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *SprayComm) err(err error) error {
	if s.isClosed() {
		return ErrClosed
	}
	return err
}

// Send implements Comm: it returns when peer has acknowledged msg.
func (s *SprayComm) Send(ctx context.Context, peer int, msg []byte) error {
	if err := checkPeer(s, peer); err != nil {
		return err
	}
	if s.isClosed() {
		return ErrClosed
	}
	ctx, done := s.withClose(ctx)
	defer done()
	if err := s.conns[peer].Send(ctx, msg); err != nil {
		return s.err(fmt.Errorf("collective: send to rank %d: %w", peer, err))
	}
	return nil
}

// Recv implements Comm.
func (s *SprayComm) Recv(ctx context.Context, peer int) ([]byte, error) {
	if err := checkPeer(s, peer); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	ctx, done := s.withClose(ctx)
	defer done()
	m, err := s.conns[peer].Recv(ctx)
	if err != nil {
		return nil, s.err(fmt.Errorf("collective: receive from rank %d: %w", peer, err))
	}
	if m.HasImm || len(m.Data) != m.Len {
		return nil, fmt.Errorf("%w: rank %d sent a WRITE notice, not a message", ErrMismatch, peer)
	}
	return m.Data, nil
}

func (s *SprayComm) isClosed() bool {
	return s.closeCtx.Err() != nil
}

// Close makes pending and later calls return ErrClosed. It is idempotent.
func (s *SprayComm) Close() error {
	s.close()
	return nil
}
