package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sprayfabric/spray/link"
	"github.com/sprayfabric/spray/transport"
)

// ScopeName is the instrumentation scope of spray's instruments.
const ScopeName = "github.com/sprayfabric/spray/telemetry"

// ErrInstrument is wrapped by the errors of Instrument and InstrumentWith.
var ErrInstrument = errors.New("telemetry: cannot instrument endpoint")

// SnapshotTimeout bounds how long a collection waits for an endpoint's
// engine to answer; an endpoint that does not answer in time, or is closed,
// reports no series in that collection.
const SnapshotTimeout = 2 * time.Second

// Instrument registers the series of ep (see the package doc) with the
// global meter provider, every one with the attribute endpoint=name. Call
// it after Serve, or after installing a provider of your own with
// otel.SetMeterProvider; before that the global provider drops everything.
// The series go away when ep closes, or earlier when stop is called (stop
// is idempotent).
func Instrument(ep *transport.Endpoint, name string) (stop func(), err error) {
	servedMu.Lock()
	hp := served
	servedMu.Unlock()
	return instrument(otel.GetMeterProvider(), hp, ep, name)
}

// InstrumentWith is Instrument with the caller's meter provider, for
// library code that keeps its own (NewPrometheus, or any OpenTelemetry SDK
// provider with the reader of your choice). Names must be unique per
// provider: two endpoints instrumented under one name report colliding
// series.
func InstrumentWith(mp metric.MeterProvider, ep *transport.Endpoint, name string) (stop func(), err error) {
	var hp *histProducer
	if v, ok := producers.Load(mp); ok {
		hp = v.(*histProducer)
	}
	return instrument(mp, hp, ep, name)
}

func instrument(mp metric.MeterProvider, hp *histProducer, ep *transport.Endpoint, name string) (stop func(), err error) {
	if mp == nil || ep == nil {
		return nil, fmt.Errorf("%w: nil meter provider or endpoint", ErrInstrument)
	}
	in := &instruments{ep: ep, name: name}
	if err := in.create(mp.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInstrument, err)
	}
	reg, err := mp.Meter(ScopeName).RegisterCallback(in.observe, in.all...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInstrument, err)
	}
	// The series go away with the endpoint, or with stop.
	quit := make(chan struct{})
	var once sync.Once
	drop := func() {}
	if hp != nil {
		drop = hp.add(in)
	}
	stop = func() { once.Do(func() { close(quit); _ = reg.Unregister(); drop() }) }
	go func() {
		select {
		case <-ep.Done():
			stop()
		case <-quit:
		}
	}()
	return stop, nil
}

// OnEndpoint returns a hook for transport.Config.OnEndpoint that
// instruments every endpoint started with that Config on mp (nil: the
// global meter provider), under the name "LINK@IP" from its link's Info
// ("xdp:veth0/q0@10.0.0.1"; the link's name alone when it holds the IP,
// as link/udp's "udp:10.0.0.1:4791" does), with "#2", "#3", ... appended while an
// endpoint of the same name is still open. An endpoint whose link reports
// per-queue counters (QueueStatsReader: an AF_XDP link) also gets the
// link's per-queue series (InstrumentLink) under the same name. The series
// of each endpoint go away when it closes. Errors go to otel.Handle.
func OnEndpoint(mp metric.MeterProvider) func(*transport.Endpoint) {
	var mu sync.Mutex
	live := map[string]bool{}
	return func(ep *transport.Endpoint) {
		p := mp
		if p == nil {
			p = otel.GetMeterProvider()
		}
		info := ep.LinkInfo()
		base := info.Name
		if !strings.Contains(base, info.IP.String()) {
			base += "@" + info.IP.String()
		}
		mu.Lock()
		name := base
		for i := 2; live[name]; i++ {
			name = fmt.Sprintf("%s#%d", base, i)
		}
		live[name] = true
		mu.Unlock()
		if _, err := InstrumentWith(p, ep, name); err != nil {
			otel.Handle(err)
		}
		stopLink := func() {}
		if qr, ok := ep.Link().(QueueStatsReader); ok {
			stop, err := InstrumentLink(p, qr, name)
			if err != nil {
				otel.Handle(err)
			} else {
				stopLink = stop
			}
		}
		go func() {
			<-ep.Done()
			stopLink()
			mu.Lock()
			delete(live, name)
			mu.Unlock()
		}()
	}
}

type instruments struct {
	ep   *transport.Endpoint
	name string
	all  []metric.Observable

	mu   sync.Mutex // collections may run concurrently
	snap transport.Snapshot

	// engine
	engRxFrames, engTxFrames, engRxBytes, engTxBytes, engDrops, engNoBuf metric.Int64ObservableCounter
	engHandovers, engHandoverDrops                                       metric.Int64ObservableCounter
	filterDrops                                                          metric.Int64ObservableCounter
	// QP
	txPkts, txBytes, rxPkts, rxBytes         metric.Int64ObservableCounter
	retx, losses, timeouts, acks, naks       metric.Int64ObservableCounter
	drops, ecn, cnps, msgs, intAcks, mbursts metric.Int64ObservableCounter
	mburstAcks, rnrNaks                      metric.Int64ObservableCounter
	creditReqs, creditGrants, unsolicited    metric.Int64ObservableCounter
	creditWaits, creditFallbacks, creditRej  metric.Int64ObservableCounter
	secDrops, secRotations                   metric.Int64ObservableCounter
	trims, trimNaks                          metric.Int64ObservableCounter
	secEpoch                                 metric.Int64ObservableGauge
	rttSmooth, rttMin, qdelay, qdelayMax     metric.Float64ObservableGauge
	held, heldMax                            metric.Int64ObservableGauge
	// path
	pTxPkts, pTxBytes, pRetx, pLosses, pAcks, pECN, pMbursts metric.Int64ObservableCounter
	pMburstAcks                                              metric.Int64ObservableCounter
	pRTT, pQdelay, pQdelayMax, pWeight                       metric.Float64ObservableGauge
	pDown                                                    metric.Int64ObservableGauge
}

func (in *instruments) create(m metric.Meter) error {
	var errs []error
	counter := func(dst *metric.Int64ObservableCounter, name, unit, desc string) {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		*dst = c
		in.all = append(in.all, c)
	}
	fgauge := func(dst *metric.Float64ObservableGauge, name, unit, desc string) {
		g, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		*dst = g
		in.all = append(in.all, g)
	}
	igauge := func(dst *metric.Int64ObservableGauge, name, unit, desc string) {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		*dst = g
		in.all = append(in.all, g)
	}
	counter(&in.engRxFrames, "spray.engine.rx.frames", "{frame}", "Frames the engine received.")
	counter(&in.engTxFrames, "spray.engine.tx.frames", "{frame}", "Frames the engine sent.")
	counter(&in.engRxBytes, "spray.engine.rx", "By", "Bytes of the frames the engine received.")
	counter(&in.engTxBytes, "spray.engine.tx", "By", "Bytes of the frames the engine sent.")
	counter(&in.engDrops, "spray.engine.drops", "{frame}", "Frames dropped before reaching a QP, by reason.")
	counter(&in.engNoBuf, "spray.engine.tx_no_buffer", "{event}", "Times the link had no free transmit buffer.")
	counter(&in.engHandovers, "spray.engine.handovers", "{frame}", "Frames passed between engines over their hand-over rings, by direction (sent: received on this engine's queue for another engine's QP; received: taken from another engine).")
	counter(&in.engHandoverDrops, "spray.engine.handover_drops", "{frame}", "Frames dropped because the hand-over ring to their QP's engine was full.")
	counter(&in.filterDrops, "spray.link.filter.drops", "{frame}", "Frames the link's filter in the kernel (an AF_XDP link's steering program) dropped before any engine saw them, by reason (malformed, refused, no_room).")

	counter(&in.txPkts, "spray.qp.tx.packets", "{packet}", "Data packets sent, retransmissions included.")
	counter(&in.txBytes, "spray.qp.tx", "By", "Bytes of the data packets sent (frames), retransmissions included.")
	counter(&in.rxPkts, "spray.qp.rx.packets", "{packet}", "Data packets accepted.")
	counter(&in.rxBytes, "spray.qp.rx", "By", "Payload bytes of the data packets accepted.")
	counter(&in.retx, "spray.qp.retransmits", "{packet}", "Data packets sent again.")
	counter(&in.losses, "spray.qp.losses", "{packet}", "Loss declarations of the sender's scoreboard.")
	counter(&in.timeouts, "spray.qp.timeouts", "{event}", "Retransmission timeouts.")
	counter(&in.acks, "spray.qp.acks", "{packet}", "Acknowledgements, by direction (sent, received).")
	counter(&in.naks, "spray.qp.naks", "{packet}", "Negative acknowledgements, by direction (sent, received).")
	counter(&in.rnrNaks, "spray.qp.rnr_naks", "{packet}", "Receiver-not-ready NAKs (data refused for lack of room), by direction (sent, received).")
	counter(&in.drops, "spray.qp.drops", "{packet}", "Data packets the receiver dropped or refused, by reason.")
	counter(&in.ecn, "spray.qp.ecn_marked", "{packet}", "CE-marked data packets received.")
	counter(&in.cnps, "spray.qp.cnps", "{packet}", "RoCEv2 congestion notifications, by direction (sent, received).")
	counter(&in.msgs, "spray.qp.messages", "{message}", "Messages completed, by direction (sent, received).")
	counter(&in.intAcks, "spray.qp.int.acks", "{packet}", "Acknowledgements that carried INT records.")
	counter(&in.mbursts, "spray.qp.microbursts", "{event}", "Microburst events: runs, per path, of acknowledgements whose INT queue delay exceeded the threshold.")
	counter(&in.mburstAcks, "spray.qp.microburst.acks", "{packet}", "Acknowledgements whose INT queue delay exceeded the microburst threshold.")
	fgauge(&in.rttSmooth, "spray.qp.rtt.smoothed", "s", "Smoothed round-trip time (EWMA 1/8); Spray: the fabric's, without the receiver's hold time.")
	fgauge(&in.rttMin, "spray.qp.rtt.min", "s", "Smallest round-trip time.")
	fgauge(&in.qdelay, "spray.qp.int.queue_delay", "s", "Smoothed INT queue delay along the path, summed over the hops (EWMA 1/8).")
	fgauge(&in.qdelayMax, "spray.qp.int.queue_delay.max", "s", "Largest INT queue delay seen.")
	igauge(&in.held, "spray.qp.reorder.held", "{packet}", "Data packets held ahead of a hole now.")
	igauge(&in.heldMax, "spray.qp.reorder.held.max", "{packet}", "Most data packets held ahead of a hole at once.")
	counter(&in.creditReqs, "spray.qp.credit.requests", "{packet}", "Receiver-paced credit requests, by direction (sent, received).")
	counter(&in.creditGrants, "spray.qp.credit.grants", "{packet}", "Credit grants, by direction (sent, received); credit carried by ACKs not included.")
	counter(&in.unsolicited, "spray.qp.credit.unsolicited", "{packet}", "Data packets sent before any credit, within the unsolicited allowance.")
	counter(&in.creditWaits, "spray.qp.credit.waits", "{event}", "Times the sender had data that only credit held back.")
	counter(&in.creditFallbacks, "spray.qp.credit.fallbacks", "{event}", "Times the sender gave up on its peer's credit and sent freely.")
	counter(&in.creditRej, "spray.qp.credit.rejected", "{packet}", "Credit grants and requests dropped as beyond what was sent or granted.")
	counter(&in.trims, "spray.qp.trims", "{packet}", "Trimmed data packets received: a switch cut them to their headers rather than drop them.")
	counter(&in.trimNaks, "spray.qp.trim_naks", "{packet}", "NAKs for exactly one trimmed packet, by direction (sent; received: acted on by resending it).")
	counter(&in.secDrops, "spray.qp.security.drops", "{packet}", "Packets of a secured QP dropped before reaching its state, by reason (bad_tag, replayed, too_old, bad_epoch, unsecured, trimmed).")
	counter(&in.secRotations, "spray.qp.security.rotations", "{event}", "Key rotations of a secured QP, by direction (sent: send keys, received: receive epochs).")
	igauge(&in.secEpoch, "spray.qp.security.epoch", "{epoch}", "Current key epoch of a secured QP, by direction (sent, received).")

	counter(&in.pTxPkts, "spray.path.tx.packets", "{packet}", "Data packets sent on the path (entropy), retransmissions included.")
	counter(&in.pTxBytes, "spray.path.tx", "By", "Bytes of the data packets sent on the path.")
	counter(&in.pRetx, "spray.path.retransmits", "{packet}", "Retransmissions sent on the path.")
	counter(&in.pLosses, "spray.path.losses", "{packet}", "Packets sent on the path and declared lost.")
	counter(&in.pAcks, "spray.path.acks", "{packet}", "Acknowledgements of packets sent on the path.")
	counter(&in.pECN, "spray.path.ecn", "{packet}", "ECN-marked acknowledgements of packets sent on the path.")
	counter(&in.pMbursts, "spray.path.microbursts", "{event}", "Microburst events on the path: runs of acknowledgements whose INT queue delay exceeded the threshold.")
	counter(&in.pMburstAcks, "spray.path.microburst.acks", "{packet}", "Acknowledgements of packets sent on the path whose INT queue delay exceeded the microburst threshold.")
	fgauge(&in.pRTT, "spray.path.rtt.smoothed", "s", "Smoothed fabric round-trip time of the path (receiver's hold time excluded).")
	fgauge(&in.pQdelay, "spray.path.int.queue_delay", "s", "Smoothed INT queue delay of the path (EWMA 1/8).")
	fgauge(&in.pQdelayMax, "spray.path.int.queue_delay.max", "s", "Largest INT queue delay of the path.")
	fgauge(&in.pWeight, "spray.path.weight", "1", "Spraying weight of the path relative to the best (adaptive spraying; 1 otherwise).")
	igauge(&in.pDown, "spray.path.down", "1", "1 while adaptive spraying has taken the path out, else 0.")
	return errors.Join(errs...)
}

func (in *instruments) observe(ctx context.Context, o metric.Observer) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, SnapshotTimeout)
	defer cancel()
	if err := in.ep.Snapshot(ctx, &in.snap); err != nil {
		return nil // closed or stuck: no series this time
	}
	ep := attribute.String("endpoint", in.name)
	i64 := func(c metric.Int64Observable, v uint64, s attribute.Set) {
		o.ObserveInt64(c, int64(v), metric.WithAttributeSet(s))
	}
	sec := func(g metric.Float64Observable, d time.Duration, s attribute.Set) {
		o.ObserveFloat64(g, d.Seconds(), metric.WithAttributeSet(s))
	}
	with := func(kvs ...attribute.KeyValue) attribute.Set { return attribute.NewSet(kvs...) }
	sent, recv := attribute.String("direction", "sent"), attribute.String("direction", "received")
	reason := func(r string) attribute.KeyValue { return attribute.String("reason", r) }

	for ei := range in.snap.Engines {
		e := &in.snap.Engines[ei]
		eng := attribute.Int("engine", ei)
		base := with(ep, eng)
		i64(in.engRxFrames, e.RxFrames, base)
		i64(in.engTxFrames, e.TxFrames, base)
		i64(in.engRxBytes, e.RxBytes, base)
		i64(in.engTxBytes, e.TxBytes, base)
		for _, d := range []struct {
			r string
			v uint64
		}{
			{"truncated", e.Truncated}, {"not_roce", e.NotRoCE}, {"bad_icrc", e.BadICRC},
			{"bad_header", e.BadHeader}, {"bad_opcode", e.BadOpcode}, {"other", e.OtherMalformed},
			{"unknown_qp", e.UnknownQP},
		} {
			i64(in.engDrops, d.v, with(ep, eng, reason(d.r)))
		}
		i64(in.engNoBuf, e.TxNoBuffer, base)
		i64(in.engHandovers, e.HandedOver, with(ep, eng, sent))
		i64(in.engHandovers, e.HandedIn, with(ep, eng, recv))
		i64(in.engHandoverDrops, e.HandoverDrops, base)
	}

	if _, ok := in.ep.Link().(link.FilterStatsReader); ok {
		f := in.snap.Filter
		for _, d := range []struct {
			r string
			v uint64
		}{{"malformed", f.Malformed}, {"refused", f.Refused}, {"no_room", f.NoRoom}} {
			i64(in.filterDrops, d.v, with(ep, reason(d.r)))
		}
	}

	for qi := range in.snap.QPs {
		q := &in.snap.QPs[qi]
		qp := attribute.Int64("qp", int64(q.QPN))
		s := q.Stats
		a := with(ep, qp)
		i64(in.txPkts, s.TxPackets, a)
		i64(in.txBytes, s.TxBytes, a)
		i64(in.rxPkts, s.RxPackets, a)
		i64(in.rxBytes, s.RxBytes, a)
		i64(in.retx, s.Retransmits, a)
		i64(in.losses, q.Retransmit.Lost, a)
		i64(in.timeouts, s.Timeouts, a)
		i64(in.acks, s.AcksSent, with(ep, qp, sent))
		i64(in.acks, s.AcksReceived, with(ep, qp, recv))
		i64(in.naks, s.NaksSent, with(ep, qp, sent))
		i64(in.naks, s.NaksReceived, with(ep, qp, recv))
		i64(in.rnrNaks, s.RNRNaksSent, with(ep, qp, sent))
		i64(in.rnrNaks, s.RNRNaksReceived, with(ep, qp, recv))
		i64(in.cnps, s.CNPsSent, with(ep, qp, sent))
		i64(in.cnps, s.CNPsReceived, with(ep, qp, recv))
		i64(in.msgs, s.MessagesSent, with(ep, qp, sent))
		i64(in.msgs, s.MessagesReceived, with(ep, qp, recv))
		for _, d := range []struct {
			r string
			v uint64
		}{
			{"duplicate", s.Duplicates}, {"out_of_window", s.OutOfWindow}, {"out_of_order", s.OutOfOrderDrops},
			{"no_buffer", s.NoBuffer}, {"remote_access", s.RemoteAccessErrors}, {"bad", s.BadPackets},
			{"rejected_ack", s.RejectedAcks}, {"rejected_nak", s.RejectedNaks}, {"rejected_cnp", s.RejectedCNPs},
			{"rejected_read_response", s.RejectedReadResponses},
		} {
			i64(in.drops, d.v, with(ep, qp, reason(d.r)))
		}
		i64(in.ecn, s.ECNMarked, a)
		i64(in.intAcks, s.INTAcks, a)
		i64(in.mbursts, s.Microbursts, a)
		i64(in.mburstAcks, s.MicroburstAcks, a)
		sec(in.rttSmooth, s.SRTT, a)
		sec(in.rttMin, s.MinRTT, a)
		sec(in.qdelay, s.INTQueueDelay, a)
		sec(in.qdelayMax, s.MaxINTQueueDelay, a)
		i64(in.held, s.ReorderHeld, a)
		i64(in.heldMax, s.MaxReorderHeld, a)
		i64(in.creditReqs, s.CreditRequestsSent, with(ep, qp, sent))
		i64(in.creditReqs, s.CreditRequestsReceived, with(ep, qp, recv))
		i64(in.creditGrants, s.CreditGrantsSent, with(ep, qp, sent))
		i64(in.creditGrants, s.CreditGrantsReceived, with(ep, qp, recv))
		i64(in.unsolicited, s.UnsolicitedPackets, a)
		i64(in.creditWaits, s.CreditWaits, a)
		i64(in.creditFallbacks, s.CreditFallbacks, a)
		i64(in.creditRej, s.CreditRejected, a)
		i64(in.trims, s.TrimsReceived, a)
		i64(in.trimNaks, s.TrimNaksSent, with(ep, qp, sent))
		i64(in.trimNaks, s.TrimNaksReceived, with(ep, qp, recv))
		ss := s.Security
		for _, d := range []struct {
			r string
			v uint64
		}{
			{"bad_tag", ss.BadTag}, {"replayed", ss.Replayed}, {"too_old", ss.TooOld},
			{"bad_epoch", ss.BadEpoch}, {"unsecured", ss.Unsecured}, {"trimmed", ss.Trimmed},
		} {
			i64(in.secDrops, d.v, with(ep, qp, reason(d.r)))
		}
		i64(in.secRotations, ss.TxRotations, with(ep, qp, sent))
		i64(in.secRotations, ss.RxRotations, with(ep, qp, recv))
		i64(in.secEpoch, uint64(ss.TxEpoch), with(ep, qp, sent))
		i64(in.secEpoch, uint64(ss.RxEpoch), with(ep, qp, recv))

		for pi := range q.Paths {
			p := &q.Paths[pi]
			pa := with(ep, qp, attribute.Int64("entropy", int64(p.Entropy)))
			i64(in.pTxPkts, p.TxPackets, pa)
			i64(in.pTxBytes, p.TxBytes, pa)
			i64(in.pRetx, p.Retransmits, pa)
			i64(in.pLosses, p.Losses, pa)
			i64(in.pAcks, p.Acks, pa)
			i64(in.pECN, p.ECN, pa)
			i64(in.pMbursts, p.Microbursts, pa)
			i64(in.pMburstAcks, p.MicroburstAcks, pa)
			sec(in.pRTT, p.SRTT, pa)
			sec(in.pQdelay, p.INTQueueDelay, pa)
			sec(in.pQdelayMax, p.MaxINTQueueDelay, pa)
			w := p.Weight
			if w == 0 && !p.Down {
				w = 1 // policies other than adaptive keep no weight: equal shares
			}
			o.ObserveFloat64(in.pWeight, w, metric.WithAttributeSet(pa))
			down := uint64(0)
			if p.Down {
				down = 1
			}
			i64(in.pDown, down, pa)
		}
	}
	return nil
}
