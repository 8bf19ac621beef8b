package sim

import (
	"slices"
	"time"

	"github.com/sprayfabric/spray/clock"
	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/transport"
)

// Host is a simulated host: a NIC that serializes at its link's rate, and
// the links that the host's transport engines run on. A host runs one
// engine, holding one QP per peer, as a real endpoint does, or one engine
// per NIC queue (QueueLink), with its frames steered to a queue by
// destination QP (Steer), as an endpoint running one engine per queue.
//
// The event loop steps an engine when a frame arrives for it, when a NIC
// transmit slot frees after it ran short, and at its NextDeadline.
type Host struct {
	n       *Net
	idx     int32
	port    int32   // the NIC's port into the first plane
	planes  []int32 // with Topo.Planes, the port into each plane
	mac     [6]byte
	queues  []*hostEngine
	steer   map[uint32]int32 // destination QP -> queue, with more than one queue
	txOut   int              // frames in the NIC queue
	starved []*hostEngine
	rxDrops uint64
	misuse  uint64
	// OnStep is called after every step of one of the host's engines.
	OnStep func(e *transport.Engine)
}

// hostEngine is the link of a host and the engine attached to it.
type hostEngine struct {
	h       *Host
	id      int32 // index in Net.engines
	eng     *transport.Engine
	rx      []int32
	rxh     int
	pending bool // a step is scheduled
	wakeAt  clock.Time
	starved bool
	closed  bool
	err     error
}

func newHost(n *Net, i int) *Host {
	mac, _ := HostAddr(i)
	return &Host{n: n, idx: int32(i), mac: mac}
}

// Index returns the host's number.
func (h *Host) Index() int { return int(h.idx) }

// Link returns the host's first queue's link: it receives every frame
// addressed to the host that Steer sends to no other queue. Every call
// returns the same link.
func (h *Host) Link() link.Link { return h.QueueLink(0) }

// QueueLink returns the link of the host's NIC queue i (i >= 0), creating
// the queues up to it.
func (h *Host) QueueLink(i int) link.Link {
	for len(h.queues) <= i {
		e := &hostEngine{h: h, id: int32(len(h.n.engines)), wakeAt: clock.Never}
		h.n.engines = append(h.n.engines, e)
		h.queues = append(h.queues, e)
	}
	return (*hostLink)(h.queues[i])
}

// Steer makes the NIC deliver the frames for QP number qpn to the queue
// of link l, one of h's links (an ntuple rule on the BTH's destination
// QP). It reports false when l is not h's or another queue already
// takes qpn.
func (h *Host) Steer(qpn uint32, l link.Link) bool {
	hl, ok := l.(*hostLink)
	if !ok || hl.h != h {
		return false
	}
	q := int32(slices.Index(h.queues, (*hostEngine)(hl)))
	if h.steer == nil {
		h.steer = map[uint32]int32{}
	}
	if o, ok := h.steer[qpn]; ok && o != q {
		return false
	}
	h.steer[qpn] = q
	return true
}

// Attach makes the event loop step eng, an engine created on l, one of
// h's links.
func (h *Host) Attach(l link.Link, eng *transport.Engine) {
	if hl, ok := l.(*hostLink); ok && hl.h == h {
		hl.eng = eng
	}
}

// Err returns the first error a step of one of the host's engines
// returned, if any.
func (h *Host) Err() error {
	for _, e := range h.queues {
		if e.err != nil {
			return e.err
		}
	}
	return nil
}

// Misuse counts link calls with foreign or stale frames.
func (h *Host) Misuse() uint64 { return h.misuse }

// Kick schedules a step of the engine on link l now (after work was
// posted to it).
func (h *Host) Kick(l link.Link) {
	if hl, ok := l.(*hostLink); ok && hl.h == h {
		(*hostEngine)(hl).kick()
	}
}

func (e *hostEngine) kick() {
	if !e.pending {
		e.pending = true
		e.h.n.schedule(e.h.n.now, evHostStep, e.id, 0)
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
	h.txOut++
	h.n.inject(id)
	h.n.send(h.egress(id), id)
	return true
}

// egress returns the port that packet id leaves by: port, or with planes
// the one its ECMP key hashes to (TestPlanesSpread).
func (h *Host) egress(id int32) int32 {
	if h.planes == nil {
		return h.port
	}
	k := splitmix(h.n.pkts[id].flow ^ 0x504C414E45)
	return h.planes[k%uint64(len(h.planes))]
}

// bthDestQP is the offset of the BTH's destination QP in a RoCEv2 frame:
// Ethernet (14), IPv4 without options (20), UDP (8), then the BTH's
// opcode, flags, partition key and a reserved byte.
const bthDestQP = 14 + 20 + 8 + 5

// receive takes a frame the NIC received: to the engine of the queue
// that its destination QP is steered to (the first queue by default), or
// to OnDeliver when the host runs none.
func (h *Host) receive(id int32) {
	var e *hostEngine
	if len(h.queues) > 0 {
		e = h.queues[0]
	}
	if h.steer != nil {
		if f := h.n.pkts[id].buf; len(f) >= bthDestQP+3 {
			if q, ok := h.steer[uint32(f[bthDestQP])<<16|uint32(f[bthDestQP+1])<<8|uint32(f[bthDestQP+2])]; ok {
				e = h.queues[q]
			}
		}
	}
	if e == nil || e.eng == nil {
		if h.n.OnDeliver != nil {
			h.n.OnDeliver(int(h.idx), h.n.pkts[id].buf, h.n.now)
		}
		h.n.freePacket(id)
		return
	}
	if len(e.rx)-e.rxh >= h.n.cfg.HostRxFrames {
		h.rxDrops++
		h.n.freePacket(id)
		return
	}
	e.rx = append(e.rx, id)
	e.kick()
}

// txDone frees a NIC slot. An engine that ran short of slots runs again
// once the queue has drained to half (the one that waited longest
// first): the wire still has half a queue of frames to send meanwhile,
// and an engine that holds a QP per peer is stepped once per half queue,
// not once per frame (TestNICRefill).
func (h *Host) txDone() {
	h.txOut--
	for len(h.starved) > 0 && h.txOut <= h.n.cfg.NICFrames/2 {
		e := h.starved[0]
		h.starved = h.starved[1:]
		if e.starved {
			e.starved = false
			e.kick()
			break
		}
	}
}

func (e *hostEngine) wake(t clock.Time) {
	if t != e.wakeAt {
		return // superseded by an earlier wake-up
	}
	e.wakeAt = clock.Never
	e.step()
}

// maxRounds bounds the engine steps in one event, so that a busy engine
// cannot hold the loop (it is stepped again at once).
const maxRounds = 64

func (e *hostEngine) step() {
	e.pending = false
	if e.eng == nil || e.err != nil {
		return
	}
	n := e.h.n
	now := n.now
	for i := 0; ; i++ {
		work, err := e.eng.Step(now)
		if err != nil {
			e.err = err
			return
		}
		if !work {
			break
		}
		if i == maxRounds {
			e.kick()
			break
		}
	}
	if e.h.OnStep != nil {
		e.h.OnStep(e.eng)
	}
	d := e.eng.NextDeadline()
	if d <= now {
		if e.starved {
			return // a free NIC slot steps it
		}
		d = now + 1
	}
	if d < e.wakeAt {
		e.wakeAt = d
		n.schedule(d, evHostWake, e.id, 0)
	}
}

// hostLink is a host's link as a link.Link.
type hostLink hostEngine

// linkBatch is the batch size the host links report: the frames a step
// of the engine receives at once, and the transmit buffers it borrows at
// once (keeping what it did not use). A host's engine holds a QP per
// peer and pays for a scan of them on every step, so frames that wait
// for it are taken in one.
const linkBatch = 32

func (l *hostLink) Info() link.Info {
	h := l.h
	_, ip := HostAddr(int(h.idx))
	return link.Info{Name: "sim", FrameSize: h.n.topo.MTU, BatchSize: linkBatch, MAC: h.mac, IP: ip}
}

func (l *hostLink) Recv(fs []link.Frame) (int, error) {
	if l.closed {
		return 0, link.ErrClosed
	}
	n := l.h.n
	k := 0
	for k < len(fs) && l.rxh < len(l.rx) {
		id := l.rx[l.rxh]
		l.rxh++
		fs[k] = link.Frame{Buf: n.pkts[id].buf, ID: uint64(id)}
		k++
	}
	if l.rxh == len(l.rx) {
		l.rx, l.rxh = l.rx[:0], 0
	}
	return k, nil
}

func (l *hostLink) Release(fs []link.Frame) {
	n := l.h.n
	for _, f := range fs {
		if f.ID >= uint64(len(n.pkts)) {
			l.h.misuse++
			continue
		}
		n.freePacket(int32(f.ID))
	}
}

func (l *hostLink) Alloc(fs []link.Frame) int {
	h := l.h
	if l.closed {
		return 0
	}
	// An engine that got no buffer waits for a NIC slot (txDone steps
	// it); one that got fewer than its batch asks again when it has
	// used them.
	k := max(min(len(fs), h.n.cfg.NICFrames-h.txOut), 0)
	if k == 0 && !l.starved {
		l.starved = true
		h.starved = append(h.starved, (*hostEngine)(l))
	}
	// Buffers an engine holds unused do not count against the NIC's
	// queue: an engine borrows its batch before it knows whether it has
	// anything to send, and a host runs many engines.
	for i := range k {
		id := h.n.allocPacket()
		fs[i] = link.Frame{Buf: h.n.pkts[id].buf, ID: uint64(id)}
	}
	return k
}

func (l *hostLink) Send(fs []link.Frame) (int, error) {
	h := l.h
	n := h.n
	sent := 0
	for _, f := range fs {
		if f.ID >= uint64(len(n.pkts)) {
			h.misuse++
			continue
		}
		id := int32(f.ID)
		pk := &n.pkts[id]
		if l.closed || len(f.Buf) == 0 || len(f.Buf) > cap(pk.buf) || &f.Buf[:1][0] != &pk.buf[:1][0] {
			h.misuse++
			n.freePacket(id)
			continue
		}
		pk.buf = pk.buf[:len(f.Buf)]
		h.txOut++
		n.inject(id)
		n.send(h.egress(id), id)
		sent++
	}
	if l.closed {
		return sent, link.ErrClosed
	}
	return sent, nil
}

func (l *hostLink) Wait(time.Duration) error {
	if l.closed {
		return link.ErrClosed
	}
	return nil
}

func (l *hostLink) Wake() {}

func (l *hostLink) Close() error {
	l.closed = true
	return nil
}
