package telemetry

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sprayfabric/spray/transport"
)

// The OpenTelemetry API has no observable histogram, and the transport
// keeps its delay histograms already bucketed (transport.DelayHistogram),
// so they reach the exporter through a metric producer, the SDK's way in
// for pre-aggregated data. NewPrometheus gives its exporter one; endpoints
// instrumented on its provider (or through Serve's global one) join it.

// histProducer produces the delay histograms of the endpoints instrumented
// on one provider. It is safe for concurrent use.
type histProducer struct {
	mu  sync.Mutex
	eps map[*instruments]time.Time // when each was instrumented
}

var _ sdkmetric.Producer = (*histProducer)(nil)

var (
	// producers maps a *sdkmetric.MeterProvider that NewPrometheus made to
	// its histogram producer.
	producers sync.Map
	// served is the producer of the latest open Server: the global meter
	// provider, as Serve installed it.
	servedMu sync.Mutex
	served   *histProducer
)

func newHistProducer() *histProducer {
	return &histProducer{eps: map[*instruments]time.Time{}}
}

func (h *histProducer) add(in *instruments) func() {
	h.mu.Lock()
	h.eps[in] = time.Now()
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.eps, in)
		h.mu.Unlock()
	}
}

// bounds are the upper bounds of transport.DelayHistogram's buckets in
// seconds (the last bucket's, +Inf, is implied).
var bounds = func() []float64 {
	b := make([]float64, transport.DelayBuckets-1)
	for i := range b {
		b[i] = transport.DelayBucketBound(i).Seconds()
	}
	return b
}()

func point(h *transport.DelayHistogram, attrs attribute.Set, start, now time.Time) metricdata.HistogramDataPoint[float64] {
	return metricdata.HistogramDataPoint[float64]{
		Attributes: attrs, StartTime: start, Time: now,
		Count: h.Count(), Bounds: bounds, BucketCounts: append([]uint64(nil), h.Counts[:]...),
		Sum: h.Sum.Seconds(),
	}
}

// Produce returns the RTT and INT queue delay histograms of every QP of
// the endpoints. They count from the QP's creation; the start time given
// is when the endpoint was instrumented.
func (h *histProducer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	h.mu.Lock()
	eps := make(map[*instruments]time.Time, len(h.eps))
	for in, t := range h.eps {
		eps[in] = t
	}
	h.mu.Unlock()
	if len(eps) == 0 {
		return nil, nil
	}
	var rtt, qd []metricdata.HistogramDataPoint[float64]
	now := time.Now()
	for in, start := range eps {
		in.mu.Lock()
		sctx, cancel := context.WithTimeout(ctx, SnapshotTimeout)
		err := in.ep.Snapshot(sctx, &in.snap)
		cancel()
		if err == nil {
			for i := range in.snap.QPs {
				q := &in.snap.QPs[i]
				attrs := attribute.NewSet(attribute.String("endpoint", in.name), attribute.Int64("qp", int64(q.QPN)))
				rtt = append(rtt, point(&q.RTT, attrs, start, now))
				qd = append(qd, point(&q.QueueDelay, attrs, start, now))
			}
		}
		in.mu.Unlock()
	}
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: ScopeName},
		Metrics: []metricdata.Metrics{
			{
				Name: "spray.qp.rtt.histogram", Unit: "s",
				Description: "Round-trip times of the QP's RTT samples (those of spray.qp.rtt.smoothed).",
				Data:        metricdata.Histogram[float64]{DataPoints: rtt, Temporality: metricdata.CumulativeTemporality},
			},
			{
				Name: "spray.qp.int.queue_delay.histogram", Unit: "s",
				Description: "INT queue delays that acknowledgements reported, summed over the hops.",
				Data:        metricdata.Histogram[float64]{DataPoints: qd, Temporality: metricdata.CumulativeTemporality},
			},
		},
	}}, nil
}
