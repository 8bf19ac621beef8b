package pool

import (
	"errors"
	"fmt"
	"math"
)

// Errors returned by New and Put.
var (
	// ErrConfig is returned by New for a non-positive size or count, or
	// more than MaxFrames buffers or MaxBytes bytes.
	ErrConfig = errors.New("pool: bad configuration")
	// ErrBadIndex is returned by Put for an index that the pool never
	// handed out.
	ErrBadIndex = errors.New("pool: index out of range")
	// ErrNotInUse is returned by Put for an index that is already free
	// (a double release).
	ErrNotInUse = errors.New("pool: buffer released twice")
)

// Limits of one pool.
const (
	MaxFrames = 1 << 24
	MaxBytes  = math.MaxInt32 // Frames * FrameSize
)

// Pool is a set of Len buffers of FrameSize bytes each. The zero value is
// not usable: make one with New. It is not safe for concurrent use.
type Pool struct {
	mem   []byte
	size  int
	free  []uint32 // stack of free indices
	inUse []bool
}

// New returns a pool of frames buffers of frameSize bytes, all free.
func New(frameSize, frames int) (*Pool, error) {
	if frameSize <= 0 || frames <= 0 || frames > MaxFrames || int64(frameSize)*int64(frames) > MaxBytes {
		return nil, fmt.Errorf("%w: %d frames of %d bytes", ErrConfig, frames, frameSize)
	}
	p := &Pool{
		mem:   make([]byte, frameSize*frames),
		size:  frameSize,
		free:  make([]uint32, frames),
		inUse: make([]bool, frames),
	}
	// Hand out low indices first: the stack top is the end of the slice.
	for i := range p.free {
		p.free[i] = uint32(frames - 1 - i)
	}
	return p, nil
}

// Get takes a free buffer and returns its index, or false when none is free.
func (p *Pool) Get() (uint32, bool) {
	n := len(p.free)
	if n == 0 {
		return 0, false
	}
	i := p.free[n-1]
	p.free = p.free[:n-1]
	p.inUse[i] = true
	return i, true
}

// Put returns buffer i to the pool. It returns ErrBadIndex or ErrNotInUse,
// and changes nothing, when i is not a buffer that is out of the pool.
func (p *Pool) Put(i uint32) error {
	if uint64(i) >= uint64(len(p.inUse)) {
		return ErrBadIndex
	}
	if !p.inUse[i] {
		return ErrNotInUse
	}
	p.inUse[i] = false
	p.free = append(p.free, i) // never grows: cap is Len
	return nil
}

// Buf returns buffer i, whole: len == cap == FrameSize. Writes through it
// cannot reach a neighbouring buffer. i must be below Len.
func (p *Pool) Buf(i uint32) []byte {
	off := int(i) * p.size
	return p.mem[off : off+p.size : off+p.size]
}

// InUse reports whether buffer i is out of the pool (handed out by Get and
// not yet returned by Put).
func (p *Pool) InUse(i uint32) bool {
	return uint64(i) < uint64(len(p.inUse)) && p.inUse[i]
}

// FrameSize is the size of every buffer.
func (p *Pool) FrameSize() int { return p.size }

// Len is the number of buffers in the pool.
func (p *Pool) Len() int { return len(p.inUse) }

// Free is the number of buffers available to Get.
func (p *Pool) Free() int { return len(p.free) }
