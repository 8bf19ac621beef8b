package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sprayfabric/spray/internal/testutil"
)

// TestFileBytes checks the bytes of a small file against the format,
// written out field by field.
func TestFileBytes(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 24 {
		t.Fatalf("NewWriter flushed %d header bytes, want 24", b.Len())
	}
	ts := time.Unix(1_700_000_000, 123_456_789)
	if err := w.WritePacket(ts, []byte{0xde, 0xad, 0xbe}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0x4d, 0x3c, 0xb2, 0xa1, // magic, nanoseconds, little-endian
		2, 0, 4, 0, // version 2.4
		0, 0, 0, 0, // thiszone
		0, 0, 0, 0, // sigfigs
		0xff, 0xff, 0, 0, // snaplen 65535
		1, 0, 0, 0, // LINKTYPE_ETHERNET
		0x00, 0xf1, 0x53, 0x65, // 1_700_000_000 s
		0x15, 0xcd, 0x5b, 0x07, // 123_456_789 ns
		3, 0, 0, 0, // captured length
		3, 0, 0, 0, // original length
		0xde, 0xad, 0xbe,
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("file\n%x\nwant\n%x", b.Bytes(), want)
	}
}

// TestRoundTrip writes random frames at random times and reads them back.
func TestRoundTrip(t *testing.T) {
	r := testutil.Rand(t)
	path := filepath.Join(t.TempDir(), "f.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	type pkt struct {
		ts    time.Time
		frame []byte
	}
	var want []pkt
	for i := range 500 {
		n := r.IntN(1600)
		if i%50 == 0 {
			n = r.IntN(9018)
		}
		fr := make([]byte, n)
		for j := range fr {
			fr[j] = byte(r.Uint32())
		}
		ts := time.Unix(r.Int64N(1<<32), r.Int64N(1e9))
		want = append(want, pkt{ts, fr})
		if err := w.WritePacket(ts, fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) {
		t.Fatalf("read %d records, wrote %d", len(recs), len(want))
	}
	for i, rc := range recs {
		if !rc.Time.Equal(want[i].ts) || !bytes.Equal(rc.Data, want[i].frame) || int(rc.OrigLen) != len(want[i].frame) {
			t.Fatalf("record %d: %v %d bytes (orig %d), wrote %v %d bytes", i, rc.Time, len(rc.Data), rc.OrigLen, want[i].ts, len(want[i].frame))
		}
	}
}

func TestSnapLenAndClampedTimes(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{7}, SnapLen+100)
	for _, ts := range []time.Time{{}, time.Unix(1<<33, 5)} {
		if err := w.WritePacket(ts, big); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	recs, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	for _, rc := range recs {
		if len(rc.Data) != SnapLen || int(rc.OrigLen) != len(big) {
			t.Fatalf("captured %d of %d bytes, want %d of %d", len(rc.Data), rc.OrigLen, SnapLen, len(big))
		}
	}
	if recs[0].Time.Unix() != 0 || recs[1].Time.Unix() != 1<<32-1 {
		t.Fatalf("clamped times %v %v", recs[0].Time.Unix(), recs[1].Time.Unix())
	}
}

// failWriter accepts n bytes, then fails.
type failWriter struct {
	n      int
	closed bool
}

var errDisk = errors.New("disk full")

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, errDisk
	}
	f.n -= len(p)
	return len(p), nil
}

func (f *failWriter) Close() error { f.closed = true; return nil }

func TestWriteErrors(t *testing.T) {
	if _, err := NewWriter(&failWriter{n: 10}); !errors.Is(err, errDisk) {
		t.Fatalf("NewWriter on a failing writer: %v", err)
	}
	fw := &failWriter{n: 24 + 1000}
	w, err := NewWriter(fw)
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 70000) // more than the buffer holds: reaches the failing writer
	err = w.WritePacket(time.Now(), frame)
	if !errors.Is(err, errDisk) {
		t.Fatalf("WritePacket past the failure: %v", err)
	}
	if err := w.WritePacket(time.Now(), frame[:10]); !errors.Is(err, errDisk) {
		t.Fatalf("error not sticky: %v", err)
	}
	if err := w.Flush(); !errors.Is(err, errDisk) {
		t.Fatalf("Flush: %v", err)
	}
	if err := w.Close(); !errors.Is(err, errDisk) {
		t.Fatalf("Close: %v", err)
	}
	if !fw.closed {
		t.Fatal("Close did not close the underlying writer")
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.WritePacket(time.Now(), frame); !errors.Is(err, ErrClosed) || !errors.Is(err, os.ErrClosed) {
		t.Fatalf("WritePacket after Close: %v", err)
	}
	if err := w.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
}

// TestConcurrent writes from several goroutines; every record must come out
// whole (run with -race).
func TestConcurrent(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 300
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				fr := bytes.Repeat([]byte{byte(g)}, 3+(i*37)%1500)
				binary.BigEndian.PutUint16(fr[1:], uint16(i))
				if err := w.WritePacket(time.Now(), fr); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != writers*each {
		t.Fatalf("%d records, want %d", len(recs), writers*each)
	}
	seen := map[[2]int]bool{}
	for _, rc := range recs {
		g, i := rc.Data[0], int(binary.BigEndian.Uint16(rc.Data[1:]))
		if len(rc.Data) != 3+(i*37)%1500 || bytes.Count(rc.Data[3:], []byte{g}) != len(rc.Data)-3 {
			t.Fatalf("record of %d bytes (writer %d, number %d) is not whole", len(rc.Data), g, i)
		}
		seen[[2]int{int(g), i}] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct records, want %d", len(seen), writers*each)
	}
}

func TestWritePacketAllocs(t *testing.T) {
	w, err := NewWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	small, big := make([]byte, 64), make([]byte, 9000)
	ts := time.Now()
	if a := testing.AllocsPerRun(1000, func() {
		_ = w.WritePacket(ts, small)
		_ = w.WritePacket(ts, big)
	}); a != 0 {
		t.Fatalf("WritePacket allocates %.1f times per call pair", a)
	}
}

func TestReadErrors(t *testing.T) {
	var good bytes.Buffer
	w, _ := NewWriter(&good)
	_ = w.WritePacket(time.Unix(1, 2), []byte("0123456789abcdef"))
	_ = w.Flush()
	g := good.Bytes()
	mod := func(off int, v uint32) []byte {
		b := bytes.Clone(g)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"short header":   g[:20],
		"magic":          mod(0, 0x0a0d0d0a), // pcapng
		"link type":      mod(20, 101),       // raw IP
		"record header":  g[:24+10],
		"record data":    g[:len(g)-1],
		"caplen>origlen": mod(24+8, 17),
		"huge caplen":    mod(24+8, 1<<30),
		"nanoseconds":    mod(24+4, 1e9),
	} {
		if _, err := Read(bytes.NewReader(b)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	// Microsecond and big-endian files read too.
	be := []byte{0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1,
		0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0xaa}
	recs, err := Read(bytes.NewReader(be))
	if err != nil || len(recs) != 1 || !recs[0].Time.Equal(time.Unix(5, 7000)) || !bytes.Equal(recs[0].Data, []byte{0xaa}) {
		t.Fatalf("big-endian microsecond file: %v %+v", err, recs)
	}
}

// FuzzRead feeds arbitrary files to the reader: it must not panic, and what
// it accepts must survive a write and a second read.
func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	w, _ := NewWriter(&b)
	_ = w.WritePacket(time.Unix(1, 2), []byte("frame"))
	_ = w.WritePacket(time.Unix(3, 4), nil)
	_ = w.Flush()
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:30])
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		var out bytes.Buffer
		w, err := NewWriter(&out)
		if err != nil {
			t.Fatal(err)
		}
		for _, rc := range recs {
			if err := w.WritePacket(rc.Time, rc.Data); err != nil {
				t.Fatal(err)
			}
		}
		_ = w.Flush()
		again, err := Read(&out)
		if err != nil || len(again) != len(recs) {
			t.Fatalf("reread: %v, %d records of %d", err, len(again), len(recs))
		}
		for i := range recs {
			if !again[i].Time.Equal(recs[i].Time) || !bytes.Equal(again[i].Data, recs[i].Data) {
				t.Fatalf("record %d changed", i)
			}
		}
	})
}

// BenchmarkWritePacket measures the cost of recording one frame.
func BenchmarkWritePacket(b *testing.B) {
	for _, size := range []int{64, 1514, 9014} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			w, err := NewWriter(io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			frame := make([]byte, size)
			ts := time.Now()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := w.WritePacket(ts, frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
