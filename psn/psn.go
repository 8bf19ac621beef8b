// Package psn is the 24-bit packet sequence number arithmetic of RoCEv2, in
// one place.
//
// A PSN lives in the low 24 bits of a uint32 and wraps from 0xFFFFFF to 0.
// Comparisons are only meaningful between PSNs less than 2^23 apart, which
// every window in spray guarantees (windows are bounded far below that). The
// model is gVisor's seqnum: a < b exactly when the signed 24-bit difference
// a-b is negative.
package psn

// Mask keeps the 24 bits of a PSN.
const Mask = 1<<24 - 1

// Half is the largest distance at which two PSNs still compare correctly.
const Half = 1 << 23

// PSN is a 24-bit packet sequence number. The zero value is PSN 0.
type PSN uint32

// New returns v truncated to 24 bits.
func New(v uint32) PSN { return PSN(v & Mask) }

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & Mask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return p.Add(1) }

// Prev returns p-1 modulo 2^24.
func (p PSN) Prev() PSN { return PSN((uint32(p) - 1) & Mask) }

// Diff returns the signed distance p-q, in [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 {
	return int32((uint32(p)-uint32(q))<<8) >> 8
}

// Less reports whether p comes before q.
func (p PSN) Less(q PSN) bool { return p.Diff(q) < 0 }

// LessEq reports whether p comes before q or equals it.
func (p PSN) LessEq(q PSN) bool { return p.Diff(q) <= 0 }

// InWindow reports whether p lies in [start, start+size).
func (p PSN) InWindow(start PSN, size uint32) bool {
	d := p.Diff(start)
	return d >= 0 && uint32(d) < size
}

// Max returns the later of p and q.
func Max(p, q PSN) PSN {
	if p.Less(q) {
		return q
	}
	return p
}

// Min returns the earlier of p and q.
func Min(p, q PSN) PSN {
	if p.Less(q) {
		return p
	}
	return q
}
