package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"

	"github.com/sprayfabric/spray/transport"
)

// SprayConn adapts a spray QP to Conn: Send posts asynchronously and keeps
// up to Depth messages in flight. It assumes the QP is the only one whose
// work requests complete on its Endpoint's CQ.
type SprayConn struct {
	C     *transport.Conn
	CQ    *transport.CQ
	Depth int // messages in flight; 0 means 32

	inflight int
	next     uint64
	comps    [64]transport.Completion
	last     transport.Message // returned by the last Recv, released by the next
}

func (s *SprayConn) reap(ctx context.Context, until int) error {
	for s.inflight > until {
		if err := s.CQ.Wait(ctx); err != nil {
			return err
		}
		n := s.CQ.Poll(s.comps[:])
		for _, c := range s.comps[:n] {
			s.inflight--
			if c.Err != nil {
				return c.Err
			}
		}
	}
	return nil
}

// Send posts msg.
func (s *SprayConn) Send(ctx context.Context, msg []byte) error {
	depth := s.Depth
	if depth <= 0 {
		depth = 32
	}
	if err := s.reap(ctx, depth-1); err != nil {
		return err
	}
	s.next++
	if err := s.C.Post(ctx, transport.WorkRequest{ID: s.next, Op: transport.OpSend, Data: msg}); err != nil {
		return err
	}
	s.inflight++
	return nil
}

// Flush waits for every posted message to complete.
func (s *SprayConn) Flush(ctx context.Context) error { return s.reap(ctx, 0) }

// Recv returns the next message, valid until the next Recv: it gives the
// previous one back to the transport's buffer pool, so that a receive loop
// allocates nothing per message, as TCPConn reuses its buffer.
func (s *SprayConn) Recv(ctx context.Context) ([]byte, error) {
	s.last.Release()
	m, err := s.C.Recv(ctx)
	s.last = m
	return m.Data, err
}

// TCPConn adapts a stream connection to Conn with an 8-byte length prefix
// per message. Context deadlines are applied to the connection.
type TCPConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
	hdr [8]byte
}

// NewTCPConn wraps c.
func NewTCPConn(c net.Conn) *TCPConn {
	return &TCPConn{c: c, r: bufio.NewReaderSize(c, 256<<10)}
}

func (t *TCPConn) deadline(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		t.c.SetDeadline(d)
	}
}

// Send writes the message (length prefix and payload in one writev).
func (t *TCPConn) Send(ctx context.Context, msg []byte) error {
	t.deadline(ctx)
	var h [8]byte
	binary.BigEndian.PutUint64(h[:], uint64(len(msg)))
	bufs := net.Buffers{h[:], msg}
	_, err := bufs.WriteTo(t.c)
	return err
}

// Flush returns at once: TCP acknowledges in the kernel.
func (t *TCPConn) Flush(context.Context) error { return nil }

// MaxTCPMessage bounds a message TCPConn accepts.
const MaxTCPMessage = 1 << 30

// Recv reads the next message into a reused buffer.
func (t *TCPConn) Recv(ctx context.Context) ([]byte, error) {
	t.deadline(ctx)
	if _, err := io.ReadFull(t.r, t.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint64(t.hdr[:])
	if n > MaxTCPMessage {
		return nil, fmt.Errorf("bench: TCP message of %d bytes exceeds %d", n, MaxTCPMessage)
	}
	if uint64(cap(t.buf)) >= n {
		t.buf = t.buf[:n]
		_, err := io.ReadFull(t.r, t.buf)
		return t.buf, err
	}
	// Grow with what arrives, not with what the header claims: eight
	// bytes must not make a server allocate a GiB per connection.
	t.buf = t.buf[:0]
	for uint64(len(t.buf)) < n {
		k := int(min(n-uint64(len(t.buf)), 4<<20))
		t.buf = slices.Grow(t.buf, k)
		if _, err := io.ReadFull(t.r, t.buf[len(t.buf):len(t.buf)+k]); err != nil {
			return nil, err
		}
		t.buf = t.buf[:len(t.buf)+k]
	}
	return t.buf, nil
}

// Close closes the connection.
func (t *TCPConn) Close() error { return t.c.Close() }
