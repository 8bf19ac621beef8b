package cc

import (
	"math"
	"slices"
	"time"

	"github.com/sprayfabric/spray/clock"
)

// HPCCConfig configures an HPCC controller. The zero value is usable: every
// field documents its default, and a negative, NaN or infinite value also
// takes the default.
type HPCCConfig struct {
	// BaseRTT is T, the base (unloaded) round-trip time of the fabric: the
	// window is paced out over it, and queues are converted to utilization
	// against it. 0 means 10µs.
	BaseRTT time.Duration
	// LineRate is the sender's line rate in bytes per second: the rate is
	// never above it. 0 means 12.5e9 (100 Gb/s).
	LineRate float64
	// InitWindow is W_init in bytes, the initial and largest window. 0 means
	// LineRate × BaseRTT (one bandwidth-delay product), as in the paper.
	InitWindow int
	// Eta is the target utilization η. 0 means 0.95.
	Eta float64
	// MaxStage is the number of reference-window updates that grow the
	// window additively before it grows multiplicatively. 0 means 5; a
	// negative value means none (the HPCC authors' later recommendation,
	// with Eta 0.99).
	MaxStage int
	// AdditiveIncrease is W_AI in bytes. 0 means InitWindow × (1-Eta) / 100,
	// the paper's W_init(1-η)/N for N = 100 flows sharing a link, at least
	// 1 byte.
	AdditiveIncrease float64
	// MinWindow is the smallest window in bytes (the paper sets none; a
	// window below one packet still lets one packet out). 0 means 1024.
	MinWindow int
	// QueueOffset is subtracted from each hop's queue length, in bytes,
	// before it counts (at least 0 remains). 0 means none, as in the
	// paper. For fabrics whose QLen counts the packet's own wait at the
	// shaper: spray's test fabric derives QLen from the packet's queue
	// delay times the link rate, and a frame that reaches a busy shaper
	// with an empty queue still waits for its own tokens, so a link at
	// line rate reads one frame of queue where a switch's queue counter
	// reads none. ByName sets it to about one frame.
	QueueOffset int
	// ClampTxRate caps each hop's txRate at its link rate. False means
	// the paper's measurement, for a TxBytes counter of bytes that left
	// the port. Spray's test fabric counts TxBytes as frames enter the
	// shaper (its programs run before the qdisc), so that a burst reads as
	// several times the link rate for the few µs between two records; the
	// bytes a port cannot send show in its queue term anyway. ByName sets
	// it.
	ClampTxRate bool
	// MinInflight is the smallest window that Window returns, in bytes;
	// the pacing rate stays the computed window over T. 0 means none (the
	// window is the computed one, at least MinWindow). A receiver that
	// acknowledges every few packets needs that many in flight to send
	// fewer acknowledgements than packets: with a smaller window the
	// sender waits for each ACK and asks for it at once. ByName sets it
	// from Params.AckEvery.
	MinInflight int
}

// hpccHops bounds the hop records an HPCC controller remembers. A path
// seldom has more than MaxINTHops hops, and a spraying sender sees a few
// paths; a hop that falls out of the table only costs one sample.
const hpccHops = 64

// hpccHop is the last INT record seen from one egress port.
type hpccHop struct {
	sw, port uint16
	ts       uint64
	qlen, tx uint32
}

// HPCC is the HPCC window controller (Li et al., SIGCOMM 2019). It computes,
// for each ACK, the utilization of every hop the acknowledged packet crossed
// from the echoed INT records (queue length and transmitted-bytes counter,
// compared with the previous record of the same egress port), takes the
// most loaded hop, smooths it over one base RTT, and sets the window to the
// reference window scaled by η/U plus W_AI; the reference window moves once
// per RTT. Rate is the window over the base RTT.
//
// ACKs without INT records do not change the window. RTTs are told apart
// with byte counts: a new RTT starts when the bytes acknowledged or
// declared lost pass the bytes that had been sent at the previous update
// (the paper's lastUpdateSeq), or, should the counts drift apart (spurious
// retransmissions), when twice the larger of BaseRTT and the latest RTT
// sample has passed.
//
// Its zero value is not usable: use NewHPCC. It is not safe for concurrent
// use.
type HPCC struct {
	t        float64 // base RTT, ns
	line     float64 // bytes/s
	winit    float64
	qoff     float64 // QueueOffset
	clamp    bool    // ClampTxRate
	eta      float64
	maxStage int
	wai      float64
	minW     float64
	minIn    float64 // MinInflight

	w, wc    float64 // window, reference window (bytes)
	u        float64 // smoothed utilization
	incStage int

	sent, resolved int64 // bytes sent; bytes acknowledged or lost
	lastSeq        int64 // sent at the last reference update
	lastTime       clock.Time
	updated        bool // lastTime is set
	rtt            time.Duration

	// hops grows with the egress ports seen, up to hpccHops entries: a
	// QP that crosses a few ports holds a few (TestHPCCHopTableGrows).
	hops []hpccHop
	next int // round-robin victim when the table is full
}

var _ Controller = (*HPCC)(nil)

// NewHPCC returns an HPCC controller with the window at InitWindow.
func NewHPCC(cfg HPCCConfig) *HPCC {
	h := &HPCC{
		t:        float64(cfg.BaseRTT),
		line:     cfg.LineRate,
		eta:      cfg.Eta,
		maxStage: cfg.MaxStage,
		wai:      cfg.AdditiveIncrease,
		minW:     float64(cfg.MinWindow),
		winit:    float64(cfg.InitWindow),
		qoff:     float64(max(cfg.QueueOffset, 0)),
		clamp:    cfg.ClampTxRate,
		minIn:    float64(max(cfg.MinInflight, 0)),
	}
	if h.t <= 0 {
		h.t = float64(10 * time.Microsecond)
	}
	if !positive(h.line) {
		h.line = 12.5e9
	}
	if !positive(h.eta) || h.eta > 1 {
		h.eta = 0.95
	}
	switch {
	case h.maxStage == 0:
		h.maxStage = 5
	case h.maxStage < 0:
		h.maxStage = 0
	}
	if h.winit <= 0 {
		h.winit = h.line * h.t / 1e9
	}
	if h.minW <= 0 {
		h.minW = 1024
	}
	h.minW = min(h.minW, h.winit)
	if !positive(h.wai) {
		h.wai = max(1, h.winit*(1-h.eta)/100)
	}
	h.w, h.wc = h.winit, h.winit
	return h
}

// positive reports whether v is a positive finite number.
func positive(v float64) bool { return v > 0 && !math.IsInf(v, 1) }

// OnSend counts the bytes sent.
func (h *HPCC) OnSend(_ clock.Time, bytes int) {
	h.sent += int64(max(bytes, 0))
}

// OnLoss counts the lost bytes as resolved, for telling RTTs apart.
func (h *HPCC) OnLoss(_ clock.Time, bytes int) {
	h.resolved += int64(max(bytes, 0))
}

// OnTimeout does nothing: HPCC reacts to INT, not to loss.
func (h *HPCC) OnTimeout(clock.Time) {}

// OnCNP does nothing: HPCC does not use ECN.
func (h *HPCC) OnCNP(clock.Time) {}

// NextTimer returns clock.Never: HPCC has no timers.
func (h *HPCC) NextTimer() clock.Time { return clock.Never }

// OnTimer does nothing.
func (h *HPCC) OnTimer(clock.Time) {}

// Window returns the window in bytes: the computed one, at least
// MinInflight (and 1).
func (h *HPCC) Window() int { return max(1, int(max(h.w, h.minIn))) }

// Rate returns the window over the base RTT, at most the line rate.
func (h *HPCC) Rate() float64 { return min(h.line, h.w*1e9/h.t) }

// Utilization returns the smoothed utilization U of the most loaded hop
// (1 is a link at line rate with no queue).
func (h *HPCC) Utilization() float64 { return h.u }

// RefWindow returns the reference window Wc in bytes.
func (h *HPCC) RefWindow() int { return int(h.wc) }

// OnAck measures the path's utilization from s.INT and sets the window.
func (h *HPCC) OnAck(s Sample) {
	h.resolved += int64(max(s.AckedBytes, 0))
	if s.RTT > 0 {
		h.rtt = s.RTT
	}
	u, ok := h.measure(s.INT)
	if !ok {
		return
	}
	update := h.resolved > h.lastSeq || !h.updated ||
		s.Now.Sub(h.lastTime) >= 2*max(time.Duration(h.t), h.rtt)
	h.computeWindow(u, update)
	if update {
		h.lastSeq, h.lastTime, h.updated = h.sent, s.Now, true
	}
}

// measure is the paper's MeasureInflight: it returns the smoothed
// utilization after folding in the records, and false when no hop had a
// previous record to compare with.
func (h *HPCC) measure(records []Hop) (float64, bool) {
	var umax, tau float64
	found := false
	for _, r := range records {
		if r.RateMbps == 0 {
			continue // no rate: no utilization
		}
		e, ok := h.lookup(r.Switch, r.Port)
		if !ok {
			*e = hpccHop{sw: r.Switch, port: r.Port, ts: r.TS, qlen: r.QLen, tx: r.TxBytes}
			continue
		}
		if r.TS <= e.ts {
			continue // an older packet's record (reordering), or a clock reset
		}
		dt := float64(r.TS - e.ts)
		b := float64(r.RateMbps) * 1e6 / 8           // bytes/s
		txRate := float64(r.TxBytes-e.tx) * 1e9 / dt // bytes/s; uint32 wrap
		if h.clamp {
			txRate = min(txRate, b)
		}
		q := max(0, float64(min(r.QLen, e.qlen))-h.qoff) // bytes
		u := q/(b*h.t/1e9) + txRate/b                    // queue over B*T, plus rate over B
		*e = hpccHop{sw: r.Switch, port: r.Port, ts: r.TS, qlen: r.QLen, tx: r.TxBytes}
		if !found || u > umax {
			umax, tau, found = u, dt, true
		}
	}
	if !found {
		return h.u, false
	}
	tau = min(tau, h.t)
	h.u = (1-tau/h.t)*h.u + tau/h.t*umax
	return h.u, true
}

// lookup returns the table entry for an egress port and true, or else a
// free entry (or the round-robin victim when the table is full) and false.
// The entry is valid until the next lookup.
func (h *HPCC) lookup(sw, port uint16) (*hpccHop, bool) {
	for i := range h.hops {
		if e := &h.hops[i]; e.sw == sw && e.port == port {
			return e, true
		}
	}
	if len(h.hops) < hpccHops {
		if len(h.hops) == cap(h.hops) {
			h.hops = slices.Grow(h.hops, min(max(4, len(h.hops)), hpccHops-len(h.hops)))
		}
		h.hops = h.hops[:len(h.hops)+1]
		return &h.hops[len(h.hops)-1], false
	}
	e := &h.hops[h.next]
	h.next = (h.next + 1) % hpccHops
	return e, false
}

// computeWindow is the paper's ComputeWind.
func (h *HPCC) computeWindow(u float64, update bool) {
	var w float64
	if u >= h.eta || h.incStage >= h.maxStage {
		if u > 0 {
			w = h.wc/(u/h.eta) + h.wai
		} else {
			w = h.winit
		}
		if update {
			h.incStage = 0
		}
	} else {
		w = h.wc + h.wai
		if update {
			h.incStage++
		}
	}
	w = min(max(w, h.minW), h.winit)
	h.w = w
	if update {
		h.wc = w
	}
}

// setWindow sets the window and the reference window to w bytes, within
// [MinWindow, InitWindow] (Auto's handover from Swift).
func (h *HPCC) setWindow(w float64) {
	w = min(max(w, h.minW), h.winit)
	h.w, h.wc = w, w
}

// BaseRTT returns T, the base RTT the controller was configured with.
func (h *HPCC) BaseRTT() time.Duration { return time.Duration(h.t) }

func (h *HPCC) minWindow() int { return int(h.minW) }
