package xdp

import (
	"errors"
	"sync/atomic"
	"unsafe"

	"github.com/sprayfabric/spray/link"
)

// frameState says who owns a UMEM frame. Every frame is in exactly one
// state; every hand-over checks the state it expects, so that a descriptor
// the kernel returns twice, or a frame the caller releases twice, is counted
// and refused instead of corrupting the pools.
type frameState uint8

const (
	stRxKernel frameState = iota // on the fill ring, in the kernel, or on the RX ring
	stRxStash                    // free RX frame waiting for room on the fill ring
	stRxUser                     // handed out by Recv
	stTxFree                     // on the TX free list
	stTxUser                     // handed out by Alloc
	stTxKernel                   // on the TX ring or in the kernel, until completion
)

// ethHeaderLen is the shortest frame Send accepts.
const ethHeaderLen = 14

// maxKicks bounds the system calls one flush makes. The kernel's copy mode
// sends at most 32 frames per call, so this covers a full default ring.
const maxKicks = 128

// errDeviceDrop is returned by kicker.kickTx when the kernel reports that the
// device dropped a frame (EBUSY from sendto in copy mode).
var errDeviceDrop = errors.New("xdp: device dropped a frame")

// kicker makes the system calls that the rings need. The Linux socket
// implements it with sendto/recvfrom; tests implement it with a fake
// kernel.
type kicker interface {
	// kickTx asks the kernel to process the TX ring. It returns nil also for
	// the transient errors that only mean "try again later", errDeviceDrop
	// when a frame was dropped by the device, any other error as is.
	kickTx() error
	// kickRx asks the kernel to process the fill ring and receive.
	kickRx()
}

// counters are updated by the goroutine that drives the socket, once per
// call, and read by Stats from any goroutine.
type counters struct {
	rxFrames, rxBytes, txFrames, txBytes atomic.Uint64
	fills, completions                   atomic.Uint64
	txKicks, rxKicks, waits              atomic.Uint64
	txDropped, txDeviceDrops             atomic.Uint64
	rxBadDescs, badReleases, badComps    atomic.Uint64
	rxHeld, txFree, txHeld, txInFlight   atomic.Int64
}

// core is the memory side of a socket: the UMEM, the four rings, the frame
// pools and their accounting. It makes system calls only through sys. It is
// not safe for concurrent use.
type core struct {
	umem       []byte
	base       uintptr
	frameShift uint
	frameSize  uint64
	maxLen     int // longest frame: frameSize - headroom
	rxFrames   uint32
	nFrames    uint32

	state   []frameState
	fill    addrRing
	comp    addrRing
	rx      descRing
	tx      descRing
	rxStash []uint32 // frame indices, capacity rxFrames
	txFree  []uint32 // frame indices, capacity txFrames

	needWakeup bool
	busyPoll   bool
	sys        kicker

	// Engine-side counts mirrored into ctr.
	rxHeld, txHeld, txInFlight int
	// txShort is set when Alloc came up short: Wait then also waits for
	// completions.
	txShort bool

	ctr counters
}

// init sets up the pools over umem and the rings, and puts as many RX frames
// on the fill ring as fit. The rings must be mapped and empty.
func (c *core) init(umem []byte, frameSize, rxFrames, txFrames int) {
	c.umem = umem
	c.base = uintptr(unsafe.Pointer(unsafe.SliceData(umem)))
	c.frameSize = uint64(frameSize)
	for 1<<c.frameShift < frameSize {
		c.frameShift++
	}
	c.maxLen = frameSize - headroom
	c.rxFrames = uint32(rxFrames)
	c.nFrames = uint32(rxFrames + txFrames)
	c.state = make([]frameState, c.nFrames)
	c.rxStash = make([]uint32, 0, rxFrames)
	c.txFree = make([]uint32, 0, txFrames)
	for i := c.nFrames; i > c.rxFrames; i-- { // lowest address on top
		c.state[i-1] = stTxFree
		c.txFree = append(c.txFree, i-1)
	}
	for i := c.rxFrames; i > 0; i-- {
		c.state[i-1] = stRxStash
		c.rxStash = append(c.rxStash, i-1)
	}
	c.refill()
	c.ctr.txFree.Store(int64(len(c.txFree)))
}

// rxIndex returns the RX frame index that addr lies in.
func (c *core) rxIndex(addr uint64) (uint32, bool) {
	i := addr >> c.frameShift
	return uint32(i), i < uint64(c.rxFrames)
}

// txIndex returns the TX frame index that addr lies in.
func (c *core) txIndex(addr uint64) (uint32, bool) {
	i := addr >> c.frameShift
	return uint32(i), i >= uint64(c.rxFrames) && i < uint64(c.nFrames)
}

// recv implements link.Link.Recv.
func (c *core) recv(fs []link.Frame) int {
	want := uint32(min(len(fs), int(c.rx.size)))
	n := c.rx.avail(want)
	if n == 0 {
		if c.busyPoll || (c.needWakeup && c.fill.needWakeup()) {
			c.sys.kickRx()
			c.ctr.rxKicks.Add(1)
		}
		return 0
	}
	n = min(n, want)
	got, bytes, bad := 0, 0, 0
	mask := uint64(c.frameSize - 1)
	for range n {
		d := c.rx.descs[c.rx.local&c.rx.mask]
		c.rx.local++
		idx, ok := c.rxIndex(d.Addr)
		if !ok || c.state[idx] != stRxKernel || d.Len == 0 || d.Addr&mask+uint64(d.Len) > c.frameSize {
			bad++
			continue
		}
		c.state[idx] = stRxUser
		end := d.Addr + uint64(d.Len)
		fs[got] = link.Frame{Buf: c.umem[d.Addr:end:end], ID: d.Addr}
		got++
		bytes += int(d.Len)
	}
	c.rx.publishCons()
	c.rxHeld += got
	c.ctr.rxHeld.Store(int64(c.rxHeld))
	c.ctr.rxFrames.Add(uint64(got))
	c.ctr.rxBytes.Add(uint64(bytes))
	if bad > 0 {
		c.ctr.rxBadDescs.Add(uint64(bad))
	}
	if len(c.rxStash) > 0 {
		c.refill()
	}
	return got
}

// release implements link.Link.Release.
func (c *core) release(fs []link.Frame) {
	room := c.fill.free(uint32(len(fs) + len(c.rxStash)))
	put, bad := uint32(0), 0
	for _, f := range fs {
		idx, ok := c.rxIndex(f.ID)
		if !ok || c.state[idx] != stRxUser {
			bad++
			continue
		}
		c.rxHeld--
		if put < room {
			c.fill.descs[c.fill.local&c.fill.mask] = uint64(idx) << c.frameShift
			c.fill.local++
			c.state[idx] = stRxKernel
			put++
		} else {
			c.state[idx] = stRxStash
			c.rxStash = append(c.rxStash, idx)
		}
	}
	if bad > 0 {
		c.ctr.badReleases.Add(uint64(bad))
	}
	c.ctr.rxHeld.Store(int64(c.rxHeld))
	if put > 0 {
		c.ctr.fills.Add(uint64(put))
	}
	if len(c.rxStash) > 0 && put < room {
		c.refill() // publishes
	} else if put > 0 {
		c.fill.publishProd()
		c.kickFill()
	}
}

// refill moves stashed RX frames to the fill ring as far as it has room.
func (c *core) refill() {
	room := c.fill.free(uint32(len(c.rxStash)))
	n := min(room, uint32(len(c.rxStash)))
	if n == 0 {
		return
	}
	for range n {
		idx := c.rxStash[len(c.rxStash)-1]
		c.rxStash = c.rxStash[:len(c.rxStash)-1]
		c.fill.descs[c.fill.local&c.fill.mask] = uint64(idx) << c.frameShift
		c.fill.local++
		c.state[idx] = stRxKernel
	}
	c.fill.publishProd()
	c.ctr.fills.Add(uint64(n))
	c.kickFill()
}

func (c *core) kickFill() {
	if c.needWakeup && c.fill.needWakeup() {
		c.sys.kickRx()
		c.ctr.rxKicks.Add(1)
	}
}

// reap returns completed TX frames to the free list and reports how many
// completion entries it read.
func (c *core) reap() int {
	n := c.comp.avail(c.comp.size)
	if n == 0 {
		return 0
	}
	got, bad := 0, 0
	for range n {
		addr := c.comp.descs[c.comp.local&c.comp.mask]
		c.comp.local++
		idx, ok := c.txIndex(addr)
		if !ok || c.state[idx] != stTxKernel {
			bad++
			continue
		}
		c.state[idx] = stTxFree
		c.txFree = append(c.txFree, idx)
		got++
	}
	c.comp.publishCons()
	c.txInFlight -= got
	c.ctr.completions.Add(uint64(got))
	c.ctr.txFree.Store(int64(len(c.txFree)))
	c.ctr.txInFlight.Store(int64(c.txInFlight))
	if bad > 0 {
		c.ctr.badComps.Add(uint64(bad))
	}
	return int(n)
}

// alloc implements link.Link.Alloc.
func (c *core) alloc(fs []link.Frame) int {
	if len(c.txFree) < len(fs) {
		c.reap()
	}
	n := min(len(fs), len(c.txFree))
	for i := range n {
		idx := c.txFree[len(c.txFree)-1]
		c.txFree = c.txFree[:len(c.txFree)-1]
		c.state[idx] = stTxUser
		addr := uint64(idx) << c.frameShift
		end := addr + uint64(c.maxLen)
		fs[i] = link.Frame{Buf: c.umem[addr:end:end], ID: addr}
	}
	c.txShort = n < len(fs)
	c.txHeld += n
	c.ctr.txHeld.Store(int64(c.txHeld))
	c.ctr.txFree.Store(int64(len(c.txFree)))
	return n
}

// txAddr returns the UMEM address of buf if it lies within TX frame idx and
// has a sendable length.
func (c *core) txAddr(idx uint32, buf []byte) (uint64, bool) {
	if len(buf) < ethHeaderLen || len(buf) > c.maxLen {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	start := c.base + uintptr(idx)<<c.frameShift
	if p < start || p+uintptr(len(buf)) > start+uintptr(c.frameSize) {
		return 0, false
	}
	return uint64(p - c.base), true
}

// send implements link.Link.Send.
func (c *core) send(fs []link.Frame) (int, error) {
	room := c.tx.free(uint32(len(fs)))
	if room < uint32(len(fs)) {
		if err := c.flushTx(); err != nil {
			c.dropAll(fs)
			return 0, err
		}
		room = c.tx.free(uint32(len(fs)))
	}
	queued, bytes, dropped := uint32(0), 0, 0
	for _, f := range fs {
		idx, ok := c.txIndex(f.ID)
		if !ok || c.state[idx] != stTxUser {
			dropped++ // not ours to take back
			continue
		}
		c.txHeld--
		addr, ok := c.txAddr(idx, f.Buf)
		if !ok || queued >= room {
			c.state[idx] = stTxFree
			c.txFree = append(c.txFree, idx)
			dropped++
			continue
		}
		c.tx.descs[c.tx.local&c.tx.mask] = desc{Addr: addr, Len: uint32(len(f.Buf))}
		c.tx.local++
		c.state[idx] = stTxKernel
		queued++
		bytes += len(f.Buf)
	}
	if queued > 0 {
		c.tx.publishProd()
	}
	c.txInFlight += int(queued)
	c.ctr.txFrames.Add(uint64(queued))
	c.ctr.txBytes.Add(uint64(bytes))
	if dropped > 0 {
		c.ctr.txDropped.Add(uint64(dropped))
	}
	c.ctr.txHeld.Store(int64(c.txHeld))
	c.ctr.txFree.Store(int64(len(c.txFree)))
	c.ctr.txInFlight.Store(int64(c.txInFlight))
	return int(queued), c.flushTx()
}

// dropAll takes back the caller's frames in fs without sending them.
func (c *core) dropAll(fs []link.Frame) {
	for _, f := range fs {
		if idx, ok := c.txIndex(f.ID); ok && c.state[idx] == stTxUser {
			c.txHeld--
			c.state[idx] = stTxFree
			c.txFree = append(c.txFree, idx)
		}
	}
	c.ctr.txDropped.Add(uint64(len(fs)))
	c.ctr.txHeld.Store(int64(c.txHeld))
	c.ctr.txFree.Store(int64(len(c.txFree)))
}

// flushTx kicks the kernel while the TX ring holds entries it has not
// consumed and the kernel asks for it (or need_wakeup is off), as long as
// each kick makes progress. It reaps completions between kicks: in copy
// mode the kernel stops sending when the completion ring is full.
func (c *core) flushTx() error {
	for range maxKicks {
		c.reap()
		before := c.tx.outstanding()
		if before == 0 || (c.needWakeup && !c.tx.needWakeup()) {
			return nil
		}
		err := c.sys.kickTx()
		c.ctr.txKicks.Add(1)
		switch {
		case err == errDeviceDrop:
			c.ctr.txDeviceDrops.Add(1)
			c.ctr.txDropped.Add(1)
		case err != nil:
			return err
		}
		if c.tx.outstanding() >= before && c.reap() == 0 {
			// No progress and no room made: the device or the kernel is
			// busy; Wait or the next Send kicks again.
			return nil
		}
	}
	return nil
}

// ready reports whether Wait can return at once: frames to receive, or
// freed transmit buffers after Alloc came up short.
// It reaps completions on the way.
func (c *core) ready() bool {
	c.reap()
	if c.rx.avail(1) > 0 {
		return true
	}
	return c.txShort && len(c.txFree) > 0
}

// wantCompletions reports whether Wait should also wake for the TX side.
func (c *core) wantCompletions() bool { return c.txShort && c.txInFlight > 0 }

// stats fills the counts that the core keeps.
func (c *core) stats(st *Stats) {
	r := &c.ctr
	st.RxFrames, st.RxBytes = r.rxFrames.Load(), r.rxBytes.Load()
	st.TxFrames, st.TxBytes = r.txFrames.Load(), r.txBytes.Load()
	st.TxDropped = r.txDropped.Load()
	st.Fills, st.Completions = r.fills.Load(), r.completions.Load()
	st.TxWakeups, st.RxWakeups, st.Waits = r.txKicks.Load(), r.rxKicks.Load(), r.waits.Load()
	st.TxDeviceDrops = r.txDeviceDrops.Load()
	st.RxBadDescs, st.BadReleases, st.BadCompletions = r.rxBadDescs.Load(), r.badReleases.Load(), r.badComps.Load()
	st.RxHeld = int(r.rxHeld.Load())
	st.RxFree = int(c.rxFrames) - st.RxHeld
	st.TxFree = int(r.txFree.Load())
	st.TxHeld = int(r.txHeld.Load())
	st.TxInFlight = int(r.txInFlight.Load())
}
