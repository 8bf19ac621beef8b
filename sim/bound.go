package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/sprayfabric/spray/transport"
	"github.com/sprayfabric/spray/transport/wire"
)

// framing is what a profile's data frames add to a message on the wire:
// seg payload bytes per full frame, each frame carrying hdr bytes of
// headers (those every data frame of the profile carries: no INT region,
// which only some do) and the preamble, FCS and gap.
type framing struct {
	seg, hdr int
}

// framingOf returns the framing of tc's data frames on topology t.
func framingOf(tc transport.Config, t Topo) framing {
	p := wire.Packet{}
	if tc.Profile == transport.Spray {
		p.BTH.Opcode = wire.OpSprayData
		p.Data.Kind = wire.KindWriteImm
	} else {
		p.BTH.Opcode = wire.OpWriteMiddle
	}
	f := framing{seg: transport.DataPayload(tc), hdr: wire.FrameLen(&p, 0)}
	if !t.Shaper {
		// A shaper counts the frame from its Ethernet header (shaperPs).
		f.hdr += wireOverhead
	}
	return f
}

// wire returns the bytes that a message of size bytes takes on a link.
func (f framing) wire(size int64) int64 {
	frames := (size + int64(f.seg) - 1) / int64(f.seg)
	return size + frames*int64(f.hdr)
}

// Bound returns the line-rate bound of flows on n's links as they stand
// (links down are avoided, as after reconvergence): the time the busiest
// link needs to carry its share of their frames' bytes, each flow's bytes
// spread evenly over its equal-cost paths (perfect spraying) and every
// link at its rate. It is the time no transport can beat for these flows
// when they start at once; ACKs and control frames are not counted.
// TestBoundByHand checks it on a fabric small enough to count.
func (n *Net) Bound(flows []Flow, f framing) time.Duration {
	load := n.loads(flows, f)
	var worst float64
	for i, b := range load {
		// A Shaper fabric's hosts send at once (Topo.Shaper).
		if b > 0 && !n.ports[i].instant {
			worst = max(worst, b*8/float64(n.ports[i].rate))
		}
	}
	return time.Duration(worst * 1e9)
}

// loads returns the bytes each port sends for flows, spread over the
// equal-cost paths as Bound says. Routes above a leaf depend only on the
// leaf that covers the destination, so the flows are summed by first
// switch and destination leaf and each sum spread once.
func (n *Net) loads(flows []Flow, f framing) []float64 {
	load := make([]float64, len(n.ports))
	type key struct{ first, rep int32 } // rep: the destination leaf's first host
	sums := map[key]float64{}
	for _, fl := range flows {
		b := float64(f.wire(fl.Size))
		src, dst := n.hosts[fl.Src], n.hosts[fl.Dst]
		out, in := src.planes, dst.planes
		if out == nil {
			out, in = []int32{src.port}, []int32{dst.port}
		}
		share := b / float64(len(out))
		for i, hp := range out {
			load[hp] += share
			down := n.ports[in[i]].peer // the leaf's port to dst in plane i
			sums[key{n.ports[n.ports[hp].peer].node, n.switches[n.ports[down].node].lo}] += share
		}
	}
	reached := make(map[key]float64, len(sums)) // the share of a sum that reaches its leaf
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.rep, b.rep)) })
	frac := make([]float64, len(n.switches)) // the share of a sum reaching each switch
	var cur, next []int32
	for _, k := range keys {
		cur = append(cur[:0], k.first)
		frac[k.first] = 1
		for len(cur) > 0 {
			next = next[:0]
			for _, si := range cur {
				b := frac[si]
				frac[si] = 0
				s := &n.switches[si]
				var outs []int32
				if k.rep >= s.lo && k.rep < s.hi {
					d := s.down[(k.rep-s.lo)/s.div]
					if n.ports[n.ports[d].peer].host {
						reached[k] += b // the leaf: its ports to hosts below
						continue
					}
					outs = []int32{d}
				} else {
					outs = n.usableUps(s, k.rep)
				}
				if len(outs) == 0 {
					continue // unreachable: the fabric drops it
				}
				share := b / float64(len(outs))
				for _, o := range outs {
					load[o] += share * sums[k]
					peer := n.ports[n.ports[o].peer].node
					if frac[peer] == 0 {
						next = append(next, peer)
					}
					frac[peer] += share
				}
			}
			cur, next = next, cur
		}
	}
	// The leaves' ports to the hosts carry what reaches them.
	for _, fl := range flows {
		b := float64(f.wire(fl.Size))
		src, dst := n.hosts[fl.Src], n.hosts[fl.Dst]
		out, in := src.planes, dst.planes
		if out == nil {
			out, in = []int32{src.port}, []int32{dst.port}
		}
		for i, hp := range out {
			down := n.ports[in[i]].peer
			load[down] += b / float64(len(out)) * reached[key{n.ports[n.ports[hp].peer].node, n.switches[n.ports[down].node].lo}]
		}
	}
	return load
}

// usableUps returns the uplinks of s that route may choose for dst.
func (n *Net) usableUps(s *swtch, dst int32) []int32 {
	ok := true
	for _, u := range s.up {
		ok = ok && n.usable(u, dst)
	}
	if ok {
		return s.up
	}
	var us []int32
	for _, u := range s.up {
		if n.usable(u, dst) {
			us = append(us, u)
		}
	}
	return us
}

// boundCache keeps the bounds of collectives already computed, by their
// framing and flows: a training run repeats the same collectives every
// step, and every scenario of a profile starts on the same fabric.
type boundCache map[boundKey]time.Duration

type boundKey struct {
	f    framing
	hash uint64
}

// flowsHash returns a hash of the sources, destinations and sizes of fs,
// in order.
func flowsHash(fs []Flow) uint64 {
	h := uint64(len(fs))
	for _, f := range fs {
		h = splitmix(h ^ uint64(f.Src)<<42 ^ uint64(f.Dst)<<21 ^ uint64(f.Size))
	}
	return h
}

// bounds returns the line-rate bound of each of w's collectives
// (Workload.Collectives) on n for the data frames of tc, taking those
// already in cache (nil: none kept) and adding the others.
func (n *Net) bounds(w Workload, tc transport.Config, cache boundCache) []time.Duration {
	if cache == nil {
		cache = boundCache{}
	}
	f := framingOf(tc, n.topo)
	cs := w.Collectives()
	bs := make([]time.Duration, len(cs))
	for k, c := range cs {
		key := boundKey{f, flowsHash(w.Flows[c[0]:c[1]])}
		b, ok := cache[key]
		if !ok {
			b = n.Bound(w.Flows[c[0]:c[1]], f)
			cache[key] = b
		}
		bs[k] = b
	}
	return bs
}
