package bench

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

// TestRemotePerf runs perf's server and client modes, as on two real hosts:
// the server in one namespace, the client in the other, found through the
// control connection, routes and neighbour resolution.
func TestRemotePerf(t *testing.T) {
	p := newPair(t)
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B.IP, DefaultControlPort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- p.B.Do(func() error { return ServePerf(ctx, ln, RemoteRun{Logf: t.Logf}) })
	}()
	addr := netip.AddrPortFrom(p.B.IP, DefaultControlPort).String()
	for _, kind := range []string{KindUDP, KindXDP, KindRaw, KindTCP} {
		for _, prof := range []transport.Profile{transport.Spray, transport.RoCE} {
			if kind == KindTCP && prof == transport.RoCE {
				continue
			}
			var res PerfResult
			err := p.A.Do(func() (err error) {
				res, err = DialPerf(ctx, addr, RemoteRun{
					Kind: kind, Transport: transport.Config{Profile: prof, Seed: seed},
					Perf: PerfConfig{Total: 32 << 20, MsgSize: 256 << 10, Pings: 50, Seed: seed},
				})
				return err
			})
			if err != nil {
				t.Fatalf("%s/%v: %v", kind, prof, err)
			}
			if !res.Integrity {
				t.Fatalf("%s/%v: integrity check failed", kind, prof)
			}
			t.Logf("%s/%s: %.2f Gbit/s, rtt p50 %.0f µs", res.Link, res.Profile, res.GoodputGbps, res.RTTp50us)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
