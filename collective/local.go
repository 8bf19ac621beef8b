package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// localWorld runs the bootstrap and mk for every rank of an n-rank world
// in this process, concurrently, with rank 0 listening on loopback.
func localWorld[C Comm](ctx context.Context, n int, mk func(ctx context.Context, rank int, b *Bootstrap) (C, error)) ([]C, error) {
	if n < 1 || n > MaxWorld {
		return nil, fmt.Errorf("%w: world of %d ranks", ErrInvalid, n)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	comms := make([]C, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := BootstrapConfig{Rank: r, Size: n, Addr: ln.Addr().String()}
			if r == 0 {
				cfg.Listener = ln
			}
			b, err := NewBootstrap(ctx, cfg)
			if err != nil {
				errs[r] = err
				cancel()
				return
			}
			defer b.Close()
			comms[r], errs[r] = mk(ctx, r, b)
			if errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for r, c := range comms {
			if errs[r] == nil {
				c.Close()
			}
		}
		return nil, err
	}
	return comms, nil
}

// LocalTCP builds a world of n ranks in this process, joined by loopback
// TCP connections, through the same bootstrap that separate processes use.
// Close every Comm when done.
func LocalTCP(ctx context.Context, n int, cfg TCPConfig) ([]*TCPComm, error) {
	return localWorld(ctx, n, func(ctx context.Context, _ int, b *Bootstrap) (*TCPComm, error) {
		return NewTCPComm(ctx, b, cfg)
	})
}

// LocalSprayConfig configures LocalSpray. The zero value is usable.
type LocalSprayConfig struct {
	// Fabric configures the link/mem fabric (loss, reordering, delay...);
	// the zero value is a perfect fabric.
	Fabric mem.Config
	// Transport configures every rank's Endpoint; rank r's seed is
	// Transport.Seed+r. The zero value is the Spray profile's defaults,
	// except that a zero MinRTO means LocalRTOFloor and a zero MaxRetries
	// means LocalMaxRetries: every rank's engine shares this process's
	// cores, and on a loaded machine an ACK can wait for the scheduler far
	// longer than the transport's 1 ms floor, which made QPs fail with no
	// frame lost.
	Transport transport.Config
}

// Retransmission bounds of LocalSpray's endpoints when its config leaves
// them zero.
const (
	LocalRTOFloor   = 5 * time.Millisecond
	LocalMaxRetries = 20
)

// LocalSprayWorld is a world of ranks in one process over spray on one
// link/mem fabric: one port and one Endpoint per rank.
type LocalSprayWorld struct {
	Fabric    *mem.Fabric
	Endpoints []*transport.Endpoint
	Comms     []*SprayComm
}

// LocalSpray builds a world of n ranks over one link/mem fabric on the
// system clock: n ports (MAC 02:00:00:00:hi:lo, IP 10.0.hi.lo for rank
// hi*256+lo, plus one), n Endpoints, and a SprayComm per rank connected
// through the bootstrap on loopback TCP. Close the world when done.
func LocalSpray(ctx context.Context, n int, cfg LocalSprayConfig) (*LocalSprayWorld, error) {
	if n < 1 || n > MaxWorld {
		return nil, fmt.Errorf("%w: world of %d ranks", ErrInvalid, n)
	}
	w := &LocalSprayWorld{Fabric: mem.NewFabric(cfg.Fabric, clock.NewSystem()), Endpoints: make([]*transport.Endpoint, n)}
	for r := range n {
		id := r + 1
		mac := [6]byte{0x02, 0, 0, 0, byte(id >> 8), byte(id)}
		ip := netip.AddrFrom4([4]byte{10, 0, byte(id >> 8), byte(id)})
		p, err := w.Fabric.NewPort(mac, ip)
		if err != nil {
			w.Close()
			return nil, err
		}
		tc := cfg.Transport
		if tc.Seed != 0 { // 0: every rank unpredictable
			tc.Seed += uint64(r)
		}
		if tc.MinRTO == 0 {
			tc.MinRTO = LocalRTOFloor
		}
		if tc.MaxRetries == 0 {
			tc.MaxRetries = LocalMaxRetries
		}
		ep, err := transport.NewEndpoint(p, tc)
		if err != nil {
			p.Close()
			w.Close()
			return nil, err
		}
		w.Endpoints[r] = ep
	}
	comms, err := localWorld(ctx, n, func(ctx context.Context, r int, b *Bootstrap) (*SprayComm, error) {
		return NewSprayComm(ctx, w.Endpoints[r], b)
	})
	if err != nil {
		w.Close()
		return nil, err
	}
	w.Comms = comms
	return w, nil
}

// Close closes the Comms, the Endpoints and the fabric.
func (w *LocalSprayWorld) Close() error {
	for _, c := range w.Comms {
		c.Close()
	}
	for _, ep := range w.Endpoints {
		if ep != nil {
			ep.Close()
		}
	}
	return w.Fabric.Close()
}
