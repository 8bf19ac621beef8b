package transport

import (
	"testing"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// TestFabricQueueWindow: the engine's recent fabric queue is the largest
// INT queueing delay of this window and the previous one, and forgets a
// window once two have passed without it.
func TestFabricQueueWindow(t *testing.T) {
	var sc qpScratch
	us := clock.Time(time.Microsecond)
	steps := []struct {
		at   clock.Time
		d    time.Duration
		want time.Duration
	}{
		{300 * us, 80 * time.Microsecond, 80 * time.Microsecond},
		{400 * us, 10 * time.Microsecond, 80 * time.Microsecond},                       // same window
		{300*us + clock.Time(fabQWindow), 5 * time.Microsecond, 80 * time.Microsecond}, // previous window
		{300*us + clock.Time(2*fabQWindow), 7 * time.Microsecond, 7 * time.Microsecond},
		{300*us + clock.Time(5*fabQWindow), 0, 0}, // idle for two windows: forgotten
	}
	for i, st := range steps {
		if got := sc.noteFabricQueue(st.at, st.d); got != st.want {
			t.Fatalf("step %d: %v, want %v", i, got, st.want)
		}
	}
}
