package main

import (
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsServer serves lockreg's metrics on /metrics, in Prometheus's text
// format, through OpenTelemetry's Prometheus exporter.
type metricsServer struct {
	// Provider is the meter provider to give lockreg
	// (registry.WithMeterProvider, jdbc.WithMeterProvider; the
	// aggregator takes the registry's).
	Provider *sdkmetric.MeterProvider
	// Addr is the address the server listens on.
	Addr string
	srv  *http.Server
	done chan error
}

// serveMetrics starts serving /metrics on addr (host:port; port 0 picks
// one).
func serveMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s := &metricsServer{Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), Addr: ln.Addr().String(),
		srv: &http.Server{Handler: mux}, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and the meter provider.
func (s *metricsServer) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, s.Provider.Shutdown(ctx))
}
