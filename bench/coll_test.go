package bench

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sprayfabric/spray/cc"
	"github.com/sprayfabric/spray/collective"
	"github.com/sprayfabric/spray/collective/collectivetest"
	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/transport"
)

func collWorld(t *testing.T, kind string, n int) []collective.Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cs []collective.Comm
	switch kind {
	case "tcp":
		ts, err := collectivetest.TCP(ctx, n, collective.TCPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ts {
			cs = append(cs, c)
			t.Cleanup(func() { c.Close() })
		}
	case "spray":
		// 16 engines and ranks in one process on a loaded machine delay
		// ACKs by milliseconds: a 5 ms RTO floor and a fixed window avoid
		// spurious timeouts and window cuts that make large runs crawl.
		mk, err := cc.ByName("fixed", cc.Params{LineRate: 1.25e9, PacketBytes: 1400})
		if err != nil {
			t.Fatal(err)
		}
		tc := transport.Config{Seed: testutil.Seed(t), MinRTO: 5 * time.Millisecond, MaxRetries: 20, CC: mk}
		w, err := collectivetest.Spray(ctx, n, collectivetest.SprayConfig{Transport: tc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		for _, c := range w.Comms {
			cs = append(cs, c)
		}
	}
	return cs
}

func runLocal(t *testing.T, cs []collective.Comm, cfg CollConfig) []CollRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows, err := RunCollectiveLocal(ctx, cs, cfg, nil)
	if err != nil {
		t.Fatalf("%+v: %v", cfg, err)
	}
	return rows
}

// TestCollectivesCorrect runs every collective on 8 ranks over spray and
// over TCP from 8 bytes to 64 MiB, checked against the reference.
func TestCollectivesCorrect(t *testing.T) {
	const n = 8
	for _, kind := range []string{"spray", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			cs := collWorld(t, kind, n)
			maxB, types := int64(2<<20), CollTypes
			if collRace {
				maxB, types = 32<<10, CollTypes[:1]
			}
			for _, op := range CollOps {
				for _, typ := range types {
					reds := []collective.Op{collective.Sum}
					if (op == OpAllReduce || op == OpReduceScatter) && typ == "float32" {
						reds = []collective.Op{collective.Sum, collective.Min, collective.Max}
					}
					for _, red := range reds {
						cfg := CollConfig{Op: op, Type: typ, Reduce: red, MinBytes: 8, MaxBytes: maxB, Factor: 64, Iters: 1, Check: true, Root: 3}
						rows := runLocal(t, cs, cfg)
						if want := len(cfg.sizes()); len(rows) != want { // 8, 512, 32K, 2M
							t.Fatalf("%s %s: %d rows, want %d", op, typ, len(rows), want)
						}
						for _, r := range rows {
							if !r.Checked || r.Wrong != 0 {
								t.Errorf("%s %s %s %d bytes: checked %v, %d wrong", op, typ, red, r.Bytes, r.Checked, r.Wrong)
							}
						}
					}
				}
			}
			if testing.Short() || collRace {
				return
			}
			// The largest size, once per collective (a minute or two on a
			// loaded 2-core machine).
			for _, op := range CollOps {
				rows := runLocal(t, cs, CollConfig{Op: op, MinBytes: 64 << 20, Iters: 1, Check: true, Root: 5})
				if len(rows) != 1 || rows[0].Bytes != 64<<20 || rows[0].Wrong != 0 || !rows[0].Checked {
					t.Errorf("%s 64 MiB: %+v", op, rows)
				}
				t.Logf("%s %s 64 MiB: %v, busbw %.2f GB/s", kind, op, rows[0].Mean, rows[0].BusBW)
			}
		})
	}
}

// corruptComm flips one byte of the first non-empty message it receives
// when armed.
type corruptComm struct {
	collective.Comm
	armed atomic.Bool
}

func (c *corruptComm) Recv(ctx context.Context, peer int) ([]byte, error) {
	b, err := c.Comm.Recv(ctx, peer)
	if err == nil && len(b) > 0 && c.armed.CompareAndSwap(true, false) {
		b[0] ^= 0x40
	}
	return b, err
}

// TestCollCheckCountsWrong corrupts one received message and expects the
// check to count at least one wrong element, on the row of that size only.
func TestCollCheckCountsWrong(t *testing.T) {
	for _, op := range CollOps {
		t.Run(op, func(t *testing.T) {
			cs := collWorld(t, "tcp", 4)
			bad := &corruptComm{Comm: cs[2]}
			bad.armed.Store(true)
			cs[2] = bad
			rows := runLocal(t, cs, CollConfig{Op: op, Type: "int32", MinBytes: 1024, Iters: 1, Check: true, Root: 1})
			if rows[0].Wrong == 0 {
				t.Errorf("%s: a corrupted message went unnoticed: %+v", op, rows[0])
			}
		})
	}
}

// TestCollRows checks the rows' shape: sizes, counts, bus factors, the
// slowest rank's times, and the table that nccl-tests users read.
func TestCollRows(t *testing.T) {
	const n = 4
	cs := collWorld(t, "spray", n)
	rows := runLocal(t, cs, CollConfig{Op: OpAllToAll, Type: "float64", MinBytes: 100, MaxBytes: 100 << 10, Factor: 4, Warmup: 1, Iters: 5, Check: true})
	wantBytes := []int64{96, 384, 1600, 6400, 25600, 102400} // whole float64s, 4 per rank at least
	var got []int64
	for _, r := range rows {
		got = append(got, r.Bytes)
		if r.Count*8 != int(r.Bytes) || r.Type != "float64" || r.Op != OpAllToAll || r.Redop != "none" || r.Root != -1 {
			t.Errorf("row %+v", r)
		}
		if len(r.Samples) != 5 || r.Mean <= 0 || r.P50 > r.P99 || r.P99 > r.P999 || r.P999 != slices.Max(r.Samples) {
			t.Errorf("row times %+v", r)
		}
		if want := r.AlgBW * 3 / 4; r.BusBW < want*0.999 || r.BusBW > want*1.001 {
			t.Errorf("busbw %v, want algbw %v * 3/4", r.BusBW, r.AlgBW)
		}
	}
	if !slices.Equal(got, wantBytes) {
		t.Errorf("sizes %v, want %v", got, wantBytes)
	}
	var buf bytes.Buffer
	WriteCollTable(&buf, rows)
	t.Logf("\n%s", buf.String())
	parsed := parseCollTable(t, buf.String())
	if len(parsed) != len(rows) {
		t.Fatalf("table has %d rows, want %d:\n%s", len(parsed), len(rows), buf.String())
	}
	for i, f := range parsed {
		if f[0] != strconv.FormatInt(rows[i].Bytes, 10) || f[2] != "float64" || f[8] != "0" {
			t.Errorf("table row %d: %q", i, f)
		}
	}
	if !strings.Contains(buf.String(), "Out of bounds values : 0 OK") {
		t.Errorf("no OK verdict in\n%s", buf.String())
	}
}

// parseCollTable returns the fields of the data lines of a table written by
// WriteCollTable (lines not starting with #), checking there are 12.
func parseCollTable(t *testing.T, s string) [][]string {
	t.Helper()
	var out [][]string
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 12 {
			t.Fatalf("table line has %d fields, want 12: %q", len(f), line)
		}
		out = append(out, f)
	}
	return out
}

func TestCollConfigErrors(t *testing.T) {
	cs := collWorld(t, "tcp", 2)
	for _, cfg := range []CollConfig{
		{Op: "gather"}, {Type: "int8"}, {Reduce: 9}, {MinBytes: -1}, {Iters: -1},
		{Op: OpBroadcast, Root: 2}, {MaxBytes: 1 << 50},
	} {
		_, err := RunCollective(context.Background(), cs[0], cfg, nil)
		if !errors.Is(err, ErrCollConfig) {
			t.Errorf("%+v: %v, want ErrCollConfig", cfg, err)
		}
	}
}

func TestCollSizesAndFactors(t *testing.T) {
	cfg, err := CollConfig{MinBytes: 8, MaxBytes: 64 << 20, Factor: 2}.resolve(8)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.sizes()
	if len(s) != 24 || s[0] != 8 || s[23] != 64<<20 {
		t.Errorf("sizes %v", s)
	}
	if s := (CollConfig{MinBytes: 1 << 40, MaxBytes: 1 << 40, Factor: 1 << 30}).sizes(); len(s) != 1 {
		t.Errorf("sizes near the limit %v", s)
	}
	for _, c := range []struct {
		op   string
		p    int
		want float64
	}{{OpAllReduce, 8, 1.75}, {OpAllToAll, 8, 0.875}, {OpAllGather, 4, 0.75}, {OpReduceScatter, 2, 0.5}, {OpBroadcast, 8, 1}} {
		if got := BusFactor(c.op, c.p); got != c.want {
			t.Errorf("BusFactor(%s, %d) = %v, want %v", c.op, c.p, got, c.want)
		}
	}
	// The reference's sums stay exact in float32 on the largest world.
	p := collective.MaxWorld
	for _, i := range []int{0, 1, 13, 1000} {
		if v := collReduced(collective.Sum, p, i); float64(float32(v)) != float64(v) {
			t.Errorf("sum at %d on %d ranks: %d is not exact in float32", i, p, v)
		}
	}
}

// TestCollSizesDistinct: a sweep from 8 bytes of float32 alltoall on 4
// ranks measures each buffer once (8 and 16 bytes are both one element per
// rank), and OnRow sees every row, in order, once, from rank 0 alone.
func TestCollSizesDistinct(t *testing.T) {
	cs := collWorld(t, "tcp", 4)
	var seen []CollRow
	rows := runLocal(t, cs, CollConfig{Op: OpAllToAll, MinBytes: 8, MaxBytes: 256, Iters: 2, Check: true,
		OnRow: func(r CollRow) { seen = append(seen, r) }})
	var got []int64
	for _, r := range rows {
		got = append(got, r.Bytes)
	}
	if want := []int64{16, 32, 64, 128, 256}; !slices.Equal(got, want) {
		t.Errorf("row sizes %v, want %v", got, want)
	}
	if len(seen) != len(rows) {
		t.Fatalf("OnRow saw %d rows, want %d", len(seen), len(rows))
	}
	for i := range rows {
		if seen[i].Bytes != rows[i].Bytes || seen[i].Mean != rows[i].Mean {
			t.Errorf("OnRow row %d: %d bytes, want %d", i, seen[i].Bytes, rows[i].Bytes)
		}
	}
}
