package xdp

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// fakeKernel plays the kernel's half of the four rings over plain memory,
// so that the core's ring and pool logic runs without a kernel (and without
// root). It behaves like the kernel's copy mode; its hostile methods break
// the rules on purpose.
type fakeKernel struct {
	c    *core
	umem []byte
	mem  [4][]uint64 // fill, comp, rx, tx
	lay  ringLayout
	size uint32

	tx        [][]byte // frames "transmitted", in order
	txBudget  int      // frames per kickTx (the kernel's copy mode does 32)
	kickErr   error    // returned by the next kickTx, then cleared
	txPaused  bool     // kickTx consumes nothing (device busy)
	discard   bool     // transmit does not keep copies of the frames
	rxDropped int      // frames dropped: no fill entry or RX ring full
	txKicks   int
	rxKicks   int
	napi      uint32 // what napiID returns
	frameSize int
	partial   []byte // a multi-buffer TX frame being gathered
}

var errFakeFatal = errors.New("fake: fatal kick error")

// newFake returns a core wired to a fake kernel.
func newFake(frameSize, rxFrames, txFrames, ringSize int) (*core, *fakeKernel) {
	return newFakeSG(frameSize, rxFrames, txFrames, ringSize, 0)
}

// newFakeSG is newFake for a socket of maxFrame bytes: multi-buffer when
// it exceeds one chunk.
func newFakeSG(frameSize, rxFrames, txFrames, ringSize, maxFrame int) (*core, *fakeKernel) {
	return newFakeStamped(frameSize, rxFrames, txFrames, ringSize, maxFrame, 0)
}

// newFakeStamped is newFakeSG for a socket whose frames arrive with a
// stamp of stamp bytes in front (Config.Stamped).
func newFakeStamped(frameSize, rxFrames, txFrames, ringSize, maxFrame, stamp int) (*core, *fakeKernel) {
	k := &fakeKernel{size: uint32(ringSize), txBudget: 32}
	// prod at byte 0, cons at 64, flags at 128, descriptors from 192.
	k.lay = ringLayout{prod: 0, cons: 64, flags: 128, desc: 192}
	c := &core{sys: k, needWakeup: true, stamp: stamp}
	k.c = c
	for i := range k.mem {
		k.mem[i] = make([]uint64, 192/8+2*ringSize)
	}
	c.fill = newAddrRing(k.bytes(0), k.lay, k.size, true)
	c.comp = newAddrRing(k.bytes(1), k.lay, k.size, false)
	c.rx = newDescRing(k.bytes(2), k.lay, k.size, false)
	c.tx = newDescRing(k.bytes(3), k.lay, k.size, true)
	// The kernel asks for TX wakeups, as in copy mode.
	atomic.StoreUint32(c.tx.flags, ringNeedWakeup)
	chunks := rxFrames + txFrames
	if maxFrame+stamp > frameSize-headroom {
		chunks = rxFrames + txFrames*txSlotChunks(frameSize, maxFrame)
	}
	k.umem = make([]byte, chunks*frameSize)
	k.frameSize = frameSize
	c.init(k.umem, frameSize, rxFrames, txFrames, maxFrame)
	return c, k
}

func (k *fakeKernel) bytes(i int) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&k.mem[i][0])), len(k.mem[i])*8)
}

// idx returns pointers to a ring's producer and consumer indices.
func (k *fakeKernel) idx(i int) (prod, cons *uint32) {
	b := k.bytes(i)
	return (*uint32)(unsafe.Pointer(&b[k.lay.prod])), (*uint32)(unsafe.Pointer(&b[k.lay.cons]))
}

func (k *fakeKernel) addrAt(i int, n uint32) *uint64 {
	return &k.mem[i][k.lay.desc/8+uint64(n&(k.size-1))]
}

func (k *fakeKernel) descAt(i int, n uint32) *desc {
	return (*desc)(unsafe.Pointer(&k.mem[i][k.lay.desc/8+2*uint64(n&(k.size-1))]))
}

// deliver receives pkt as the kernel's copy mode does: take a fill entry,
// copy the frame after the headroom, post an RX descriptor.
func (k *fakeKernel) deliver(pkt []byte) bool {
	fp, fc := k.idx(0)
	rp, rc := k.idx(2)
	if atomic.LoadUint32(rp)-atomic.LoadUint32(rc) == k.size || atomic.LoadUint32(fp) == atomic.LoadUint32(fc) {
		k.rxDropped++
		return false
	}
	n := atomic.LoadUint32(fc)
	addr := *k.addrAt(0, n) + headroom
	atomic.StoreUint32(fc, n+1)
	if addr+uint64(len(pkt)) > uint64(len(k.umem)) {
		panic("fake kernel: fill entry outside the UMEM")
	}
	copy(k.umem[addr:], pkt)
	return k.postRx(addr, uint32(len(pkt)))
}

// postRx writes an RX descriptor as is (hostile tests use it directly).
func (k *fakeKernel) postRx(addr uint64, n uint32) bool {
	return k.postRxOpt(addr, n, 0)
}

func (k *fakeKernel) postRxOpt(addr uint64, n, opt uint32) bool {
	rp, rc := k.idx(2)
	p := atomic.LoadUint32(rp)
	if p-atomic.LoadUint32(rc) == k.size {
		return false
	}
	*k.descAt(2, p) = desc{Addr: addr, Len: n, Options: opt}
	atomic.StoreUint32(rp, p+1)
	return true
}

// deliverSG receives pkt as the kernel's multi-buffer copy mode does: one
// fill entry per frameSize-headroom bytes, the descriptors of one frame
// chained with XDP_PKT_CONTD and published together. It returns false
// (and counts a drop) when the fill or RX ring has too little room.
func (k *fakeKernel) deliverSG(pkt []byte) bool {
	per := k.frameSize - headroom
	nd := uint32((len(pkt) + per - 1) / per)
	fp, fc := k.idx(0)
	rp, rc := k.idx(2)
	if k.size-(atomic.LoadUint32(rp)-atomic.LoadUint32(rc)) < nd || atomic.LoadUint32(fp)-atomic.LoadUint32(fc) < nd {
		k.rxDropped++
		return false
	}
	f, p := atomic.LoadUint32(fc), atomic.LoadUint32(rp)
	for i := range nd {
		addr := *k.addrAt(0, f+i) + headroom
		piece := pkt[int(i)*per : min(len(pkt), int(i+1)*per)]
		copy(k.umem[addr:], piece)
		var opt uint32
		if i+1 < nd {
			opt = pktContd
		}
		*k.descAt(2, p+i) = desc{Addr: addr, Len: uint32(len(piece)), Options: opt}
	}
	atomic.StoreUint32(fc, f+nd)
	atomic.StoreUint32(rp, p+nd)
	return true
}

// postComp writes a completion entry as is.
func (k *fakeKernel) postComp(addr uint64) bool {
	cp, cc := k.idx(1)
	p := atomic.LoadUint32(cp)
	if p-atomic.LoadUint32(cc) == k.size {
		return false
	}
	*k.addrAt(1, p) = addr
	atomic.StoreUint32(cp, p+1)
	return true
}

// transmit consumes up to max TX descriptors, copying their frames out and
// completing them, as the kernel's copy mode does. It stops when the
// completion ring is full.
func (k *fakeKernel) transmit(max int) int {
	tp, tc := k.idx(3)
	n := 0
	for ; n < max; n++ {
		c := atomic.LoadUint32(tc)
		if c == atomic.LoadUint32(tp) {
			break
		}
		d := *k.descAt(3, c)
		cp, cc := k.idx(1)
		if atomic.LoadUint32(cp)-atomic.LoadUint32(cc) == k.size {
			break
		}
		if !k.discard {
			k.partial = append(k.partial, k.umem[d.Addr:d.Addr+uint64(d.Len)]...)
			if d.Options&pktContd == 0 {
				k.tx = append(k.tx, k.partial)
				k.partial = nil
			}
		}
		atomic.StoreUint32(tc, c+1)
		k.postComp(d.Addr)
	}
	return n
}

func (k *fakeKernel) kickTx() error {
	k.txKicks++
	if err := k.kickErr; err != nil {
		k.kickErr = nil
		if err == errDeviceDrop {
			k.transmit(1)
			k.tx = k.tx[:len(k.tx)-1] // consumed and completed, never sent
		}
		return err
	}
	if !k.txPaused {
		k.transmit(k.txBudget)
	}
	return nil
}

func (k *fakeKernel) kickRx() { k.rxKicks++ }

func (k *fakeKernel) napiID() uint32 { return k.napi }

// fillOnRing returns how many entries the fill ring holds.
func (k *fakeKernel) fillOnRing() int {
	fp, fc := k.idx(0)
	return int(atomic.LoadUint32(fp) - atomic.LoadUint32(fc))
}
