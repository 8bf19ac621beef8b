package transport

import (
	"math"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/sprayfabric/spray/internal/testutil"
	"github.com/sprayfabric/spray/link/mem"
)

// TestStatsCopiesEveryCounter: every QPStats counter comes from the QP's
// own counters or its rare ones, under its name, and Stats copies each:
// a counter added to QPStats and to neither, or not copied, fails here.
func TestStatsCopiesEveryCounter(t *testing.T) {
	s := newSimPair(t, mem.Config{Seed: testutil.Seed(t)}, Config{Profile: Spray})
	q := s.qa
	q.rare = new(rareStats)
	src := map[string]reflect.Value{}
	n := uint64(1)
	for _, v := range []reflect.Value{reflect.ValueOf(&q.stats).Elem(), reflect.ValueOf(q.rare).Elem()} {
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			if _, dup := src[name]; dup {
				t.Fatalf("counter %s held twice", name)
			}
			f := v.Field(i)
			switch f.Kind() {
			case reflect.Uint64:
				f.SetUint(n)
			case reflect.Int64:
				f.SetInt(int64(n))
			default:
				t.Fatalf("counter %s of kind %v", name, f.Kind())
			}
			src[name] = f
			n++
		}
	}
	got := reflect.ValueOf(q.Stats())
	for i := range got.NumField() {
		name := got.Type().Field(i).Name
		switch name {
		case "ReorderHeld", "Security": // from the receiver and secState
			continue
		}
		f, ok := src[name]
		if !ok {
			t.Errorf("QPStats.%s is held nowhere in the QP", name)
			continue
		}
		if !got.Field(i).Equal(f) {
			t.Errorf("Stats().%s = %v, the QP holds %v", name, got.Field(i), f)
		}
		delete(src, name)
	}
	for name := range src {
		t.Errorf("the QP counts %s, which QPStats lacks", name)
	}
}

// TestRareStatsOnDemand: a clean transfer counts nothing rare, so a busy
// QP holds no rare counters; the first refused packet allocates them and
// Stats reports it.
func TestRareStatsOnDemand(t *testing.T) {
	seed := testutil.Seed(t)
	s := newSimPair(t, mem.Config{Seed: seed, Delay: 2 * time.Microsecond}, Config{Profile: Spray, Seed: seed})
	transfer(t, s, [][]byte{make([]byte, 20000), make([]byte, 5000)})
	if s.qa.rare != nil || s.qb.rare != nil {
		t.Fatalf("rare counters after a clean transfer: %+v %+v", s.qa.rare, s.qb.rare)
	}
	if st := s.qa.Stats(); st.TxPackets == 0 || st.BadPackets != 0 {
		t.Fatalf("Stats: %d packets sent, %d bad", st.TxPackets, st.BadPackets)
	}
	s.qa.rareStats().BadPackets++
	if s.qa.rare == nil || s.qa.Stats().BadPackets != 1 {
		t.Fatalf("a rare count: %+v, Stats().BadPackets %d", s.qa.rare, s.qa.Stats().BadPackets)
	}
}

// TestDelayHistWide: a QP's compact histogram reports what a
// DelayHistogram fed the same samples reports, past a bucket's 2^32-1.
func TestDelayHistWide(t *testing.T) {
	var h delayHist
	var want DelayHistogram
	for _, d := range []time.Duration{-5, 0, time.Microsecond, 3 * time.Microsecond, time.Millisecond, time.Hour} {
		h.add(d)
		want.Add(d)
	}
	if h.full() != want {
		t.Fatalf("compact %+v, want %+v", h.full(), want)
	}
	h.c[3] = math.MaxUint32 - 1
	want.Counts[3] = math.MaxUint32 - 1
	for range 3 {
		h.add(5 * time.Microsecond)
		want.Add(5 * time.Microsecond)
	}
	h.add(time.Hour)
	want.Add(time.Hour)
	if h.wide == nil || h.full() != want || h.full().Counts[3] != math.MaxUint32+2 {
		t.Fatalf("past 2^32-1: %+v, want %+v", h.full(), want)
	}
}

// TestQPSize: a QP fits the allocator's 1,152-byte class with the 8-byte
// header the runtime puts before an object of more than 512 bytes that
// holds pointers. The simulator holds a million QPs at 1,024 hosts, every
// one busy, so each byte here costs a megabyte: rare counters, credit
// state and posted-buffer ring behind pointers, delay histograms in 32
// bits and field order keep it there; a field that takes it past the
// class costs 128 bytes a QP.
func TestQPSize(t *testing.T) {
	if n := unsafe.Sizeof(QP{}); n > 1152-8 {
		t.Fatalf("QP is %d bytes, want at most 1144", n)
	}
}
