package telemetry_test

import (
	"log"
	"net/http"

	"github.com/sprayfabric/spray/telemetry"
	"github.com/sprayfabric/spray/transport"
)

// Serve /metrics and export an endpoint's series through the global meter
// provider.
func ExampleServe() {
	var ep *transport.Endpoint // from transport.NewEndpoint
	srv, err := telemetry.Serve(":9464")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	stop, err := telemetry.Instrument(ep, "rank0")
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
}

// A library that keeps its own HTTP mux and leaves the global meter
// provider alone.
func ExampleInstrumentWith() {
	var ep *transport.Endpoint // from transport.NewEndpoint
	prom, err := telemetry.NewPrometheus()
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/metrics", prom.Handler)
	stop, err := telemetry.InstrumentWith(prom.Provider, ep, "rank0")
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
}

// Instrument every endpoint that code elsewhere starts with this Config.
func ExampleOnEndpoint() {
	prom, err := telemetry.NewPrometheus()
	if err != nil {
		log.Fatal(err)
	}
	cfg := transport.Config{OnEndpoint: telemetry.OnEndpoint(prom.Provider)}
	_ = cfg // hand cfg to bench, collective, or transport.NewEndpoint
}
