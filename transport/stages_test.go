package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link/mem"
	"github.com/sprayfabric/spray/transport/wire"
)

// BenchmarkStages times each stage of a 64-byte SEND through two QPs,
// sans link (link/mem's BenchmarkSendRecv times that; BenchmarkPingPong
// the Endpoint's wake-ups): post, segment and encode, decode, receive
// path and reassembly, ACK generation, ACK decode and processing,
// completions on both sides. Each is reported as ns/<stage>; the budget
// in docs/design.md comes from here and from BenchmarkSmallMessage.
func BenchmarkStages(b *testing.B) {
	s := newSimPair(b, mem.Config{}, Config{Profile: Spray, Seed: 1})
	msg := make([]byte, 64)
	bufA, bufB := make([]byte, 9000), make([]byte, 9000)
	var data, ack wire.Packet
	stages := []string{"post", "encode", "decode", "receive", "ack-gen", "ack-handle", "complete"}
	var spent [7]time.Duration
	now := clock.Time(0)
	id := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		now += clock.Time(time.Microsecond)
		id++
		t0 := time.Now()
		if err := s.qa.Post(WorkRequest{ID: id, Op: OpSend, Data: msg}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		n, err := s.qa.PollTransmit(now, bufA)
		if err != nil || n == 0 {
			b.Fatalf("data: %d bytes, %v", n, err)
		}
		t2 := time.Now()
		if err := wire.Decode(bufA[:n], &data); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		s.qb.Handle(now, &data)
		t4 := time.Now()
		m, err := s.qb.PollTransmit(now, bufB)
		if err != nil || m == 0 {
			b.Fatalf("ACK: %d bytes, %v", m, err)
		}
		t5 := time.Now()
		if err := wire.Decode(bufB[:m], &ack); err != nil {
			b.Fatal(err)
		}
		s.qa.Handle(now, &ack)
		t6 := time.Now()
		c, ok := s.qa.PollCompletion()
		r, rok := s.qb.PollCompletion()
		if !ok || !rok || c.ID != id || r.Len != len(msg) {
			b.Fatalf("completions %+v %v, %+v %v", c, ok, r, rok)
		}
		if r.pooled {
			recvPool.put(r.Data)
		}
		t7 := time.Now()
		for i, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t4.Sub(t3), t5.Sub(t4), t6.Sub(t5), t7.Sub(t6)} {
			spent[i] += d
		}
	}
	for i, name := range stages {
		b.ReportMetric(float64(spent[i].Nanoseconds())/float64(b.N), "ns/"+name)
	}
}
