package collective

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"unsafe"
)

// Options tunes the collectives. A nil *Options, and the zero value, mean
// the defaults; every rank must pass the same values.
type Options struct {
	// ChunkBytes bounds the payload of one message: larger transfers are
	// cut into chunks of this size (rounded down to whole elements, at least
	// one), so that a receiver reduces one chunk while the next is on the
	// wire and no message is huge. 0 or less means 256 KiB.
	ChunkBytes int
	// SmallBytes is the largest AllReduce, in bytes, done by recursive
	// doubling (log2(size) full exchanges, for latency) when the world
	// size is a power of two; larger ones, and every one on other world
	// sizes, use the ring (reduce-scatter then all-gather, for bandwidth).
	// 0 means 64 KiB; a negative value means always the ring.
	SmallBytes int
	// AllToAllConcurrent makes AllToAll send to and receive from every
	// peer at once (as NCCL groups its sends and receives) instead of
	// p-1 pairwise rounds, one peer each: traffic to peers behind
	// different links overlaps, at the price of incast at every receiver.
	AllToAllConcurrent bool
}

const (
	defaultChunk = 256 << 10
	defaultSmall = 64 << 10
)

func (o *Options) chunkElems(es int) int {
	cb := defaultChunk
	if o != nil && o.ChunkBytes > 0 {
		cb = o.ChunkBytes
	}
	return max(cb/es, 1)
}

func (o *Options) small() int {
	if o == nil || o.SmallBytes == 0 {
		return defaultSmall
	}
	return o.SmallBytes
}

func mod(a, p int) int { return ((a % p) + p) % p }

// overlap reports whether a and b share memory.
func overlap[T Element](a, b []T) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	es := uintptr(elemSize[T]())
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b))*es && b0 < a0+uintptr(len(a))*es
}

func same[T Element](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sendChunks sends x to peer as messages of at most ce elements.
func sendChunks[T Element](ctx context.Context, c Comm, peer int, x []T, ce int) error {
	for off := 0; off < len(x); off += ce {
		if err := c.Send(ctx, peer, bytesOf(x[off:min(off+ce, len(x))])); err != nil {
			return err
		}
	}
	return nil
}

// recvChunks receives len(x) elements from peer in messages of at most ce
// elements, copying them into x, or reducing them into x with op when
// doReduce is set.
func recvChunks[T Element](ctx context.Context, c Comm, peer int, x []T, ce int, doReduce bool, op Op) error {
	es := elemSize[T]()
	var scratch []T
	for off := 0; off < len(x); off += ce {
		dst := x[off:min(off+ce, len(x))]
		b, err := c.Recv(ctx, peer)
		if err != nil {
			return err
		}
		if len(b) != len(dst)*es {
			return fmt.Errorf("%w: %d bytes from rank %d, want %d", ErrMismatch, len(b), peer, len(dst)*es)
		}
		if doReduce {
			reduce(dst, elemsOf(b, &scratch), op)
		} else {
			copy(bytesOf(dst), b)
		}
	}
	return nil
}

// exchange sends send to rank to, on another goroutine, while it receives
// len(recv) elements from rank from into recv (reduced with op when
// doReduce is set). send and recv must not overlap. It returns when both
// are done; if either fails, the other is cancelled.
func exchange[T Element](ctx context.Context, c Comm, to int, send []T, from int, recv []T, ce int, doReduce bool, op Op) error {
	if len(send) == 0 {
		return recvChunks(ctx, c, from, recv, ce, doReduce, op)
	}
	if len(recv) == 0 {
		return sendChunks(ctx, c, to, send, ce)
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		err := sendChunks(ictx, c, to, send, ce)
		if err != nil {
			cancel()
		}
		errc <- err
	}()
	rerr := recvChunks(ictx, c, from, recv, ce, doReduce, op)
	if rerr != nil {
		cancel()
	}
	serr := <-errc
	return firstErr(ctx, rerr, serr)
}

// firstErr picks the error to report among those of parallel operations
// that cancel each other: the first that is not our own cancellation.
func firstErr(ctx context.Context, errs ...error) error {
	var canceled error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if ctx.Err() == nil && errors.Is(err, context.Canceled) {
			canceled = err
			continue
		}
		return err
	}
	return canceled
}

// AllReduce reduces send element-wise with op across all ranks and leaves
// the result in recv on every rank. recv may be send itself (in place) but
// must not otherwise overlap it; both have the same length on every rank.
// On a power-of-two world, payloads up to Options.SmallBytes go by
// recursive doubling; the rest by a ring (reduce-scatter, then
// all-gather). Every rank ends with bit-identical results.
func AllReduce[T Element](ctx context.Context, c Comm, send, recv []T, op Op, opt *Options) error {
	if len(send) != len(recv) || !op.valid() || (!same(send, recv) && overlap(send, recv)) {
		return fmt.Errorf("%w: AllReduce of %d elements into %d (op %v)", ErrInvalid, len(send), len(recv), op)
	}
	copy(recv, send)
	p, n := c.Size(), len(recv)
	if p == 1 || n == 0 {
		return nil
	}
	es := elemSize[T]()
	ce := opt.chunkElems(es)
	if p&(p-1) == 0 && n*es <= opt.small() {
		return recursiveDoubling(ctx, c, recv, op, ce)
	}
	seg := func(k int) []T { return recv[k*n/p : (k+1)*n/p] }
	if err := ringReduceScatter(ctx, c, seg, op, ce); err != nil {
		return err
	}
	return ringAllGather(ctx, c, seg, ce)
}

func recursiveDoubling[T Element](ctx context.Context, c Comm, buf []T, op Op, ce int) error {
	r, p := c.Rank(), c.Size()
	tmp := make([]T, len(buf))
	for mask := 1; mask < p; mask <<= 1 {
		peer := r ^ mask
		if err := exchange(ctx, c, peer, buf, peer, tmp, ce, false, op); err != nil {
			return err
		}
		// a+b == b+a in IEEE arithmetic: both partners get the same bits.
		reduce(buf, tmp, op)
	}
	return nil
}

// ringReduceScatter leaves seg(rank) reduced over all ranks. In step s,
// rank r sends seg(r-s-1) to its right neighbour and reduces seg(r-s-2)
// from its left neighbour into its own.
func ringReduceScatter[T Element](ctx context.Context, c Comm, seg func(k int) []T, op Op, ce int) error {
	r, p := c.Rank(), c.Size()
	right, left := mod(r+1, p), mod(r-1, p)
	for s := 0; s < p-1; s++ {
		if err := exchange(ctx, c, right, seg(mod(r-s-1, p)), left, seg(mod(r-s-2, p)), ce, true, op); err != nil {
			return err
		}
	}
	return nil
}

// ringAllGather starts with seg(rank) in place and ends with every
// segment: in step s, rank r sends seg(r-s) right and receives seg(r-s-1)
// from the left.
func ringAllGather[T Element](ctx context.Context, c Comm, seg func(k int) []T, ce int) error {
	r, p := c.Rank(), c.Size()
	right, left := mod(r+1, p), mod(r-1, p)
	for s := 0; s < p-1; s++ {
		if err := exchange(ctx, c, right, seg(mod(r-s, p)), left, seg(mod(r-s-1, p)), ce, false, 0); err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter reduces send element-wise with op across all ranks and
// leaves block Rank of the result in recv: len(send) == Size*len(recv),
// and block k is send[k*len(recv):(k+1)*len(recv)]. It uses a ring and a
// work copy of send; send is not modified. recv must not overlap send.
func ReduceScatter[T Element](ctx context.Context, c Comm, send, recv []T, op Op, opt *Options) error {
	p, m := c.Size(), len(recv)
	if len(send) != p*m || !op.valid() || overlap(send, recv) {
		return fmt.Errorf("%w: ReduceScatter of %d elements into %d on %d ranks (op %v)", ErrInvalid, len(send), m, p, op)
	}
	if p == 1 || m == 0 {
		copy(recv, send)
		return nil
	}
	work := make([]T, len(send))
	copy(work, send)
	seg := func(k int) []T { return work[k*m : (k+1)*m] }
	if err := ringReduceScatter(ctx, c, seg, op, opt.chunkElems(elemSize[T]())); err != nil {
		return err
	}
	copy(recv, seg(c.Rank()))
	return nil
}

// AllGather gathers every rank's send into recv on every rank, rank k's in
// block k: len(recv) == Size*len(send). send may be block Rank of recv
// (in place) but must not otherwise overlap recv. It uses a ring.
func AllGather[T Element](ctx context.Context, c Comm, send, recv []T, opt *Options) error {
	p, r, m := c.Size(), c.Rank(), len(send)
	if len(recv) != p*m || (overlap(send, recv) && !same(send, recv[r*m:(r+1)*m])) {
		return fmt.Errorf("%w: AllGather of %d elements into %d on %d ranks", ErrInvalid, m, len(recv), p)
	}
	copy(recv[r*m:], send)
	if p == 1 || m == 0 {
		return nil
	}
	seg := func(k int) []T { return recv[k*m : (k+1)*m] }
	return ringAllGather(ctx, c, seg, opt.chunkElems(elemSize[T]()))
}

// AllToAll sends block k of send to rank k and receives rank k's block for
// this rank into block k of recv: len(send) == len(recv), a multiple of
// Size. It uses pairwise exchange: in step s, rank r sends to r+s and
// receives from r-s. send and recv must not overlap.
func AllToAll[T Element](ctx context.Context, c Comm, send, recv []T, opt *Options) error {
	p, r := c.Size(), c.Rank()
	if len(send) != len(recv) || len(send)%p != 0 || overlap(send, recv) {
		return fmt.Errorf("%w: AllToAll of %d elements into %d on %d ranks", ErrInvalid, len(send), len(recv), p)
	}
	m := len(send) / p
	blk := func(x []T, k int) []T { return x[k*m : (k+1)*m] }
	if p == 1 || m == 0 {
		copy(blk(recv, r), blk(send, r))
		return nil
	}
	ce := opt.chunkElems(elemSize[T]())
	if opt != nil && opt.AllToAllConcurrent {
		return allToAllConcurrent(ctx, c, send, recv, m, ce)
	}
	copy(blk(recv, r), blk(send, r))
	for s := 1; s < p; s++ {
		to, from := mod(r+s, p), mod(r-s, p)
		if err := exchange(ctx, c, to, blk(send, to), from, blk(recv, from), ce, false, 0); err != nil {
			return err
		}
	}
	return nil
}

// allToAllConcurrent sends to and receives from every peer at once, one
// goroutine per direction and peer, each in the pairwise order's offset.
func allToAllConcurrent[T Element](ctx context.Context, c Comm, send, recv []T, m, ce int) error {
	p, r := c.Size(), c.Rank()
	blk := func(x []T, k int) []T { return x[k*m : (k+1)*m] }
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2*(p-1))
	for s := 1; s < p; s++ {
		to, from := mod(r+s, p), mod(r-s, p)
		go func() {
			err := sendChunks(ictx, c, to, blk(send, to), ce)
			if err != nil {
				cancel()
			}
			errc <- err
		}()
		go func() {
			err := recvChunks(ictx, c, from, blk(recv, from), ce, false, 0)
			if err != nil {
				cancel()
			}
			errc <- err
		}()
	}
	// The rank's own block is copied once the goroutines just started had
	// a turn to post their transfers, not before: a block of a large
	// all-to-all takes tens of µs to copy, and they wait for this P.
	runtime.Gosched()
	copy(blk(recv, r), blk(send, r))
	errs := make([]error, 0, 2*(p-1))
	for range 2 * (p - 1) {
		errs = append(errs, <-errc)
	}
	return firstErr(ctx, errs...)
}

// Broadcast copies root's buf into buf on every rank, along a binomial
// tree, pipelined by chunks: a rank forwards each chunk to its children as
// soon as it has received it from its parent.
func Broadcast[T Element](ctx context.Context, c Comm, buf []T, root int, opt *Options) error {
	p, r := c.Size(), c.Rank()
	if root < 0 || root >= p {
		return fmt.Errorf("%w: Broadcast from root %d on %d ranks", ErrInvalid, root, p)
	}
	if p == 1 || len(buf) == 0 {
		return nil
	}
	ce := opt.chunkElems(elemSize[T]())
	nchunks := (len(buf) + ce - 1) / ce
	chunk := func(i int) []T { return buf[i*ce : min((i+1)*ce, len(buf))] }
	vr := mod(r-root, p)
	rank := func(v int) int { return mod(v+root, p) }
	// The children of virtual rank v are v+mask for the masks below v's
	// lowest set bit (below p's next power of two for the root).
	top := 1
	for top < p {
		top <<= 1
	}
	low := top
	if vr != 0 {
		low = vr & -vr
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	var kids []chan int
	errc := make(chan error, bits.Len(uint(top)))
	for mask := low >> 1; mask >= 1; mask >>= 1 {
		if vr+mask >= p {
			continue
		}
		child := rank(vr + mask)
		ready := make(chan int, nchunks)
		kids = append(kids, ready)
		go func() {
			var err error
			for i := range ready {
				if err = c.Send(ictx, child, bytesOf(chunk(i))); err != nil {
					cancel()
					break
				}
			}
			errc <- err
		}()
	}
	var rerr error
	es := elemSize[T]()
	for i := range nchunks {
		if vr != 0 {
			b, err := c.Recv(ictx, rank(vr-low))
			if err == nil && len(b) != len(chunk(i))*es {
				err = fmt.Errorf("%w: %d bytes from rank %d, want %d", ErrMismatch, len(b), rank(vr-low), len(chunk(i))*es)
			}
			if err != nil {
				rerr = err
				cancel()
				break
			}
			copy(bytesOf(chunk(i)), b)
		}
		for _, k := range kids {
			k <- i
		}
	}
	errs := []error{rerr}
	for _, k := range kids {
		close(k)
	}
	for range kids {
		errs = append(errs, <-errc)
	}
	return firstErr(ctx, errs...)
}

// Barrier returns once every rank has entered it (a dissemination barrier:
// log2(Size) rounds of empty messages).
func Barrier(ctx context.Context, c Comm) error {
	r, p := c.Rank(), c.Size()
	for k := 1; k < p; k <<= 1 {
		to, from := mod(r+k, p), mod(r-k, p)
		ictx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			err := c.Send(ictx, to, nil)
			if err != nil {
				cancel()
			}
			errc <- err
		}()
		b, rerr := c.Recv(ictx, from)
		if rerr == nil && len(b) != 0 {
			rerr = fmt.Errorf("%w: %d bytes from rank %d in a barrier", ErrMismatch, len(b), from)
		}
		if rerr != nil {
			cancel()
		}
		serr := <-errc
		cancel()
		if err := firstErr(ctx, rerr, serr); err != nil {
			return err
		}
	}
	return nil
}
