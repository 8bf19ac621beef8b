package cm

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/udp"
	"github.com/sprayfabric/spray/transport"
)

// Options is what the tests set on an endpoint: the connection manager's
// Config and the transport's, as the root package's Options gives them.
type Options struct {
	Addr             netip.Addr // a kernel UDP link on this address (openUDP)
	Link             LinkKind
	Port             uint16
	MTU              int
	Profile          transport.Profile
	CMAddr           string
	Transport        transport.Config
	CloseTimeout     time.Duration
	HandshakeTimeout time.Duration
	MaxHandshakes    int
	TrustPeerIP      bool
	Security         *Security
	Logf             func(format string, args ...any)
}

// NewEndpoint starts a transport endpoint over l and its connection
// manager, as the root package's NewEndpoint does.
func NewEndpoint(l link.Link, o Options) (*Endpoint, error) {
	cfg := o.Transport
	cfg.Profile = o.Profile
	if o.MTU != 0 {
		cfg.MTU = o.MTU + 14
	}
	frame := cfg.MTU
	if frame == 0 {
		frame = 1514
		if fs := l.Info().FrameSize; fs > 0 {
			frame = min(fs, frame)
		}
	}
	te, err := transport.NewEndpoint(l, cfg)
	if err != nil {
		l.Close()
		return nil, err
	}
	ep, err := New(te, Config{CMAddr: o.CMAddr, Profile: o.Profile, Kind: o.Link, MTU: frame - 14, DataPort: o.Port,
		CloseTimeout: o.CloseTimeout, HandshakeTimeout: o.HandshakeTimeout, MaxHandshakes: o.MaxHandshakes,
		TrustPeerIP: o.TrustPeerIP, Security: o.Security, Logf: o.Logf})
	if err != nil {
		te.Close()
		return nil, err
	}
	return ep, nil
}

// Open opens a kernel UDP link on o.Addr (port o.Port, MTU o.MTU or
// 1500) and an endpoint over it, as the root package's Open does for
// LinkUDP on loopback.
func Open(_ context.Context, o Options) (*Endpoint, error) {
	if o.Link != LinkUDP {
		return nil, fmt.Errorf("the tests open kernel UDP links only, not %s", o.Link)
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	l, err := udp.Open(udp.Config{Local: o.Addr, Port: o.Port, PeerPort: o.Port, FrameSize: o.MTU + 14})
	if err != nil {
		return nil, err
	}
	if o.CMAddr == "" {
		o.CMAddr = netip.AddrPortFrom(o.Addr, Port).String()
	}
	return NewEndpoint(l, o)
}
