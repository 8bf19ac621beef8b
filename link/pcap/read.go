package pcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// ErrFormat is wrapped by the errors of reading a file that is not a classic
// pcap file of Ethernet frames, or is truncated.
var ErrFormat = errors.New("pcap: malformed capture file")

// maxRecord bounds the bytes of one record that the reader accepts (the
// largest snapshot length tools write).
const maxRecord = 256 << 10

// Record is one frame read back from a capture file.
type Record struct {
	Time    time.Time
	Data    []byte // the captured bytes, at most the file's snapshot length
	OrigLen uint32 // the frame's length on the link
}

// ReadFile reads every record of the classic pcap file of Ethernet frames at
// path (either byte order, microsecond or nanosecond timestamps). A file
// that is not one, or is truncated, gives an error wrapping ErrFormat.
func ReadFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

// Read reads every record of a classic pcap stream of Ethernet frames, as
// ReadFile does. It holds the whole capture in memory (at most 256 KiB per
// record).
func Read(r io.Reader) ([]Record, error) {
	br := bufio.NewReader(r)
	var h [fileHeaderLen]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, fmt.Errorf("%w: file header: %v", ErrFormat, err)
	}
	var bo binary.ByteOrder
	var unit time.Duration
	switch m := binary.LittleEndian.Uint32(h[:]); m {
	case MagicNanos, 0xa1b2c3d4:
		bo = binary.LittleEndian
	case 0x4d3cb2a1, 0xd4c3b2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("%w: magic %#08x", ErrFormat, m)
	}
	unit = time.Microsecond
	if bo.Uint32(h[:]) == MagicNanos {
		unit = time.Nanosecond
	}
	if lt := bo.Uint32(h[20:]); lt != LinkTypeEthernet {
		return nil, fmt.Errorf("%w: link type %d, want Ethernet (1)", ErrFormat, lt)
	}
	var recs []Record
	var rh [recordHeaderLen]byte
	for {
		if _, err := io.ReadFull(br, rh[:]); err == io.EOF {
			return recs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%w: record %d header: %v", ErrFormat, len(recs)+1, err)
		}
		capLen, origLen := bo.Uint32(rh[8:]), bo.Uint32(rh[12:])
		if capLen > maxRecord || capLen > origLen {
			return nil, fmt.Errorf("%w: record %d: %d bytes captured of %d", ErrFormat, len(recs)+1, capLen, origLen)
		}
		frac := bo.Uint32(rh[4:])
		if time.Duration(frac)*unit >= time.Second {
			return nil, fmt.Errorf("%w: record %d: fraction of a second %d", ErrFormat, len(recs)+1, frac)
		}
		data := make([]byte, capLen)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrFormat, len(recs)+1, err)
		}
		ts := time.Unix(int64(bo.Uint32(rh[0:])), int64(time.Duration(frac)*unit))
		recs = append(recs, Record{Time: ts, Data: data, OrigLen: origLen})
	}
}
