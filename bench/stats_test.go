package bench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 1000; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 500}, {99, 990}, {99.9, 999}, {100, 1000}, {0, 1}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	sum := Summarize([]time.Duration{3, 1, 2})
	if sum.Min != 1 || sum.Max != 3 || sum.Mean != 2 || sum.P50 != 2 || sum.N != 3 {
		t.Fatalf("Summarize = %+v", sum)
	}
	if Percentile(nil, 50) != 0 {
		t.Fatal("empty percentile")
	}
}
