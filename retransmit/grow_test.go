package retransmit

import (
	"testing"
	"unsafe"

	"github.com/sprayfabric/spray/psn"
)

// TestRingGrowsAndTrims: the ring starts empty, doubles as packets go out
// (keeping each PSN's entry and resend bit across the wrap of the PSN
// space), never beyond Capacity rounded up, and Trim gives it back once
// every packet is acknowledged, and only then.
func TestRingGrowsAndTrims(t *testing.T) {
	first := psn.New(psn.Mask - 40) // the PSNs wrap while the ring grows
	s := mustNew(t, Config{Capacity: 1000, NoTLP: true}, first)
	if len(s.ring) != 0 || s.Trimmable() {
		t.Fatalf("new scoreboard holds a ring of %d", len(s.ring))
	}
	p := first
	send := func(n int) {
		for range n {
			if err := s.OnSend(0, p, 100, uint64(p), 1); err != nil {
				t.Fatal(err)
			}
			p = p.Next()
		}
	}
	send(10)
	if len(s.ring) != 2*minRing {
		t.Fatalf("ring of %d after 10 packets, want %d", len(s.ring), 2*minRing)
	}
	// An RTO queues the oldest for resend; the ring then grows with it queued.
	if _, kind, err := s.OnTimeout(s.NextTimeout(), nil); err != nil || kind != RTO {
		t.Fatalf("timeout: %v %v", kind, err)
	}
	queued := s.nQueued
	if queued == 0 {
		t.Fatal("the RTO queued nothing")
	}
	send(200)
	mustCheck(t, s)
	if len(s.ring) != 256 || s.nQueued != queued {
		t.Fatalf("ring %d (want 256), %d queued (want %d)", len(s.ring), s.nQueued, queued)
	}
	if q, tag, ok := s.PopLost(); !ok || q != first || tag != uint64(first) {
		t.Fatalf("PopLost after growth: %v %v %v, want %v", q, tag, ok, first)
	}
	send(1000 - 210)
	if len(s.ring) != 1024 {
		t.Fatalf("ring of %d at Capacity 1000, want 1024", len(s.ring))
	}
	if err := s.OnSend(0, p, 100, 0, 1); err == nil {
		t.Fatal("the ring grew past Capacity")
	}
	if s.Trim() {
		t.Fatal("Trim gave back a ring with packets outstanding")
	}
	ev, _ := s.OnAck(10, Ack{Cum: p}, nil)
	if len(ev) != 1000 {
		t.Fatalf("%d events for 1000 packets", len(ev))
	}
	if !s.Trim() || len(s.ring) != 0 || len(s.queue) != 0 {
		t.Fatalf("ring of %d after Trim with nothing outstanding", len(s.ring))
	}
	send(3)
	if len(s.ring) != minRing || s.Outstanding() != 3 {
		t.Fatalf("ring of %d, %d outstanding after Trim and 3 more packets", len(s.ring), s.Outstanding())
	}
	mustCheck(t, s)
}

// TestPathTableGrows: the per-entropy RACK table holds about as many slots
// as entropies in use, and keeps each entropy's state as it grows.
func TestPathTableGrows(t *testing.T) {
	s := mustNew(t, Config{}, 0)
	if len(s.paths) != 0 {
		t.Fatalf("new scoreboard has %d path slots", len(s.paths))
	}
	const n = 40
	for i := range n {
		r := s.pathSlot(uint16(49152 + 7*i))
		*r = pathRack{flags: rOK, entropy: uint16(49152 + 7*i), psn: psn.New(uint32(i))}
	}
	if len(s.paths) < n || len(s.paths) > 4*n {
		t.Fatalf("%d slots for %d entropies", len(s.paths), n)
	}
	for i := range n {
		if r := s.path(uint16(49152 + 7*i)); r == nil || r.psn != psn.New(uint32(i)) {
			t.Fatalf("entropy %d lost its state as the table grew", i)
		}
	}
}

// TestPopLostSmallRingWraps: in a ring smaller than a word of the resend
// bitmap, PopLost finds a queued PSN whose slot wrapped past the ring's end.
func TestPopLostSmallRingWraps(t *testing.T) {
	first := psn.New(5) // slot 5 of a ring of minRing
	s := mustNew(t, Config{NoTLP: true}, first)
	for k := range uint32(minRing) {
		if err := s.OnSend(0, first.Add(k), 100, uint64(k), 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.ring) != minRing {
		t.Fatalf("ring of %d for %d packets, want %d", len(s.ring), minRing, minRing)
	}
	s.enqueue(first.Add(1)) // slot 6
	s.enqueue(first.Add(4)) // slot 1, past the ring's end
	for _, want := range []uint32{1, 4} {
		q, tag, ok := s.PopLost()
		if !ok || q != first.Add(want) || tag != uint64(want) {
			t.Fatalf("PopLost: %v %v %v, want PSN %v", q, tag, ok, first.Add(want))
		}
	}
	if _, _, ok := s.PopLost(); ok {
		t.Fatal("PopLost returned a PSN with none queued")
	}
}

// TestPathRackSize: a RACK slot is 24 bytes. A busy QP holds a table of
// them about twice the entropies it uses, and the simulator a million
// QPs: eight bytes more a slot cost about 0.5 GB at 1,024 hosts.
func TestPathRackSize(t *testing.T) {
	if n := unsafe.Sizeof(pathRack{}); n > 24 {
		t.Fatalf("pathRack is %d bytes, want at most 24", n)
	}
}

// TestScoreboardSize: a scoreboard fits the allocator's 576-byte class
// with the 8-byte header the runtime puts before an object of more than
// 512 bytes that holds pointers: every busy QP holds one, and the
// simulator a million.
func TestScoreboardSize(t *testing.T) {
	if n := unsafe.Sizeof(Scoreboard{}); n > 576-8 {
		t.Fatalf("Scoreboard is %d bytes, want at most 568", n)
	}
}
