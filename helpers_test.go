package spray

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0, 1}
	macB = [6]byte{2, 0, 0, 0, 0, 2}
	ipA  = netip.MustParseAddr("10.9.0.1")
	ipB  = netip.MustParseAddr("10.9.0.2")
)

// memEndpoint opens an Endpoint on a new port of fab whose connection
// manager listens on a free loopback TCP port; each of set may change the
// options first.
func memEndpoint(t testing.TB, fab *mem.Fabric, mac [6]byte, ip netip.Addr, seed uint64, set ...func(*Options)) *Endpoint {
	t.Helper()
	p, err := fab.NewPort(mac, ip)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		CMAddr:       "127.0.0.1:0",
		TrustPeerIP:  true, // link/mem's addresses are not the host's
		CloseTimeout: 10 * time.Second,
		Transport:    transport.Config{Seed: seed, MinRTO: time.Millisecond, MaxRTO: 20 * time.Millisecond, MaxRetries: 10},
		Logf:         t.Logf,
	}
	for _, f := range set {
		f(&opts)
	}
	ep, err := NewEndpoint(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

func memPair(t *testing.T, mc mem.Config) (*mem.Fabric, *Endpoint, *Endpoint) {
	t.Helper()
	fab := mem.NewFabric(mc, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	return fab, memEndpoint(t, fab, macA, ipA, mc.Seed), memEndpoint(t, fab, macB, ipB, mc.Seed+1)
}

func qps(t *testing.T, ep *Endpoint) int {
	t.Helper()
	n, err := ep.QPs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// LoadPSK reads a key file, trimmed, and refuses a short one with
// ErrOptions.
func TestLoadPSK(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	os.WriteFile(good, append(bytes.Clone(key), '\n'), 0o600)
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if k, err := LoadPSK(good); err != nil || !bytes.Equal(k, key) {
		t.Fatalf("LoadPSK: %q, %v", k, err)
	}
	if _, err := LoadPSK(short); !errors.Is(err, ErrOptions) {
		t.Fatalf("LoadPSK of a short key: %v, want ErrOptions", err)
	}
}

// exchange sends msgs from a to b and checks that they arrive intact and
// in order.
func exchange(ctx context.Context, a, b *Conn, msgs [][]byte) error {
	return testutil.Exchange(ctx, a.Send, b.Recv, func(m transport.Message) []byte { return m.Data }, msgs)
}
