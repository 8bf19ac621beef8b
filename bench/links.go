package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/sprayfabric/spray"
	"github.com/sprayfabric/spray/link"
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
	// Queues is the number of device queues to serve (KindXDP), from
	// queue 0; 0 means every RX queue the device has.
	Queues int
	// Allow restricts the steering program to frames from these peers
	// (KindXDP); empty allows every peer.
	Allow []netip.Addr
	// Logf receives log lines (the AF_XDP copy-mode fallback); nil: slog.
	Logf func(format string, args ...any)
	// BusyPoll asks AF_XDP sockets to busy poll their device queue
	// (spray.LinkConfig.BusyPoll): set with transport.Config.BusyPoll.
	BusyPoll bool
}

// OpenLink opens a link in the calling thread's network namespace with
// spray.OpenLink, the constructor spray.Open uses: for KindXDP the
// steering program attached to the interface (native mode, generic as a
// fallback) and one AF_XDP socket per RX queue registered in it; closing
// the link detaches it.
func OpenLink(spec LinkSpec) (link.Link, error) {
	var kind spray.LinkKind
	switch spec.Kind {
	case KindUDP:
		kind = spray.LinkUDP
	case KindRaw:
		kind = spray.LinkRaw
	case KindXDP:
		kind = spray.LinkXDP
	default:
		return nil, fmt.Errorf("bench: unknown link kind %q (want xdp, raw, udp or tcp)", spec.Kind)
	}
	l, _, _, err := spray.OpenLink(spray.LinkConfig{
		Kind:      kind,
		Interface: spray.Interface{Index: spec.Ifindex, MAC: spec.MAC, IP: spec.IP},
		FrameSize: spec.FrameSize,
		Queues:    spec.Queues,
		Port:      spec.Port,
		PeerPort:  spec.PeerPort,
		Entropies: spec.Ports,
		Allow:     spec.Allow,
		Logf:      spec.Logf,
		BusyPoll:  spec.BusyPoll,
	})
	return l, err
}

// XDPLink is an AF_XDP link on every queue of a device with the steering
// program that feeds it: what OpenLink returns for KindXDP.
type XDPLink = xdp.Link

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

// onceLogf returns a Logf that passes each format string to logf the first
// time it is used and drops it afterwards: a message that every socket
// logs alike (xdp's "driver offers no zero-copy") is said once. It is safe
// for concurrent use.
func onceLogf(logf func(format string, args ...any)) func(format string, args ...any) {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(format string, args ...any) {
		mu.Lock()
		first := !seen[format]
		seen[format] = true
		mu.Unlock()
		if first {
			logf(format, args...)
		}
	}
}
