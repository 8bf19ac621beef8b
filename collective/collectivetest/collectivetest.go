// Package collectivetest builds whole worlds of collective ranks inside one
// process, for tests, examples and single-host benchmarks: TCP joins the
// ranks by loopback TCP, Spray by spray QPs over one link/mem
// fabric. Both go through the same Bootstrap that separate processes use,
// with rank 0 listening on loopback.
//
// Every rank's engine shares this process's cores, so the figures of an
// in-process world say little about a real fabric.
package collectivetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

// World runs the bootstrap and mk for every rank of an n-rank world in this
// process, concurrently, with rank 0 listening on loopback, and returns the
// ranks' Comms in rank order. The first error cancels the other ranks; it
// then closes the Comms made and returns the errors joined.
func World[C collective.Comm](ctx context.Context, n int, mk func(ctx context.Context, rank int, b *collective.Bootstrap) (C, error)) ([]C, error) {
	if n < 1 || n > collective.MaxWorld {
		return nil, fmt.Errorf("%w: world of %d ranks", collective.ErrInvalid, n)
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
			cfg := collective.BootstrapConfig{Rank: r, Size: n, Addr: ln.Addr().String()}
			if r == 0 {
				cfg.Listener = ln
			}
			b, err := collective.NewBootstrap(ctx, cfg)
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

// TCP builds a world of n ranks in this process, joined by loopback
// TCP connections, through the same bootstrap that separate processes use.
// Close every Comm when done.
func TCP(ctx context.Context, n int, cfg collective.TCPConfig) ([]*collective.TCPComm, error) {
	return World(ctx, n, func(ctx context.Context, _ int, b *collective.Bootstrap) (*collective.TCPComm, error) {
		return collective.NewTCPComm(ctx, b, cfg)
	})
}

// SprayConfig configures Spray. The zero value is usable.
type SprayConfig struct {
	// Fabric configures the link/mem fabric (loss, reordering, delay...);
	// the zero value is a perfect fabric.
	Fabric mem.Config
	// Transport configures every rank's Endpoint; rank r's seed is
	// Transport.Seed+r. The zero value is the Spray profile's defaults,
	// except that a zero MinRTO means RTOFloor and a zero MaxRetries
	// means MaxRetries: every rank's engine shares this process's
	// cores, and on a loaded machine an ACK can wait for the scheduler far
	// longer than the transport's 1 ms floor, which made QPs fail with no
	// frame lost.
	Transport transport.Config
	// PSK and IntegrityOnly secure every QP (collective.SprayConfig).
	PSK           []byte
	IntegrityOnly bool
}

// Retransmission bounds of Spray's endpoints when its config leaves
// them zero. 100 retries declare a peer dead after about 10 s of silence
// (at the transport's 100 ms MaxRTO): ranks of one process starved by a
// loaded machine under the race detector are slow, not dead
// (TestCollectives).
const (
	RTOFloor   = 5 * time.Millisecond
	MaxRetries = 100
)

// SprayWorld is a world of ranks in one process over spray on one
// link/mem fabric: one port and one Endpoint per rank.
type SprayWorld struct {
	Fabric    *mem.Fabric
	Endpoints []*transport.Endpoint
	Comms     []*collective.SprayComm
}

// Spray builds a world of n ranks over one link/mem fabric on the
// system clock: n ports (MAC 02:00:00:00:hi:lo, IP 10.0.hi.lo for rank
// hi*256+lo, plus one), n Endpoints, and a SprayComm per rank connected
// through the bootstrap on loopback TCP. Close the world when done.
func Spray(ctx context.Context, n int, cfg SprayConfig) (*SprayWorld, error) {
	if n < 1 || n > collective.MaxWorld {
		return nil, fmt.Errorf("%w: world of %d ranks", collective.ErrInvalid, n)
	}
	w := &SprayWorld{Fabric: mem.NewFabric(cfg.Fabric, clock.NewSystem()), Endpoints: make([]*transport.Endpoint, n)}
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
			tc.MinRTO = RTOFloor
		}
		if tc.MaxRetries == 0 {
			tc.MaxRetries = MaxRetries
		}
		ep, err := transport.NewEndpoint(p, tc)
		if err != nil {
			p.Close()
			w.Close()
			return nil, err
		}
		w.Endpoints[r] = ep
	}
	comms, err := World(ctx, n, func(ctx context.Context, r int, b *collective.Bootstrap) (*collective.SprayComm, error) {
		return collective.NewSprayCommConfig(ctx, w.Endpoints[r], b, collective.SprayConfig{PSK: cfg.PSK, IntegrityOnly: cfg.IntegrityOnly})
	})
	if err != nil {
		w.Close()
		return nil, err
	}
	w.Comms = comms
	return w, nil
}

// Close closes the Comms, the Endpoints and the fabric.
func (w *SprayWorld) Close() error {
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
