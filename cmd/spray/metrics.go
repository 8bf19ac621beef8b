package main

import (
	"github.com/sprayfabric/spray/telemetry"
	"github.com/sprayfabric/spray/transport"
)

// metricsStarted, when set (by tests), learns the URL of the metrics page.
var metricsStarted func(url string)

// serveMetrics serves Prometheus metrics on addr (the --metrics flag) when
// it is not empty, and sets tcfg's OnEndpoint hook so that every endpoint
// the command starts with tcfg is instrumented, named LINK@IP. Call the
// returned function when the command ends.
func serveMetrics(addr string, tcfg *transport.Config, logf func(string, ...any)) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	srv, err := startMetrics(addr, logf)
	if err != nil {
		return nil, err
	}
	tcfg.OnEndpoint = telemetry.OnEndpoint(srv.MeterProvider())
	return func() { srv.Close() }, nil
}

// startMetrics serves Prometheus metrics on addr and says where.
func startMetrics(addr string, logf func(string, ...any)) (*telemetry.Server, error) {
	srv, err := telemetry.Serve(addr)
	if err != nil {
		return nil, err
	}
	logf("metrics for Prometheus on %s", srv.URL())
	if metricsStarted != nil {
		metricsStarted(srv.URL())
	}
	return srv, nil
}
