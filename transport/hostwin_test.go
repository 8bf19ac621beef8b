package transport

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestHostWindowBounds: with Config.HostWindow, an engine whose QPs all
// send at once never has more data in flight than the bound on a lossless
// link (no resend, which the bound lets past), holds its output for it
// (HostWindowHeld), and every message still arrives whole; on a lossy,
// reordering link every message arrives too, and the engine's count of
// bytes in flight is back at zero once all is acknowledged.
func TestHostWindowBounds(t *testing.T) {
	const qps, bound = 16, 12_000
	for _, prof := range []Profile{Spray, RoCE} {
		for _, loss := range []float64{0, 0.02} {
			t.Run(fmt.Sprintf("%v/loss%v", prof, loss), func(t *testing.T) {
				m, want, _ := hostLoad(t, Config{Profile: prof, HostWindow: bound}, loss, qps)
				most := 0
				for steps := 0; pendingAny(m, want); steps++ {
					if steps > 2_000_000 {
						t.Fatal("messages still in flight after two million steps")
					}
					m.mustStep(t)
					check(t, m, want)
					most = max(most, m.ea.inflight)
					if loss == 0 && m.ea.inflight > bound {
						t.Fatalf("at %v: %d bytes in flight, bound %d", m.clk.Now(), m.ea.inflight, bound)
					}
				}
				if st := m.ea.Stats(); st.HostWindowHeld == 0 {
					t.Fatalf("output never held for the bound (most in flight %d bytes)", most)
				}
				if m.ea.inflight != 0 {
					t.Fatalf("%d bytes still counted in flight with every message acknowledged", m.ea.inflight)
				}
				t.Logf("most in flight %d bytes of %d; held %d times", most, bound, m.ea.Stats().HostWindowHeld)
			})
		}
	}
}

// TestHostRateBounds: with Config.HostRate, an engine whose QPs all send
// at once on a link eight times faster sends its data no faster than the
// bound (a burst of PacingBurst and a frame aside) on a lossless link,
// holds its output for it (HostRateHeld), and every message arrives
// whole, on a lossy, reordering link too.
func TestHostRateBounds(t *testing.T) {
	const qps, rate, burst = 16, 156.25e6, 16 << 10 // bytes/s: an eighth of the link's 10 Gb/s
	for _, prof := range []Profile{Spray, RoCE} {
		for _, loss := range []float64{0, 0.02} {
			t.Run(fmt.Sprintf("%v/loss%v", prof, loss), func(t *testing.T) {
				m, want, total := hostLoad(t, Config{Profile: prof, HostRate: rate, PacingBurst: burst}, loss, qps)
				sent := func() (b uint64) {
					for _, q := range m.qa {
						b += q.Stats().TxBytes
					}
					return b
				}
				start := m.clk.Now()
				for steps := 0; pendingAny(m, want); steps++ {
					if steps > 2_000_000 {
						t.Fatal("messages still in flight after two million steps")
					}
					m.mustStep(t)
					check(t, m, want)
					allowed := burst + rate*float64(m.clk.Now()-start)/1e9 + 2*1514
					if b := sent(); loss == 0 && float64(b) > allowed {
						t.Fatalf("at %v: %d bytes of data sent, the rate allows %.0f", m.clk.Now(), b, allowed)
					}
				}
				if st := m.ea.Stats(); st.HostRateHeld == 0 {
					t.Fatal("output never held for the rate")
				}
				took := m.clk.Now() - start
				t.Logf("%d bytes of messages in %v (%.0f MB/s); held %d times", total, time.Duration(took), float64(total)/float64(took)*1e3, m.ea.Stats().HostRateHeld)
			})
		}
	}
}

// TestHostRateConfig: a negative, NaN or infinite HostRate is a
// configuration error.
func TestHostRateConfig(t *testing.T) {
	for _, r := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := (Config{HostRate: r}).withDefaults(1514); !errors.Is(err, ErrConfig) {
			t.Errorf("HostRate %v: err %v, want ErrConfig", r, err)
		}
	}
}

// hostLoad connects qps QPs between two engines of cfg (with a fixed
// seed and a 1 ms MinRTO) over a 10 Gb/s link/mem fabric with 20 µs of
// delay, lossy and reordering when loss is above 0, and posts three
// random messages of up to 20 KiB on each of A's QPs. It returns the
// pair, the messages' hashes by receiving QP, and their bytes.
func hostLoad(t *testing.T, cfg Config, loss float64, qps int) (*multiPair, map[*QP][][32]byte, int) {
	t.Helper()
	seed := testutil.Seed(t)
	r := testutil.Rand(t)
	mc := mem.Config{Seed: seed, Delay: 20 * time.Microsecond, Bandwidth: 10e9}
	if loss > 0 {
		mc.Loss, mc.Reorder, mc.ReorderDelay = loss, 0.05, 20*time.Microsecond
	}
	cfg.Seed, cfg.MinRTO = seed, time.Millisecond
	m := newMultiPair(t, mc, cfg, qps)
	want := map[*QP][][32]byte{}
	total := 0
	for i, q := range m.qa {
		for _, msg := range randomMessages(r, 3, 20<<10) {
			if err := q.Post(WorkRequest{ID: uint64(i), Op: OpSend, Data: msg}); err != nil {
				t.Fatal(err)
			}
			want[m.qb[i]] = append(want[m.qb[i]], hash(msg))
			total += len(msg)
		}
	}
	return m, want, total
}

// TestHostWindowAsksAck: under a host window that holds each of many QPs
// to a packet or two in flight, fewer than AckEvery, the packets that fill
// the window ask for an ACK, so the window turns over in round trips and
// not in receivers' AckDelay: the transfer takes under a fifth of what one
// AckDelay per window would cost, and every message arrives whole.
func TestHostWindowAsksAck(t *testing.T) {
	const qps, bound, delay = 16, 12_000, 500 * time.Microsecond
	m, want, total := hostLoad(t, Config{Profile: Spray, HostWindow: bound, AckEvery: 16, AckDelay: delay}, 0, qps)
	start := m.clk.Now()
	for steps := 0; pendingAny(m, want); steps++ {
		if steps > 2_000_000 {
			t.Fatal("messages still in flight after two million steps")
		}
		m.mustStep(t)
		check(t, m, want)
	}
	took := m.clk.Now().Sub(start)
	windows := (total + bound - 1) / bound
	held := time.Duration(windows) * delay // one AckDelay per window's worth
	t.Logf("%d bytes in %d windows: %v (one AckDelay a window: %v)", total, windows, took, held)
	if took > held/5 {
		t.Errorf("transfer of %d bytes took %v under a %d-byte host window; one AckDelay per window is %v", total, took, bound, held)
	}
}
