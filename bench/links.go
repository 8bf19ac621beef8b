package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/sprayfabric/spray/ebpf"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/raw"
	"github.com/sprayfabric/spray/link/udp"
	"github.com/sprayfabric/spray/xdp"
)

// Link kinds a workload can run over. TCP is kernel TCP between the same
// two addresses, the reference.
const (
	KindXDP = "xdp"
	KindRaw = "raw"
	KindUDP = "udp"
	KindTCP = "tcp"
)

// LinkSpec says which link to open on which interface.
type LinkSpec struct {
	Kind    string // KindXDP, KindRaw or KindUDP
	Ifindex int
	MAC     [6]byte
	IP      netip.Addr
	// Ports are the UDP source ports (entropies) a KindUDP link binds, one
	// socket each; other kinds send from any port.
	Ports []uint16
	// Port is the UDP port a KindUDP link receives on, PeerPort the one it
	// sends to; 0 means 4791 (udp.RoCEPort).
	Port, PeerPort uint16
	// FrameSize is the largest frame, Ethernet header included; 0 takes
	// the link's default.
	FrameSize int
	// Queues is the number of device queues to serve (KindXDP); 0 means 1.
	// Only queue 0 is served for now.
	Queues int
	// Allow restricts the steering program to frames from these peers
	// (KindXDP); empty allows every peer.
	Allow []netip.Addr
	// Logf receives log lines (the AF_XDP copy-mode fallback); nil: slog.
	Logf func(format string, args ...any)
}

// OpenLink opens a link in the calling thread's network namespace. For
// KindXDP it also loads the steering program, attaches it to the interface
// (native mode, generic as a fallback) and registers the socket; closing
// the link detaches it.
func OpenLink(spec LinkSpec) (link.Link, error) {
	switch spec.Kind {
	case KindUDP:
		return udp.Open(udp.Config{Local: spec.IP, Entropies: spec.Ports, FrameSize: spec.FrameSize, Port: spec.Port, PeerPort: spec.PeerPort})
	case KindRaw:
		return raw.Open(raw.Config{Ifindex: spec.Ifindex, MAC: spec.MAC, IP: spec.IP, FrameSize: spec.FrameSize})
	case KindXDP:
		return openXDP(spec)
	}
	return nil, fmt.Errorf("bench: unknown link kind %q (want xdp, raw, udp or tcp)", spec.Kind)
}

// XDPLink is an AF_XDP socket with the steering program that feeds it.
type XDPLink struct {
	*xdp.Socket
	Steering *ebpf.Steering
}

func openXDP(spec LinkSpec) (*XDPLink, error) {
	st, err := ebpf.LoadSteering(ebpf.SteerConfig{Local: []netip.Addr{spec.IP}, Allow: spec.Allow})
	if err != nil {
		return nil, err
	}
	if err := st.Attach(spec.Ifindex, ebpf.Auto); err != nil {
		st.Close()
		return nil, err
	}
	sock, err := xdp.Open(xdp.Config{Ifindex: spec.Ifindex, MAC: spec.MAC, IP: spec.IP, Logf: spec.Logf})
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := st.Register(sock.Queue(), sock.FD()); err != nil {
		sock.Close()
		st.Close()
		return nil, err
	}
	return &XDPLink{Socket: sock, Steering: st}, nil
}

// Close closes the socket and detaches the steering program.
func (l *XDPLink) Close() error {
	return errors.Join(l.Socket.Close(), l.Steering.Close())
}

// tcpPair connects a TCP client in one place to a server in another; the
// listen and dial functions run where their sockets must be made (inside a
// namespace, for a testbed).
func tcpPair(ctx context.Context, listen func() (net.Listener, error), dial func(addr string) (net.Conn, error)) (client, server net.Conn, err error) {
	ln, err := listen()
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		acc <- res{c, err}
	}()
	client, err = dial(ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	select {
	case r := <-acc:
		if r.err != nil {
			client.Close()
			return nil, nil, r.err
		}
		return client, r.c, nil
	case <-ctx.Done():
		client.Close()
		return nil, nil, ctx.Err()
	}
}
