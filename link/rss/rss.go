package rss

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// DefaultKey is the 40-byte key of Microsoft's RSS specification, the one
// its verification vectors use and many drivers' default.
var DefaultKey = []byte{
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2,
	0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
	0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4,
	0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
	0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
}

// ErrNoRSS is wrapped by Device's error for a device without an RSS key
// or indirection table.
var ErrNoRSS = errors.New("rss: device has no RSS hash key or indirection table")

// Toeplitz returns the Toeplitz hash of data under key: for every set bit
// i of data (most significant bit of data[0] first), the 32 bits of key
// starting at bit i are XORed into the result. key must be at least
// len(data)+4 bytes long; missing key bits count as zeros.
func Toeplitz(key, data []byte) uint32 {
	var h uint32
	var win uint64 // key bits [i, i+64) at the top
	for j := range 8 {
		win <<= 8
		if j < len(key) {
			win |= uint64(key[j])
		}
	}
	next := 8
	for _, b := range data {
		for bit := 7; bit >= 0; bit-- {
			if b&(1<<bit) != 0 {
				h ^= uint32(win >> 32)
			}
			win <<= 1
		}
		// Refill the byte that shifted below the window's top 56 bits.
		if next < len(key) {
			win |= uint64(key[next])
		}
		next++
	}
	return h
}

// Tuple is what a NIC hashes for a UDP or TCP frame: addresses and ports.
type Tuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
}

// Input returns the hash input for t in the specification's order: source
// address, destination address, source port, destination port; with
// ports false, the addresses only (what a NIC hashes for fragments and
// protocols without ports).
func (t Tuple) Input(dst []byte, ports bool) []byte {
	if t.Src.Is4() {
		a, b := t.Src.As4(), t.Dst.As4()
		dst = append(append(dst, a[:]...), b[:]...)
	} else {
		a, b := t.Src.As16(), t.Dst.As16()
		dst = append(append(dst, a[:]...), b[:]...)
	}
	if ports {
		dst = binary.BigEndian.AppendUint16(dst, t.SrcPort)
		dst = binary.BigEndian.AppendUint16(dst, t.DstPort)
	}
	return dst
}

// Hash returns the Toeplitz hash of t's addresses and ports under key.
func Hash(key []byte, t Tuple) uint32 {
	var buf [36]byte
	return Toeplitz(key, t.Input(buf[:0], true))
}

// ParseFrame returns the tuple of an Ethernet frame carrying IPv4 or IPv6
// (one 802.1Q tag allowed, no IPv6 extension headers) and UDP, and ok false
// for anything else, a non-first fragment included.
func ParseFrame(frame []byte) (t Tuple, ok bool) {
	if len(frame) < 14 {
		return t, false
	}
	off, et := 14, binary.BigEndian.Uint16(frame[12:])
	if et == 0x8100 {
		if len(frame) < 18 {
			return t, false
		}
		off, et = 18, binary.BigEndian.Uint16(frame[16:])
	}
	ip := frame[off:]
	var l4 []byte
	switch et {
	case 0x0800:
		if len(ip) < 20 || ip[0]>>4 != 4 {
			return t, false
		}
		ihl := int(ip[0]&0xf) * 4
		if ihl < 20 || len(ip) < ihl+8 || ip[9] != 17 {
			return t, false
		}
		if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 { // not the first fragment
			return t, false
		}
		t.Src = netip.AddrFrom4([4]byte(ip[12:16]))
		t.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
		l4 = ip[ihl:]
	case 0x86dd:
		if len(ip) < 48 || ip[0]>>4 != 6 || ip[6] != 17 {
			return t, false
		}
		t.Src = netip.AddrFrom16([16]byte(ip[8:24]))
		t.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
		l4 = ip[40:]
	default:
		return t, false
	}
	t.SrcPort = binary.BigEndian.Uint16(l4)
	t.DstPort = binary.BigEndian.Uint16(l4[2:])
	return t, true
}

// Table is a device's RSS configuration: its hash key and indirection
// table. The zero value has neither; Queue then returns 0.
type Table struct {
	Key   []byte
	Indir []uint32 // queue of each hash bucket
}

// Spread returns a table of size entries (128 when size <= 0) that spreads
// the buckets over queues in turn, as Linux drivers' default
// (ethtool_rxfh_indir_default), with key (DefaultKey when nil).
func Spread(queues, size int, key []byte) Table {
	if size <= 0 {
		size = 128
	}
	if key == nil {
		key = DefaultKey
	}
	t := Table{Key: append([]byte(nil), key...), Indir: make([]uint32, size)}
	for i := range t.Indir {
		t.Indir[i] = uint32(i % max(queues, 1))
	}
	return t
}

// Queue returns the queue the table gives a hash: Indir[hash mod len].
func (t Table) Queue(hash uint32) int {
	if len(t.Indir) == 0 {
		return 0
	}
	return int(t.Indir[hash%uint32(len(t.Indir))])
}

// QueueOf returns the queue a NIC with this table delivers tuple t to.
func (t Table) QueueOf(tp Tuple) int {
	if len(t.Indir) == 0 {
		return 0
	}
	return t.Queue(Hash(t.Key, tp))
}

// PortsFor appends to dst the source ports in [lo, hi] whose frames from
// src to dst:dport the table delivers to queue q, at most n of them.
func (t Table) PortsFor(dst []uint16, tp Tuple, q, n int, lo, hi uint16) []uint16 {
	for p := uint32(lo); p <= uint32(hi) && n > 0; p++ {
		tp.SrcPort = uint16(p)
		if t.QueueOf(tp) == q {
			dst = append(dst, uint16(p))
			n--
		}
	}
	return dst
}
