package collective

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
)

// TCPConfig configures a TCPComm. The zero value is usable.
type TCPConfig struct {
	// Listen is the local address that peers connect to; "" means
	// "127.0.0.1:0" (loopback, any port). Set it to an address of the host
	// for a world that spans hosts.
	Listen string
	// Advertise is the address that peers dial; "" means Listen's actual
	// address, with an unspecified IP (listening on ":port") replaced by the
	// local IP of the bootstrap connection.
	Advertise string
	// MaxMessage bounds a message that Recv accepts; 0 means 1 GiB.
	MaxMessage int64
}

// TCPComm is a Comm over kernel TCP: one connection per pair of ranks,
// each message prefixed by its 8-byte length.
//
// The zero value is not usable: get one from NewTCPComm. It is safe for
// concurrent use as Comm says. A call cancelled by its context before it
// moved a byte can be retried; one cancelled half way through a message
// breaks the connection to that peer: later calls to the peer return
// ErrBroken.
type TCPComm struct {
	rank, size int
	max        int64
	peers      []*tcpPeer

	closeOnce sync.Once
}

type tcpPeer struct {
	c net.Conn

	smu     sync.Mutex
	sbroken error

	rmu     sync.Mutex
	rd      *bufio.Reader
	rbroken error
	hdr     [8]byte
}

// NewTCPComm listens, exchanges listen addresses through b, and connects
// to every other rank: a rank dials the ranks below it and accepts the
// ranks above it. b is only used during the call.
func NewTCPComm(ctx context.Context, b *Bootstrap, cfg TCPConfig) (*TCPComm, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = 1 << 30
	}
	if cfg.MaxMessage < 0 {
		return nil, fmt.Errorf("%w: MaxMessage %d", ErrInvalid, cfg.MaxMessage)
	}
	t := &TCPComm{rank: b.rank, size: b.size, max: cfg.MaxMessage, peers: make([]*tcpPeer, b.size)}
	if b.size == 1 {
		return t, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("collective: listen %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	adv := cfg.Advertise
	if adv == "" {
		la := ln.Addr().(*net.TCPAddr)
		if la.IP.IsUnspecified() {
			for _, c := range b.conns {
				if c != nil {
					la = &net.TCPAddr{IP: c.LocalAddr().(*net.TCPAddr).IP, Port: la.Port}
					break
				}
			}
		}
		adv = la.String()
	}
	addrs, err := b.AllGather(ctx, []byte(adv))
	if err != nil {
		return nil, err
	}
	if err := t.connect(ctx, ln, addrs); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *TCPComm) connect(ctx context.Context, ln net.Listener, addrs [][]byte) error {
	var d net.Dialer
	for j := 0; j < t.rank; j++ {
		c, err := d.DialContext(ctx, "tcp", string(addrs[j]))
		if err != nil {
			return fmt.Errorf("%w: dial rank %d at %s: %w", ErrBootstrap, j, addrs[j], err)
		}
		var h [16]byte
		binary.BigEndian.PutUint32(h[0:], bootMagic)
		binary.BigEndian.PutUint32(h[4:], bootVersion)
		binary.BigEndian.PutUint32(h[8:], uint32(t.rank))
		binary.BigEndian.PutUint32(h[12:], uint32(t.size))
		if err := withConnCtx(ctx, c, func() error { _, err := c.Write(h[:]); return err }); err != nil {
			c.Close()
			return fmt.Errorf("%w: hello to rank %d: %w", ErrBootstrap, j, err)
		}
		t.peers[j] = newTCPPeer(c)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for n := t.rank + 1; n < t.size; n++ {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: accept: %w", ErrBootstrap, err)
		}
		rd := bufio.NewReaderSize(c, 256<<10)
		var h [16]byte
		if err := withConnCtx(ctx, c, func() error { _, err := io.ReadFull(rd, h[:]); return err }); err != nil {
			c.Close()
			return fmt.Errorf("%w: hello from %v: %w", ErrBootstrap, c.RemoteAddr(), err)
		}
		r := int(binary.BigEndian.Uint32(h[8:]))
		if binary.BigEndian.Uint32(h[0:]) != bootMagic || binary.BigEndian.Uint32(h[4:]) != bootVersion ||
			int(binary.BigEndian.Uint32(h[12:])) != t.size || r <= t.rank || r >= t.size || t.peers[r] != nil {
			c.Close()
			return fmt.Errorf("%w: bad hello from %v (rank %d)", ErrBootstrap, c.RemoteAddr(), r)
		}
		p := newTCPPeer(c)
		p.rd = rd
		t.peers[r] = p
	}
	for _, p := range t.peers {
		if p != nil {
			p.c.SetDeadline(noDeadline)
		}
	}
	return nil
}

func newTCPPeer(c net.Conn) *tcpPeer {
	return &tcpPeer{c: c, rd: bufio.NewReaderSize(c, 256<<10)}
}

// Rank implements Comm.
func (t *TCPComm) Rank() int { return t.rank }

// Size implements Comm.
func (t *TCPComm) Size() int { return t.size }

func (t *TCPComm) peer(peer int) (*tcpPeer, error) {
	if err := checkPeer(t, peer); err != nil {
		return nil, err
	}
	return t.peers[peer], nil
}

// Send implements Comm: it returns once the kernel has taken the message.
func (t *TCPComm) Send(ctx context.Context, peer int, msg []byte) error {
	p, err := t.peer(peer)
	if err != nil {
		return err
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	if p.sbroken != nil {
		return p.sbroken
	}
	var h [8]byte
	binary.BigEndian.PutUint64(h[:], uint64(len(msg)))
	var n int64
	err = withConnDeadline(ctx, p.c, true, func() error {
		bufs := net.Buffers{h[:], msg}
		var err error
		n, err = bufs.WriteTo(p.c)
		return err
	})
	if err != nil && n == 0 && ctx.Err() != nil {
		return err // nothing written: the stream is intact
	}
	if err != nil {
		err = t.fail(peer, err)
		p.sbroken = fmt.Errorf("%w: send to rank %d: %w", ErrBroken, peer, err)
	}
	return err
}

// Recv implements Comm. The returned slice is newly allocated.
func (t *TCPComm) Recv(ctx context.Context, peer int) ([]byte, error) {
	p, err := t.peer(peer)
	if err != nil {
		return nil, err
	}
	p.rmu.Lock()
	defer p.rmu.Unlock()
	if p.rbroken != nil {
		return nil, p.rbroken
	}
	var m []byte
	var started bool
	err = withConnDeadline(ctx, p.c, false, func() error {
		k, err := io.ReadFull(p.rd, p.hdr[:])
		started = k > 0
		if err != nil {
			return err
		}
		n := binary.BigEndian.Uint64(p.hdr[:])
		if n > uint64(t.max) {
			return fmt.Errorf("%w: rank %d sent %d bytes, bound %d", ErrTooLarge, peer, n, t.max)
		}
		m = make([]byte, n)
		_, err = io.ReadFull(p.rd, m)
		return err
	})
	if err != nil && !started && ctx.Err() != nil {
		return nil, err // nothing read: the stream is intact
	}
	if err != nil {
		err = t.fail(peer, err)
		p.rbroken = fmt.Errorf("%w: receive from rank %d: %w", ErrBroken, peer, err)
		return nil, err
	}
	return m, nil
}

// fail turns an I/O error into the error to report: ErrClosed once the Comm
// is closed.
func (t *TCPComm) fail(peer int, err error) error {
	if isClosedErr(err) {
		return ErrClosed
	}
	return err
}

// Close closes every connection; it is idempotent.
func (t *TCPComm) Close() error {
	t.closeOnce.Do(func() {
		for _, p := range t.peers {
			if p != nil {
				p.c.Close()
			}
		}
	})
	return nil
}
