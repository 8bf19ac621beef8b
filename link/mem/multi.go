package mem

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/rss"
)

// MultiPort is a port with several receive queues, like a NIC with RSS: it
// implements link.Multi. A frame switched to it lands on the queue that its
// RSS table gives the frame's addresses and UDP ports (rss.Table.QueueOf),
// queue 0 for frames without them; a frame sent on queue i leaves from
// queue i, from that queue's own pool of Config.Frames buffers. Each queue
// is a *Port with its own random source (the fabric's seed and its creation
// order), so runs are as reproducible as with single ports.
//
// The MultiPort's own methods serve every queue at once (Recv takes from
// each queue in turn, Send and Alloc use queue 0) for a caller that drives
// it with one engine; a caller uses either those or Queues, never both.
// The zero value is not usable: get one from Fabric.NewMultiPort. It is
// safe for concurrent use, but its Wait, like each queue's, must not be
// called from two goroutines at once.
type MultiPort struct {
	fab   *Fabric
	qs    []*Port
	links []link.Link
	tab   rss.Table
	wake  chan struct{}
	done  chan struct{}
	timer *time.Timer
	rr    int // guarded by fab.mu: the queue Recv starts at
}

var (
	_ link.Multi       = (*MultiPort)(nil)
	_ link.StatsReader = (*MultiPort)(nil)
)

// NewMultiPort attaches a port with the given addresses and queues receive
// queues that spreads frames over its queues by tab (nil: rss.Spread over
// the queues with rss.DefaultKey and 128 entries). Errors are those of
// NewPort, and ErrConfig for queues < 1 or a table naming a queue that
// does not exist.
func (f *Fabric) NewMultiPort(mac [6]byte, ip netip.Addr, queues int, tab *rss.Table) (*MultiPort, error) {
	if queues < 1 || queues > 1024 {
		return nil, fmt.Errorf("%w: %d queues, want 1..1024", ErrConfig, queues)
	}
	t := rss.Spread(queues, 128, nil)
	if tab != nil {
		t = rss.Table{Key: append([]byte(nil), tab.Key...), Indir: append([]uint32(nil), tab.Indir...)}
		for _, q := range t.Indir {
			if int(q) >= queues {
				return nil, fmt.Errorf("%w: RSS table names queue %d of %d", ErrConfig, q, queues)
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkMAC(mac); err != nil {
		return nil, err
	}
	m := &MultiPort{fab: f, tab: t, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if !f.sim {
		m.timer = time.NewTimer(time.Hour)
		m.timer.Stop()
	}
	for i := range queues {
		p := f.newPortLocked(mac, ip)
		p.group, p.name = m, fmt.Sprintf("mem/q%d", i)
		m.qs = append(m.qs, p)
		m.links = append(m.links, p)
	}
	f.byMAC[mac] = m.qs[0]
	f.macGen++
	return m, nil
}

// pick returns the queue that the RSS table gives frame.
func (m *MultiPort) pick(frame []byte) *Port {
	if len(m.qs) == 1 {
		return m.qs[0]
	}
	tp, ok := rss.ParseFrame(frame)
	if !ok {
		return m.qs[0]
	}
	return m.qs[m.tab.QueueOf(tp)%len(m.qs)]
}

// Queues returns the queue ports, in queue order.
func (m *MultiPort) Queues() []link.Link { return m.links }

// Queue returns queue i.
func (m *MultiPort) Queue(i int) *Port { return m.qs[i] }

// RSS returns a copy of the port's RSS table.
func (m *MultiPort) RSS() rss.Table {
	return rss.Table{Key: append([]byte(nil), m.tab.Key...), Indir: append([]uint32(nil), m.tab.Indir...)}
}

// Info describes the port: Name is "mem", the rest as queue 0's.
func (m *MultiPort) Info() link.Info {
	in := m.qs[0].Info()
	in.Name = "mem"
	return in
}

// Stats returns the counters summed over the queues.
func (m *MultiPort) Stats() link.Stats {
	m.fab.mu.Lock()
	defer m.fab.mu.Unlock()
	var s link.Stats
	for _, q := range m.qs {
		s.RxFrames += q.stats.RxFrames
		s.RxBytes += q.stats.RxBytes
		s.TxFrames += q.stats.TxFrames
		s.TxBytes += q.stats.TxBytes
		s.RxDropped += q.stats.RxDropped
		s.TxDropped += q.stats.TxDropped
	}
	return s
}

// NextDelivery returns the earliest due time of the frames in flight to
// any queue, or clock.Never.
func (m *MultiPort) NextDelivery() clock.Time {
	m.fab.mu.Lock()
	defer m.fab.mu.Unlock()
	return m.nextLocked()
}

func (m *MultiPort) nextLocked() clock.Time {
	t := clock.Never
	for _, q := range m.qs {
		if len(q.rxq) > 0 {
			t = clock.Min(t, q.rxq[0].due)
		}
	}
	return t
}

// Blackhole drops every frame sent to or from any queue while on is true.
func (m *MultiPort) Blackhole(on bool) {
	m.fab.mu.Lock()
	for _, q := range m.qs {
		q.down = on
	}
	m.fab.mu.Unlock()
}

// Recv fills fs with due frames from the queues, taking from each in turn.
func (m *MultiPort) Recv(fs []link.Frame) (int, error) {
	f := m.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clk.Now()
	n, open := 0, false
	for k := range m.qs {
		q := m.qs[(m.rr+k)%len(m.qs)]
		if q.closed {
			continue
		}
		open = true
		n += q.recvLocked(fs[n:], now)
	}
	m.rr++
	if !open {
		return 0, link.ErrClosed
	}
	return n, nil
}

// Release returns frames received by Recv (or by any queue) to the fabric.
func (m *MultiPort) Release(fs []link.Frame) {
	f := m.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range fs {
		o, b, buf := f.lookup(fs[i].ID)
		if buf == nil || buf.state != stRx || f.ports[buf.holder].group != m {
			f.stats.Misuse++
			continue
		}
		o.put(b)
	}
}

// Alloc lends transmit buffers of queue 0.
func (m *MultiPort) Alloc(fs []link.Frame) int { return m.qs[0].Alloc(fs) }

// Send transmits frames allocated by Alloc, from queue 0.
func (m *MultiPort) Send(fs []link.Frame) (int, error) { return m.qs[0].Send(fs) }

// Wait blocks until a frame may be due at any queue, a buffer may have been
// freed, Wake is called or timeout passes; see Port.Wait.
func (m *MultiPort) Wait(timeout time.Duration) error {
	select {
	case <-m.done:
		return link.ErrClosed
	default:
	}
	if m.timer == nil {
		select {
		case <-m.wake:
		default:
		}
		return nil
	}
	if timeout == 0 {
		return nil
	}
	f := m.fab
	f.mu.Lock()
	if t := m.nextLocked(); t != clock.Never {
		until := t.Sub(f.clk.Now())
		if until <= 0 {
			f.mu.Unlock()
			return nil
		}
		if timeout < 0 || until < timeout {
			timeout = until
		}
	}
	f.mu.Unlock()
	return sleep(f.clk, timeout, m.wake, m.done, m.timer)
}

// Wake makes a pending or the next Wait return. Safe from any goroutine.
func (m *MultiPort) Wake() { notify(m.wake) }

// PrepareWait has nothing to do before Wait blocks: the fabric's lock
// guards what Wait reads (link.WaitSplitter).
func (m *MultiPort) PrepareWait(timeout time.Duration) (time.Duration, bool, error) {
	return timeout, false, nil
}

// Block is Wait (link.WaitSplitter).
func (m *MultiPort) Block(timeout time.Duration) error { return m.Wait(timeout) }

// Close closes every queue. It is idempotent.
func (m *MultiPort) Close() error {
	f := m.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range m.qs {
		f.closePort(q)
	}
	return nil
}
