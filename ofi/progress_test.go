package main

import (
	"context"
	"testing"
	"time"
)

// TestPollerHandsBack: while the application polls, the provider's
// goroutines pause; a reader about to block hands progress back to them
// at once (standDown), reads older than pollGrace do not hold them, and
// a closed endpoint ends the pause. Run with -race: readers and the
// goroutines use the poller concurrently.
func TestPollerHandsBack(t *testing.T) {
	var p poller
	p.init()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !p.pause(ctx) {
		t.Fatal("pause with no read pending: false, want true at once")
	}
	p.last.Store(monoNow() - 2*int64(pollGrace))
	if !p.pause(ctx) {
		t.Fatal("pause after a stale read: false, want true at once")
	}

	// A read an hour ahead holds the goroutine past any grace: only
	// standDown frees it.
	p.last.Store(monoNow() + int64(time.Hour))
	res := make(chan bool, 1)
	go func() { res <- p.pause(ctx) }()
	p.standDown()
	select {
	case ok := <-res:
		if !ok {
			t.Fatal("pause after standDown: false, want true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pause did not return after standDown")
	}

	// A closed endpoint ends a pause whatever the reads.
	p.last.Store(monoNow() + int64(time.Hour))
	go func() { res <- p.pause(ctx) }()
	cancel()
	select {
	case ok := <-res:
		if ok {
			t.Fatal("pause after the context ended: true, want false")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pause did not return after the context ended")
	}
}

// TestPollerConns: connections added are the ones a polling reader
// visits, and a removed one is no longer visited.
func TestPollerConns(t *testing.T) {
	var p poller
	p.init()
	a, b, c := &rxConn{}, &rxConn{}, &rxConn{}
	p.addConn(a)
	p.addConn(b)
	p.addConn(c)
	p.removeConn(b)
	got := p.conns.list()
	if len(got) != 2 || got[0] != a || got[1] != c {
		t.Fatalf("conns after adding a, b, c and removing b: %v", got)
	}
}
