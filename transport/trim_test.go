package transport

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/transport/wire"
)

// trimFirst makes s's fabric trim (wire.Trim) the first transmission of
// each spray data packet from A whose PSN is in psns, and hand the
// trimmed frame to B; it returns how many it trimmed so far.
func trimFirst(t *testing.T, s *simPair, psns map[uint32]bool) *int {
	return trimIf(t, s, func(pk *wire.Packet) bool { return psns[pk.BTH.PSN] })
}

// trimIf is trimFirst for the data packets that trim selects.
func trimIf(t *testing.T, s *simPair, trim func(pk *wire.Packet) bool) *int {
	return trimNoting(t, s, trim, nil)
}

// trimNoting is trimIf that also notes in sizes the length of each data
// PSN's last frame from A, before any trimming; with sizes (not nil) every
// data frame skips the fabric into toB, so that B takes each of A's bursts
// in one step, and acknowledges it with one ACK.
func trimNoting(t *testing.T, s *simPair, trim func(pk *wire.Packet) bool, sizes map[uint32]int) *int {
	t.Helper()
	n := new(int)
	seen := map[uint32]bool{}
	s.fab.SetFilter(func(f []byte) bool {
		var pk wire.Packet
		bad := wire.Decode(f, &pk) != nil && !pk.BTH.Secured
		data := !bad && pk.BTH.Opcode == wire.OpSprayData
		if data && sizes != nil {
			sizes[pk.BTH.PSN] = len(f)
		}
		if !data || !trim(&pk) || seen[pk.BTH.PSN] {
			if data && sizes != nil {
				s.toB = append(s.toB, bytes.Clone(f))
				return false
			}
			return true
		}
		seen[pk.BTH.PSN] = true
		c := bytes.Clone(f)
		m, err := wire.Trim(c)
		if err != nil {
			t.Errorf("Trim: %v", err)
			return true
		}
		s.toB = append(s.toB, c[:m])
		*n++
		return false
	})
	return n
}

// TestTrimToNak: a data packet that a switch trimmed reaches the receiver
// as its headers; the receiver asks for exactly that PSN with a NAK, the
// sender resends it once, at once, with no timeout, probe or RACK loss,
// and the bytes arrive intact.
func TestTrimToNak(t *testing.T) {
	seed := testutil.Seed(t)
	cfg := Config{Profile: Spray, Seed: seed, MTU: 1500, INTHops: 4}
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 10 * time.Microsecond, Bandwidth: 10e9}, cfg)
	first := s.qa.Info().PSN
	trimmed := trimFirst(t, s, map[uint32]bool{first + 5: true, first + 40: true})
	msgs := randomMessages(rand.New(rand.NewPCG(seed, 1)), 4, 200<<10)
	transfer(t, s, msgs)
	a, b := s.qa.Stats(), s.qb.Stats()
	rs := s.qa.RetransmitStats()
	t.Logf("trimmed %d; receiver: trims %d, NAKs %d; sender: NAKs taken %d, retransmits %d, %+v", *trimmed, b.TrimsReceived, b.TrimNaksSent, a.TrimNaksReceived, a.Retransmits, rs)
	if *trimmed != 2 || b.TrimsReceived != 2 || b.TrimNaksSent != 2 || a.TrimNaksReceived != 2 {
		t.Fatalf("trimmed %d, receiver took %d and sent %d NAKs, sender took %d: want 2 each", *trimmed, b.TrimsReceived, b.TrimNaksSent, a.TrimNaksReceived)
	}
	if a.Retransmits != 2 || rs.LostTrim != 2 || rs.Lost != 2 || rs.TLPs+rs.RTOs != 0 || a.Timeouts != 0 || b.Duplicates != 0 {
		t.Fatalf("%d retransmits, %d timeouts, %d duplicates, %+v: want exactly the 2 trimmed PSNs resent, on their NAKs", a.Retransmits, a.Timeouts, b.Duplicates, rs)
	}
}

// TestTrimMarksPath: a path whose queue trims every packet it takes stays
// in the spray set, its trims counted as congestion marks (ECN) and not as
// losses; the trimmed packets are resent and the bytes arrive intact.
// Scored as losses, three in a row would take the path out.
func TestTrimMarksPath(t *testing.T) {
	seed := testutil.Seed(t)
	cfg := Config{Profile: Spray, Seed: seed, MTU: 1500, INTHops: 4}
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 10 * time.Microsecond, Bandwidth: 10e9}, cfg)
	hot := s.qa.PathStats()[0].Entropy
	trimmed := trimIf(t, s, func(pk *wire.Packet) bool { return pk.UDP.Src == hot })
	transfer(t, s, randomMessages(rand.New(rand.NewPCG(seed, 3)), 4, 200<<10))
	a := s.qa.Stats()
	var ps multipath.PathStats
	for _, p := range s.qa.PathStats() {
		if p.Entropy == hot {
			ps = p
		}
	}
	t.Logf("trimmed %d; path %d: %+v", *trimmed, hot, ps)
	if *trimmed < 3 || a.TrimNaksReceived != uint64(*trimmed) {
		t.Fatalf("trimmed %d, sender took %d trim NAKs: want at least 3, all taken", *trimmed, a.TrimNaksReceived)
	}
	if ps.Removals != 0 || ps.Down || ps.Losses != 0 || ps.ECN < uint64(*trimmed) {
		t.Fatalf("path %d after %d trims: %d removals, down %v, %d losses, %d ECN marks: want in the set, no loss, a mark per trim",
			hot, *trimmed, ps.Removals, ps.Down, ps.Losses, ps.ECN)
	}
}

// TestTrimSecuredDropped: a secured QP cannot authenticate a trimmed
// packet (its tag went with the payload), so it drops it, counted in
// Security.Trimmed, sends no NAK for it, and its loss detection repairs
// the PSN as it would a drop.
func TestTrimSecuredDropped(t *testing.T) {
	seed := testutil.Seed(t)
	s := newSecPair(t, mem.Config{Seed: seed, Delay: 10 * time.Microsecond, Bandwidth: 10e9}, Config{Profile: Spray, Seed: seed, MTU: 1500}, false, 0)
	first := s.qa.Info().PSN
	trimmed := trimFirst(t, s, map[uint32]bool{first + 5: true})
	transfer(t, s, randomMessages(rand.New(rand.NewPCG(seed, 2)), 3, 100<<10))
	b := s.qb.Stats()
	if *trimmed != 1 || b.Security.Trimmed != 1 || b.TrimsReceived != 0 || b.TrimNaksSent != 0 || s.qa.RetransmitStats().Lost == 0 {
		t.Fatalf("trimmed %d; Security.Trimmed %d, trims taken %d, NAKs %d, sender losses %d: want 1, 1, 0, 0, at least 1",
			*trimmed, b.Security.Trimmed, b.TrimsReceived, b.TrimNaksSent, s.qa.RetransmitStats().Lost)
	}
}

// TestTrimNakAcksBytes: a trim NAK also acknowledges what reached the
// receiver since the last ACK (its cumulative PSN and SACK), and the
// controller is told those bytes (cc.Sample.AckedBytes): with every third
// packet trimmed once, the samples acknowledge each PSN's bytes, as last
// sent, exactly once, some of them in trim NAKs' samples (no RTT). HPCC
// counts its rounds in acknowledged bytes.
func TestTrimNakAcksBytes(t *testing.T) {
	seed := testutil.Seed(t)
	var samples []cc.Sample
	cfg := Config{Profile: Spray, Seed: seed, MTU: 1500, INTHops: 4,
		CC: func() cc.Controller { return sampleRecorder{samples: &samples} }}
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 10 * time.Microsecond, Bandwidth: 10e9}, cfg)
	sizes := map[uint32]int{}
	trimmed := trimNoting(t, s, func(pk *wire.Packet) bool { return pk.BTH.PSN%3 == 0 }, sizes)
	transfer(t, s, randomMessages(rand.New(rand.NewPCG(seed, 4)), 4, 200<<10))
	want := 0
	for _, n := range sizes {
		want += n
	}
	acked, fromNaks := 0, 0
	for _, x := range samples {
		acked += x.AckedBytes
		if x.RTT == 0 {
			fromNaks += x.AckedBytes
		}
	}
	a := s.qa.Stats()
	t.Logf("trimmed %d, trim NAKs taken %d; samples acknowledged %d bytes, %d in trim NAKs'; %d sent", *trimmed, a.TrimNaksReceived, acked, fromNaks, want)
	if *trimmed < 10 || a.TrimNaksReceived != uint64(*trimmed) || a.Retransmits != uint64(*trimmed) {
		t.Fatalf("trimmed %d, sender took %d trim NAKs and resent %d: want at least 10, all taken and resent once", *trimmed, a.TrimNaksReceived, a.Retransmits)
	}
	if acked != want || fromNaks == 0 {
		t.Fatalf("the controller was told of %d acknowledged bytes (%d by trim NAKs), want %d, some by trim NAKs", acked, fromNaks, want)
	}
}
