package reorder

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"

	"github.com/sprayfabric/spray/psn"
)

// DefaultWindowSize is the window size that NewWindow uses for size 0.
const DefaultWindowSize = 4096

// MaxWindowSize is the largest window NewWindow accepts, far below the 2^23
// PSN distance at which 24-bit comparisons stop being meaningful.
const MaxWindowSize = 1 << 20

// ErrInvalidConfig is returned (wrapped) by NewWindow, NewAssembler and
// Config.Validate for a size or limit out of range.
var ErrInvalidConfig = errors.New("reorder: invalid configuration")

// Verdict is what Window.Mark says about a PSN.
type Verdict uint8

const (
	// New: the PSN had not arrived; it is now marked. Process the packet.
	New Verdict = iota + 1
	// Duplicate: the PSN is before Cum or was already marked. Drop the
	// packet's payload (but still acknowledge: the sender may have missed
	// the previous ACK).
	Duplicate
	// Outside: the PSN is at or beyond Cum+Size: the sender overran the
	// window. Nothing was marked; drop the packet and count it.
	Outside
)

// String returns "new", "duplicate" or "outside".
func (v Verdict) String() string {
	switch v {
	case New:
		return "new"
	case Duplicate:
		return "duplicate"
	case Outside:
		return "outside"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Window records which PSNs arrived in [Cum, Cum+Size) and advances Cum,
// the next expected PSN, past every PSN that arrived contiguously.
//
// It is a ring of bits held in uint64 words; the bit of Cum moves forward
// through the ring as Cum advances, and advancing clears the bits it
// passes, so every bit in the ring always belongs to a PSN in
// [Cum, Cum+Size). The ring holds no memory while PSNs arrive in order; it
// grows (doubling from 64 bits, up to Size) to span the furthest PSN
// marked ahead of a hole, and Trim gives it back once no PSN is held
// there. Mark allocates only to grow it; Sack does not allocate.
//
// The zero value is not usable: create a Window with NewWindow. A Window is
// not safe for concurrent use.
type Window struct {
	bits    []uint64
	size    int     // PSNs tracked from cum on, a multiple of 64
	cum     psn.PSN // next expected PSN
	pos     int     // ring bit of cum, in [0, 64*len(bits)), 0 without bits
	high    psn.PSN // highest PSN marked, or cum-1
	pending int     // bits set in the ring
}

// NewWindow returns a window whose first expected PSN is start. size is the
// number of PSNs tracked beyond Cum: a multiple of 64 in [64, MaxWindowSize];
// 0 means DefaultWindowSize. Any other size, or a start PSN above psn.Mask,
// is an error wrapping ErrInvalidConfig.
func NewWindow(start psn.PSN, size int) (*Window, error) {
	if size == 0 {
		size = DefaultWindowSize
	}
	if size < 64 || size > MaxWindowSize || size%64 != 0 {
		return nil, fmt.Errorf("%w: window size %d is not a multiple of 64 in [64, %d]", ErrInvalidConfig, size, MaxWindowSize)
	}
	if start > psn.Mask {
		return nil, fmt.Errorf("%w: start PSN %#x does not fit in 24 bits", ErrInvalidConfig, uint32(start))
	}
	return &Window{
		size: size,
		cum:  start,
		high: start.Prev(),
	}, nil
}

// nbits is the number of bits in the ring.
func (w *Window) nbits() int { return 64 * len(w.bits) }

// grow makes the ring span at least d+1 bits (d < size), keeping the
// marks, with Cum's bit at 0.
func (w *Window) grow(d int) {
	n := max(64, w.nbits())
	for n <= d {
		n *= 2
	}
	n = min(n, w.size)
	bits := make([]uint64, n/64)
	for off := 0; off < w.nbits(); off += 64 {
		bits[off/64] = w.ring(off, 64)
	}
	w.bits, w.pos = bits, 0
}

// Trim gives the ring back when no PSN is held ahead of a hole, and
// reports whether it had one.
func (w *Window) Trim() bool {
	if w.bits == nil || w.pending > 0 {
		return false
	}
	w.bits, w.pos = nil, 0
	return true
}

// Trimmable reports whether Trim would give memory back.
func (w *Window) Trimmable() bool { return w.bits != nil && w.pending == 0 }

// Mark records the arrival of PSN p and returns New if it had not arrived
// (then Cum advances past every contiguously arrived PSN), Duplicate if it is
// before Cum or already marked, and Outside (nothing recorded) if it is at or
// beyond Cum+Size. Bits of p above the 24 PSN bits are ignored. It runs in
// O(1) amortized time and does not allocate.
func (w *Window) Mark(p psn.PSN) Verdict {
	p = psn.New(uint32(p))
	d := p.Diff(w.cum)
	if d < 0 {
		return Duplicate
	}
	if int(d) >= w.size {
		return Outside
	}
	if d == 0 && w.pending == 0 {
		// In order: Cum moves on, and the ring has nothing to hold.
		w.high, w.cum = p, p.Next()
		if w.pos++; w.pos == w.nbits() {
			w.pos = 0
		}
		return New
	}
	if int(d) >= w.nbits() {
		w.grow(int(d))
	}
	i := w.pos + int(d)
	if i >= w.nbits() {
		i -= w.nbits()
	}
	bit := uint64(1) << (i & 63)
	if w.bits[i>>6]&bit != 0 {
		return Duplicate
	}
	w.bits[i>>6] |= bit
	w.pending++
	if d > w.high.Diff(w.cum) {
		w.high = p
	}
	if d == 0 {
		// Cum stops at most one past high: advancing only crosses marked
		// PSNs, so Highest needs no clamp.
		w.advance()
	}
	return New
}

// Check returns what Mark(p) would return, without recording anything. Use
// it to decide on a packet before the steps that can still refuse it
// (Assembler.Message), and Mark only once the packet was accepted: a PSN
// that Mark recorded is acknowledged by the next SACK and is never
// retransmitted.
func (w *Window) Check(p psn.PSN) Verdict {
	d := psn.New(uint32(p)).Diff(w.cum)
	switch {
	case d < 0:
		return Duplicate
	case int(d) >= w.size:
		return Outside
	case w.Has(p):
		return Duplicate
	}
	return New
}

// advance moves Cum past the run of set bits that starts at Cum, clearing
// them, a word at a time.
func (w *Window) advance() {
	for {
		word, bit := w.pos>>6, w.pos&63
		// Bits above 63-bit are shifted-in zeros, so the run is at most
		// 64-bit long and stays inside this word.
		run := bits.TrailingZeros64(^(w.bits[word] >> bit))
		if run == 0 {
			return
		}
		w.bits[word] &^= (^uint64(0) >> (64 - run)) << bit
		w.pending -= run
		w.cum = w.cum.Add(uint32(run))
		w.pos += run
		if w.pos == w.nbits() {
			w.pos = 0
		}
		if bit+run < 64 {
			return
		}
	}
}

// Cum returns the next expected PSN: every PSN before it has arrived (or was
// before the start of the window).
func (w *Window) Cum() psn.PSN { return w.cum }

// Size returns the number of PSNs the window tracks from Cum on.
func (w *Window) Size() int { return w.size }

// Highest returns the highest PSN marked so far, or Cum-1 if no PSN beyond
// Cum has arrived.
func (w *Window) Highest() psn.PSN { return w.high }

// Pending returns the number of marked PSNs at or beyond Cum: packets that
// arrived ahead of a hole.
func (w *Window) Pending() int { return w.pending }

// Has reports whether p arrived: true for every PSN before Cum, false for
// every PSN at or beyond Cum+Size.
func (w *Window) Has(p psn.PSN) bool {
	d := psn.New(uint32(p)).Diff(w.cum)
	if d < 0 {
		return true
	}
	if int(d) >= w.nbits() {
		return false
	}
	i := w.pos + int(d)
	if i >= w.nbits() {
		i -= w.nbits()
	}
	return w.bits[i>>6]&(1<<(i&63)) != 0
}

// Sack fills words with the arrival bitmap of [base, base+64*len(words)):
// bit i of words[j] is set when PSN base+64j+i arrived (every PSN before Cum
// counts as arrived; none at or beyond Cum+Size has). base is Cum when recent
// is before Cum+64*len(words); otherwise base is recent-64*len(words)+1, so
// that recent, the PSN just received, is the last bit. The wire carries 1 to
// 4 words (wire.MaxSackWords); Sack accepts any number, and returns Cum
// without touching anything for none. It does not allocate.
func (w *Window) Sack(recent psn.PSN, words []uint64) (base psn.PSN) {
	if len(words) == 0 {
		return w.cum
	}
	span := 64 * len(words)
	off := 0
	if d := int(psn.New(uint32(recent)).Diff(w.cum)); d >= span {
		off = d - span + 1
	}
	for j := range words {
		words[j] = w.bits64(off + 64*j)
	}
	return w.cum.Add(uint32(off))
}

// bits64 returns the arrival bits of the 64 PSNs Cum+off .. Cum+off+63.
func (w *Window) bits64(off int) uint64 {
	switch {
	case off <= -64:
		return ^uint64(0)
	case off < 0:
		k := -off
		return (uint64(1)<<k - 1) | w.ring(0, 64-k)<<k
	}
	return w.ring(off, 64)
}

// ring returns n bits (1..64) of the window starting at offset off >= 0
// from Cum; bits beyond the ring are 0 (nothing is marked there).
func (w *Window) ring(off, n int) uint64 {
	n = min(n, w.nbits()-off)
	if n <= 0 {
		return 0
	}
	i := w.pos + off
	if i >= w.nbits() {
		i -= w.nbits()
	}
	word, bit := i>>6, i&63
	v := w.bits[word] >> bit
	if bit != 0 && n > 64-bit {
		next := word + 1
		if next == len(w.bits) {
			next = 0
		}
		v |= w.bits[next] << (64 - bit)
	}
	if n < 64 {
		v &= uint64(1)<<n - 1
	}
	return v
}
