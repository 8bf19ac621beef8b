package sim

import (
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/transport"
)

// Host is a simulated host: a NIC that serializes at its link's rate and,
// once attached, a transport engine that the event loop steps when a frame
// arrives for it, when a transmit slot frees after it ran short, and at
// its NextDeadline. Its Link is what the engine sends and receives on.
type Host struct {
	n       *Net
	idx     int32
	port    int32
	mac     [6]byte
	eng     *transport.Engine
	rx      []int32
	rxh     int
	txOut   int // buffers lent to the engine or in the NIC queue
	starved bool
	pending bool // a step is scheduled
	wakeAt  clock.Time
	rxDrops uint64
	misuse  uint64
	closed  bool
	OnStep  func(h *Host) // called after every step (completions)
	stepErr error
}

func newHost(n *Net, i int) *Host {
	mac, _ := HostAddr(i)
	return &Host{n: n, idx: int32(i), mac: mac, wakeAt: clock.Never}
}

// Index returns the host's number.
func (h *Host) Index() int { return int(h.idx) }

// Link returns the host's link: an engine created on it must be attached
// with Attach.
func (h *Host) Link() link.Link { return (*hostLink)(h) }

// Attach makes the event loop step e, an engine on h.Link().
func (h *Host) Attach(e *transport.Engine) { h.eng = e }

// Engine returns the attached engine, or nil.
func (h *Host) Engine() *transport.Engine { return h.eng }

// Err returns the first error an engine step returned.
func (h *Host) Err() error { return h.stepErr }

// Misuse counts link calls with foreign or stale frames.
func (h *Host) Misuse() uint64 { return h.misuse }

// Kick schedules a step of the host's engine now (after work was posted).
func (h *Host) Kick() {
	if !h.pending {
		h.pending = true
		h.n.schedule(h.n.now, evHostStep, h.idx, 0)
	}
}

// Send puts a copy of frame on the host's NIC, as if a transport had sent
// it (fabric tests without a transport). It reports false when the frame
// is too large or the NIC queue is full.
func (h *Host) Send(frame []byte) bool {
	if len(frame) > h.n.topo.MTU || h.txOut >= h.n.cfg.NICFrames {
		return false
	}
	id := h.n.allocPacket()
	pk := &h.n.pkts[id]
	pk.buf = pk.buf[:copy(pk.buf, frame)]
	pk.readyPs = int64(h.n.now) * 1000
	h.txOut++
	h.n.enqueue(h.port, id)
	return true
}

func (h *Host) receive(id int32) {
	if h.eng == nil {
		if h.n.OnDeliver != nil {
			h.n.OnDeliver(int(h.idx), h.n.pkts[id].buf, h.n.now)
		}
		h.n.freePacket(id)
		return
	}
	if len(h.rx)-h.rxh >= h.n.cfg.HostRxFrames {
		h.rxDrops++
		h.n.freePacket(id)
		return
	}
	h.rx = append(h.rx, id)
	h.Kick()
}

func (h *Host) txDone() {
	h.txOut--
	if h.starved {
		h.starved = false
		h.Kick()
	}
}

func (h *Host) wake(t clock.Time) {
	if t != h.wakeAt {
		return // superseded by an earlier wake-up
	}
	h.wakeAt = clock.Never
	h.step()
}

// maxRounds bounds the engine steps in one event, so that a busy host
// cannot hold the loop (it is stepped again at once).
const maxRounds = 64

func (h *Host) step() {
	h.pending = false
	if h.eng == nil || h.stepErr != nil {
		return
	}
	now := h.n.now
	for i := 0; ; i++ {
		work, err := h.eng.Step(now)
		if err != nil {
			h.stepErr = err
			return
		}
		if !work {
			break
		}
		if i == maxRounds {
			h.Kick()
			break
		}
	}
	if h.OnStep != nil {
		h.OnStep(h)
	}
	d := h.eng.NextDeadline()
	if d <= now {
		if h.starved {
			return // the NIC's next free slot steps it
		}
		d = now + 1
	}
	if d < h.wakeAt {
		h.wakeAt = d
		h.n.schedule(d, evHostWake, h.idx, 0)
	}
}

// hostLink is a Host seen as a link.Link.
type hostLink Host

// linkBatch is the batch size the host link reports.
const linkBatch = 32

func (l *hostLink) Info() link.Info {
	h := (*Host)(l)
	_, ip := HostAddr(int(h.idx))
	return link.Info{Name: "sim", FrameSize: h.n.topo.MTU, BatchSize: linkBatch, MAC: h.mac, IP: ip}
}

func (l *hostLink) Recv(fs []link.Frame) (int, error) {
	h := (*Host)(l)
	if h.closed {
		return 0, link.ErrClosed
	}
	k := 0
	for k < len(fs) && h.rxh < len(h.rx) {
		id := h.rx[h.rxh]
		h.rxh++
		fs[k] = link.Frame{Buf: h.n.pkts[id].buf, ID: uint64(id)}
		k++
	}
	if h.rxh == len(h.rx) {
		h.rx, h.rxh = h.rx[:0], 0
	}
	return k, nil
}

func (l *hostLink) Release(fs []link.Frame) {
	h := (*Host)(l)
	for _, f := range fs {
		if f.ID >= uint64(len(h.n.pkts)) {
			h.misuse++
			continue
		}
		h.n.freePacket(int32(f.ID))
	}
}

func (l *hostLink) Alloc(fs []link.Frame) int {
	h := (*Host)(l)
	if h.closed {
		return 0
	}
	k := min(len(fs), h.n.cfg.NICFrames-h.txOut)
	if k < len(fs) {
		h.starved = true
	}
	for i := range max(k, 0) {
		id := h.n.allocPacket()
		fs[i] = link.Frame{Buf: h.n.pkts[id].buf, ID: uint64(id)}
		h.txOut++
	}
	return max(k, 0)
}

func (l *hostLink) Send(fs []link.Frame) (int, error) {
	h := (*Host)(l)
	sent := 0
	for _, f := range fs {
		if f.ID >= uint64(len(h.n.pkts)) {
			h.misuse++
			continue
		}
		id := int32(f.ID)
		pk := &h.n.pkts[id]
		if h.closed || len(f.Buf) == 0 || len(f.Buf) > cap(pk.buf) || &f.Buf[:1][0] != &pk.buf[:1][0] {
			h.misuse++
			h.txOut--
			h.n.freePacket(id)
			continue
		}
		pk.buf = pk.buf[:len(f.Buf)]
		pk.readyPs = int64(h.n.now) * 1000
		h.n.enqueue(h.port, id)
		sent++
	}
	if h.closed {
		return sent, link.ErrClosed
	}
	return sent, nil
}

func (l *hostLink) Wait(time.Duration) error {
	if (*Host)(l).closed {
		return link.ErrClosed
	}
	return nil
}

func (l *hostLink) Wake() {}

func (l *hostLink) Close() error {
	(*Host)(l).closed = true
	return nil
}
