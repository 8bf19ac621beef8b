package transport

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestEndpointSendTo: SendTo reaches a peer that accepts on demand,
// AcceptPeer hands the peer its Conn, whose Send answers on the same QP;
// both sides close the idle connection, and the next SendTo makes a new
// one. Messages arrive intact.
func TestEndpointSendTo(t *testing.T) {
	testutil.RealClock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, pa, pb := memPorts(t, mem.Config{})
	cfg := Config{Seed: testutil.Seed(t), Peers: PeerConfig{IdleTimeout: 100 * time.Millisecond}}
	ea, err := NewEndpoint(pa, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Seed++
	cfg.Peers.Accept = true
	eb, err := NewEndpoint(pb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	rng := testutil.Rand(t)
	msgs := randomMessages(rng, 6, 100000)
	b := PeerAddr{IP: ipB, MAC: macB}
	for _, m := range msgs[:3] {
		if err := ea.SendTo(ctx, b, m); err != nil {
			t.Fatal(err)
		}
	}
	cb, err := eb.AcceptPeer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cb.RemoteIP() != ipA {
		t.Fatalf("accepted a Conn from %v, want %v", cb.RemoteIP(), ipA)
	}
	for i, want := range msgs[:3] {
		m, err := cb.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Data, want) {
			t.Fatalf("message %d differs", i)
		}
		m.Release()
	}
	// The answer goes back on the same QP: A's Conn to B receives it.
	if err := cb.Send(ctx, msgs[3]); err != nil {
		t.Fatal(err)
	}
	ca, err := ea.Peer(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ca.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, msgs[3]) {
		t.Fatal("the answer differs")
	}
	// Idle: both sides close, then a new connection.
	pollUntil(t, 10*time.Second, func() bool {
		na, _ := ea.QPs(ctx)
		nb, _ := eb.QPs(ctx)
		return na == 0 && nb == 0
	}, "both sides close the idle QPs")
	if _, err := cb.Recv(ctx); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("Recv on a Conn closed idle: %v, want ErrDestroyed", err)
	}
	if err := ea.SendTo(ctx, b, msgs[4]); err != nil {
		t.Fatal(err)
	}
	cb2, err := eb.AcceptPeer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := cb2.Recv(ctx); err != nil || !bytes.Equal(m.Data, msgs[4]) {
		t.Fatalf("after the idle close: %v", err)
	}
	sa, _ := ea.PeerStats(ctx)
	sb, _ := eb.PeerStats(ctx)
	// At least two QPs made and one closed idle on each side; on the real
	// clock a slow host may see the second QP close idle too, or a SendTo
	// cross a close notice and make one more (it retries once).
	if sa.Initiated < 2 || sb.Accepted < 2 || sb.Accepted > sa.Initiated ||
		sa.IdleClosed+sa.PeerClosed < 1 || sb.IdleClosed+sb.PeerClosed < 1 {
		t.Fatalf("stats A %+v, B %+v", sa, sb)
	}
}

// TestEndpointPeerRefused: an endpoint that does not accept on demand
// drops first packets (PeerStats.Refused) and makes no QP; the sender's
// SendTo ends with its context.
func TestEndpointPeerRefused(t *testing.T) {
	testutil.RealClock(t)
	_, pa, pb := memPorts(t, mem.Config{})
	ea, err := NewEndpoint(pa, Config{Seed: testutil.Seed(t), MaxRetries: 2, MinRTO: time.Millisecond, MaxRTO: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := NewEndpoint(pb, Config{Seed: testutil.Seed(t) + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ea.SendTo(ctx, PeerAddr{IP: ipB, MAC: macB}, []byte("hello")); !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("SendTo a peer that does not accept: %v, want ErrPeerUnreachable", err)
	}
	st, _ := eb.PeerStats(ctx)
	n, _ := eb.QPs(ctx)
	if st.Refused == 0 || n != 0 {
		t.Fatalf("refusing endpoint: %+v, %d QPs", st, n)
	}
	// The failed QP is not reused: the next SendTo makes another.
	if err := ea.SendTo(ctx, PeerAddr{IP: ipB, MAC: macB}, []byte("again")); !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("second SendTo: %v, want ErrPeerUnreachable", err)
	}
	if sa, _ := ea.PeerStats(ctx); sa.Initiated != 2 {
		t.Fatalf("initiator made %d QPs, want 2", sa.Initiated)
	}
	if n, _ := ea.QPs(ctx); n != 1 {
		t.Fatalf("initiator holds %d QPs, want the last one only", n)
	}
}

// pollUntil polls cond until it holds, failing the test after d.
func pollUntil(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s did not happen", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPeerSteered: between two endpoints of four engines on multi-queue
// ports, an on-demand QP made on engine 1 asks its acceptor (on engine 0,
// which owns QP 0) to send from entropies that this side's RSS delivers
// to queue 1: the initiator's side hands no frame over, and messages both
// ways arrive intact.
func TestPeerSteered(t *testing.T) {
	testutil.RealClock(t)
	const queues = 4
	seed := testutil.Seed(t)
	fab := mem.NewFabric(mem.Config{Seed: seed, Delay: 5 * time.Microsecond}, clock.NewSystem())
	defer fab.Close()
	ma, _ := fab.NewMultiPort(macA, ipA, queues, nil)
	mb, _ := fab.NewMultiPort(macB, ipB, queues, nil)
	ea, err := NewEndpoint(ma, Config{Seed: seed, MaxRetries: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := NewEndpoint(mb, Config{Seed: seed + 1, MaxRetries: 50, Peers: PeerConfig{Accept: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ea.CreateQP(ctx) // so that the QP below is not on engine 0
	to := PeerAddr{IP: ipB, MAC: macB}
	ca, err := ea.Peer(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	if ca.s.idx != 1 {
		t.Fatalf("the on-demand QP is on engine %d, want 1", ca.s.idx)
	}
	rng := testutil.Rand(t)
	ab, ba := randomMessages(rng, 3, 300000), randomMessages(rng, 3, 300000)
	for _, m := range ab {
		if err := ea.SendTo(ctx, to, m); err != nil {
			t.Fatal(err)
		}
	}
	cb, err := eb.AcceptPeer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range ab {
		m, err := cb.Recv(ctx)
		if err != nil || !bytes.Equal(m.Data, want) {
			t.Fatalf("B: message %d: %v", i, err)
		}
	}
	for _, m := range ba {
		if err := cb.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range ba {
		m, err := ca.Recv(ctx)
		if err != nil || !bytes.Equal(m.Data, want) {
			t.Fatalf("A: message %d: %v", i, err)
		}
	}
	per, _ := ea.EngineStats(ctx)
	for i, s := range per {
		if s.HandedOver != 0 {
			t.Errorf("initiator's engine %d handed %d frames over", i, s.HandedOver)
		}
	}
	if per[1].RxFrames == 0 {
		t.Error("the initiator's engine 1 received nothing")
	}
}
