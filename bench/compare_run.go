package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/transport"
)

// qpComm is a collective.Comm over connected spray QPs, one per peer, for
// worlds whose QPs were connected here rather than through a bootstrap
// (on a fabric, a QP must address the next hop's MAC, not the peer's).
type qpComm struct {
	rank  int
	conns []*transport.Conn
}

func (q *qpComm) Rank() int { return q.rank }
func (q *qpComm) Size() int { return len(q.conns) }

func (q *qpComm) peer(p int) (*transport.Conn, error) {
	if p < 0 || p >= len(q.conns) || q.conns[p] == nil {
		return nil, fmt.Errorf("%w: peer %d", collective.ErrInvalid, p)
	}
	return q.conns[p], nil
}

func (q *qpComm) Send(ctx context.Context, p int, msg []byte) error {
	c, err := q.peer(p)
	if err != nil {
		return err
	}
	return c.Send(ctx, msg)
}

func (q *qpComm) Recv(ctx context.Context, p int) ([]byte, error) {
	c, err := q.peer(p)
	if err != nil {
		return nil, err
	}
	m, err := c.Recv(ctx)
	if err != nil {
		return nil, err
	}
	if m.HasImm || len(m.Data) != m.Len {
		return nil, fmt.Errorf("%w: rank %d sent a WRITE notice", collective.ErrMismatch, p)
	}
	return m.Data, nil
}

func (q *qpComm) Close() error { return nil }

// qpSums are the QP counters a compare row reports, summed over every
// rank's QPs.
type qpSums struct {
	transport.QPStats
	// TLPs counts tail loss probes (from the send scoreboards).
	TLPs uint64
}

// qpCounters sums the QP counters of every rank's QPs.
func qpCounters(ctx context.Context, comms []collective.Comm) (qpSums, error) {
	var sum qpSums
	for _, c := range comms {
		q, ok := c.(*qpComm)
		if !ok {
			continue
		}
		for _, conn := range q.conns {
			if conn == nil {
				continue
			}
			s, err := conn.Stats(ctx)
			if err != nil {
				return sum, err
			}
			sum.Retransmits += s.Retransmits
			sum.Timeouts += s.Timeouts
			sum.Duplicates += s.Duplicates
			sum.ECNMarked += s.ECNMarked
			rs, err := conn.RetransmitStats(ctx)
			if err != nil {
				return sum, err
			}
			sum.TLPs += rs.TLPs
		}
	}
	return sum, nil
}

// addQPCounters sets the row's QP counters to what they gained since
// before. It reads them with a fresh deadline, since a run that timed out
// still has engines to ask; on an error the counters stay zero.
func (row *CompareRow) addQPCounters(ctx context.Context, comms []collective.Comm, before qpSums) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q, err := qpCounters(qctx, comms)
	if err != nil {
		return
	}
	row.Retransmits = q.Retransmits - before.Retransmits
	row.Timeouts = q.Timeouts - before.Timeouts
	row.Duplicates = q.Duplicates - before.Duplicates
	row.TLPs = q.TLPs - before.TLPs
}

// a2aValue is element i of the block that rank src sends to rank dst in
// iteration it.
func a2aValue(src, dst, it, i int) int32 {
	return int32(uint32(src)*0x9E3779B1 ^ uint32(dst)*0x85EBCA77 ^ uint32(it)*0xC2B2AE3D + uint32(i))
}

// a2aHooks are called by runAllToAll at iteration boundaries, while no
// rank is running: before(it) before iteration it starts (it counts the
// warm-up ones too), during(ctx, it, prev) in its own goroutine while
// iteration it runs, with the completion time of the one before it (0 for
// the first).
type a2aHooks struct {
	before func(it int) error
	during func(ctx context.Context, it int, prev time.Duration)
}

// runAllToAll runs warmup+iters all-to-alls of block elements per peer on
// every comm at once, releasing all ranks together for each, and returns
// the completion times of the timed ones and the wrong elements received.
// On an error it returns what it measured so far.
func runAllToAll(ctx context.Context, comms []collective.Comm, block, warmup, iters int, pairwise bool, hooks a2aHooks) ([]time.Duration, int, error) {
	opt := &collective.Options{AllToAllConcurrent: !pairwise}
	n := len(comms)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type done struct {
		end time.Time
		err error
	}
	// A rank reports its end on dones, then checks what it received (and
	// fills its next send buffer) only when told to on check[r], once every
	// rank has ended: the ranks share this process's cores, and a rank that
	// finished first would otherwise take CPU from the engines of those
	// still finishing (hosts of a real fabric check on their own cores).
	start := make([]chan struct{}, n)
	check := make([]chan struct{}, n)
	dones := make(chan done, n)
	checked := make(chan int, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		start[r] = make(chan struct{}, 1)
		check[r] = make(chan struct{}, 1)
		wg.Go(func() {
			send := make([]int32, block*n)
			recv := make([]int32, block*n)
			fill := func(it int) {
				for d := range n {
					for i := range block {
						send[d*block+i] = a2aValue(r, d, it, i)
					}
				}
			}
			fill(0)
			for it := range warmup + iters {
				select {
				case <-start[r]:
				case <-ctx.Done():
					return
				}
				err := collective.AllToAll(ctx, c, send, recv, opt)
				end := time.Now()
				if err != nil {
					err = fmt.Errorf("rank %d: %w", r, err)
					cancel(err)
					dones <- done{end, err}
					return
				}
				dones <- done{end, nil}
				select {
				case <-check[r]:
				case <-ctx.Done():
					return
				}
				wrong := 0
				for s := range n {
					for i := range block {
						if recv[s*block+i] != a2aValue(s, r, it, i) {
							wrong++
						}
					}
				}
				fill(it + 1)
				checked <- wrong
			}
		})
	}
	defer wg.Wait()
	var samples []time.Duration
	var prev time.Duration
	wrong := 0
	for it := range warmup + iters {
		if hooks.before != nil {
			if err := hooks.before(it); err != nil {
				cancel(err)
				return samples, wrong, err
			}
		}
		dctx, stop := context.WithCancel(ctx)
		var dwg sync.WaitGroup
		if hooks.during != nil {
			dwg.Go(func() { hooks.during(dctx, it, prev) })
		}
		t0 := time.Now()
		for r := range n {
			start[r] <- struct{}{}
		}
		var last time.Time
		var errs []error
		for range n {
			select {
			case d := <-dones:
				if d.err != nil {
					errs = append(errs, d.err)
				}
				if d.end.After(last) {
					last = d.end
				}
			case <-ctx.Done():
				// A rank failed (its error is the cause) or the run's
				// context ended while ranks wait.
				stop()
				dwg.Wait()
				return samples, wrong, iterError(it, warmup, time.Since(t0), context.Cause(ctx))
			}
			if len(errs) > 0 {
				break
			}
		}
		stop()
		dwg.Wait()
		if len(errs) > 0 {
			return samples, wrong, iterError(it, warmup, time.Since(t0), errors.Join(errs...))
		}
		for r := range n {
			check[r] <- struct{}{}
		}
		for range n {
			select {
			case w := <-checked:
				wrong += w
			case <-ctx.Done():
				return samples, wrong, iterError(it, warmup, time.Since(t0), context.Cause(ctx))
			}
		}
		prev = last.Sub(t0)
		if it >= warmup {
			samples = append(samples, prev)
		}
	}
	return samples, wrong, nil
}

// iterError says which iteration err stopped and how long after its start
// (for a QP that fails, the time its retransmission timer took to give up).
func iterError(it, warmup int, d time.Duration, err error) error {
	which := fmt.Sprintf("iteration %d", it-warmup+1)
	if it < warmup {
		which = fmt.Sprintf("warm-up iteration %d", it+1)
	}
	return fmt.Errorf("%s stopped %v after its start: %w", which, d.Round(time.Millisecond), err)
}
