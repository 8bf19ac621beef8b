package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sprayfabric/spray/collective"
)

// Collective operations RunCollective measures.
const (
	OpAllToAll      = "alltoall"
	OpAllReduce     = "allreduce"
	OpAllGather     = "allgather"
	OpReduceScatter = "reducescatter"
	OpBroadcast     = "broadcast"
)

// CollOps lists the collectives RunCollective measures.
var CollOps = []string{OpAllToAll, OpAllReduce, OpAllGather, OpReduceScatter, OpBroadcast}

// CollTypes lists the element types RunCollective measures.
var CollTypes = []string{"float32", "float64", "int32"}

// ErrCollConfig is wrapped by RunCollective's errors for a bad CollConfig.
var ErrCollConfig = errors.New("bench: invalid collective config")

// CollConfig describes a collective benchmark, a sweep of sizes as
// nccl-tests runs it. Every rank must pass the same CollConfig. The zero
// value is usable: an all-reduce (sum) of 8 bytes of float32, 20 timed
// iterations, no warm-up, no check.
type CollConfig struct {
	// Op is the collective, one of CollOps; "" means OpAllReduce.
	Op string
	// Type is the element type, one of CollTypes; "" means float32.
	Type string
	// Reduce is the reduction of allreduce and reducescatter (Sum, the
	// zero value, Min or Max); the other collectives ignore it.
	Reduce collective.Op
	// MinBytes and MaxBytes bound the sweep: sizes go from MinBytes,
	// multiplied by Factor, while they do not exceed MaxBytes. A size is
	// the bytes of the largest buffer of a rank, as in nccl-tests (the
	// whole send buffer of alltoall and reducescatter, the whole receive
	// buffer of allgather); it is rounded down to whole elements, a
	// multiple of the world size for alltoall, allgather and reducescatter,
	// and at least one element per rank. MinBytes 0 means 8; MaxBytes 0 (or
	// less than MinBytes) means MinBytes.
	MinBytes, MaxBytes int64
	// Factor multiplies the size from one step to the next; 0 or 1 means 2.
	// Sizes that round to the element count of the size before them are
	// skipped.
	Factor int
	// OnRow, when not nil, is called with each row as soon as its size is
	// done, from the calling goroutine, on every rank (spray bench prints
	// rows as they finish).
	OnRow func(CollRow)
	// Warmup is the number of untimed iterations per size (0: none);
	// Iters the number of timed ones (0 means 20).
	Warmup, Iters int
	// Check runs one extra, untimed iteration per size on deterministic
	// per-rank inputs and counts the elements that differ from a reference
	// every rank computes on its own (CollRow.Wrong).
	Check bool
	// Root is the root rank of broadcast; the other collectives ignore it.
	Root int
	// Options tunes the collectives' algorithms; nil means their defaults.
	Options *collective.Options
}

// CollRow is the result of one size of a sweep, the same on every rank.
type CollRow struct {
	Bytes int64  `json:"bytes"` // size, as nccl-tests prints it
	Count int    `json:"count"` // elements in Bytes
	Type  string `json:"type"`
	Op    string `json:"op"`
	Redop string `json:"redop"` // "sum", "min", "max", or "none"
	Root  int    `json:"root"`  // broadcast's root, -1 for the others
	// Mean is the mean time of an iteration; every iteration's time is the
	// slowest rank's.
	Mean time.Duration `json:"mean_ns"`
	// AlgBW is Bytes/Mean and BusBW AlgBW times the collective's bus
	// factor (nccl-tests' PERFORMANCE.md), in GB/s (1e9 bytes per second).
	AlgBW float64 `json:"algbw_gbps"`
	BusBW float64 `json:"busbw_gbps"`
	// Wrong is the number of elements, summed over the ranks, that differ
	// from the reference; 0 without CollConfig.Check.
	Wrong int `json:"wrong"`
	// Checked says whether the row was checked (Wrong is meaningful).
	Checked bool `json:"checked"`
	// P50, P99 and P999 are percentiles of the iterations' times.
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	// Samples are the iterations' times, in the order they ran.
	Samples []time.Duration `json:"samples_ns"`
}

// resolve fills in the defaults and validates cfg for a world of p ranks.
func (cfg CollConfig) resolve(p int) (CollConfig, error) {
	if cfg.Op == "" {
		cfg.Op = OpAllReduce
	}
	if cfg.Type == "" {
		cfg.Type = "float32"
	}
	if !slices.Contains(CollOps, cfg.Op) {
		return cfg, fmt.Errorf("%w: collective %q (want one of %s)", ErrCollConfig, cfg.Op, strings.Join(CollOps, ", "))
	}
	if !slices.Contains(CollTypes, cfg.Type) {
		return cfg, fmt.Errorf("%w: type %q (want one of %s)", ErrCollConfig, cfg.Type, strings.Join(CollTypes, ", "))
	}
	if cfg.Reduce > collective.Max {
		return cfg, fmt.Errorf("%w: reduction %v", ErrCollConfig, cfg.Reduce)
	}
	if cfg.MinBytes < 0 || cfg.MaxBytes < 0 || cfg.Factor < 0 || cfg.Warmup < 0 || cfg.Iters < 0 {
		return cfg, fmt.Errorf("%w: negative size, factor or iteration count", ErrCollConfig)
	}
	if cfg.MinBytes == 0 {
		cfg.MinBytes = 8
	}
	if cfg.MaxBytes < cfg.MinBytes {
		cfg.MaxBytes = cfg.MinBytes
	}
	if cfg.MaxBytes > 1<<40 {
		return cfg, fmt.Errorf("%w: %d bytes is too large", ErrCollConfig, cfg.MaxBytes)
	}
	if cfg.Factor <= 1 {
		cfg.Factor = 2
	}
	if cfg.Iters == 0 {
		cfg.Iters = 20
	}
	if cfg.Op == OpBroadcast && (cfg.Root < 0 || cfg.Root >= p) {
		return cfg, fmt.Errorf("%w: root %d on %d ranks", ErrCollConfig, cfg.Root, p)
	}
	return cfg, nil
}

// sizes returns the sweep's sizes in bytes.
func (cfg CollConfig) sizes() []int64 {
	var s []int64
	for b := cfg.MinBytes; b <= cfg.MaxBytes; b *= int64(cfg.Factor) {
		s = append(s, b)
		if b > cfg.MaxBytes/int64(cfg.Factor) {
			break
		}
	}
	return s
}

// BusFactor is the factor from algorithm bandwidth to bus bandwidth of a
// collective on p ranks, as nccl-tests computes it: 2(p-1)/p for
// allreduce, (p-1)/p for alltoall, allgather and reducescatter, 1 for
// broadcast.
func BusFactor(op string, p int) float64 {
	switch op {
	case OpAllReduce:
		return 2 * float64(p-1) / float64(p)
	case OpAllToAll, OpAllGather, OpReduceScatter:
		return float64(p-1) / float64(p)
	}
	return 1
}

// RunCollective runs the sweep cfg describes on c, and must be called on
// every rank of the world at once. For each size it runs the check
// iteration (with cfg.Check), the warm-up iterations, then the timed ones,
// each timed iteration after a barrier; the time of an iteration is the
// slowest rank's (an all-reduce of the samples with Max). progress, when
// not nil, is called after every iteration with the iterations done and
// the total, from the calling goroutine. Every rank returns the same rows.
// An error leaves the Comm unusable (see package collective).
func RunCollective(ctx context.Context, c collective.Comm, cfg CollConfig, progress func(done, total int)) ([]CollRow, error) {
	cfg, err := cfg.resolve(c.Size())
	if err != nil {
		return nil, err
	}
	switch cfg.Type {
	case "float64":
		return runColl[float64](ctx, c, cfg, progress)
	case "int32":
		return runColl[int32](ctx, c, cfg, progress)
	}
	return runColl[float32](ctx, c, cfg, progress)
}

// collBufs holds one rank's buffers for one size.
type collBufs[T collective.Element] struct {
	send, recv []T
}

func runColl[T collective.Element](ctx context.Context, c collective.Comm, cfg CollConfig, progress func(done, total int)) ([]CollRow, error) {
	p := c.Size()
	es := int64(elemBytes[T]())
	sizes := distinctSizes(cfg.sizes(), cfg.Op, es, p)
	perSize := cfg.Warmup + cfg.Iters
	if cfg.Check {
		perSize++
	}
	total, done := perSize*len(sizes), 0
	step := func() {
		done++
		if progress != nil {
			progress(done, total)
		}
	}
	var rows []CollRow
	var bufs collBufs[T]
	for _, size := range sizes {
		count := collCount(cfg.Op, size/es, p)
		row := CollRow{Bytes: int64(count) * es, Count: count, Type: cfg.Type, Op: cfg.Op, Redop: "none", Root: -1}
		switch cfg.Op {
		case OpAllReduce, OpReduceScatter:
			row.Redop = cfg.Reduce.String()
		case OpBroadcast:
			row.Root = cfg.Root
		}
		bufs.size(cfg.Op, count, p)
		if cfg.Check {
			wrong, err := checkColl(ctx, c, cfg, &bufs)
			if err != nil {
				return rows, fmt.Errorf("bench: %s of %d bytes (check): %w", cfg.Op, row.Bytes, err)
			}
			// Sum the wrong counts over the ranks (float64: exact here).
			w := []float64{float64(wrong)}
			if err := collective.AllReduce(ctx, c, w, w, collective.Sum, cfg.Options); err != nil {
				return rows, err
			}
			row.Wrong, row.Checked = int(w[0]), true
			step()
		}
		for range cfg.Warmup {
			if err := doColl(ctx, c, cfg, &bufs); err != nil {
				return rows, fmt.Errorf("bench: %s of %d bytes (warm-up): %w", cfg.Op, row.Bytes, err)
			}
			step()
		}
		times := make([]float64, cfg.Iters)
		for i := range times {
			if err := collective.Barrier(ctx, c); err != nil {
				return rows, err
			}
			t0 := time.Now()
			if err := doColl(ctx, c, cfg, &bufs); err != nil {
				return rows, fmt.Errorf("bench: %s of %d bytes: %w", cfg.Op, row.Bytes, err)
			}
			times[i] = float64(time.Since(t0))
			step()
		}
		if err := collective.AllReduce(ctx, c, times, times, collective.Max, cfg.Options); err != nil {
			return rows, err
		}
		row.Samples = make([]time.Duration, len(times))
		for i, t := range times {
			row.Samples[i] = time.Duration(t)
		}
		s := Summarize(slices.Clone(row.Samples))
		row.Mean, row.P50, row.P99, row.P999 = s.Mean, s.P50, s.P99, s.P999
		if s.Mean > 0 {
			row.AlgBW = float64(row.Bytes) / s.Mean.Seconds() / 1e9
			row.BusBW = row.AlgBW * BusFactor(cfg.Op, p)
		}
		rows = append(rows, row)
		if cfg.OnRow != nil {
			cfg.OnRow(row)
		}
	}
	return rows, nil
}

// distinctSizes drops the sizes of the sweep that round (collCount) to
// the element count of the size before them, so that no two rows measure
// the same buffer: 8 and 16 bytes of float32 alltoall on 4 ranks are both
// one element per rank. TestCollSizesDistinct guards it.
func distinctSizes(sizes []int64, op string, es int64, p int) []int64 {
	var out []int64
	last := -1
	for _, size := range sizes {
		if n := collCount(op, size/es, p); n != last {
			out = append(out, size)
			last = n
		}
	}
	return out
}

// collCount is the element count of a size: whole elements, a multiple of
// p for the collectives that split their buffer by rank, and at least one
// element per rank.
func collCount(op string, elems int64, p int) int {
	switch op {
	case OpAllToAll, OpAllGather, OpReduceScatter:
		return int(max(elems/int64(p), 1)) * p
	}
	return int(max(elems, 1))
}

func elemBytes[T collective.Element]() int {
	var z T
	switch any(z).(type) {
	case float64:
		return 8
	}
	return 4
}

// size makes the buffers for count elements of op on p ranks.
func (b *collBufs[T]) size(op string, count, p int) {
	ns, nr := count, count
	switch op {
	case OpAllGather:
		ns = count / p
	case OpReduceScatter:
		nr = count / p
	case OpBroadcast:
		nr = 0
	}
	grow := func(x []T, n int) []T {
		if cap(x) < n {
			return make([]T, n)
		}
		return x[:n]
	}
	b.send, b.recv = grow(b.send, ns), grow(b.recv, nr)
}

// doColl runs one iteration of cfg.Op on the buffers.
func doColl[T collective.Element](ctx context.Context, c collective.Comm, cfg CollConfig, b *collBufs[T]) error {
	switch cfg.Op {
	case OpAllToAll:
		return collective.AllToAll(ctx, c, b.send, b.recv, cfg.Options)
	case OpAllReduce:
		return collective.AllReduce(ctx, c, b.send, b.recv, cfg.Reduce, cfg.Options)
	case OpAllGather:
		return collective.AllGather(ctx, c, b.send, b.recv, cfg.Options)
	case OpReduceScatter:
		return collective.ReduceScatter(ctx, c, b.send, b.recv, cfg.Reduce, cfg.Options)
	case OpBroadcast:
		return collective.Broadcast(ctx, c, b.send, cfg.Root, cfg.Options)
	}
	return fmt.Errorf("%w: collective %q", ErrCollConfig, cfg.Op)
}

// collValue is rank r's input element at global index i: a small integer,
// so that sums over any number of ranks (up to collective.MaxWorld) are
// exact in every element type and in any order. It differs between ranks
// and, with a period of 1021, between neighbouring indices, so that a
// misplaced block shows.
func collValue(r, i int) int { return (i*37)%1021 - 510 + r }

// collReduced is the reduction of collValue(·, i) over p ranks.
func collReduced(op collective.Op, p, i int) int {
	g := collValue(0, i)
	switch op {
	case collective.Min:
		return g
	case collective.Max:
		return g + p - 1
	}
	return p*g + p*(p-1)/2
}

// checkColl fills the send buffer with the rank's deterministic input,
// runs one iteration and counts the elements of the result that differ
// from the reference.
func checkColl[T collective.Element](ctx context.Context, c collective.Comm, cfg CollConfig, b *collBufs[T]) (int, error) {
	r, p := c.Rank(), c.Size()
	base := 0 // global index of send[0]
	if cfg.Op == OpAllGather {
		base = r * len(b.send)
	}
	for i := range b.send {
		b.send[i] = T(collValue(r, base+i))
	}
	for i := range b.recv {
		b.recv[i] = T(-(1 << 30)) // below any reference value, exact in every type
	}
	if err := doColl(ctx, c, cfg, b); err != nil {
		return 0, err
	}
	wrong := 0
	diff := func(got T, want int) {
		if got != T(want) {
			wrong++
		}
	}
	switch cfg.Op {
	case OpAllToAll:
		// Block k of recv is rank k's block r.
		m := len(b.recv) / p
		for i, v := range b.recv {
			k, j := i/m, i%m
			diff(v, collValue(k, r*m+j))
		}
	case OpAllReduce:
		for i, v := range b.recv {
			diff(v, collReduced(cfg.Reduce, p, i))
		}
	case OpAllGather:
		// Block k of recv is rank k's send, global indices k*m...
		m := len(b.send)
		for i, v := range b.recv {
			diff(v, collValue(i/m, i))
		}
	case OpReduceScatter:
		m := len(b.recv)
		for j, v := range b.recv {
			diff(v, collReduced(cfg.Reduce, p, r*m+j))
		}
	case OpBroadcast:
		for i, v := range b.send {
			diff(v, collValue(cfg.Root, i))
		}
	}
	return wrong, nil
}

// RunCollectiveLocal runs RunCollective on every Comm of a world in this
// process at once and returns rank 0's rows. progress is called from rank
// 0's goroutine, and so is cfg.OnRow. The first failing rank cancels the
// others.
func RunCollectiveLocal(ctx context.Context, comms []collective.Comm, cfg CollConfig, progress func(done, total int)) ([]CollRow, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows := make([][]CollRow, len(comms))
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			pr, rc := progress, cfg
			if r != 0 {
				pr, rc.OnRow = nil, nil
			}
			if rows[r], errs[r] = RunCollective(ctx, c, rc, pr); errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: no ranks", ErrCollConfig)
	}
	return rows[0], nil
}

// WriteCollTable writes rows as nccl-tests does: size, count, type, redop,
// root, time per iteration (µs), algbw and busbw (GB/s), #wrong ("N/A"
// when not checked), then the iterations' p50, p99 and p99.9 (µs).
func WriteCollTable(w io.Writer, rows []CollRow) {
	t := NewCollTable(w)
	for _, r := range rows {
		t.Row(r)
	}
	t.Close()
}

// CollTable writes WriteCollTable's table one row at a time, as each size
// finishes, in columns of fixed width (nccl-tests' layout) so that rows
// printed minutes apart still line up. The zero value is not usable; a
// CollTable is not safe for concurrent use.
type CollTable struct {
	w      io.Writer
	header bool
	rows   int
	wrong  int
	busbw  float64
}

// NewCollTable returns a table that writes to w; the header goes out with
// the first row (or Close).
func NewCollTable(w io.Writer) *CollTable { return &CollTable{w: w} }

const collRowFormat = " %11s %12s %8s %6s %6s %10s %9s %9s %7s %10s %10s %10s\n"

func (t *CollTable) writeHeader() {
	if t.header {
		return
	}
	t.header = true
	fmt.Fprintf(t.w, "#"+collRowFormat[1:], "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "p50", "p99", "p99.9")
	fmt.Fprintf(t.w, "#"+collRowFormat[1:], "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)")
}

// Row writes one row.
func (t *CollTable) Row(r CollRow) {
	t.writeHeader()
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e3) }
	wrong := "N/A"
	if r.Checked {
		wrong = fmt.Sprint(r.Wrong)
	}
	fmt.Fprintf(t.w, collRowFormat, strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Count), r.Type, r.Redop, strconv.Itoa(r.Root),
		us(r.Mean), fmt.Sprintf("%.3f", r.AlgBW), fmt.Sprintf("%.3f", r.BusBW), wrong, us(r.P50), us(r.P99), us(r.P999))
	t.rows++
	t.wrong += r.Wrong
	t.busbw += r.BusBW
}

// Close writes the summary lines (out-of-bounds values and the mean bus
// bandwidth) when at least one row was written.
func (t *CollTable) Close() {
	t.writeHeader()
	if t.rows > 0 {
		fmt.Fprintf(t.w, "# Out of bounds values : %d %s\n", t.wrong, map[bool]string{true: "OK", false: "FAILED"}[t.wrong == 0])
		fmt.Fprintf(t.w, "# Avg bus bandwidth    : %.3f\n", t.busbw/float64(t.rows))
	}
}
