package xdp

import (
	"encoding/binary"
	"errors"
	"math"
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
	stTxMember                   // a TX slot's chunk after its first (multi-buffer)
)

// ethHeaderLen is the shortest frame Send accepts.
const ethHeaderLen = 14

// Frame IDs. A UMEM frame's ID is its UMEM address with the socket's tag
// (its queue, for the sockets of a Link) in the bits above idQueueShift, so
// that a Link can route a frame back to the socket that lent it. A received
// multi-buffer frame, copied into a reassembly buffer, has idJumbo set and
// the buffer's index in the low bits. UMEM addresses stay below 2^32
// (maxFrames chunks of at most 4 KiB).
const (
	idQueueShift = 48
	idAddrMask   = 1<<idQueueShift - 1
	idJumbo      = 1 << 47
	// idInPlace marks a multi-buffer frame handed out in place: its
	// pieces lie back to back in consecutive RX entries (see
	// core.inPlace); the low 32 bits are the first entry's address and
	// idPiecesShift's five bits the number of entries.
	idInPlace     = 1 << 46
	idPiecesShift = 40
	idPiecesMask  = 0x1f
)

// unalignedOffsetShift is XSK_UNALIGNED_BUF_OFFSET_SHIFT: in an unaligned
// UMEM, an RX descriptor's address carries the data's offset from the
// buffer's address in its bits from 48 up.
const unalignedOffsetShift = 48

// pktContd is XDP_PKT_CONTD: on an RX or TX descriptor, the frame goes on
// in the next descriptor (multi-buffer).
const pktContd = 1

// maxFrags is the most RX descriptors one frame may take: the kernel's
// limit (MAX_SKB_FRAGS, 17, plus the head). A driver in zero-copy mode may
// fill less than a chunk per descriptor, so the count is not bounded by
// MaxFrame over the chunk size; the length is, and is checked.
const maxFrags = 18

// batchSize is Info().BatchSize.
const batchSize = 64

// jumboBuffers is the number of reassembly buffers of a multi-buffer
// socket: two receive batches, as the engine holds at most one between
// Recv and Release.
const jumboBuffers = 2 * batchSize

// kickBurst is the number of Sends since the socket last received frames
// or its caller last went to wait after which a Send may leave its frames
// for a later kick (Config.KickDelay): an acknowledgement and the request
// right behind it (two Sends) still leave at once, so that a ping-pong
// waits for nothing; what a sender sends while it neither receives nor
// sleeps is a stream, and shares kicks.
const kickBurst = 2

// kickSmall is the most frames a Send may queue and leave for a later
// kick (Config.KickDelay): a kick's fixed cost, spread over more frames
// than that, is small beside theirs, and the frames of a large message
// would only wait.
const kickSmall = 4

// kickBatch is the most frames a Send leaves on the TX ring for a later
// kick (Config.KickDelay): the kernel's copy mode sends at most 32 per
// kick, so that waiting for more saves no kick, only time.
const kickBatch = 32

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
	// napiID returns the NAPI instance the kernel recorded for the socket
	// (SO_INCOMING_NAPI_ID), the one busy polling drives; 0: none.
	napiID() uint32
}

// counters are updated by the goroutine that drives the socket, once per
// call, and read by Stats from any goroutine.
type counters struct {
	rxFrames, rxBytes, txFrames, txBytes atomic.Uint64
	fills, completions                   atomic.Uint64
	txKicks, rxKicks, waits              atomic.Uint64
	txDeferred                           atomic.Uint64
	txDropped, txDeviceDrops             atomic.Uint64
	rxBadDescs, badReleases, badComps    atomic.Uint64
	rxOversize, rxJumbo, rxCopied        atomic.Uint64
	rxHeld, txFree, txHeld, txInFlight   atomic.Int64
}

// core is the memory side of a socket: the UMEM, the four rings, the frame
// pools and their accounting. It makes system calls only through sys. It is
// not safe for concurrent use.
type core struct {
	umem       []byte
	base       uintptr
	frameShift uint
	frameSize  uint64 // one UMEM chunk
	maxLen     int    // longest frame: MaxFrame
	// stamp is the length of the arrival stamp in front of every received
	// frame: ebpf.StampLen on a Stamped socket, else 0. recv strips it into
	// Frame.RxTime; rxMax, the longest received frame with its stamp
	// (maxLen+stamp), bounds reassembly and frames in place, so that a
	// stamped frame of MaxFrame bytes is accepted (TestStampedRecv).
	stamp    int
	rxMax    int
	rxFrames uint32 // RX chunks, at the start of the UMEM
	nFrames  uint32 // RX chunks plus TX slots times txSlot
	// txSlot is the number of adjacent chunks one TX frame spans (1
	// without multi-buffer); a TX frame is named by its first chunk.
	txSlot uint32
	// pending counts, for the first chunk of a TX slot in the kernel, the
	// descriptors whose completion is still due.
	pending []uint8
	// tag is ORed into every frame ID the socket hands out (see idJumbo).
	tag uint64

	// Multi-buffer receive: frames that span several chunks and cannot be
	// handed out in place (inPlace) are copied into one of the jumbo
	// buffers (each maxLen long) and handed out from there; their chunks
	// go back to the fill ring at once, or with inPlace when the frame is
	// released.
	sg      bool
	jumbo   []byte
	jfree   []uint32
	jheld   []bool
	jHeld   int
	maxFrag int // the most descriptors one frame may take (maxFrags)
	// jent and jentN hold, with inPlace, the RX entries of the frame in
	// each reassembly buffer (maxFrags per buffer) until it is released.
	jent  []uint32
	jentN []uint8

	// inPlace (a multi-buffer socket over an unaligned UMEM, copy mode)
	// puts RX entry i at address i*rxStride, rxStride being a chunk less
	// the kernel's headroom: the kernel writes a piece of a frame from
	// 256 bytes into its entry, so the pieces of a frame in consecutive
	// entries lie back to back and the frame is handed out where it lies.
	// An entry's headroom overlaps the end of the previous entry's data,
	// which the kernel never writes in copy mode (it writes the headroom
	// only for XDP metadata, which the steering program does not set: its
	// arrival stamp is prepended with bpf_xdp_adjust_head, so it is frame
	// data, written from the entry's usual offset).
	// Otherwise rxStride is frameSize. TestLinkJumbo checks the bytes and
	// that frames are handed out in place.
	inPlace  bool
	rxStride uint64

	state   []frameState
	fill    addrRing
	comp    addrRing
	rx      descRing
	tx      descRing
	rxStash stash    // free RX frames waiting for the fill ring, oldest first
	txFree  []uint32 // frame indices, capacity txFrames

	needWakeup bool
	busyPoll   bool
	sys        kicker
	// napi is the NAPI instance busy polling drives, read once
	// (napiRead) after the first frame arrived, when the kernel has
	// recorded it; while it is 0 after that read, a busy-polling recv
	// makes no system call, since the kernel would have nothing to poll
	// (veth in copy mode: TestBusyPoll).
	napi     uint32
	napiRead bool

	// kickDelay (Config.KickDelay, ns) lets send leave its descriptors on
	// the TX ring without a kick while the last kick is younger than it;
	// kickOwed says such descriptors wait; lastKick is when flushTx last
	// kicked, on now's clock (monotonic ns). now is nil without a delay.
	kickDelay int64
	now       func() int64
	lastKick  int64
	kickOwed  bool
	// burst counts the sends since recv last returned frames or the
	// caller last prepared to wait (kickBurst).
	burst int

	// Engine-side counts mirrored into ctr.
	rxHeld, txHeld, txInFlight int
	// txShort is set when Alloc came up short: Wait then also waits for
	// completions.
	txShort bool

	ctr counters
}

// stash is a FIFO of RX frame indices, its capacity the RX pool's size.
type stash struct {
	buf     []uint32
	head, n uint32
}

func (q *stash) push(i uint32) {
	q.buf[(q.head+q.n)%uint32(len(q.buf))] = i
	q.n++
}

func (q *stash) pop() uint32 {
	i := q.buf[q.head]
	q.head = (q.head + 1) % uint32(len(q.buf))
	q.n--
	return i
}

// txSlotChunks is the number of UMEM chunks of frameSize bytes one TX frame
// of maxFrame bytes spans.
func txSlotChunks(frameSize, maxFrame int) int {
	return max(1, (maxFrame+frameSize-1)/frameSize)
}

// init sets up the pools over umem and the rings, and puts as many RX frames
// on the fill ring as fit. The rings must be mapped and empty; c.stamp set.
// maxFrame is the longest frame; when it, with the stamp, exceeds
// frameSize-headroom the socket is multi-buffer (bound with XDP_USE_SG).
// umem must hold rxFrames + txFrames*txSlotChunks(frameSize, maxFrame)
// chunks.
func (c *core) init(umem []byte, frameSize, rxFrames, txFrames, maxFrame int) {
	c.umem = umem
	c.base = uintptr(unsafe.Pointer(unsafe.SliceData(umem)))
	c.frameSize = uint64(frameSize)
	for 1<<c.frameShift < frameSize {
		c.frameShift++
	}
	if maxFrame <= 0 {
		maxFrame = frameSize - headroom - c.stamp
	}
	c.maxLen = maxFrame
	c.rxMax = maxFrame + c.stamp
	c.sg = c.rxMax > frameSize-headroom
	c.txSlot = uint32(txSlotChunks(frameSize, maxFrame))
	if !c.sg {
		c.txSlot = 1
	}
	c.rxStride = c.frameSize
	if c.inPlace {
		c.rxStride = c.frameSize - headroom
	}
	c.rxFrames = uint32(rxFrames)
	c.nFrames = uint32(rxFrames) + uint32(txFrames)*c.txSlot
	c.state = make([]frameState, c.nFrames)
	c.pending = make([]uint8, c.nFrames)
	c.rxStash.buf = make([]uint32, rxFrames)
	c.txFree = make([]uint32, 0, txFrames)
	for i := c.nFrames; i > c.rxFrames; i -= c.txSlot { // lowest address on top
		c.state[i-c.txSlot] = stTxFree
		for j := i - c.txSlot + 1; j < i; j++ {
			c.state[j] = stTxMember
		}
		c.txFree = append(c.txFree, i-c.txSlot)
	}
	if c.sg {
		c.maxFrag = maxFrags
		c.jumbo = make([]byte, jumboBuffers*c.rxMax)
		c.jheld = make([]bool, jumboBuffers)
		c.jent = make([]uint32, jumboBuffers*maxFrags)
		c.jentN = make([]uint8, jumboBuffers)
		c.jfree = make([]uint32, 0, jumboBuffers)
		for j := jumboBuffers; j > 0; j-- {
			c.jfree = append(c.jfree, uint32(j-1))
		}
	}
	for i := range c.rxFrames {
		c.state[i] = stRxStash
		c.rxStash.push(i)
	}
	c.refill()
	c.ctr.txFree.Store(int64(len(c.txFree)))
}

// rxIndex returns the RX chunk index that addr (a UMEM address from the
// kernel) lies in.
func (c *core) rxIndex(addr uint64) (uint32, bool) {
	i := addr >> c.frameShift
	return uint32(i), i < uint64(c.rxFrames)
}

// rxDesc returns the RX entry that an RX descriptor names and the UMEM
// address of its data, checking that the data lies within the entry.
func (c *core) rxDesc(d desc) (idx uint32, data uint64, ok bool) {
	if !c.inPlace {
		idx, ok = c.rxIndex(d.Addr)
		return idx, d.Addr, ok && d.Addr&(c.frameSize-1)+uint64(d.Len) <= c.frameSize
	}
	base, off := d.Addr&(1<<unalignedOffsetShift-1), d.Addr>>unalignedOffsetShift
	i := base / c.rxStride
	if base%c.rxStride != 0 || i >= uint64(c.rxFrames) || off+uint64(d.Len) > c.frameSize {
		return 0, 0, false
	}
	return uint32(i), base + off, true
}

// rxAddr is the address of RX entry idx, for the fill ring.
func (c *core) rxAddr(idx uint32) uint64 { return uint64(idx) * c.rxStride }

// rxID returns the RX chunk index of a frame ID the socket handed out.
func (c *core) rxID(id uint64) (uint32, bool) {
	if id&^idAddrMask != c.tag {
		return 0, false
	}
	if c.inPlace {
		a := id & idAddrMask
		if a%c.rxStride != 0 || a/c.rxStride >= uint64(c.rxFrames) {
			return 0, false
		}
		return uint32(a / c.rxStride), true
	}
	return c.rxIndex(id & idAddrMask)
}

// txIndex returns the first chunk of the TX slot that addr (a UMEM
// address) lies in.
func (c *core) txIndex(addr uint64) (uint32, bool) {
	i := addr >> c.frameShift
	if i < uint64(c.rxFrames) || i >= uint64(c.nFrames) {
		return 0, false
	}
	j := uint32(i) - c.rxFrames
	return c.rxFrames + j - j%c.txSlot, true
}

// txID returns the first chunk of the TX slot of a frame ID.
func (c *core) txID(id uint64) (uint32, bool) {
	if id&^idAddrMask != c.tag {
		return 0, false
	}
	return c.txIndex(id & idAddrMask)
}

// rxTime returns the arrival stamp at the start of b, a received frame of at
// least c.stamp bytes: CLOCK_MONOTONIC ns, little endian as the steering
// program writes it (TestLinkStamp); 0 on a socket without stamps.
func (c *core) rxTime(b []byte) int64 {
	if c.stamp == 0 {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// recv implements link.Link.Recv.
func (c *core) recv(fs []link.Frame) int {
	n := c.rx.avail(c.rx.size)
	if n == 0 {
		if (c.busyPoll && (c.napi != 0 || !c.napiRead)) || (c.needWakeup && c.fill.needWakeup()) {
			c.sys.kickRx()
			c.ctr.rxKicks.Add(1)
		}
		return 0
	}
	got, bytes, bad := 0, 0, 0
	for used := uint32(0); used < n && got < len(fs); {
		d := c.rx.descs[c.rx.local&c.rx.mask]
		if c.sg && d.Options&pktContd != 0 {
			k, ok := c.recvMulti(&fs[got], n-used)
			if k == 0 {
				break // incomplete frame or no reassembly buffer: later
			}
			used += k
			if ok {
				bytes += len(fs[got].Buf)
				got++
			}
			continue
		}
		c.rx.local++
		used++
		idx, data, ok := c.rxDesc(d)
		if !ok || c.state[idx] != stRxKernel || d.Len == 0 {
			bad++
			continue
		}
		if c.stamp > 0 && d.Len < uint32(c.stamp+ethHeaderLen) {
			// Too short to hold a stamp and an Ethernet header: the
			// kernel used the chunk, so it goes back to the stash;
			// counted, never sliced (TestStampedRecv).
			c.state[idx] = stRxStash
			c.rxStash.push(idx)
			bad++
			continue
		}
		c.state[idx] = stRxUser
		end := data + uint64(d.Len)
		id := c.tag | data
		if c.inPlace {
			id = c.tag | c.rxAddr(idx)
		}
		fr := c.umem[data:end:end]
		fs[got] = link.Frame{Buf: fr[c.stamp:], ID: id, RxTime: c.rxTime(fr)}
		bytes += len(fs[got].Buf)
		got++
		c.rxHeld++
	}
	c.rx.publishCons()
	if got > 0 {
		c.burst = 0
	}
	if c.busyPoll && !c.napiRead && got > 0 {
		c.napi, c.napiRead = c.sys.napiID(), true
	}
	c.ctr.rxHeld.Store(int64(c.rxHeld))
	c.ctr.rxFrames.Add(uint64(got))
	c.ctr.rxBytes.Add(uint64(bytes))
	if bad > 0 {
		c.ctr.rxBadDescs.Add(uint64(bad))
	}
	if c.rxStash.n > 0 {
		c.refill()
	}
	return got
}

// recvMulti takes one frame that spans several RX descriptors (all but the
// last with XDP_PKT_CONTD), among the avail descriptors at the consumer
// index. It copies the frame into a free reassembly buffer, puts it in *f
// and returns the chunks to the stash. It returns the number of
// descriptors it consumed (0: the frame's last descriptor is not there
// yet, or no reassembly buffer is free) and whether *f holds a frame: a
// frame longer than rxMax or shorter than the stamp and an Ethernet header,
// with more than maxFrag pieces, or with a descriptor that names no chunk
// the kernel owns is dropped and counted.
func (c *core) recvMulti(f *link.Frame, avail uint32) (uint32, bool) {
	k := uint32(1)
	for k < avail && c.rx.descs[(c.rx.local+k-1)&c.rx.mask].Options&pktContd != 0 {
		k++
	}
	last := c.rx.descs[(c.rx.local+k-1)&c.rx.mask]
	if last.Options&pktContd != 0 {
		// The rest has not arrived. A kernel publishes a frame's
		// descriptors together, so only a frame longer than the ring
		// can stay incomplete: drop what there is of it.
		if k < c.rx.size && k <= uint32(c.maxFrag) {
			return 0, false
		}
	}
	if c.inPlace && last.Options&pktContd == 0 && k <= uint32(c.maxFrag) {
		if c.recvInPlace(f, k) {
			return k, true
		}
	}
	if len(c.jfree) == 0 {
		return 0, false
	}
	j := c.jfree[len(c.jfree)-1]
	buf := c.jumbo[int(j)*c.rxMax : (int(j)+1)*c.rxMax]
	n, ok := 0, k <= uint32(c.maxFrag)
	var used [maxFrags]uint32
	nu := 0
	for range k {
		d := c.rx.descs[c.rx.local&c.rx.mask]
		c.rx.local++
		idx, data, valid := c.rxDesc(d)
		if !valid || c.state[idx] != stRxKernel {
			c.ctr.rxBadDescs.Add(1)
			ok = false
			continue
		}
		if ok && n+int(d.Len) <= len(buf) {
			n += copy(buf[n:], c.umem[data:data+uint64(d.Len)])
		} else {
			ok = false
		}
		if nu < len(used) {
			c.state[idx] = stRxUser
			used[nu] = idx
			nu++
		} else {
			c.state[idx] = stRxStash
			c.rxStash.push(idx)
		}
	}
	ok = ok && n >= c.stamp+ethHeaderLen
	// With frames in place, the copied frame's chunks go back to the
	// kernel when it is released, in their turn among the frames around
	// it: given back early, they would jump the queue of free entries and
	// break the order that keeps later frames' pieces back to back.
	hold := ok && c.inPlace
	for _, idx := range used[:nu] {
		if !hold {
			c.state[idx] = stRxStash
			c.rxStash.push(idx)
		}
	}
	if !ok {
		c.ctr.rxOversize.Add(1)
		return k, false
	}
	if hold {
		copy(c.jent[int(j)*maxFrags:], used[:nu])
		c.jentN[j] = uint8(nu)
		c.rxHeld += nu
	}
	c.jfree = c.jfree[:len(c.jfree)-1]
	c.jheld[j] = true
	c.jHeld++
	c.ctr.rxJumbo.Add(1)
	c.ctr.rxCopied.Add(1)
	*f = link.Frame{Buf: buf[c.stamp:n:n], ID: c.tag | idJumbo | uint64(j), RxTime: c.rxTime(buf)}
	return k, true
}

// recvInPlace hands out, where it lies, the frame of the k descriptors at
// the consumer index when its pieces are back to back (in consecutive RX
// entries, each full but the last) and valid, and reports whether it did;
// otherwise it consumes nothing, and recvMulti copies the frame.
func (c *core) recvInPlace(f *link.Frame, k uint32) bool {
	var first, start, end uint64
	for i := range k {
		d := c.rx.descs[(c.rx.local+i)&c.rx.mask]
		idx, data, ok := c.rxDesc(d)
		if !ok || c.state[idx] != stRxKernel || d.Len == 0 {
			return false
		}
		if i == 0 {
			first, start = uint64(idx), data
		} else if uint64(idx) != first+uint64(i) || data != end {
			return false
		}
		end = data + uint64(d.Len)
	}
	n := end - start
	if n > uint64(c.rxMax) || n < uint64(c.stamp+ethHeaderLen) {
		return false // recvMulti drops it and counts
	}
	for i := range k {
		c.state[uint32(first)+i] = stRxUser
	}
	c.rx.local += k
	c.rxHeld += int(k)
	c.ctr.rxJumbo.Add(1)
	fr := c.umem[start:end:end]
	*f = link.Frame{Buf: fr[c.stamp:], ID: c.tag | idInPlace | uint64(k)<<idPiecesShift | c.rxAddr(uint32(first)), RxTime: c.rxTime(fr)}
	return true
}

// release implements link.Link.Release.
func (c *core) release(fs []link.Frame) {
	c.fill.free(uint32(len(fs)) + c.rxStash.n) // one load of the kernel's index
	put, bad := uint32(0), 0
	give := func(idx uint32) {
		c.rxHeld--
		// Behind the stash, if any: the kernel gets free frames in the
		// order they were freed (see inPlace).
		if c.rxStash.n == 0 && c.fill.free(1) > 0 {
			c.fill.descs[c.fill.local&c.fill.mask] = c.rxAddr(idx)
			c.fill.local++
			c.state[idx] = stRxKernel
			put++
		} else {
			c.state[idx] = stRxStash
			c.rxStash.push(idx)
		}
	}
	for _, f := range fs {
		if f.ID&idInPlace != 0 && c.inPlace {
			k := uint32(f.ID>>idPiecesShift) & idPiecesMask
			idx, ok := c.rxID(f.ID &^ (idInPlace | idPiecesMask<<idPiecesShift))
			if !ok || k < 2 || idx+k > c.rxFrames {
				bad++
				continue
			}
			for i := range k {
				if c.state[idx+i] != stRxUser {
					ok = false
				}
			}
			if !ok {
				bad++
				continue
			}
			for i := range k {
				give(idx + i)
			}
			continue
		}
		if f.ID&idJumbo != 0 && c.sg {
			j := f.ID &^ idJumbo &^ c.tag
			if f.ID&^idAddrMask != c.tag || j >= uint64(len(c.jheld)) || !c.jheld[j] {
				bad++
				continue
			}
			c.jheld[j] = false
			c.jHeld--
			c.jfree = append(c.jfree, uint32(j))
			if c.inPlace {
				for _, idx := range c.jent[int(j)*maxFrags : int(j)*maxFrags+int(c.jentN[j])] {
					give(idx)
				}
				c.jentN[j] = 0
			}
			continue
		}
		idx, ok := c.rxID(f.ID)
		if !ok || c.state[idx] != stRxUser {
			bad++
			continue
		}
		give(idx)
	}
	if bad > 0 {
		c.ctr.badReleases.Add(uint64(bad))
	}
	c.ctr.rxHeld.Store(int64(c.rxHeld))
	if put > 0 {
		c.ctr.fills.Add(uint64(put))
	}
	if c.rxStash.n > 0 && c.fill.free(1) > 0 {
		c.refill() // publishes
	} else if put > 0 {
		c.fill.publishProd()
		c.kickFill()
	}
}

// refill moves stashed RX frames to the fill ring as far as it has room.
func (c *core) refill() {
	room := c.fill.free(c.rxStash.n)
	n := min(room, c.rxStash.n)
	if n == 0 {
		return
	}
	// Oldest first, so that entries stashed in address order reach the
	// kernel in that order (inPlace needs consecutive entries).
	for range n {
		idx := c.rxStash.pop()
		c.fill.descs[c.fill.local&c.fill.mask] = c.rxAddr(idx)
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
// completion entries it read. A frame sent as several descriptors
// (multi-buffer) completes with its last one.
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
		if !ok || c.state[idx] != stTxKernel || c.pending[idx] == 0 {
			bad++
			continue
		}
		if c.pending[idx]--; c.pending[idx] > 0 {
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
		fs[i] = link.Frame{Buf: c.umem[addr:end:end], ID: c.tag | addr}
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
	if p < start || p+uintptr(len(buf)) > start+uintptr(c.txSlot)*uintptr(c.frameSize) {
		return 0, false
	}
	return uint64(p - c.base), true
}

// descsFor returns the number of TX descriptors a frame of n bytes at UMEM
// address addr takes: one per chunk it touches.
func (c *core) descsFor(addr uint64, n int) uint32 {
	off := addr & (c.frameSize - 1)
	return uint32((off + uint64(n) + c.frameSize - 1) >> c.frameShift)
}

// send implements link.Link.Send.
func (c *core) send(fs []link.Frame) (int, error) {
	want := uint32(len(fs)) * c.txSlot
	room := c.tx.free(want)
	if room < want {
		if err := c.flushTx(); err != nil {
			c.dropAll(fs)
			return 0, err
		}
		room = c.tx.free(want)
	}
	queued, used, bytes, dropped := uint32(0), uint32(0), 0, 0
	for _, f := range fs {
		idx, ok := c.txID(f.ID)
		if !ok || c.state[idx] != stTxUser {
			dropped++ // not ours to take back
			continue
		}
		c.txHeld--
		addr, ok := c.txAddr(idx, f.Buf)
		k := uint32(1)
		if ok {
			k = c.descsFor(addr, len(f.Buf))
		}
		if !ok || used+k > room {
			c.state[idx] = stTxFree
			c.txFree = append(c.txFree, idx)
			dropped++
			continue
		}
		for rest := uint64(len(f.Buf)); rest > 0; {
			l := min(rest, c.frameSize-addr&(c.frameSize-1))
			rest -= l
			var opt uint32
			if rest > 0 {
				opt = pktContd
			}
			c.tx.descs[c.tx.local&c.tx.mask] = desc{Addr: addr, Len: uint32(l), Options: opt}
			c.tx.local++
			addr += l
		}
		c.state[idx] = stTxKernel
		c.pending[idx] = uint8(k)
		used += k
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
	if queued > 0 && c.kickDelay > 0 && c.needWakeup {
		c.burst++
		if c.burst > kickBurst && queued <= kickSmall && c.tx.outstanding() < kickBatch && c.now()-c.lastKick < c.kickDelay {
			// A stream: neither received frames nor a wait since the
			// last kickBurst Sends, and a kick went out less than
			// kickDelay ago. One kick for the frames of several Sends
			// costs the kernel one pass instead of one per Send
			// (TestKickDelay).
			c.kickOwed = true
			c.ctr.txDeferred.Add(1)
			return int(queued), nil
		}
	}
	return int(queued), c.flushTx()
}

// setKickDelay turns on Config.KickDelay: delay ns on the clock now.
func (c *core) setKickDelay(delay int64, now func() int64) {
	c.kickDelay, c.now = delay, now
	// Long ago: the first Send kicks at once.
	c.lastKick = math.MinInt64 / 2
}

// flushIdle is what a caller's wait does first: the stream of Sends
// ends (kickBurst), and what they left on the ring is kicked.
func (c *core) flushIdle() error {
	c.burst = 0
	return c.flushTx()
}

// flushDue kicks the descriptors that send left on the TX ring once they
// have waited kickDelay: Recv calls it, so that an engine that keeps
// polling without sleeping (busy polling) still sends them in time.
func (c *core) flushDue() error {
	if !c.kickOwed || c.now()-c.lastKick < c.kickDelay {
		return nil
	}
	return c.flushTx()
}

// dropAll takes back the caller's frames in fs without sending them.
func (c *core) dropAll(fs []link.Frame) {
	for _, f := range fs {
		if idx, ok := c.txID(f.ID); ok && c.state[idx] == stTxUser {
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
	c.kickOwed = false
	for range maxKicks {
		c.reap()
		before := c.tx.outstanding()
		if before == 0 || (c.needWakeup && !c.tx.needWakeup()) {
			return nil
		}
		err := c.sys.kickTx()
		c.ctr.txKicks.Add(1)
		if c.now != nil {
			c.lastKick = c.now()
		}
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
	st.TxDeferredKicks = r.txDeferred.Load()
	st.TxDeviceDrops = r.txDeviceDrops.Load()
	st.RxBadDescs, st.BadReleases, st.BadCompletions = r.rxBadDescs.Load(), r.badReleases.Load(), r.badComps.Load()
	st.RxOversize, st.RxMultiBuffer, st.RxReassembled = r.rxOversize.Load(), r.rxJumbo.Load(), r.rxCopied.Load()
	st.RxHeld = int(r.rxHeld.Load())
	st.RxFree = int(c.rxFrames) - st.RxHeld
	st.TxFree = int(r.txFree.Load())
	st.TxHeld = int(r.txHeld.Load())
	st.TxInFlight = int(r.txInFlight.Load())
}
