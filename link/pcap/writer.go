package pcap

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/sprayfabric/spray/link"
)

// Format constants of the files a Writer writes.
const (
	// MagicNanos is the magic number of a classic pcap file whose record
	// timestamps hold nanoseconds.
	MagicNanos = 0xa1b23c4d
	// SnapLen is the snapshot length: the most bytes of a frame recorded.
	SnapLen = 65535
	// LinkTypeEthernet is the link type of the records: Ethernet II frames
	// without FCS.
	LinkTypeEthernet = 1

	fileHeaderLen   = 24
	recordHeaderLen = 16
	bufferSize      = 64 << 10
)

// ErrClosed is returned by a Writer's methods after Close. It wraps
// os.ErrClosed.
var ErrClosed = fmt.Errorf("pcap: writer closed: %w", os.ErrClosed)

// Writer writes frames to a classic pcap file through a buffer. Create one
// with NewWriter; the zero value is not usable. A Writer is safe for
// concurrent use: records of concurrent calls do not interleave.
//
// Writes go to an internal 64 KiB buffer: the file is complete only after
// Flush or Close. The first write error is sticky: WritePacket, Flush and
// Close return it from then on.
type Writer struct {
	mu     sync.Mutex
	bw     *bufio.Writer
	dst    io.Writer
	hdr    [recordHeaderLen]byte
	err    error // first error, or ErrClosed
	closed bool
}

// NewWriter writes the pcap file header to w and returns a Writer that
// appends records to it. The header is flushed at once, so that a write
// error shows here. Close closes w if it is an io.Closer.
func NewWriter(w io.Writer) (*Writer, error) {
	var h [fileHeaderLen]byte
	le := binary.LittleEndian
	le.PutUint32(h[0:], MagicNanos)
	le.PutUint16(h[4:], 2) // version 2.4
	le.PutUint16(h[6:], 4)
	// thiszone and sigfigs stay 0.
	le.PutUint32(h[16:], SnapLen)
	le.PutUint32(h[20:], LinkTypeEthernet)
	bw := bufio.NewWriterSize(w, bufferSize)
	if _, err := bw.Write(h[:]); err != nil {
		return nil, fmt.Errorf("pcap: write header: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("pcap: write header: %w", err)
	}
	return &Writer{bw: bw, dst: w}, nil
}

// WritePacket appends one record: frame (cut to SnapLen bytes) captured at
// ts. Seconds before 1970 or after 2106 are clamped to the range of the
// format. It copies frame and does not keep it; it does not allocate.
func (w *Writer) WritePacket(ts time.Time, frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.write(ts, frame)
}

// writeFrames appends a record for each frame under one lock.
func (w *Writer) writeFrames(ts time.Time, fs []link.Frame) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range fs {
		if w.write(ts, fs[i].Buf) != nil {
			return
		}
	}
}

func (w *Writer) write(ts time.Time, frame []byte) error {
	if w.err != nil {
		return w.err
	}
	sec := ts.Unix()
	nsec := ts.Nanosecond()
	switch {
	case sec < 0:
		sec, nsec = 0, 0
	case sec > math.MaxUint32:
		sec, nsec = math.MaxUint32, 999_999_999
	}
	caplen := min(len(frame), SnapLen)
	le := binary.LittleEndian
	le.PutUint32(w.hdr[0:], uint32(sec))
	le.PutUint32(w.hdr[4:], uint32(nsec))
	le.PutUint32(w.hdr[8:], uint32(caplen))
	le.PutUint32(w.hdr[12:], uint32(min(len(frame), math.MaxUint32)))
	if _, err := w.bw.Write(w.hdr[:]); err != nil {
		w.err = fmt.Errorf("pcap: write: %w", err)
		return w.err
	}
	if _, err := w.bw.Write(frame[:caplen]); err != nil {
		w.err = fmt.Errorf("pcap: write: %w", err)
		return w.err
	}
	return nil
}

// Flush writes the buffered records to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flush()
}

func (w *Writer) flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("pcap: write: %w", err)
		return w.err
	}
	return nil
}

// Close flushes the buffered records and closes the underlying writer if it
// is an io.Closer (an *os.File, typically). It returns the first error of
// the Writer's life, if any. It is idempotent; later calls return nil, and
// later writes ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.flush()
	if c, ok := w.dst.(io.Closer); ok {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("pcap: close: %w", cerr)
		}
	}
	w.err = ErrClosed
	return err
}
