package ebpf

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestPortConfigParams(t *testing.T) {
	pp, err := PortConfig{ID: PortID{1, 2}, RateMbps: 100}.params()
	if err != nil {
		t.Fatal(err)
	}
	want := portParams{id: PortID{1, 2}, rate: 100, pmax: 1 << 32, geLB: 1 << 32}
	if pp != want {
		t.Errorf("zero config: %+v, want %+v (no marking, no faults, defaults 1)", pp, want)
	}
	pp, err = PortConfig{
		ECN: ECNConfig{KMin: time.Microsecond, KMax: 5 * time.Microsecond, PMax: 0.25},
		Faults: Faults{Loss: 0.5, Blackhole: true, RoCEOnly: true,
			Burst: GilbertElliott{P: 0.01, R: 0.5, LossBad: 0.75}},
	}.params()
	if err != nil {
		t.Fatal(err)
	}
	want = portParams{kmin: 1000, kmax: 5000, pmax: 1 << 30, loss: 1 << 31,
		geP: uint64(math.Round(0.01 * (1 << 32))), geR: 1 << 31, geLB: 3 << 30,
		blackhole: true, burst: true, roceOnly: true}
	if pp != want {
		t.Errorf("got %+v, want %+v", pp, want)
	}
	for _, bad := range []PortConfig{
		{ECN: ECNConfig{KMin: 2, KMax: 1}},
		{ECN: ECNConfig{KMin: -1}},
		{ECN: ECNConfig{KMax: 1, PMax: 1.01}},
		{Faults: Faults{Loss: math.NaN()}},
		{Faults: Faults{Loss: -1}},
		{Faults: Faults{Burst: GilbertElliott{R: 2}}},
		{Faults: Faults{Burst: GilbertElliott{LossGood: math.Inf(1)}}},
		{TrimQueue: 3000}, // no rate to drain at
	} {
		if _, err := bad.params(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestPortCountersArithmetic(t *testing.T) {
	a := PortCounters{Packets: 10, Bytes: 1000, DropLoss: 1, DropBurst: 2, DropBlackhole: 3,
		Measured: 4, QueueDelaySum: 8 * time.Microsecond, MaxQueueDelay: 5 * time.Microsecond}
	b := PortCounters{Packets: 4, Bytes: 400, DropLoss: 1, MaxQueueDelay: time.Microsecond}
	d := a.Sub(b)
	if d.Packets != 6 || d.Bytes != 600 || d.Drops() != 5 || d.MaxQueueDelay != a.MaxQueueDelay {
		t.Errorf("Sub: %v", d)
	}
	if m := a.MeanQueueDelay(); m != 2*time.Microsecond {
		t.Errorf("MeanQueueDelay %v, want 2µs", m)
	}
	if m := (PortCounters{}).MeanQueueDelay(); m != 0 {
		t.Errorf("MeanQueueDelay of nothing: %v", m)
	}
	if s := (PortID{3, 4}).String(); s != "3/4" {
		t.Errorf("PortID.String() = %q", s)
	}
}
