package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sprayfabric/spray/link"
)

// QueueStatsReader is a link whose counters can be read per device queue
// (*xdp.Link). Served and QueueCounters return one entry per queue the link
// serves, in the same order; Served gives the device's queue numbers.
type QueueStatsReader interface {
	Served() []int
	QueueCounters() []link.Stats
}

// InstrumentLink registers the per-queue series of l on mp (nil: the global
// meter provider), every one with the attributes link=name and queue (the
// device queue number, decimal):
//
//	spray_link_queue_rx_frames_total, spray_link_queue_tx_frames_total
//	spray_link_queue_rx_bytes_total, spray_link_queue_tx_bytes_total
//	spray_link_queue_rx_dropped_total, spray_link_queue_tx_dropped_total
//
// A queue whose rx_frames stays at zero while the others move is one that
// the device's RSS hash never picks, or one that the link does not serve.
// The series stay until stop is called (idempotent); after the link closes
// they keep its last counters.
func InstrumentLink(mp metric.MeterProvider, l QueueStatsReader, name string) (stop func(), err error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil link", ErrInstrument)
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	var all []metric.Observable
	var errs error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil && errs == nil {
			errs = err
		}
		all = append(all, c)
		return c
	}
	rxF := counter("spray.link.queue.rx.frames", "{frame}", "Frames the link received on the device queue.")
	txF := counter("spray.link.queue.tx.frames", "{frame}", "Frames the link sent on the device queue.")
	rxB := counter("spray.link.queue.rx", "By", "Bytes of the frames received on the device queue.")
	txB := counter("spray.link.queue.tx", "By", "Bytes of the frames sent on the device queue.")
	rxD := counter("spray.link.queue.rx.dropped", "{frame}", "Frames of the device queue dropped before the link handed them over (ring full, too long).")
	txD := counter("spray.link.queue.tx.dropped", "{frame}", "Frames handed to the link for the device queue and not sent.")
	if errs != nil {
		return nil, fmt.Errorf("%w: %w", ErrInstrument, errs)
	}
	var mu sync.Mutex // collections may run concurrently
	observe := func(_ context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		served, stats := l.Served(), l.QueueCounters()
		for i, st := range stats {
			q := i
			if i < len(served) {
				q = served[i]
			}
			set := metric.WithAttributeSet(attribute.NewSet(attribute.String("link", name), attribute.String("queue", strconv.Itoa(q))))
			o.ObserveInt64(rxF, int64(st.RxFrames), set)
			o.ObserveInt64(txF, int64(st.TxFrames), set)
			o.ObserveInt64(rxB, int64(st.RxBytes), set)
			o.ObserveInt64(txB, int64(st.TxBytes), set)
			o.ObserveInt64(rxD, int64(st.RxDropped), set)
			o.ObserveInt64(txD, int64(st.TxDropped), set)
		}
		return nil
	}
	reg, err := m.RegisterCallback(observe, all...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInstrument, err)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = reg.Unregister() }) }, nil
}
