package xdp

import "github.com/sprayfabric/spray/link"

var _ link.FilterStatsReader = (*Link)(nil)

// FilterStats returns the drops of the link's steering program: frames it
// dropped before any socket saw them (ebpf.SteerCounters' Malformed,
// Refused and NoRoom), which transport.Endpoint.Snapshot and package
// telemetry export beside the engines' own drops
// (TestLinkFilterStatsExported).
func (l *Link) FilterStats() (link.FilterStats, error) {
	if l.steer == nil {
		return link.FilterStats{}, nil
	}
	c, err := l.steer.Counters()
	if err != nil {
		return link.FilterStats{}, err
	}
	return link.FilterStats{Malformed: c.Malformed, Refused: c.Refused, NoRoom: c.NoRoom}, nil
}
