package transport

import (
	"encoding/binary"
	"testing"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// segLink is a link/mem port that reports segmentation offload
// (link.Info.Segments) and records the source port of every data frame it
// sends, one slice per Send.
type segLink struct {
	link.Link
	segments int
	sends    [][]uint16
}

func (l *segLink) Info() link.Info {
	i := l.Link.Info()
	i.Segments = l.segments
	return i
}

func (l *segLink) Send(fs []link.Frame) (int, error) {
	var ports []uint16
	for _, f := range fs {
		if len(f.Buf) > 1024 { // data, not an ACK
			ports = append(ports, binary.BigEndian.Uint16(f.Buf[wire.EthLen+wire.IPv4Len:]))
		}
	}
	l.sends = append(l.sends, ports)
	return l.Link.Send(fs)
}

// newSegPair is newSimPair over links that report segments.
func newSegPair(t *testing.T, segments int) (*simPair, *segLink) {
	t.Helper()
	cfg := Config{Seed: testutil.Seed(t), CC: func() cc.Controller { return &cc.Fixed{} }}
	cfgB := cfg
	cfgB.Seed++
	s := &simPair{t: t, clk: &clock.Sim{}}
	s.fab = mem.NewFabric(mem.Config{}, s.clk)
	pa, err := s.fab.NewPort(macA, ipA)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := s.fab.NewPort(macB, ipB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close(); pb.Close() })
	la := &segLink{Link: pa, segments: segments}
	if s.ea, err = NewEngine(la, cfg); err != nil {
		t.Fatal(err)
	}
	if s.eb, err = NewEngine(&segLink{Link: pb, segments: segments}, cfgB); err != nil {
		t.Fatal(err)
	}
	if s.qa, err = s.ea.CreateQP(); err != nil {
		t.Fatal(err)
	}
	if s.qb, err = s.eb.CreateQP(); err != nil {
		t.Fatal(err)
	}
	if err := s.qa.Connect(s.qb.Info()); err != nil {
		t.Fatal(err)
	}
	if err := s.qb.Connect(s.qa.Info()); err != nil {
		t.Fatal(err)
	}
	return s, la
}

// On a link that segments, a QP sends a message's packets in runs of
// runFrames on one entropy, so that the link finds runs to send as one
// message, and still sprays the runs over several entropies within one
// Step; the message arrives intact. On a link that does not, consecutive
// packets change entropy.
func TestRunsPerEntropy(t *testing.T) {
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	for _, segments := range []int{0, 64} {
		s, la := newSegPair(t, segments)
		if err := s.qa.Post(WorkRequest{ID: 1, Op: OpSend, Data: msg}); err != nil {
			t.Fatal(err)
		}
		if err := s.run(1e9, func() bool { return len(s.ca) > 0 && len(s.cb) > 0 }); err != nil {
			t.Fatal(err)
		}
		if c := s.cb[0]; c.Op != OpRecv || hash(c.Data) != hash(msg) || s.ca[0].Err != nil {
			t.Fatalf("segments %d: message not delivered intact: %v of %d bytes, sender's completion %v", segments, c.Op, len(c.Data), s.ca[0].Err)
		}
		var all []uint16
		widest := 0 // the most entropies one Send used
		for _, ports := range la.sends {
			all = append(all, ports...)
			seen := map[uint16]bool{}
			for _, p := range ports {
				seen[p] = true
			}
			widest = max(widest, len(seen))
		}
		if s.qa.Stats().Retransmits != 0 {
			t.Fatalf("segments %d: %d retransmissions on a lossless fabric", segments, s.qa.Stats().Retransmits)
		}
		changes := 0
		for k := 1; k < len(all); k++ {
			if all[k] != all[k-1] {
				changes++
			}
		}
		if segments == 0 {
			if changes < len(all)/2 {
				t.Fatalf("without segments: %d entropy changes in %d packets, want most packets on a new entropy", changes, len(all))
			}
			continue
		}
		for k := range all {
			if start := k - k%runFrames; all[k] != all[start] {
				t.Fatalf("packet %d on entropy %d, its run (from packet %d) on %d", k, all[k], start, all[start])
			}
		}
		if widest < 3 {
			t.Fatalf("one Send used at most %d entropies, want runs spread over at least 3", widest)
		}
		t.Logf("%d packets, %d entropy changes, up to %d entropies in one Send", len(all), changes, widest)
	}
}
