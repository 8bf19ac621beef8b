package main

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/sprayfabric/spray/transport"
)

// onDemand reports whether the provider reaches peers with QPs made on
// demand (transport.Endpoint.Peer: the first message travels in the first
// round trip, no connection manager handshake) rather than spray.Dial.
// FI_SPRAY_ON_DEMAND=0 turns it off; every rank of a job must agree, since
// an endpoint accepts on-demand QPs only when it is on.
var onDemand = sync.OnceValue(func() bool { return os.Getenv("FI_SPRAY_ON_DEMAND") != "0" })

// peerConn is an on-demand transport.Conn as serve reads it.
type peerConn struct{ *transport.Conn }

func (c peerConn) Close() error {
	_, err := c.Destroy(context.Background())
	return err
}

func (c peerConn) Remote() transport.QPInfo { return transport.QPInfo{IP: c.RemoteIP()} }

func (c peerConn) QP() *transport.Conn { return c.Conn }

// recvConn is what serve reads a peer's messages from: a connection the
// connection manager made (*spray.Conn) or an on-demand one (peerConn).
type recvConn interface {
	Recv(ctx context.Context) (transport.Message, error)
	Close() error
	Remote() transport.QPInfo
	QP() *transport.Conn // the QP a polling reader takes messages from
}

// servePeer serves c's messages unless a goroutine already does: a peer's
// messages to this endpoint come on the QP that either side made first.
func (ep *endpoint) servePeer(c *transport.Conn) {
	if _, loaded := ep.served.LoadOrStore(c, struct{}{}); loaded {
		return
	}
	ep.wg.Go(func() {
		ep.serve(peerConn{c}, true)
		ep.served.Delete(c)
	})
}

// acceptPeerLoop serves the QPs that peers' first packets made.
func (ep *endpoint) acceptPeerLoop() {
	for {
		c, err := ep.sp.AcceptPeer(ep.ctx)
		if err != nil {
			return
		}
		ep.servePeer(c)
	}
}

// reachOnDemand returns p's on-demand Conn, made without a round trip,
// and serves what the peer sends back on it.
func (ep *endpoint) reachOnDemand(ctx context.Context, p *peer) (*transport.Conn, error) {
	c, err := ep.sp.Peer(ctx, transport.PeerAddr{IP: p.name.Addr()})
	if err != nil {
		return nil, err
	}
	ep.servePeer(c)
	return c, nil
}

// post posts wr on p's connection; an on-demand Conn that closed for
// idleness is replaced once (the request was not posted on it).
func (ep *endpoint) post(p *peer, wr transport.WorkRequest) error {
	if p.qp == nil {
		return p.conn.QP().Post(ep.ctx, wr)
	}
	err := p.qp.Post(ep.ctx, wr)
	if errors.Is(err, transport.ErrIdleClosed) {
		c, rerr := ep.reachOnDemand(ep.ctx, p)
		if rerr != nil {
			return rerr
		}
		p.qp = c
		err = c.Post(ep.ctx, wr)
	}
	return err
}
