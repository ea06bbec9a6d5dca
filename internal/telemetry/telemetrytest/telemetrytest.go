// Package telemetrytest reads what lockreg's packages record, for their
// tests: an OpenTelemetry SDK meter provider with a manual reader, and a
// tracer provider with a span recorder. Only tests import it, so the SDK
// stays out of the library's packages.
package telemetrytest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Metrics is a meter provider whose measurements a test reads.
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// NewMetrics returns a meter provider of the SDK with a manual reader.
func NewMetrics() *Metrics {
	r := sdkmetric.NewManualReader()
	return &Metrics{Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), reader: r}
}

// Collect returns every metric recorded so far, by name.
func (m *Metrics) Collect(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			out[mt.Name] = mt
		}
	}
	return out
}

// has reports whether set has every attribute of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// Sum returns the sum of the points of the integer counter (or up-down
// counter) name whose attributes include attrs; 0 if there are none.
func (m *Metrics) Sum(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	mt, ok := m.Collect(t)[name]
	if !ok {
		return 0
	}
	s, ok := mt.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, not an integer sum", name, mt.Data)
	}
	var n int64
	for _, p := range s.DataPoints {
		if has(p.Attributes, attrs) {
			n += p.Value
		}
	}
	return n
}

// Gauge returns the sum of the points of the integer gauge name whose
// attributes include attrs, collected now; 0 if there are none.
func (m *Metrics) Gauge(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	mt, ok := m.Collect(t)[name]
	if !ok {
		return 0
	}
	g, ok := mt.Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("%s is a %T, not an integer gauge", name, mt.Data)
	}
	var n int64
	for _, p := range g.DataPoints {
		if has(p.Attributes, attrs) {
			n += p.Value
		}
	}
	return n
}

// Count returns how many values the histogram name recorded with
// attributes that include attrs.
func (m *Metrics) Count(t testing.TB, name string, attrs ...attribute.KeyValue) uint64 {
	t.Helper()
	mt, ok := m.Collect(t)[name]
	if !ok {
		return 0
	}
	h, ok := mt.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, not a histogram", name, mt.Data)
	}
	var n uint64
	for _, p := range h.DataPoints {
		if has(p.Attributes, attrs) {
			n += p.Count
		}
	}
	return n
}

// Unit returns the unit of metric name, "" if it recorded nothing.
func (m *Metrics) Unit(t testing.TB, name string) string {
	t.Helper()
	return m.Collect(t)[name].Unit
}

// Spans is a tracer provider that records ended spans.
type Spans struct {
	Provider *sdktrace.TracerProvider
	rec      *tracetest.SpanRecorder
}

// NewSpans returns a tracer provider of the SDK that samples every span.
func NewSpans() *Spans {
	rec := tracetest.NewSpanRecorder()
	return &Spans{Provider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec: rec}
}

// Ended returns the spans ended so far, in the order they ended.
func (s *Spans) Ended() []sdktrace.ReadOnlySpan { return s.rec.Ended() }

// Named returns the ended spans called name.
func (s *Spans) Named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.rec.Ended() {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// Attr returns the value of attribute key of span, and whether it has one.
func Attr(span sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range span.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// Buffer is a bytes.Buffer that a logger may write to from other
// goroutines while the test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a text logger that writes to b.
func (b *Buffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }
