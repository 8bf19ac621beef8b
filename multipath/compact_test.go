package multipath

import (
	"math"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/sprayfabric/spray/clock"
)

// TestAdaptivePathStateSize: a busy QP holds one pathState per entropy, so
// its size is the policy's memory per path.
func TestAdaptivePathStateSize(t *testing.T) {
	if n := unsafe.Sizeof(pathState{}); n > 64 {
		t.Fatalf("pathState is %d bytes, want at most 64", n)
	}
}

// TestAdaptiveWideValues: values that outgrow the narrow fields (an RTT of
// seconds, a counter past 2^32) come out exact; a policy whose fields are
// wide from the start picks the same entropies and reports the same
// counters as one whose fields are narrow; and a policy holds loss state
// from its first loss or ECN mark only.
func TestAdaptiveWideValues(t *testing.T) {
	set := Entropies(3, 8)
	cfg := AdaptiveConfig{LossLimit: 1 << 20, MaxLossRate: 2}
	narrow := NewAdaptive(set, 5, cfg).(*adaptive)
	wide := NewAdaptive(set, 5, cfg).(*adaptive)
	wide.ensure()
	wide.widen()
	now := clock.Time(0)
	for k := range 3000 {
		now += clock.Time(time.Microsecond)
		a, b := narrow.Next(now), wide.Next(now)
		if a != b {
			t.Fatalf("packet %d: entropy %d narrow, %d wide", k, a, b)
		}
		rtt := time.Duration(10+int(a)%7) * time.Microsecond
		for _, p := range []*adaptive{narrow, wide} {
			switch {
			case k%11 == 0:
				p.OnLoss(now, a)
			case k%5 == 0:
				p.OnINT(now, a, rtt/3)
				fallthrough
			default:
				p.OnAck(now, a, rtt, a%3 == 0)
			}
		}
	}
	if narrow.wide != nil {
		t.Fatal("microsecond RTTs and a few thousand packets widened the policy")
	}
	if !reflect.DeepEqual(narrow.Stats(), wide.Stats()) {
		t.Fatalf("stats differ:\nnarrow %+v\nwide   %+v", narrow.Stats(), wide.Stats())
	}

	q := NewAdaptive(set, 5, cfg).(*adaptive)
	q.OnAck(now, set[0], 5*time.Second, false)
	q.OnAck(now, set[0], 3*time.Second, false)
	if q.wide == nil {
		t.Fatal("an RTT of 5 s did not widen the policy")
	}
	if st := q.Stats()[0]; st.SRTT != 4750*time.Millisecond || st.MinRTT != 3*time.Second {
		t.Fatalf("after RTTs of 5 s and 3 s: SRTT %v (want 4.75s), MinRTT %v (want 3s)", st.SRTT, st.MinRTT)
	}

	p := NewAdaptive(set, 5, cfg).(*adaptive)
	p.ensure()
	p.st[1].cnt[cAcks] = math.MaxUint32
	p.OnAck(now, set[1], 0, false)
	if got := p.Stats()[1].Acks; got != 1<<32 {
		t.Fatalf("Acks %d after 2^32 acknowledgements, want %d", got, uint64(1)<<32)
	}

	clean := NewAdaptive(set, 5, cfg).(*adaptive)
	for k := range 100 {
		now += clock.Time(time.Microsecond)
		clean.OnAck(now, clean.Next(now), time.Duration(10+k%5)*time.Microsecond, false)
	}
	if clean.lossy != nil {
		t.Fatal("a policy with no loss and no ECN mark holds loss state")
	}
	clean.OnLoss(now, set[3])
	if st := clean.Stats()[3]; st.Losses != 1 || clean.consecLoss(3) != 1 {
		t.Fatalf("after a loss: %d losses, %d in a row", st.Losses, clean.consecLoss(3))
	}
}
