//go:build linux

package udp

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link"
)

// BenchmarkWakeWhilePacing measures how long a frame waits before an
// untimed Wait on its link returns, while other links of the process do
// short timed Waits in a loop, as pacing engines do (a frame for an engine
// parked in the runtime poller must not go unnoticed while the other
// threads wait with a timeout; see internal/poll). It reports the
// median and the 99th percentile of the wake-up latency, from just before
// Send to the return of the receiver's Wait, and of how late the pacers'
// Waits return after their 30 µs.
func BenchmarkWakeWhilePacing(b *testing.B) {
	r := testutil.Rand(b)
	ipA, ipB := loopbackPair(r)
	x, err := Open(Config{Local: ipA})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	y, err := Open(Config{Local: ipB})
	if err != nil {
		b.Fatal(err)
	}
	defer y.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The pacing engines: 30 µs waits on idle links; late holds how late
	// each one's Waits returned.
	late := make([][]time.Duration, 4)
	for i := range 4 {
		p, err := Open(Config{Local: netip.AddrFrom4([4]byte{127, ipA.As4()[1], ipA.As4()[2], byte(10 + i)})})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if p.Wait(30*time.Microsecond) != nil {
					return
				}
				late[i] = append(late[i], time.Since(t0)-30*time.Microsecond)
			}
		})
	}
	woke := make(chan time.Time, 1)
	wg.Go(func() {
		in := make([]link.Frame, 8)
		for {
			if err := y.Wait(-1); err != nil {
				return
			}
			at := time.Now()
			n, err := y.Recv(in)
			if err != nil {
				return
			}
			if n > 0 {
				y.Release(in[:n])
				woke <- at
			}
		}
	})
	fs := make([]link.Frame, 1)
	payload := make([]byte, 64)
	var lat []time.Duration
	for b.Loop() {
		time.Sleep(200 * time.Microsecond) // let the receiver park
		if x.Alloc(fs) != 1 {
			b.Fatal("no transmit buffer")
		}
		fs[0].Buf = buildFrame(fs[0].Buf, ipA, ipB, RoCEPort, 0, payload)
		t0 := time.Now()
		if n, err := x.Send(fs); n != 1 || err != nil {
			b.Fatalf("Send: %d, %v", n, err)
		}
		select {
		case at := <-woke:
			lat = append(lat, at.Sub(t0))
		case <-time.After(5 * time.Second):
			b.Fatal("the receiver's Wait never returned")
		}
	}
	close(stop)
	y.Close()
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "wake-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "wake-p99-µs")
	pace := slices.Concat(late...)
	slices.Sort(pace)
	b.ReportMetric(float64(pace[len(pace)/2].Microseconds()), "pace-late-p50-µs")
	b.ReportMetric(float64(pace[len(pace)*99/100].Microseconds()), "pace-late-p99-µs")
}
