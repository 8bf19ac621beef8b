package collective_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/link/pcap"
	"github.com/sprayfabric/spray/transport"
)

// syncBuffer is a bytes.Buffer for the captures of several links.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	pw *pcap.Writer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Bytes flushes the capture and returns it.
func (s *syncBuffer) Bytes() []byte {
	s.pw.Flush()
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// securedWorld builds a world of len(cfgs) ranks over link/mem, rank r
// with cfgs[r], every frame captured.
func securedWorld(t *testing.T, cfgs []SprayConfig) ([]*SprayComm, *syncBuffer, error) {
	t.Helper()
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed}, clock.NewSystem())
	t.Cleanup(func() { fab.Close() })
	capture := &syncBuffer{}
	pw, err := pcap.NewWriter(capture)
	if err != nil {
		t.Fatal(err)
	}
	capture.pw = pw
	eps := make([]*transport.Endpoint, len(cfgs))
	for r := range eps {
		p, err := fab.NewPort([6]byte{2, 0, 0, 0, 8, byte(r + 1)}, netip.AddrFrom4([4]byte{10, 8, 0, byte(r + 1)}))
		if err != nil {
			t.Fatal(err)
		}
		if eps[r], err = transport.NewEndpoint(pcap.Wrap(p, pw), transport.Config{Seed: seed + uint64(r)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eps[r].Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, err := collectivetest.World(ctx, len(cfgs), func(ctx context.Context, r int, b *Bootstrap) (*SprayComm, error) {
		return NewSprayCommConfig(ctx, eps[r], b, cfgs[r])
	})
	for _, c := range comms {
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return comms, capture, err
}

// Ranks that share a pre-shared key exchange messages intact over secured
// QPs: encrypted, none of a message's bytes show in a capture of the
// links; integrity only, they do, as in clear. A rank with another key or
// none fails the world's set-up with ErrBootstrap naming the key, and a
// key too short is refused.
func TestSprayCommSecured(t *testing.T) {
	psk := []byte("0123456789abcdef0123456789abcdef")
	marker := bytes.Repeat([]byte("spray secret payload "), 200)
	for _, tc := range []struct {
		name     string
		cfg      SprayConfig
		readable bool
	}{
		{"clear", SprayConfig{}, true},
		{"encrypted", SprayConfig{PSK: psk}, false},
		{"integrity", SprayConfig{PSK: psk, IntegrityOnly: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, capture, err := securedWorld(t, []SprayConfig{tc.cfg, tc.cfg, tc.cfg})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- comms[0].Send(ctx, 2, marker) }()
			got, err := comms[2].Recv(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, marker) {
				t.Fatalf("received %d bytes, not the %d sent", len(got), len(marker))
			}
			if seen := bytes.Contains(capture.Bytes(), marker[:64]); seen != tc.readable {
				t.Fatalf("the message readable in the capture: %v, want %v", seen, tc.readable)
			}
		})
	}
	other := []byte("fedcba9876543210fedcba9876543210")
	for _, tc := range []struct {
		name string
		cfgs []SprayConfig
	}{
		{"another key", []SprayConfig{{PSK: psk}, {PSK: psk}, {PSK: other}}},
		{"no key", []SprayConfig{{PSK: psk}, {}, {PSK: psk}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := securedWorld(t, tc.cfgs)
			if !errors.Is(err, ErrBootstrap) || !strings.Contains(err.Error(), "pre-shared key") {
				t.Fatalf("world: %v, want ErrBootstrap naming the pre-shared key", err)
			}
			t.Logf("world: %v", err)
		})
	}
	t.Run("short key", func(t *testing.T) {
		_, _, err := securedWorld(t, []SprayConfig{{PSK: []byte("short")}, {PSK: []byte("short")}})
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("world: %v, want ErrInvalid", err)
		}
	})
}
