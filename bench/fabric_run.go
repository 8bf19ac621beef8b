package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/link/route"
	"github.com/sprayfabric/spray/multipath"
	"github.com/sprayfabric/spray/retransmit"
	"github.com/sprayfabric/spray/testbed"
	"github.com/sprayfabric/spray/transport"
)

// FabricRun describes a bulk run between two hosts of a testbed: Flows QPs
// on one endpoint per host, each sending Total bytes from A to B, with a
// goodput timeline recorded at the receiver. The zero value of every field
// but the hosts is usable: each documents its default.
type FabricRun struct {
	// A sends, B receives.
	A, B *testbed.Host
	// Kind is the link kind (KindXDP, KindRaw or KindUDP); "" means KindXDP.
	Kind string
	// Transport configures both endpoints (the receiver's Seed is
	// Transport.Seed+1).
	Transport transport.Config
	// Ports, when set, are the entropies the endpoints offer their QPs
	// (the transport draws each QP's entropy or spray set from them); nil
	// leaves the choice to the transport. With PathsECMP and Ports that all
	// hash onto one spine, every QP lands on that spine.
	Ports []uint16
	// Flows is the number of QPs, all sending at once; 0 means 1.
	Flows int
	// Total is the bytes each flow sends; 0 means 64 MiB.
	Total int64
	// MsgSize is the message size; 0 means 64 KiB. Smaller messages give
	// the timeline a finer grain.
	MsgSize int
	// Depth is the messages each flow keeps posted; 0 means 16.
	Depth int
	// Bucket is the timeline's resolution; 0 means 5ms.
	Bucket time.Duration
	// Seed seeds the payloads.
	Seed uint64
	// PathEvery, when positive, samples every sending QP's per-path
	// counters at that interval into FlowResult.PathSamples (for seeing
	// paths leave and rejoin the spray set, and their weights, over time).
	PathEvery time.Duration
	// During, when set, runs in its own goroutine from the first message on
	// with the time the transfer started; its context ends when the
	// transfer does, and the run waits for it.
	During func(ctx context.Context, start time.Time)
}

// Timeline is a goodput timeline: Bytes[i] is the payload that completed
// (was received whole, or acknowledged whole) in [i*Bucket, (i+1)*Bucket)
// after the transfer's start.
type Timeline struct {
	Bucket time.Duration
	Bytes  []int64
}

func (t *Timeline) add(at time.Duration, n int64) {
	i := int(max(at, 0) / t.Bucket)
	for len(t.Bytes) <= i {
		t.Bytes = append(t.Bytes, 0)
	}
	t.Bytes[i] += n
}

// Rate returns the goodput in bit/s over [from, to) after the start, counted
// in whole buckets (from rounded down, to rounded up), or 0 for an empty
// span.
func (t Timeline) Rate(from, to time.Duration) float64 {
	i, j := int(max(from, 0)/t.Bucket), int((max(to, 0)+t.Bucket-1)/t.Bucket)
	j = min(j, len(t.Bytes))
	if j <= i {
		return 0
	}
	var n int64
	for _, b := range t.Bytes[i:j] {
		n += b
	}
	return float64(n) * 8 / (time.Duration(j-i) * t.Bucket).Seconds()
}

// Recovery returns how long after the instant at the goodput, averaged over
// window, first reaches frac times ref (bit/s): the start of the first
// window-long span, beginning at a bucket boundary at or after at, whose
// rate is at least frac*ref. ok is false if no such span exists.
func (t Timeline) Recovery(at, window time.Duration, ref, frac float64) (time.Duration, bool) {
	first := int((max(at, 0) + t.Bucket - 1) / t.Bucket)
	n := max(int(window/t.Bucket), 1)
	for i := first; i+n <= len(t.Bytes); i++ {
		from := time.Duration(i) * t.Bucket
		if t.Rate(from, from+time.Duration(n)*t.Bucket) >= frac*ref {
			return max(from-at, 0), true
		}
	}
	return 0, false
}

// Dip returns the lowest goodput in bit/s averaged over window (whole
// buckets) of the windows that begin at a bucket boundary in [from, to);
// 0 if none fits in the timeline.
func (t Timeline) Dip(from, to, window time.Duration) float64 {
	n := max(int(window/t.Bucket), 1)
	low, found := 0.0, false
	for i := int((max(from, 0) + t.Bucket - 1) / t.Bucket); time.Duration(i)*t.Bucket < to && i+n <= len(t.Bytes); i++ {
		at := time.Duration(i) * t.Bucket
		if r := t.Rate(at, at+time.Duration(n)*t.Bucket); !found || r < low {
			low, found = r, true
		}
	}
	return low
}

// FlowResult is what one flow of a FabricRun measured.
type FlowResult struct {
	// Bytes were received; Seconds from the transfer's start to the last
	// byte received; GoodputMbps is Bytes over Seconds.
	Bytes       int64
	Seconds     float64
	GoodputMbps float64
	// Integrity: the receiver's SHA-256 of the bytes equals the sender's.
	Integrity bool
	// Received is the receiver's timeline of whole messages, Acked the
	// sender's (messages whose every byte was acknowledged): a lost packet
	// holds back every later message until it is repaired. Placed is the
	// payload the receiving QP placed, packet by packet, sampled every
	// Bucket (QPStats.RxBytes): what the fabric delivered, holes or not.
	Received, Acked, Placed Timeline
	// Sender and Receiver are the two QPs' counters at the end, Paths the
	// sender's per-path view.
	Sender, Receiver transport.QPStats
	Paths            []multipath.PathStats
	// Scoreboard is the sender's retransmission counters.
	Scoreboard retransmit.Stats
	// PathSamples are the sender's per-path counters every
	// FabricRun.PathEvery (none when it is zero).
	PathSamples []PathSample
}

// PathSample is a sending QP's per-path view at At after the transfer's
// start.
type PathSample struct {
	At    time.Duration
	Paths []multipath.PathStats
}

// FabricResult is the outcome of a FabricRun.
type FabricResult struct {
	Flows []FlowResult
	// Seconds is the time until the last flow finished.
	Seconds float64
}

// GoodputMbps is the sum of the flows' bytes over the run's length.
func (r FabricResult) GoodputMbps() float64 {
	var n int64
	for _, f := range r.Flows {
		n += f.Bytes
	}
	if r.Seconds <= 0 {
		return 0
	}
	return float64(n) * 8 / r.Seconds / 1e6
}

// portsLink reports a chosen set of entropies in its Info, so that the
// transport draws its QPs' entropies from them.
type portsLink struct {
	link.Link
	ports []uint16
}

func (p portsLink) Info() link.Info {
	i := p.Link.Info()
	i.Ports = p.ports
	return i
}

// ErrFabricRun is wrapped by RunFabric's errors about its arguments and the
// workload (not those of the layers below).
var ErrFabricRun = errors.New("bench: fabric run")

// RunFabric runs r: it opens a link and an endpoint on each host, connects
// r.Flows QPs, sends every flow's bytes at once and checks them by SHA-256.
// It returns ErrIntegrity (wrapped) when bytes differ.
func RunFabric(ctx context.Context, r FabricRun) (FabricResult, error) {
	if r.A == nil || r.B == nil {
		return FabricResult{}, fmt.Errorf("%w: both hosts are needed", ErrFabricRun)
	}
	if r.Kind == "" {
		r.Kind = KindXDP
	}
	if r.Kind == KindTCP {
		return FabricResult{}, fmt.Errorf("%w: link kind tcp is not supported", ErrFabricRun)
	}
	r.Flows = max(r.Flows, 1)
	if r.Total <= 0 {
		r.Total = 64 << 20
	}
	if r.MsgSize <= 0 {
		r.MsgSize = 64 << 10
	}
	if r.Depth <= 0 {
		r.Depth = 16
	}
	if r.Bucket <= 0 {
		r.Bucket = 5 * time.Millisecond
	}
	ports := r.Ports
	if len(ports) == 0 && r.Kind == KindUDP {
		ports = multipath.Entropies(r.Transport.Seed^0x706f727473, max(r.Transport.Entropies, 8))
	}
	open := func(h *testbed.Host) (link.Link, error) {
		var l link.Link
		err := h.Do(func() error {
			var err error
			l, err = OpenLink(LinkSpec{Kind: r.Kind, Ifindex: h.Ifindex, MAC: h.MAC, IP: h.IP, Ports: ports, FrameSize: h.MTU + 14})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bench: opening %s link in %s: %w", r.Kind, h.Name, err)
		}
		return l, nil
	}
	la, err := open(r.A)
	if err != nil {
		return FabricResult{}, err
	}
	lb, err := open(r.B)
	if err != nil {
		la.Close()
		return FabricResult{}, err
	}
	wa, wb := la, lb
	if len(r.Ports) > 0 {
		wa, wb = portsLink{la, r.Ports}, portsLink{lb, r.Ports}
	}
	cfg := r.Transport
	ea, err := transport.NewEndpoint(wa, cfg)
	if err != nil {
		la.Close()
		lb.Close()
		return FabricResult{}, err
	}
	defer ea.Close()
	if cfg.Seed != 0 { // 0: both unpredictable
		cfg.Seed++
	}
	eb, err := transport.NewEndpoint(wb, cfg)
	if err != nil {
		lb.Close()
		return FabricResult{}, err
	}
	defer eb.Close()
	var hopAB, hopBA [6]byte
	for _, x := range []struct {
		h   *testbed.Host
		to  netip.Addr
		mac *[6]byte
	}{{r.A, r.B.IP, &hopAB}, {r.B, r.A.IP, &hopBA}} {
		if err := x.h.Do(func() error {
			p, err := route.Resolve(ctx, x.to)
			*x.mac = p.DstMAC
			return err
		}); err != nil {
			return FabricResult{}, err
		}
	}
	send := make([]*transport.Conn, r.Flows)
	recv := make([]*transport.Conn, r.Flows)
	for i := range send {
		if send[i], err = ea.CreateQP(ctx); err != nil {
			return FabricResult{}, err
		}
		if recv[i], err = eb.CreateQP(ctx); err != nil {
			return FabricResult{}, err
		}
		ia, ib := send[i].Info(), recv[i].Info()
		ib.MAC, ia.MAC = hopAB, hopBA
		if err := send[i].Connect(ctx, ib); err != nil {
			return FabricResult{}, err
		}
		if err := recv[i].Connect(ctx, ia); err != nil {
			return FabricResult{}, err
		}
	}
	return runFlows(ctx, r, send, recv, ea.CQ())
}

// flowState is the sender's bookkeeping of one flow.
type flowState struct {
	sent, acked int64
	inflight    int
	next        uint64
	sizes       []int64 // bytes of the messages in flight, by ID modulo Depth
}

func runFlows(ctx context.Context, r FabricRun, send, recv []*transport.Conn, cq *transport.CQ) (FabricResult, error) {
	bufs := payloads(r.Seed, 4, r.MsgSize)
	want := sha256.New()
	for sent, i := int64(0), 0; sent < r.Total; i++ {
		n := int(min(int64(r.MsgSize), r.Total-sent))
		want.Write(bufs[i%len(bufs)][:n])
		sent += int64(n)
	}
	wantSum := want.Sum(nil)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	res := FabricResult{Flows: make([]FlowResult, len(send))}
	for i := range res.Flows {
		res.Flows[i].Received.Bucket = r.Bucket
		res.Flows[i].Acked.Bucket = r.Bucket
		res.Flows[i].Placed.Bucket = r.Bucket
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range recv {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &res.Flows[i]
			h := sha256.New()
			for f.Bytes < r.Total {
				m, err := c.Recv(ctx)
				if err != nil {
					cancel(fmt.Errorf("bench: flow %d: receiver after %d of %d bytes: %w", i, f.Bytes, r.Total, err))
					return
				}
				at := time.Since(start)
				h.Write(m.Data)
				f.Bytes += int64(len(m.Data))
				f.Received.add(at, int64(len(m.Data)))
				f.Seconds = at.Seconds()
			}
			f.Integrity = f.Bytes == r.Total && bytes.Equal(h.Sum(nil), wantSum)
		}()
	}
	dctx, stopDuring := context.WithCancel(ctx)
	duringDone := make(chan struct{})
	go func() {
		defer close(duringDone)
		if r.During != nil {
			r.During(dctx, start)
		}
	}()
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		samplePlaced(dctx, recv, res.Flows, start, r.Bucket)
	}()
	pathsDone := make(chan struct{})
	go func() {
		defer close(pathsDone)
		if r.PathEvery > 0 {
			samplePaths(dctx, send, res.Flows, start, r.PathEvery)
		}
	}()
	err := sendFlows(ctx, r, send, cq, bufs, &res, start)
	if err != nil {
		cancel(err)
	}
	wg.Wait()
	stopDuring()
	<-duringDone
	<-samplerDone
	<-pathsDone
	if cause := context.Cause(ctx); cause != nil {
		return res, cause
	}
	for i := range res.Flows {
		f := &res.Flows[i]
		res.Seconds = max(res.Seconds, f.Seconds)
		if f.Seconds > 0 {
			f.GoodputMbps = float64(f.Bytes) * 8 / f.Seconds / 1e6
		}
		if f.Sender, err = send[i].Stats(ctx); err != nil {
			return res, err
		}
		if f.Receiver, err = recv[i].Stats(ctx); err != nil {
			return res, err
		}
		if f.Paths, err = send[i].PathStats(ctx); err != nil {
			return res, err
		}
		if f.Scoreboard, err = send[i].RetransmitStats(ctx); err != nil {
			return res, err
		}
	}
	for i, f := range res.Flows {
		if !f.Integrity {
			return res, fmt.Errorf("flow %d: %w", i, ErrIntegrity)
		}
	}
	return res, nil
}

// samplePlaced samples the receiving QPs' placed bytes every bucket until
// ctx ends, into each flow's Placed timeline.
func samplePlaced(ctx context.Context, recv []*transport.Conn, flows []FlowResult, start time.Time, bucket time.Duration) {
	last := make([]uint64, len(recv))
	everyTick(ctx, bucket, func() bool {
		for i, c := range recv {
			st, err := c.Stats(ctx)
			if err != nil {
				return false
			}
			flows[i].Placed.add(time.Since(start), int64(st.RxBytes-last[i]))
			last[i] = st.RxBytes
		}
		return true
	})
}

// samplePaths samples the sending QPs' per-path counters every interval
// until ctx ends, into each flow's PathSamples.
func samplePaths(ctx context.Context, send []*transport.Conn, flows []FlowResult, start time.Time, every time.Duration) {
	everyTick(ctx, every, func() bool {
		for i, c := range send {
			ps, err := c.PathStats(ctx)
			if err != nil {
				return false
			}
			flows[i].PathSamples = append(flows[i].PathSamples, PathSample{At: time.Since(start), Paths: ps})
		}
		return true
	})
}

// everyTick calls fn every interval until ctx ends or fn returns false.
func everyTick(ctx context.Context, interval time.Duration, fn func() bool) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !fn() {
			return
		}
	}
}

// sendFlows keeps Depth messages posted on every flow until each has sent
// Total bytes and all are acknowledged.
func sendFlows(ctx context.Context, r FabricRun, send []*transport.Conn, cq *transport.CQ, bufs [][]byte, res *FabricResult, start time.Time) error {
	fs := make([]flowState, len(send))
	byQPN := make(map[uint32]int, len(send))
	for i, c := range send {
		byQPN[c.Info().QPN] = i
		fs[i].sizes = make([]int64, r.Depth)
	}
	var comps [64]transport.Completion
	for {
		busy := false
		for i := range fs {
			f := &fs[i]
			for f.inflight < r.Depth && f.sent < r.Total {
				n := int(min(int64(r.MsgSize), r.Total-f.sent))
				id := f.next
				if err := send[i].Post(ctx, transport.WorkRequest{ID: id, Op: transport.OpSend, Data: bufs[id%uint64(len(bufs))][:n]}); err != nil {
					return fmt.Errorf("bench: flow %d: posting message %d: %w", i, id, err)
				}
				f.sizes[id%uint64(r.Depth)] = int64(n)
				f.next++
				f.inflight++
				f.sent += int64(n)
			}
			if f.inflight > 0 {
				busy = true
			}
		}
		if !busy {
			return nil
		}
		if err := cq.Wait(ctx); err != nil {
			return err
		}
		at := time.Since(start)
		n := cq.Poll(comps[:])
		for _, c := range comps[:n] {
			i, ok := byQPN[c.QPN]
			if !ok {
				continue
			}
			if c.Err != nil {
				return fmt.Errorf("bench: flow %d: message %d: %w", i, c.ID, c.Err)
			}
			f := &fs[i]
			f.inflight--
			b := f.sizes[c.ID%uint64(r.Depth)]
			f.acked += b
			res.Flows[i].Acked.add(at, b)
		}
	}
}

// SpineOf returns, for each entropy, the spine that the fabric hashes a
// RoCE packet from host a to host b (on different leaves) with that UDP
// source port onto, found by sending a few kernel UDP datagrams from a to
// b's port 4791 and watching a's leaf's uplink counters. Nothing may cross
// that leaf's uplinks meanwhile. al is a's leaf.
func SpineOf(ctx context.Context, fab *testbed.Fabric, al int, a, b *testbed.Host, entropies []uint16) ([]int, error) {
	out := make([]int, len(entropies))
	payload := make([]byte, 1000)
	for k, e := range entropies {
		before, err := fab.UplinkBytes(al)
		if err != nil {
			return nil, err
		}
		err = a.Do(func() error {
			// Unconnected, so that the ICMP errors b answers with do not
			// fail the next write.
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.IP, e)))
			if err != nil {
				return err
			}
			defer c.Close()
			to := netip.AddrPortFrom(b.IP, 4791)
			for range 8 {
				if _, err := c.WriteToUDPAddrPort(payload, to); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("bench: probing entropy %d: %w", e, err)
		}
		out[k] = -1
		for try := 0; try < 50 && out[k] < 0; try++ {
			after, err := fab.UplinkBytes(al)
			if err != nil {
				return nil, err
			}
			best := uint64(0)
			for s := range after {
				if d := after[s] - before[s]; d >= 4000 && d > best {
					best, out[k] = d, s
				}
			}
			if out[k] < 0 {
				select {
				case <-time.After(2 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
		if out[k] < 0 {
			return nil, fmt.Errorf("%w: entropy %d: no uplink of leaf %d carried the probes", ErrFabricRun, e, al)
		}
	}
	return out, nil
}
