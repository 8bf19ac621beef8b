package collective

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BootstrapConfig says how to find rank 0.
type BootstrapConfig struct {
	// Rank and Size place this process in the world: 0 <= Rank < Size.
	Rank, Size int
	// Addr is rank 0's bootstrap address (host:port). Rank 0 listens there
	// unless Listener is set; every other rank dials it, retrying until its
	// context ends while rank 0 is not listening yet.
	Addr string
	// Listener, on rank 0, is used instead of listening on Addr (tests
	// listen on port 0 and hand the address to the other ranks). Bootstrap
	// closes it when it has every rank's hello. Ignored on other ranks.
	Listener net.Listener
	// MaxBlob bounds one rank's contribution to a round; 0 means 1 MiB.
	MaxBlob int
	// Waiting, when not nil, is called every WaitEvery while NewBootstrap
	// waits for the world, with the ranks it still waits for: on rank 0
	// the ranks that have not joined, elsewhere rank 0 (until it answers).
	// It runs on a goroutine of its own and must not block. A rank whose
	// peer never comes is otherwise silent until its context ends.
	Waiting func(missing []int)
	// WaitEvery is the period of Waiting; 0 means 5 s.
	WaitEvery time.Duration
}

// MaxWorld bounds BootstrapConfig.Size.
const MaxWorld = 1 << 12

const (
	bootMagic   = 0x53505259 // "SPRY"
	bootVersion = 1
)

// Bootstrap is the rendezvous of a world of ranks over TCP: rank 0 gathers
// each round's contributions and sends everybody the whole table. Comms use
// it to exchange what they need to connect (addresses, QP numbers) and as a
// barrier afterwards. Messages are small; it is not a data path.
//
// The zero value is not usable: get one from NewBootstrap. Its rounds must
// be called by one goroutine at a time, by every rank in the same order.
// Close is idempotent.
type Bootstrap struct {
	rank, size int
	maxBlob    int

	// Rank 0: one connection per other rank, indexed by rank (nil at 0).
	// Other ranks: conns[0] is the connection to rank 0.
	conns []net.Conn
	rds   []*bufio.Reader
	// joinMu guards conns while NewBootstrap reports who it waits for.
	joinMu sync.Mutex

	closeOnce sync.Once
}

// NewBootstrap joins the world: rank 0 accepts a connection from every
// other rank, the others dial rank 0. It returns once every rank has
// joined, or with an error wrapping ErrBootstrap (or the context's error).
func NewBootstrap(ctx context.Context, cfg BootstrapConfig) (*Bootstrap, error) {
	if cfg.Size < 1 || cfg.Size > MaxWorld || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: rank %d of size %d (size at most %d)", ErrInvalid, cfg.Rank, cfg.Size, MaxWorld)
	}
	if cfg.MaxBlob == 0 {
		cfg.MaxBlob = 1 << 20
	}
	if cfg.MaxBlob < 0 {
		return nil, fmt.Errorf("%w: MaxBlob %d", ErrInvalid, cfg.MaxBlob)
	}
	b := &Bootstrap{rank: cfg.Rank, size: cfg.Size, maxBlob: cfg.MaxBlob, conns: make([]net.Conn, cfg.Size), rds: make([]*bufio.Reader, cfg.Size)}
	if cfg.Waiting != nil && cfg.Size > 1 {
		stop := b.reportWaiting(cfg)
		defer stop()
	}
	var err error
	if cfg.Rank == 0 {
		err = b.accept(ctx, cfg)
	} else {
		err = b.dial(ctx, cfg)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// reportWaiting calls cfg.Waiting every cfg.WaitEvery with the ranks
// that have not joined yet, until the returned stop is called.
// TestBootstrapWaiting guards it.
func (b *Bootstrap) reportWaiting(cfg BootstrapConfig) (stop func()) {
	every := cfg.WaitEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var missing []int
			b.joinMu.Lock()
			for r := range b.size {
				if r != b.rank && (b.rank == 0 || r == 0) && b.conns[r] == nil {
					missing = append(missing, r)
				}
			}
			b.joinMu.Unlock()
			if len(missing) > 0 {
				cfg.Waiting(missing)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// missing lists, on rank 0, the ranks that have not joined, as "1, 3".
func (b *Bootstrap) missing() string {
	b.joinMu.Lock()
	defer b.joinMu.Unlock()
	var m []string
	for r := 1; r < b.size; r++ {
		if b.conns[r] == nil {
			m = append(m, strconv.Itoa(r))
		}
	}
	return strings.Join(m, ", ")
}

// Rank returns this process's rank.
func (b *Bootstrap) Rank() int { return b.rank }

// Size returns the number of ranks.
func (b *Bootstrap) Size() int { return b.size }

func (b *Bootstrap) accept(ctx context.Context, cfg BootstrapConfig) error {
	if cfg.Size == 1 {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil
	}
	ln := cfg.Listener
	if ln == nil {
		var lc net.ListenConfig
		var err error
		if ln, err = lc.Listen(ctx, "tcp", cfg.Addr); err != nil {
			return fmt.Errorf("%w: listen: %w", ErrBootstrap, err)
		}
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for joined := 1; joined < cfg.Size; {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: rank(s) %s never joined %s: %w", ErrBootstrap, b.missing(), cfg.Addr, ctx.Err())
			}
			return fmt.Errorf("%w: accept: %w", ErrBootstrap, err)
		}
		keepAlive(c)
		rd := bufio.NewReader(c)
		hctx, hcancel := context.WithTimeout(ctx, helloTimeout)
		rank, err := b.readHello(hctx, c, rd)
		hcancel()
		if err != nil {
			c.Close()
			return err
		}
		if b.conns[rank] != nil {
			c.Close()
			return fmt.Errorf("%w: rank %d joined twice", ErrBootstrap, rank)
		}
		b.joinMu.Lock()
		b.conns[rank], b.rds[rank] = c, rd
		b.joinMu.Unlock()
		joined++
	}
	return nil
}

func (b *Bootstrap) readHello(ctx context.Context, c net.Conn, rd *bufio.Reader) (int, error) {
	var h [16]byte
	err := withConnCtx(ctx, c, func() error { _, err := io.ReadFull(rd, h[:]); return err })
	if err != nil {
		return 0, fmt.Errorf("%w: hello from %v: %w", ErrBootstrap, c.RemoteAddr(), err)
	}
	magic, ver := binary.BigEndian.Uint32(h[0:]), binary.BigEndian.Uint32(h[4:])
	rank, size := int(binary.BigEndian.Uint32(h[8:])), int(binary.BigEndian.Uint32(h[12:]))
	switch {
	case magic != bootMagic || ver != bootVersion:
		return 0, fmt.Errorf("%w: bad hello from %v (magic %#x version %d)", ErrBootstrap, c.RemoteAddr(), magic, ver)
	case size != b.size:
		return 0, fmt.Errorf("%w: rank %d says the world has %d ranks, rank 0 says %d", ErrBootstrap, rank, size, b.size)
	case rank <= 0 || rank >= b.size:
		return 0, fmt.Errorf("%w: hello from rank %d out of range [1, %d)", ErrBootstrap, rank, b.size)
	}
	return rank, nil
}

func (b *Bootstrap) dial(ctx context.Context, cfg BootstrapConfig) error {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", cfg.Addr)
		if err == nil {
			keepAlive(c)
			var h [16]byte
			binary.BigEndian.PutUint32(h[0:], bootMagic)
			binary.BigEndian.PutUint32(h[4:], bootVersion)
			binary.BigEndian.PutUint32(h[8:], uint32(cfg.Rank))
			binary.BigEndian.PutUint32(h[12:], uint32(cfg.Size))
			if err := withConnCtx(ctx, c, func() error { _, err := c.Write(h[:]); return err }); err != nil {
				c.Close()
				return fmt.Errorf("%w: hello: %w", ErrBootstrap, err)
			}
			b.joinMu.Lock()
			b.conns[0], b.rds[0] = c, bufio.NewReader(c)
			b.joinMu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: dial %s: %w", ErrBootstrap, cfg.Addr, ctx.Err())
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w: dial %s: %w", ErrBootstrap, cfg.Addr, err)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// AllGather contributes blob to a round and returns every rank's
// contribution, indexed by rank (the slice at this rank's index is blob).
func (b *Bootstrap) AllGather(ctx context.Context, blob []byte) ([][]byte, error) {
	if len(blob) > b.maxBlob {
		return nil, fmt.Errorf("%w: blob of %d bytes, bound %d", ErrTooLarge, len(blob), b.maxBlob)
	}
	out := make([][]byte, b.size)
	if b.rank != 0 {
		c := b.conns[0]
		if c == nil {
			return nil, ErrClosed
		}
		err := withConnCtx(ctx, c, func() error {
			if err := writeFrame(c, blob); err != nil {
				return err
			}
			for i := range out {
				m, err := readFrame(b.rds[0], b.maxBlob)
				if err != nil {
					return err
				}
				out[i] = m
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w: round with rank 0: %w", ErrBootstrap, err)
		}
		return out, nil
	}
	out[0] = blob
	for r := 1; r < b.size; r++ {
		c := b.conns[r]
		if c == nil {
			return nil, ErrClosed
		}
		err := withConnCtx(ctx, c, func() error {
			m, err := readFrame(b.rds[r], b.maxBlob)
			out[r] = m
			return err
		})
		if err != nil {
			// The world is broken: fail every rank's round now rather
			// than when its context ends.
			b.Close()
			return nil, fmt.Errorf("%w: round with rank %d: %w", ErrBootstrap, r, err)
		}
	}
	for r := 1; r < b.size; r++ {
		c := b.conns[r]
		err := withConnCtx(ctx, c, func() error {
			for _, m := range out {
				if err := writeFrame(c, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("%w: round with rank %d: %w", ErrBootstrap, r, err)
		}
	}
	return out, nil
}

// Barrier returns when every rank has called it.
func (b *Bootstrap) Barrier(ctx context.Context) error {
	_, err := b.AllGather(ctx, nil)
	return err
}

// Close closes the bootstrap connections. It is idempotent.
func (b *Bootstrap) Close() error {
	b.closeOnce.Do(func() {
		for _, c := range b.conns {
			if c != nil {
				c.Close()
			}
		}
	})
	return nil
}

// A rank that connected must say hello within helloTimeout; keepalives
// probe an idle bootstrap connection after keepIdle, every keepInterval,
// and give up after keepCount unanswered, so that a rank whose host
// vanished (no FIN) fails the next round within about 7 s instead of
// hanging it until the caller's context ends. A rank whose process dies
// closes its connections, and the round fails at once, naming the rank
// (TestBootstrapRankDies).
const (
	helloTimeout = 10 * time.Second
	keepIdle     = 2 * time.Second
	keepInterval = time.Second
	keepCount    = 5
)

func keepAlive(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepIdle, Interval: keepInterval, Count: keepCount})
	}
}

func writeFrame(w io.Writer, m []byte) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(m)))
	bufs := net.Buffers{h[:], m}
	_, err := bufs.WriteTo(w)
	return err
}

func readFrame(r io.Reader, limit int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w: frame of %d bytes, bound %d", ErrTooLarge, n, limit)
	}
	m := make([]byte, n)
	if _, err := io.ReadFull(r, m); err != nil {
		return nil, err
	}
	return m, nil
}
