package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// spineFabric is a link/mem fabric shaped like `spray compare`'s spinefail
// scenario: hosts on two leaves joined by two spines, where the spine a
// frame between the leaves crosses is a hash of its addresses and UDP
// source port (ECMP). Dead blackholes one spine in both directions: every
// frame between the leaves that hashes onto it is dropped (data packets,
// acknowledgements and probes alike).
type spineFabric struct {
	clk     *clock.Sim
	fab     *mem.Fabric
	eng     []*Engine
	ips     []netip.Addr
	qps     [][]*QP // qps[i][j]: host i's QP to host j
	comps   [][]Completion
	dead    bool
	dropped int
}

// spineOf is the spine (0 or 1) that a frame from src to dst with UDP
// source port sport hashes onto.
func spineOf(src, dst []byte, sport uint16) int {
	h := fnv.New32a()
	h.Write(src)
	h.Write(dst)
	h.Write([]byte{byte(sport >> 8), byte(sport)})
	return int(h.Sum32()>>7) & 1
}

// leafOf is the leaf of host address ip (10.0.L.x).
func leafOf(ip []byte) byte { return ip[2] }

func newSpineFabric(t *testing.T, hosts int, cfg Config) *spineFabric {
	t.Helper()
	s := &spineFabric{clk: &clock.Sim{}}
	s.fab = mem.NewFabric(mem.Config{
		Seed: cfg.Seed, Delay: 20 * time.Microsecond, Jitter: 10 * time.Microsecond,
		Bandwidth: 1e9,
		Filter: func(f []byte) bool {
			if !s.dead || len(f) < 36 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
				return true
			}
			src, dst := f[26:30], f[30:34]
			if leafOf(src) == leafOf(dst) || spineOf(src, dst, binary.BigEndian.Uint16(f[34:])) != 1 {
				return true
			}
			s.dropped++
			return false
		},
	}, s.clk)
	for i := range hosts {
		mac := [6]byte{0x02, 0, 0, 0, byte(i / 2), byte(i)}
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i / 2), byte(i + 1)})
		p, err := s.fab.NewPort(mac, ip)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c := cfg
		c.Seed = cfg.Seed + uint64(i)*0x9E3779B97F4A7C15
		e, err := NewEngine(p, c)
		if err != nil {
			t.Fatal(err)
		}
		s.eng = append(s.eng, e)
		s.ips = append(s.ips, ip)
	}
	s.qps = make([][]*QP, hosts)
	s.comps = make([][]Completion, hosts)
	for i := range hosts {
		s.qps[i] = make([]*QP, hosts)
		for j := range hosts {
			if i == j {
				continue
			}
			q, err := s.eng[i].CreateQP()
			if err != nil {
				t.Fatal(err)
			}
			s.qps[i][j] = q
		}
	}
	for i := range hosts {
		for j := range hosts {
			if i != j {
				if err := s.qps[i][j].Connect(s.qps[j][i].Info()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return s
}

// run steps every engine, jumping the simulated clock to the next event,
// until done reports true; it fails after limit of simulated time, when
// nothing can happen any more, or when a QP fails.
func (s *spineFabric) run(limit clock.Time, during func(now clock.Time), done func() bool) error {
	for !done() {
		now := s.clk.Now()
		if during != nil {
			during(now)
		}
		work := false
		next := s.fab.NextDelivery()
		for i, e := range s.eng {
			w, err := e.Step(now)
			if err != nil {
				return err
			}
			work = work || w
			s.comps[i] = e.Completions(s.comps[i])
			next = clock.Min(next, e.NextDeadline())
		}
		for i, c := range s.comps {
			for _, cp := range c {
				if cp.Err != nil {
					return fmt.Errorf("host %d: %w", i, cp.Err)
				}
			}
		}
		if work {
			continue
		}
		switch {
		case next == clock.Never:
			return fmt.Errorf("deadlock at %v", now)
		case next > limit:
			return fmt.Errorf("not done after %v of simulated time", limit)
		case next <= now:
			next = now + 1
		}
		s.clk.Set(next)
	}
	return nil
}

// TestSpineFailAllToAll is `spray compare --scenarios spinefail` on
// link/mem: four hosts on two leaves, a QP between every two of them, and
// an all-to-all (every host sends a message to every other) repeated in
// bursts separated by idle gaps longer than the retransmission timeout, so
// that every QP's path knowledge goes stale between them. In the middle of
// one burst, one spine dies in both directions, never to come back: the
// data packets, acknowledgements and probes that hash onto it are lost.
// Every message of every later burst must still arrive byte-exact, with no
// QP failing for an unreachable peer.
//
// The burst in which the spine dies must also end within failPeriods
// MinRTO periods of simulated time, no QP taking more than failTimeouts
// timeouts in it. The receivers' queues keep SRTT above twice the smallest
// RTT, so every first timeout is an F-RTO (the oldest packet resent
// alone); the packets RACK then declares lost must go on a path that
// delivers, and the resend's ACK, though it comes sooner than any RTT
// measured under the queue, must count (nextEntropy, ackOne). Without
// either the burst took 7.5 periods here, three timeouts in a row.
func TestSpineFailAllToAll(t *testing.T) { spineFail(t, false) }

// TestSpineFailOneWay is TestSpineFailAllToAll with data from the hosts of
// one leaf to those of the other only: the receivers send no data, so
// nothing but the duplicates their peers resend tells them which paths
// lose their acknowledgements.
func TestSpineFailOneWay(t *testing.T) { spineFail(t, true) }

func spineFail(t *testing.T, oneWay bool) {
	const (
		hosts  = 4
		iters  = 24
		failAt = 6
		size   = 80 << 10 // about 24 packets of the compare run's MTU
		gap    = 200 * time.Millisecond
		// failPeriods and failTimeouts bound the burst of the failure
		// (TestSpineFailAllToAll).
		failPeriods  = 5
		failTimeouts = 3
	)
	seed := testutil.Seed(t)
	rng := testutil.Rand(t)
	cfg := Config{
		Profile: Spray, Paths: PathsAdaptive, Entropies: 32, Window: 256, MTU: 3514,
		MinRTO: 18 * time.Millisecond, Seed: seed,
		CC: func() cc.Controller { return cc.Fixed{WindowBytes: 28 << 10} },
	}
	s := newSpineFabric(t, hosts, cfg)
	sends := func(i, j int) bool { return i != j && (!oneWay || (i/2 == 0 && j/2 == 1)) }
	want := make([]int, hosts) // send and receive completions per burst
	for i := range hosts {
		for j := range hosts {
			if sends(i, j) {
				want[i]++
				want[j]++
			}
		}
	}
	for it := range iters {
		msgs := make([][][]byte, hosts)
		for i := range hosts {
			msgs[i] = make([][]byte, hosts)
			for j := range hosts {
				if !sends(i, j) {
					continue
				}
				m := make([]byte, size)
				for k := range m {
					m[k] = byte(rng.Uint32())
				}
				msgs[i][j] = m
				if err := s.qps[i][j].Post(WorkRequest{ID: uint64(it + 1), Op: OpSend, Data: m}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range s.comps {
			s.comps[i] = s.comps[i][:0]
		}
		start := s.clk.Now()
		before := s.timeouts()
		during := func(now clock.Time) {
			if it == failAt && !s.dead && now.Sub(start) > time.Millisecond {
				s.dead = true
			}
		}
		err := s.run(start.Add(time.Minute), during, func() bool {
			for i, c := range s.comps {
				if len(c) < want[i] {
					return false
				}
			}
			return true
		})
		if err != nil {
			t.Fatalf("iteration %d (spine dead: %v, %d frames dropped): %v", it, s.dead, s.dropped, err)
		}
		for i := range hosts {
			for _, c := range s.comps[i] {
				if c.Op != OpRecv {
					continue
				}
				j := -1
				for k := range hosts {
					if k != i && s.qps[i][k].QPN() == c.QPN {
						j = k
					}
				}
				if j < 0 || !bytes.Equal(c.Data, msgs[j][i]) {
					t.Fatalf("iteration %d: host %d received a wrong message from host %d", it, i, j)
				}
			}
		}
		if it == failAt && !oneWay {
			after, most := s.timeouts(), uint64(0)
			for k := range after {
				most = max(most, after[k]-before[k])
			}
			took := s.clk.Now().Sub(start)
			t.Logf("the burst of the failure took %v (%.1f MinRTO periods), at most %d timeouts on one QP", took, float64(took)/float64(cfg.MinRTO), most)
			if took > failPeriods*cfg.MinRTO || most > failTimeouts {
				t.Fatalf("the burst of the failure took %v, over %d MinRTO periods (%v), or a QP took %d timeouts, over %d",
					took, failPeriods, failPeriods*cfg.MinRTO, most, failTimeouts)
			}
		}
		s.clk.Set(s.clk.Now().Add(gap))
	}
	if !s.dead || s.dropped == 0 {
		t.Fatalf("the spine never died (%d frames dropped)", s.dropped)
	}
	t.Logf("%d frames dropped on the dead spine", s.dropped)
}

// timeouts returns the retransmission timeouts of every QP, host by host.
func (s *spineFabric) timeouts() []uint64 {
	var n []uint64
	for _, row := range s.qps {
		for _, q := range row {
			if q != nil {
				n = append(n, q.Stats().Timeouts)
			}
		}
	}
	return n
}
