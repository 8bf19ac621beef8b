package bench

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

// A perf server with a pre-shared key serves clients that hold it, with
// the protection each asks for (bytes intact, the protection reported),
// and refuses, naming the key, a client with another key or none; a
// client with a key refuses a server without one.
func TestRemotePerfSecure(t *testing.T) {
	p := newPair(t)
	seed := testutil.Seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	psk := []byte("00112233445566778899aabbccddeeff")
	serve := func(port uint16, own []byte) string {
		var ln net.Listener
		if err := p.B.Do(func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(p.B.IP, port).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() {
			served <- p.B.Do(func() error { return ServePerf(ctx, ln, RemoteRun{Perf: PerfConfig{PSK: own}, Logf: t.Logf}) })
		}()
		t.Cleanup(func() { cancel(); <-served })
		return ln.Addr().String()
	}
	secured, clear := serve(DefaultControlPort, psk), serve(DefaultControlPort+1, nil)
	dial := func(addr string, pc PerfConfig) (PerfResult, error) {
		pc.Total, pc.MsgSize, pc.Pings, pc.Seed = 8<<20, 256<<10, 20, seed
		var res PerfResult
		err := p.A.Do(func() (err error) {
			res, err = DialPerf(ctx, addr, RemoteRun{Kind: KindUDP, Transport: transport.Config{Seed: seed}, Perf: pc})
			return err
		})
		return res, err
	}
	for _, io := range []bool{false, true} {
		res, err := dial(secured, PerfConfig{PSK: psk, IntegrityOnly: io})
		want := map[bool]string{false: ProtectionEncrypted, true: ProtectionIntegrity}[io]
		if err != nil || !res.Integrity || res.Protection != want {
			t.Fatalf("secured run (integrity only %v): %v, integrity %v, protection %q, want %q", io, err, res.Integrity, res.Protection, want)
		}
	}
	for _, tc := range []struct {
		name string
		addr string
		pc   PerfConfig
		want string
	}{
		{"wrong key", secured, PerfConfig{PSK: []byte("ffeeddccbbaa99887766554433221100")}, "pre-shared key"},
		{"no key", secured, PerfConfig{}, "pre-shared key"},
		{"server without key", clear, PerfConfig{PSK: psk}, "pre-shared key"},
	} {
		_, err := dial(tc.addr, tc.pc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error naming the %s", tc.name, err, tc.want)
		}
		if tc.name == "wrong key" && !errors.Is(err, ErrPerfAuth) {
			t.Fatalf("%s: %v, want ErrPerfAuth", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}
