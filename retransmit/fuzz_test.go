package retransmit

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/psn"
)

// fuzzReader hands out fuzz bytes, zeros once they run out.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) more() bool { return len(r.b) > 0 }

func (r *fuzzReader) u8() uint8 {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *fuzzReader) u64() uint64 {
	var buf [8]byte
	n := copy(buf[:], r.b)
	r.b = r.b[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

// near returns a PSN a small signed distance from p, or anywhere.
func (r *fuzzReader) near(p psn.PSN) psn.PSN {
	v := r.u8()
	if v == 0xFF {
		return psn.New(uint32(r.u64()))
	}
	return p.Add(uint32(int32(int8(v))))
}

// FuzzAck drives a Scoreboard with arbitrary sends, resends, ACKs, NAKs and
// timeouts: it must never panic, never report a PSN acknowledged twice or
// lost after acknowledgment, and keep InFlight <= Outstanding <= Capacity
// and its own bookkeeping consistent.
func FuzzAck(f *testing.F) {
	f.Add([]byte{0, 8, 0, 0, 0, 0, 2, 3, 0x01, 0, 0, 0, 0, 0, 0, 0, 4, 4, 1, 2, 9})
	f.Add([]byte{1, 16, 0, 0, 0, 0, 0, 3, 2, 1, 1, 1, 4, 4, 4, 2, 6})
	f.Add([]byte{0, 3, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4})
	f.Add([]byte{0, 40, 0, 0, 0, 0, 0, 0, 0, 2, 2, 0xFF, 1, 2, 3, 4, 5, 6, 7, 8, 0xAA, 0xBB, 5, 200, 4, 1, 1, 1})
	f.Add([]byte{2, 64, 0, 0, 0, 0, 0, 0, 3, 1, 3, 3, 4, 1, 1, 6, 0xFF, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{b: data}
		hdr := r.u8()
		cfg := Config{Mode: Mode(hdr & 1), Capacity: int(r.u8()%64) + 1, MaxRetries: 3, NoTLP: hdr&2 != 0}
		first := psn.PSN(1<<24 - 20).Add(uint32(r.u8()))
		s, err := New(cfg, first)
		if err != nil {
			t.Fatal(err)
		}
		capacity := s.Config().Capacity
		dst := make([]Event, 0, capacity)
		sack := make([]uint64, 5)
		acked := map[psn.PSN]bool{}
		now := clock.Time(0)
		for r.more() {
			var ev []Event
			switch op := r.u8() % 8; op {
			case 0: // new packet
				if !s.Full() {
					p := s.Next()
					if err := s.OnSend(now, p, int(r.u8())*8, uint64(p), 0); err != nil && s.Err() == nil {
						t.Fatalf("OnSend(Next): %v", err)
					}
				}
			case 1: // resend
				if p, tag, ok := s.PopLost(); ok {
					if tag != uint64(p) {
						t.Fatalf("PopLost(%d) tag %d", p, tag)
					}
					if err := s.OnSend(now, p, int(r.u8())*8, tag, 1); err != nil && s.Err() == nil {
						t.Fatalf("resend %d: %v", p, err)
					}
				}
			case 2: // ACK
				n := int(r.u8() % 6)
				for i := range n {
					sack[i] = r.u64()
				}
				a := Ack{Cum: r.near(s.Oldest()), SackBase: r.near(s.Oldest()), Sack: sack[:n]}
				if v := r.u8(); v&1 != 0 {
					a.Acked, a.HasAcked = r.near(s.Oldest()), true
				}
				ev, _ = s.OnAck(now, a, dst[:0])
			case 3: // NAK
				ev, _ = s.OnNak(now, r.near(s.Oldest()), dst[:0])
			case 4: // jump to the next timer
				if next := s.NextTimeout(); next != clock.Never {
					now = max(now, next)
				}
				ev, _, _ = s.OnTimeout(now, dst[:0])
			case 5: // time passes
				now = now.Add(time.Duration(r.u8()) * time.Microsecond)
				ev, _, _ = s.OnTimeout(now, dst[:0])
			case 6: // OnSend with an arbitrary PSN: an error or a valid send
				p := r.near(s.Next())
				err := s.OnSend(now, p, int(r.u8()), uint64(p), 2)
				if err == nil && acked[p] {
					t.Fatalf("resend of acknowledged PSN %d accepted", p)
				}
				if err != nil && !errors.Is(err, ErrUnexpectedPSN) && !errors.Is(err, ErrFull) && !errors.Is(err, ErrRetryExceeded) {
					t.Fatalf("OnSend(%d): unexpected error %v", p, err)
				}
			case 7: // time passes without a timer call
				now = now.Add(time.Duration(r.u8()) * 100 * time.Nanosecond)
			}
			if len(ev) > capacity {
				t.Fatalf("%d events, capacity %d", len(ev), capacity)
			}
			for _, e := range ev {
				if acked[e.PSN] {
					t.Fatalf("event %+v after PSN %d was acknowledged", e, e.PSN)
				}
				if e.Tag != uint64(e.PSN) {
					t.Fatalf("event %+v carries another PSN's tag", e)
				}
				if !e.Lost {
					acked[e.PSN] = true
				}
			}
			pk, by := s.InFlight()
			if pk < 0 || by < 0 || pk > s.Outstanding() || s.Outstanding() > capacity {
				t.Fatalf("InFlight %d/%dB, Outstanding %d, Capacity %d", pk, by, s.Outstanding(), capacity)
			}
			if err := s.check(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
