package collective

import (
	"context"
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
}

// NewSprayCommConfig is NewSprayComm with a SprayConfig.
func NewSprayCommConfig(ctx context.Context, ep *transport.Endpoint, b *Bootstrap, cfg SprayConfig) (*SprayComm, error) {
	s := &SprayComm{rank: b.rank, size: b.size, ep: ep, conns: make([]*transport.Conn, b.size)}
	s.closeCtx, s.close = context.WithCancel(context.Background())
	if b.size == 1 {
		return s, nil
	}
	blob := make([]byte, b.size*qpInfoLen)
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
		if len(table[j]) != b.size*qpInfoLen {
			return nil, fmt.Errorf("%w: rank %d sent %d bytes of QP info, want %d", ErrBootstrap, j, len(table[j]), b.size*qpInfoLen)
		}
		qi := getQPInfo(table[j][b.rank*qpInfoLen:])
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
