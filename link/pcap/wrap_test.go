package pcap

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sprayfabric/spray/link"
)

// loop is a link whose Send queues frames for its own Recv, and which logs
// the calls forwarded to it.
type loop struct {
	bufs  [][]byte
	free  []uint64
	rx    []link.Frame
	calls []string
	stats link.Stats
}

func newLoop(n int) *loop {
	l := &loop{}
	for i := range n {
		l.bufs = append(l.bufs, make([]byte, 256))
		l.free = append(l.free, uint64(i))
	}
	return l
}

func (l *loop) Info() link.Info {
	l.calls = append(l.calls, "Info")
	return link.Info{Name: "loop", FrameSize: 256, BatchSize: 4, IP: netip.MustParseAddr("10.1.1.1")}
}

func (l *loop) Recv(fs []link.Frame) (int, error) {
	n := copy(fs, l.rx)
	l.rx = append(l.rx[:0], l.rx[n:]...)
	return n, nil
}

func (l *loop) Release(fs []link.Frame) {
	for _, f := range fs {
		l.free = append(l.free, f.ID)
	}
}

func (l *loop) Alloc(fs []link.Frame) int {
	n := 0
	for n < len(fs) && len(l.free) > 0 {
		id := l.free[len(l.free)-1]
		l.free = l.free[:len(l.free)-1]
		fs[n] = link.Frame{Buf: l.bufs[id], ID: id}
		n++
	}
	return n
}

func (l *loop) Send(fs []link.Frame) (int, error) {
	l.rx = append(l.rx, fs...)
	l.stats.TxFrames += uint64(len(fs))
	return len(fs), nil
}

func (l *loop) Wait(timeout time.Duration) error {
	l.calls = append(l.calls, "Wait "+timeout.String())
	return nil
}

func (l *loop) Wake()        { l.calls = append(l.calls, "Wake") }
func (l *loop) Close() error { l.calls = append(l.calls, "Close"); return link.ErrClosed }

type statsLoop struct{ *loop }

func (s statsLoop) Stats() link.Stats { return s.stats }

func TestWrap(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	inner := newLoop(8)
	l := Wrap(inner, w)
	if _, ok := l.(link.StatsReader); ok {
		t.Fatal("wrapper of a link without Stats implements StatsReader")
	}
	if l.Info().Name != "loop" {
		t.Fatal("Info not forwarded")
	}
	var want [][]byte
	fs := make([]link.Frame, 3)
	if n := l.Alloc(fs); n != 3 {
		t.Fatalf("Alloc %d", n)
	}
	for i := range fs {
		fs[i].Buf = fs[i].Buf[:10+i]
		for j := range fs[i].Buf {
			fs[i].Buf[j] = byte(i*16 + j)
		}
		want = append(want, bytes.Clone(fs[i].Buf))
	}
	if n, err := l.Send(fs); n != 3 || err != nil {
		t.Fatalf("Send %d %v", n, err)
	}
	rx := make([]link.Frame, 8)
	n, err := l.Recv(rx)
	if n != 3 || err != nil {
		t.Fatalf("Recv %d %v", n, err)
	}
	for i := range n {
		if !bytes.Equal(rx[i].Buf, want[i]) {
			t.Fatalf("frame %d changed: %x, sent %x", i, rx[i].Buf, want[i])
		}
	}
	want = append(want, want...) // sent, then received
	l.Release(rx[:n])
	if len(inner.free) != 8 {
		t.Fatalf("Release not forwarded: %d free", len(inner.free))
	}
	if err := l.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	l.Wake()
	if err := l.Close(); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Close: %v, want the inner link's error", err)
	}
	if got := inner.calls; len(got) != 4 || got[1] != "Wait 1s" || got[2] != "Wake" || got[3] != "Close" {
		t.Fatalf("calls reaching the link: %q", got)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	recs, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, rc := range recs {
		if !bytes.Equal(rc.Data, want[i]) {
			t.Fatalf("record %d: %x, want %x", i, rc.Data, want[i])
		}
		if time.Since(rc.Time) > time.Hour || time.Until(rc.Time) > time.Hour {
			t.Fatalf("record %d stamped %v", i, rc.Time)
		}
	}

	// Stats pass through when the link has them.
	sl := Wrap(statsLoop{newLoop(2)}, w)
	sr, ok := sl.(link.StatsReader)
	if !ok {
		t.Fatal("wrapper of a link with Stats does not implement StatsReader")
	}
	fs = fs[:2]
	sl.Alloc(fs)
	sl.Send(fs)
	if sr.Stats().TxFrames != 2 {
		t.Fatalf("Stats %+v", sr.Stats())
	}

	// A split wait passes through when the link has one, alone or with
	// Stats; a transport would otherwise use the rings beside a Wait.
	if _, ok := l.(link.WaitSplitter); ok {
		t.Fatal("wrapper of a link without a split wait implements WaitSplitter")
	}
	for _, inner := range []link.Link{splitLoop{newLoop(2)}, statsSplitLoop{statsLoop{newLoop(2)}}} {
		ws, ok := Wrap(inner, w).(link.WaitSplitter)
		if !ok {
			t.Fatalf("wrapper of %T does not implement WaitSplitter", inner)
		}
		if d, ready, err := ws.PrepareWait(time.Second); d != time.Millisecond || ready || err != nil {
			t.Fatalf("PrepareWait through the wrapper of %T = %v, %v, %v", inner, d, ready, err)
		}
	}
}

// splitLoop is a loop whose wait splits; PrepareWait shortens the timeout
// to 1 ms, for the test to see that the call went through.
type splitLoop struct{ *loop }

func (splitLoop) PrepareWait(time.Duration) (time.Duration, bool, error) {
	return time.Millisecond, false, nil
}
func (splitLoop) Block(time.Duration) error { return nil }

type statsSplitLoop struct{ statsLoop }

func (statsSplitLoop) PrepareWait(time.Duration) (time.Duration, bool, error) {
	return time.Millisecond, false, nil
}
func (statsSplitLoop) Block(time.Duration) error { return nil }

// TestWrapAllocs: capturing a batch costs no allocation.
func TestWrapAllocs(t *testing.T) {
	w, err := NewWriter(discard{})
	if err != nil {
		t.Fatal(err)
	}
	l := Wrap(statsLoop{newLoop(4)}, w)
	fs := make([]link.Frame, 4)
	rx := make([]link.Frame, 4)
	if a := testing.AllocsPerRun(1000, func() {
		n := l.Alloc(fs)
		l.Send(fs[:n])
		m, _ := l.Recv(rx)
		l.Release(rx[:m])
	}); a != 0 {
		t.Fatalf("%.1f allocations per batch", a)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
