package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// ErrServe is wrapped by the errors of Serve and NewPrometheus.
var ErrServe = errors.New("telemetry: cannot serve metrics")

// Prometheus is an OpenTelemetry MeterProvider whose metrics an HTTP
// handler serves in the Prometheus text format, on a registry of its own
// (the process's default registry is left alone). Build it with
// NewPrometheus; it is safe for concurrent use.
type Prometheus struct {
	// Provider is the meter provider to pass to InstrumentWith.
	Provider *sdkmetric.MeterProvider
	// Handler serves the registry: mount it at /metrics.
	Handler http.Handler

	hp *histProducer
}

// NewPrometheus returns a meter provider exporting to a new Prometheus
// registry, and the handler that serves it. The registry also holds the Go
// runtime and process collectors (go_*, process_*), and the delay
// histograms of the endpoints instrumented on p.Provider. Call
// p.Provider.Shutdown when done.
func NewPrometheus() (*Prometheus, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServe, err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServe, err)
	}
	hp := newHistProducer()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithProducer(hp))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServe, err)
	}
	p := &Prometheus{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		Handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
		hp:       hp,
	}
	producers.Store(p.Provider, hp)
	return p, nil
}

// Server serves a Prometheus endpoint at /metrics over HTTP. It is safe for
// concurrent use; Close is idempotent.
type Server struct {
	prom *Prometheus
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	once sync.Once
	err  error
}

// Serve listens on addr ("host:port"; ":0" picks a free port), serves
// /metrics there and installs its meter provider as OpenTelemetry's global
// one (otel.SetMeterProvider), so that Instrument, and any other
// OpenTelemetry instrumentation of the process, export through it. A
// library that must not touch the global provider uses NewPrometheus and
// InstrumentWith instead.
func Serve(addr string) (*Server, error) {
	prom, err := NewPrometheus()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = prom.Provider.Shutdown(context.Background())
		return nil, fmt.Errorf("%w: %w", ErrServe, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", prom.Handler)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "spray metrics: see /metrics")
	})
	s := &Server{
		prom: prom, ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	otel.SetMeterProvider(prom.Provider)
	servedMu.Lock()
	served = prom.hp
	servedMu.Unlock()
	return s, nil
}

// Addr returns the address the server listens on, with the port it got.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns the address of the metrics page, http://ADDR/metrics.
func (s *Server) URL() string { return "http://" + s.Addr() + "/metrics" }

// MeterProvider returns the server's meter provider (the global one after
// Serve, unless something replaced it since).
func (s *Server) MeterProvider() metric.MeterProvider { return s.prom.Provider }

// Close stops serving and shuts the meter provider down. Series registered
// with it stop being collected. It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		err := s.srv.Close()
		<-s.done
		s.err = errors.Join(err, s.prom.Provider.Shutdown(context.Background()))
		producers.Delete(s.prom.Provider)
		servedMu.Lock()
		if served == s.prom.hp {
			served = nil
		}
		servedMu.Unlock()
	})
	return s.err
}
