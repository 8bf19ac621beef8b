package wire

import "encoding/binary"

// INT shim and hop record layout, for switches (eBPF programs) that fill hop
// records in place. Offsets are relative to the start of the BTH of an
// OpSprayData packet whose data header has FlagINT.
const (
	// INTVersion is the version byte of the INT shim.
	INTVersion = 1
	// INTShimOff is the offset of the INT shim from the start of the BTH.
	INTShimOff = BTHLen + DataHdrLen
	// Offsets inside the shim.
	INTShimVersionOff = 0
	INTShimCountOff   = 1 // hop records filled so far
	INTShimMaxOff     = 2 // hop slots reserved (= Data.INTMax)
	// INTRegionMaxLen is the largest INT region: shim and MaxINTHops slots.
	INTRegionMaxLen = INTShimLen + MaxINTHops*HopLen
)

// HopAt returns hop record i of records, which holds consecutive 24-byte
// records (Packet.INT after Decode). It returns the zero Hop if record i is
// not entirely within records.
func HopAt(records []byte, i int) Hop {
	if i < 0 || i >= len(records)/HopLen {
		return Hop{}
	}
	r := records[i*HopLen : i*HopLen+HopLen]
	return Hop{
		Switch:   binary.BigEndian.Uint16(r[0:]),
		Port:     binary.BigEndian.Uint16(r[2:]),
		RateMbps: binary.BigEndian.Uint32(r[4:]),
		TS:       binary.BigEndian.Uint64(r[8:]),
		QLen:     binary.BigEndian.Uint32(r[16:]),
		TxBytes:  binary.BigEndian.Uint32(r[20:]),
	}
}

// PutHop writes h as record i of records. It does nothing if record i is not
// entirely within records.
func PutHop(records []byte, i int, h Hop) {
	if i < 0 || i >= len(records)/HopLen {
		return
	}
	r := records[i*HopLen : i*HopLen+HopLen]
	binary.BigEndian.PutUint16(r[0:], h.Switch)
	binary.BigEndian.PutUint16(r[2:], h.Port)
	binary.BigEndian.PutUint32(r[4:], h.RateMbps)
	binary.BigEndian.PutUint64(r[8:], h.TS)
	binary.BigEndian.PutUint32(r[16:], h.QLen)
	binary.BigEndian.PutUint32(r[20:], h.TxBytes)
}

// INTRegion returns where an IPv4 frame's INT shim starts and the hop
// records filled and reserved there, for a switch that stamps a frame at
// every hop and parses it once (the simulator). ok is false, and no hop
// may be stamped, where StampHop would stamp none: no INT region, an
// unknown shim version, too many slots, a frame Decode rejects, or IPv6
// (whose UDP checksum StampHop recomputes). A caller stamps record n with
// PutHop(frame[off+INTShimLen:], n, h) and stores n+1 at
// off+INTShimCountOff while n < max (TestINTRegionMatchesStampHop).
func INTRegion(frame []byte) (off, n, max int, ok bool) {
	var l layout
	if err := parse(frame, &l); err != nil || l.bad != nil || l.intLen == 0 || l.v6 {
		return 0, 0, 0, false
	}
	shim := frame[l.intOff : l.intOff+l.intLen]
	if shim[INTShimVersionOff] != INTVersion || int(shim[INTShimMaxOff]) > MaxINTHops {
		return 0, 0, 0, false
	}
	return l.intOff, int(shim[INTShimCountOff]), int(shim[INTShimMaxOff]), true
}

// StampHop does in software what a fabric switch does in eBPF: it writes h
// into the next free hop slot of a spray data frame's INT region and
// increments the shim's hop count. The ICRC stays valid because the INT
// region is masked in it; for IPv6 StampHop recomputes the UDP checksum. It
// returns false, and changes nothing, when the frame carries no INT region
// or all its slots are filled. A frame that Decode would reject for its
// lower headers or INT region gives the same error here.
func StampHop(frame []byte, h Hop) (bool, error) {
	var l layout
	if err := parse(frame, &l); err != nil {
		return false, err
	}
	if l.bad != nil {
		return false, l.bad
	}
	if l.intLen == 0 {
		return false, nil
	}
	shim := frame[l.intOff : l.intOff+l.intLen]
	n, max := int(shim[INTShimCountOff]), int(shim[INTShimMaxOff])
	if shim[INTShimVersionOff] != INTVersion || n >= max || max > MaxINTHops {
		return false, nil
	}
	PutHop(shim[INTShimLen:], n, h)
	shim[INTShimCountOff]++
	if l.v6 {
		putUDPChecksum6(frame, l.ip, l.udp, l.end)
	}
	return true, nil
}
